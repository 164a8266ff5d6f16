"""Each function's role grants what its code calls, both ways: the boto3 operations
reachable from its handler (read from the source, tests/infra/code_calls.py) against
the actions its role holds in the synthesized template. A call without its grant would be
refused in AWS; a grant no code uses is privilege only an attacker would use."""

from __future__ import annotations

import pytest

from codeshot.sdk.project import read_config
from codeshot.store import tables
from infra.bundling import (
    AGENT_ENTRY_MODULE,
    API_FUNCTION,
    PLATFORM_FUNCTIONS,
    RUNNER_FUNCTION,
    PlatformFunction,
    agent_bundle,
)
from infra.config import REPO_ROOT
from tests.infra.code_calls import (
    PREFIXES,
    actions_called,
    calls_by_module,
    clients_made,
    handler_modules,
)
from tests.infra.conftest import Synth, synthesize

# Granted for what is not a call in the function's code:
NOT_CALLS = {
    # The event source mappings poll the queues with the runner's role; QueryVectors with
    # metadata is authorised by GetVectors too.
    "runner": {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes",
               "sqs:GetQueueUrl", "s3vectors:GetVectors"},
    # DeleteObject of a version (an embed's delete marker: EmbedStore.restore) is
    # authorised as DeleteObjectVersion, which the reader, going by operation, cannot see.
    "eraser": {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes",
               "sqs:GetQueueUrl", "s3:DeleteObjectVersion"},
}
# Calls the reader finds on paths this function's inputs never take (each still checked
# to be found, so that an entry cannot outlive its reason).
NOT_REACHED = {
    "register": {
        # Deployed agents carry no MCP Authorization: registration stores no agent secret
        # and so deletes none (AgentSecrets.delete(None) returns at once).
        "secretsmanager:CreateSecret", "secretsmanager:DeleteSecret",
    },
    "runner": {
        # A prompt callback's answer is posted as text alone: the runner claims no upload,
        # so it never lists one (nor may it read uploads/).
        "s3:ListBucket",
    },
}
AWS = tuple(f"{prefix}:" for prefix in PREFIXES.values())
# A store module's DynamoDB calls are on its own table; transactions written elsewhere span
# tables: the tables their items are on, by kind.
STORES = {f"codeshot.store.{spec.logical}": spec for spec in tables.TABLES}
TRANSACTION_TABLES = {
    # the message, its embeds, the idempotency key; the session's counts and the quotas;
    # the session's deletion not begun
    "codeshot.usecases.messaging": {"dynamodb:PutItem": (tables.SESSIONS,),
                                    "dynamodb:UpdateItem": (tables.SESSIONS, tables.USAGE),
                                    "dynamodb:ConditionCheckItem": (tables.SESSIONS,)},
    # the reply, its trace and marker, the session, a paused state; the running slot back;
    # the session's deletion not begun
    "codeshot.runner.session_runner": {"dynamodb:PutItem": (tables.SESSIONS,),
                                       "dynamodb:DeleteItem": (tables.SESSIONS,),
                                       "dynamodb:UpdateItem": (tables.SESSIONS, tables.USAGE),
                                       "dynamodb:ConditionCheckItem": (tables.SESSIONS,)},
}
# Transaction parts the reader cannot see: built and returned by another function than the
# one calling transact_write_items. (function, table, action) -> where, and what it writes.
TRANSACTION_PARTS = {
    # UserStorageStore._count: a key put or deleted moves its scope's key count with it.
    ("api", "user_storage", "dynamodb:UpdateItem"): ("codeshot/store/user_storage.py",
                                                     'return {"Update": update}'),
}


@pytest.fixture(scope="module")
def every_option(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """The app with every optional part on (S3 Vectors corpus search, a tuned router model
    whose graph is read from S3), so that each call the code can make has its grant in
    the template."""
    from tests.routing.test_tune import fake_tuning

    model = fake_tuning(tmp_path_factory.mktemp("model") / "router-model")
    return synthesize(tmp_path_factory.mktemp("every-option"),
                      **{"codeshot:corpusSearch": "s3vectors",
                         "codeshot:routerModel": str(model)})


def aws_actions(actions: set[str]) -> set[str]:
    return {a for a in actions if a.startswith(AWS)}  # not logs: and xray:, every function's


@pytest.mark.parametrize("function", PLATFORM_FUNCTIONS, ids=lambda f: f.name)
def test_a_functions_role_grants_what_its_code_calls(every_option, function: PlatformFunction):
    called = actions_called(handler_modules(function.handler.rsplit(".", 1)[0]),
                            function.aws_services)
    not_reached = NOT_REACHED.get(function.name, set())
    assert not_reached <= set(called), f"stale NOT_REACHED: {not_reached - set(called)}"
    called = {a: how for a, how in called.items() if a not in not_reached}
    granted = aws_actions(every_option.platform.all_actions(function.handler))
    missing = {a: called[a] for a in set(called) - granted}
    assert not missing, f"{function.name} calls, ungranted (action: how): {missing}"
    unused = granted - set(called) - NOT_CALLS.get(function.name, set())
    assert not unused, f"{function.name} is granted what its code never calls: {unused}"
    assert NOT_CALLS.get(function.name, set()) <= granted


@pytest.mark.parametrize("function", PLATFORM_FUNCTIONS, ids=lambda f: f.name)
def test_a_function_bundles_the_model_of_each_aws_service_its_code_makes_a_client_of(
        function: PlatformFunction):
    """A bundle keeps only its ``aws_services``' botocore models: a client of any other
    service fails to be made (UnknownServiceError), in AWS only. The API's accounts made a
    cognito-idp client its bundle had no model for: every sign-up failed with a 500."""
    made = clients_made(handler_modules(function.handler.rsplit(".", 1)[0]))
    missing = {service: via for service, via in made.items()
               if service not in function.aws_services}
    assert not missing, f"{function.name} makes clients its bundle has no model of: {missing}"
    unused = set(function.aws_services) - set(made)
    assert not unused, f"{function.name} bundles models no code of it uses: {unused}"


@pytest.mark.parametrize("function", PLATFORM_FUNCTIONS, ids=lambda f: f.name)
def test_each_table_grants_what_the_code_calls_on_it(synth, function: PlatformFunction):
    """Both ways, table by table. Action names alone hide a call on a table the role cannot
    touch (an agent deploy that charged the usage table failed only in AWS), and a grant
    on one table that the code makes only on another (the runner could Scan the users)."""
    called = calls_by_module(handler_modules(function.handler.rsplit(".", 1)[0]),
                             function.aws_services)
    calls: dict[tuple[str, str], str] = {}
    for (action, module), via in called.items():
        if not action.startswith("dynamodb:"):
            continue
        on = (STORES[module],) if module in STORES else TRANSACTION_TABLES[module][action]
        calls |= {(spec.logical, action): via for spec in on}
    for (name, logical, action), (path, part) in TRANSACTION_PARTS.items():
        if name == function.name:
            assert part in (REPO_ROOT / path).read_text(), f"stale TRANSACTION_PARTS: {path}"
            calls[(logical, action)] = path
    granted = {(spec.logical, action) for spec in tables.TABLES
               for action in synth.platform.actions_on(function.handler, synth.table_id(spec))}
    missing = {call: via for call, via in calls.items() if call not in granted}
    assert not missing, f"{function.name} calls, ungranted on that table: {missing}"
    unused = granted - set(calls)
    assert not unused, f"{function.name} is granted, on these tables, what it never calls " \
                       f"there: {sorted(unused)}"


def test_an_agent_calls_nothing_in_aws_and_is_granted_nothing(synth):
    agent_dir = REPO_ROOT / "agent_template"
    bundle = agent_bundle(agent_dir, read_config(agent_dir).entry_point)
    files = [path for _, path in bundle.files if path.suffix == ".py"]
    assert any(p.name == "agent.py" for p in files)
    assert actions_called(files, tuple(PREFIXES), entry="handle_query") == {}
    assert aws_actions(synth.agent.all_actions(f"{AGENT_ENTRY_MODULE}.handler")) == set()


def test_the_reading_sees_calls_through_typed_stores():
    """The reader follows ``services.<store>.<method>`` and module functions to the boto3
    call: the runner reaches BatchWriteItem through the session store (a long trace's
    put_messages, a deleted session's purge; from handle or give_up: whichever path is
    found first is named)."""
    called = actions_called(handler_modules("handlers.runner"), RUNNER_FUNCTION.aws_services)
    path = called["dynamodb:BatchWriteItem"]
    assert path.startswith("> SessionRunner.") and " > SessionStore." in path and \
        path.endswith(".batch_write"), path
    api = actions_called(handler_modules("handlers.api"), API_FUNCTION.aws_services)
    assert "sqs:ReceiveMessage" not in api  # the API never consumes the queue
    # A shared helper's Query (store/dynamo.py's query_pages) counts for the store that
    # called it: the sweep's index reads are on user storage's table.
    by_module = calls_by_module(handler_modules("handlers.runner"), RUNNER_FUNCTION.aws_services)
    assert ("dynamodb:Query", "codeshot.store.user_storage") in by_module
    assert not [m for _, m in by_module if m == "codeshot.store.dynamo"]

"""Each function's role grants what its code calls, both ways: the boto3 operations
reachable from its handler (read from the source, tests/infra/code_calls.py) against
the actions its role holds in the synthesized template. A call without its grant would be
refused in AWS; a grant no code uses is privilege only an attacker would use."""

from __future__ import annotations

import pytest

from codeshot.sdk.project import read_config
from infra.bundling import (
    AGENT_ENTRY_MODULE,
    API_FUNCTION,
    REGISTER_FUNCTION,
    RUNNER_FUNCTION,
    PlatformFunction,
    agent_bundle,
)
from infra.config import REPO_ROOT
from tests.infra.code_calls import PREFIXES, actions_called, handler_modules
from tests.infra.conftest import Synth, synthesize

# Granted for what is not a call in the function's code:
NOT_CALLS = {
    # The event source mappings poll the queues with the runner's role; QueryVectors with
    # metadata is authorised by GetVectors too.
    "runner": {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility",
               "sqs:GetQueueAttributes", "sqs:GetQueueUrl", "s3vectors:GetVectors"},
    # Lets a missing object answer 404 (NOT_FOUND: "you have no upload ...") not 403.
    "api": {"s3:ListBucket"},
}
# Calls the reader finds on paths this function's inputs never take (each still checked
# to be found, so that an entry cannot outlive its reason).
NOT_REACHED = {
    "register": {
        # Deployed agents carry no MCP Authorization: registration stores no agent secret
        # and so deletes none (AgentSecrets.delete(None) returns at once).
        "secretsmanager:CreateSecret", "secretsmanager:DeleteSecret",
        # The platform Funcs' catalogue is imported for its names; no Func runs here.
        "dynamodb:BatchGetItem",
    },
}
AWS = tuple(f"{prefix}:" for prefix in PREFIXES.values())


@pytest.fixture(scope="module")
def every_option(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """The app with every optional part on (S3 Vectors corpus search), so that each call
    the code can make has its grant in the template."""
    return synthesize(tmp_path_factory.mktemp("every-option"),
                      **{"codeshot:corpusSearch": "s3vectors"})


def aws_actions(actions: set[str]) -> set[str]:
    return {a for a in actions if a.startswith(AWS)}  # not logs: and xray:, every function's


@pytest.mark.parametrize("function", [API_FUNCTION, RUNNER_FUNCTION, REGISTER_FUNCTION],
                         ids=lambda f: f.name)
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


def test_an_agent_calls_nothing_in_aws_and_is_granted_nothing(synth):
    agent_dir = REPO_ROOT / "agent_template"
    bundle = agent_bundle(agent_dir, read_config(agent_dir).entry_point)
    files = [path for _, path in bundle.files if path.suffix == ".py"]
    assert any(p.name == "agent.py" for p in files)
    assert actions_called(files, tuple(PREFIXES), entry="handle_query") == {}
    assert aws_actions(synth.agent.all_actions(f"{AGENT_ENTRY_MODULE}.handler")) == set()


def test_the_reading_sees_calls_through_typed_stores():
    """The reader follows ``services.<store>.<method>`` and module functions to the boto3
    call: the runner's long traces reach BatchWriteItem through SessionStore.put_messages."""
    called = actions_called(handler_modules("handlers.runner"), RUNNER_FUNCTION.aws_services)
    assert "SessionStore.put_messages" in called["dynamodb:BatchWriteItem"]
    api = actions_called(handler_modules("handlers.api"), API_FUNCTION.aws_services)
    assert "sqs:ReceiveMessage" not in api  # the API never consumes the queue

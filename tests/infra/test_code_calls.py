"""The IAM reader (code_calls.py) follows the code of ours that only what is not ours
calls. It missed the API's cancel (a DeleteItem on the sessions table, reached only from
A2A's ``on_cancel_task`` and the /mcp tools): the role lacked the grant, and every cancel
would have failed in AWS alone."""

from __future__ import annotations

from pathlib import Path

from tests.infra.code_calls import REPO, calls_by_module, handler_modules

FIXTURE = Path(__file__).parent / "fixtures" / "framework_hooks.py"


def test_the_reader_counts_the_calls_of_what_a_framework_calls():
    """A framework subclass's hook, a duck-typed object handed to an SDK and an ASGI app's
    ``__call__``, each through ``services: Services``; stores typed as a variable, a
    nested function's parameter or an attribute made by a constructor. A never-called method of an object kept to ourselves
    counts for nothing."""
    called = calls_by_module([FIXTURE, *handler_modules("codeshot.services")],
                             ("dynamodb", "sqs"))
    sessions = "codeshot.store.sessions"
    assert set(called) == {
        # end_pause's transaction: the session idle, its paused state dropped, the reply
        ("dynamodb:UpdateItem", sessions), ("dynamodb:DeleteItem", sessions),
        ("dynamodb:PutItem", sessions), ("dynamodb:ConditionCheckItem", sessions),
        ("dynamodb:GetItem", "codeshot.store.users"),
        ("dynamodb:GetItem", "codeshot.store.registry"), ("dynamodb:GetItem", sessions),
        ("dynamodb:UpdateItem", "codeshot.store.usage"),
        ("sqs:SendMessage", "codeshot.store.queue")}, called
    assert called[("dynamodb:DeleteItem", sessions)].startswith("> .Declines > "), called


def test_the_reader_reads_the_modules_imported_by_name():
    """The API imports /mcp's module on its first request, by its name: no import
    statement shows it, and its tools cancel questions."""
    assert REPO / "codeshot" / "api" / "mcp.py" in handler_modules("handlers.api")

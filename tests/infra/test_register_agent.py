"""The custom resource behind ``cdk deploy``'s agent registration, on moto: create,
update, rename, delete, and a failure answered to CloudFormation instead of hanging."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import ClassVar

import pytest

from codeshot.errors import NotFound
from codeshot.runner.handshake import Handshake
from codeshot.sdk.project import load_agent, read_config
from codeshot.services import Services
from codeshot.store.tables import REPLIES_HELD_MARK
from codeshot.usecases import new_stack
from handlers import register_agent
from infra.config import REPO_ROOT
from tests import stacks

URL = "https://93.184.215.14/notes"  # public address literal: passes the SSRF check offline


@pytest.fixture
def services(aws):
    return Services(aws)


@pytest.fixture
def fetch():
    """The template agent's real handshake document, without HTTP; records calls."""
    directory = REPO_ROOT / "agent_template"
    agent = load_agent(directory, read_config(directory))
    calls: list[tuple[str, str]] = []

    def fetch(url: str, token: str) -> Handshake:
        calls.append((url, token))
        return Handshake(**agent.metadata())

    fetch.calls = calls
    return fetch


def event(kind: str, physical_id: str | None = None, **props) -> dict:
    properties = {"Owner": "admin", "Handle": "notes", "Name": "Notes",
                  "Description": "Saves notes", "Url": URL, "Published": "true",
                  "SampleQueries": ["What are my notes?"], "CodeHash": "h1", **props}
    out = {"RequestType": kind, "ResourceProperties": properties, "RequestId": "req-1",
           "StackId": "arn:aws:cloudformation:us-east-1:1:stack/S/x", "LogicalResourceId": "R",
           "ResponseURL": "http://127.0.0.1:9/unused"}
    if physical_id:
        out["PhysicalResourceId"] = physical_id
    return out


def test_create_registers_under_a_new_admin_user(services, fetch):
    physical_id, data = register_agent.apply(event("Create"), services, fetch)
    assert physical_id == "admin/notes" == data["AgentId"]
    agent = services.registry.get("admin/notes")
    admin = services.users.get_by_username("admin")
    assert agent.owner == "admin" and agent.published
    assert agent.kind.value == data["Kind"] == "code_shot"
    assert agent.func_url == URL and agent.few_shots  # from the handshake
    assert "What are my notes?" in agent.sample_queries
    assert fetch.calls[0][0] == URL
    # A second agent reuses the same admin user.
    register_agent.apply(event("Create", Handle="notes2"), services, fetch)
    assert services.users.get_by_username("admin").user_id == admin.user_id


def test_agents_are_never_deployed_under_an_account_that_signed_up_with_the_name(services,
                                                                              fetch):
    """Whoever signed up as the admin username first would own the kit's agents (their
    URL, their users' queries and call tokens): the deploy refuses instead."""
    from codeshot.errors import Conflict

    services.users.create("ops", identity="cognito-sub-of-mallory")
    with pytest.raises(Conflict, match="signed up"):
        register_agent.apply(event("Create", Owner="ops"), services, fetch)
    assert services.registry.scan_all() == []


def test_deploys_are_not_counted_against_the_admins_daily_changes(aws, fetch):
    """The operator's cdk deploy registers and updates agents as the admin user: never
    RATE_LIMITED by the users' allowance (and the function has no usage-table access)."""
    services = Services(aws.replace(daily_agent_changes=0))
    for kind in ("Create", "Update"):
        physical_id, _ = register_agent.apply(event(kind, "admin/notes"), services, fetch)
        assert physical_id == "admin/notes"


def test_update_rereads_the_handshake_and_changes_fields(services, fetch):
    register_agent.apply(event("Create"), services, fetch)
    before = len(fetch.calls)
    physical_id, _ = register_agent.apply(
        event("Update", "admin/notes", Description="Now with more notes", CodeHash="h2"),
        services, fetch)
    assert physical_id == "admin/notes"
    assert services.registry.get("admin/notes").description == "Now with more notes"
    assert len(fetch.calls) > before  # code may have changed at the same URL


def test_renamed_handle_gets_a_new_physical_id_and_delete_removes_the_old(services, fetch):
    register_agent.apply(event("Create"), services, fetch)
    physical_id, _ = register_agent.apply(
        event("Update", "admin/notes", Handle="jotter"), services, fetch)
    assert physical_id == "admin/jotter"  # CloudFormation then deletes the old id
    register_agent.apply(event("Delete", "admin/notes"), services, fetch)
    with pytest.raises(NotFound):
        services.registry.get("admin/notes")
    assert services.registry.get("admin/jotter").owner == "admin"


def test_delete_is_idempotent_and_ignores_failed_creates(services, fetch):
    register_agent.apply(event("Create"), services, fetch)
    assert register_agent.apply(event("Delete", "admin/notes"), services, fetch)[0] == "admin/notes"
    register_agent.apply(event("Delete", "admin/notes"), services, fetch)  # already gone
    failed = register_agent.UNREGISTERED + "req-0"
    assert register_agent.apply(event("Delete", failed), services, fetch) == (failed, {})


def test_retrying_gives_a_new_agent_api_time_then_gives_up():
    attempts = []

    def flaky(url, token):
        attempts.append(url)
        if len(attempts) < 3:
            raise RuntimeError("503")
        return "ok"

    assert register_agent.retrying(flaky, lambda: False, sleep=lambda s: None)("u", "t") == "ok"
    assert len(attempts) == 3

    def down(url, token):
        raise RuntimeError("down")

    with pytest.raises(RuntimeError, match="down"):  # out of time: the error goes up
        register_agent.retrying(down, lambda: True, sleep=lambda s: None)("u", "t")


class _Recorder(BaseHTTPRequestHandler):
    bodies: ClassVar[list[dict]] = []
    sizes: ClassVar[list[int]] = []

    def do_PUT(self):
        self.sizes.append(int(self.headers["Content-Length"]))
        self.bodies.append(json.loads(self.rfile.read(self.sizes[-1])))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


class _Context:
    def get_remaining_time_in_millis(self) -> int:
        return 100_000


def test_handler_answers_cloudformation_even_when_registration_fails(aws, monkeypatch):
    server = HTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Recorder.bodies.clear()
    monkeypatch.setattr(register_agent, "_services", lambda: Services(aws))
    try:
        bad = event("Create", Url="http://127.0.0.1:1/")  # loopback: refused (SSRF check)
        bad["ResponseURL"] = f"http://127.0.0.1:{server.server_port}/response"
        register_agent.handler(bad, _Context())
    finally:
        server.shutdown()
    assert len(_Recorder.bodies) == 1, _Recorder.bodies
    body = _Recorder.bodies[0]
    assert body["Status"] == "FAILED", body
    assert "non-public address" in body["Reason"] or "refused" in body["Reason"], body
    assert body["PhysicalResourceId"] == register_agent.UNREGISTERED + "req-1"
    assert (body["RequestId"], body["LogicalResourceId"]) == ("req-1", "R")


@pytest.mark.parametrize("reason", [
    "Few-shot 1: Q: Quelle météo à Zürich ? — " * 200,  # 2 bytes a character in UTF-8
    "Ask Func[roll]: 🎲 " * 400,  # 4 bytes an emoji
    'Few-shot 1 line 3: "Ask Func[x]: y"\n' * 200,
    "undecodable \udc80 byte in a template property " * 100,  # a lone surrogate
])
def test_a_long_reason_is_cut_so_that_cloudformation_takes_the_answer(reason):
    """CloudFormation takes at most 4096 bytes: a longer answer is refused ("Response
    object is too long") and the stack shows that, not why the agent failed."""
    server = HTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Recorder.bodies.clear()
    _Recorder.sizes.clear()
    failed = event("Create") | {"ResponseURL": f"http://127.0.0.1:{server.server_port}/r"}
    try:
        register_agent.respond(failed, "FAILED", "admin/notes", reason, {"AgentId": "a/b"})
        register_agent.respond(failed, "FAILED", "admin/notes", reason[:40], {})
    finally:
        server.shutdown()
    (size, _), (long, short) = _Recorder.sizes, _Recorder.bodies
    assert size <= 4096
    assert long["Reason"].endswith("…") and reason.startswith(long["Reason"][:-1])
    assert len(long["Reason"]) > 1000  # as much of the reason as fits, not a stub
    assert (long["Status"], long["Data"]) == ("FAILED", {"AgentId": "a/b"})
    assert short["Reason"] == reason[:40]  # a short one is whole


def answers(services: Services, monkeypatch, *events: dict) -> list[dict]:
    """The handler's answers to CloudFormation, one per event, PUT to a loopback server."""
    server = HTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Recorder.bodies.clear()
    monkeypatch.setattr(register_agent, "_services", lambda: services)
    try:
        for sent in events:
            sent["ResponseURL"] = f"http://127.0.0.1:{server.server_port}/response"
            register_agent.handler(sent, _Context())
    finally:
        server.shutdown()
    return list(_Recorder.bodies)


def test_the_replies_held_resource_marks_the_sessions_table_of_a_stack_being_created(
        services, monkeypatch):
    """Its create, update and delete answer CloudFormation under one physical id (never a
    replacement); only while the stack is being created is the table marked, and its
    delete (the stack's rollback or deletion) leaves the mark with its table."""
    db, table = services.sessions.db, services.settings.sessions_table
    db.delete_item(TableName=table, Key=REPLIES_HELD_MARK)  # as CDK makes the table
    stack = stacks.stack_in(services.settings, stacks.CREATING)
    bodies = answers(services, monkeypatch, stacks.replies_held_event(stack))
    stacks.now_in(services.settings, stack, stacks.UPDATING)
    bodies += answers(services, monkeypatch, *(
        stacks.replies_held_event(stack, kind) for kind in ("Update", "Delete")))
    assert [(b["Status"], b["PhysicalResourceId"], b["Data"]) for b in bodies] == [
        ("SUCCESS", new_stack.PHYSICAL_ID, {"Marked": "true"}),
        ("SUCCESS", new_stack.PHYSICAL_ID, {"Marked": "false"}),
        ("SUCCESS", new_stack.PHYSICAL_ID, {})]
    assert services.sessions.replies_held()
    assert services.registry.scan_all() == []  # no agent registration


def test_the_replies_held_resource_added_by_an_upgrade_marks_nothing(services, monkeypatch):
    """Created by the update that brings it, into a stack whose table may hold replies
    from before HELD# items: unmarked, for `codeshot users hold-replies`."""
    db, table = services.sessions.db, services.settings.sessions_table
    db.delete_item(TableName=table, Key=REPLIES_HELD_MARK)
    updating = stacks.stack_in(services.settings, stacks.UPDATING)
    (body,) = answers(services, monkeypatch, stacks.replies_held_event(updating))
    assert (body["Status"], body["Data"]) == ("SUCCESS", {"Marked": "false"})
    assert not services.sessions.replies_held()


def test_a_replies_held_resource_that_cannot_read_its_stack_fails_and_marks_nothing(
        services, monkeypatch):
    """In AWS, a stack its role may not describe (any but its own) is refused as this
    missing one is: the stack's creation fails (and rolls back) rather than guess."""
    db, table = services.sessions.db, services.settings.sessions_table
    db.delete_item(TableName=table, Key=REPLIES_HELD_MARK)
    (body,) = answers(services, monkeypatch, stacks.replies_held_event(
        "arn:aws:cloudformation:us-east-1:123456789012:stack/another/x"))
    assert body["Status"] == "FAILED" and "does not exist" in body["Reason"], body
    assert not services.sessions.replies_held()


def test_a_failed_creates_rollback_is_answered_under_the_id_cloudformation_holds(
        services, monkeypatch):
    """A create that failed is answered under an id of the handler's making; the
    rollback's delete must answer that same id (CloudFormation requires one id a
    resource), and is answered even when the function cannot build its services."""
    missing = "arn:aws:cloudformation:us-east-1:123456789012:stack/another/x"
    (failed,) = answers(services, monkeypatch, stacks.replies_held_event(missing))
    assert failed["Status"] == "FAILED"
    rollback = stacks.replies_held_event(missing, "Delete") | {
        "PhysicalResourceId": failed["PhysicalResourceId"]}
    (deleted,) = answers(services, monkeypatch, rollback)
    assert (deleted["Status"], deleted["PhysicalResourceId"]) == (
        "SUCCESS", failed["PhysicalResourceId"])

    def broken() -> Services:
        raise RuntimeError("no settings in this environment")

    monkeypatch.setattr(register_agent, "_services", broken)
    server = HTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Recorder.bodies.clear()
    try:
        register_agent.handler(rollback | {
            "ResponseURL": f"http://127.0.0.1:{server.server_port}/response"}, _Context())
    finally:
        server.shutdown()
    (answer,) = _Recorder.bodies
    assert answer["Status"] == "FAILED" and "no settings" in answer["Reason"]
    assert answer["PhysicalResourceId"] == failed["PhysicalResourceId"]

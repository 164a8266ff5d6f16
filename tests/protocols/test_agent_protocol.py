"""The Agent Protocol v1 at /ap/v1/agent, driven by its official Python client
(agent-protocol-client, in its own virtualenv: tests/protocols/ap_client.py) against the
local stack: tasks run to their end, steps, artifacts, pagination, a question answered by
the next step (the RFC's option 1), and bad input."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.dynamo_reads import PartitionReads
from tests.protocols.conftest import new_account, new_user

CLIENT = Path(__file__).with_name("ap_client.py")
AP = "/ap/v1/agent"


def run_client(python: Path, stack, key: str, *args: str) -> dict:
    out = subprocess.run([str(python), str(CLIENT), stack.api_url, key, *args],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def ap(stack, key: str, method: str, path: str, headers: dict | None = None,
       **kwargs) -> httpx.Response:
    return httpx.request(method, f"{stack.api_url}{AP}{path}", timeout=60,
                         headers={"Authorization": f"Bearer {key}", **(headers or {})},
                         **kwargs)


def gql_messages(stack, key: str, handle: str) -> list[tuple[str, str]]:
    out = httpx.post(f"{stack.api_url}/graphql", timeout=30,
                     headers={"Authorization": f"Bearer {key}"},
                     json={"query": "query ($h: String!) { sessionByHandle(handle: $h) "
                                    "{ frontendAgentId messages { type text } } }",
                           "variables": {"h": handle}}).json()
    return [(m["type"], m["text"]) for m in out["data"]["sessionByHandle"]["messages"]]


def long_task(stack, key: str, steps: int, made_at: int) -> tuple[str, list]:
    """A task with one upload and ``steps`` steps stored straight into its log, each a
    query, a thought and an answer; the answer of step ``made_at`` carries an embed."""
    from codeshot import ids
    from codeshot.models import EmbedRef, Message, MessageType

    task_id = ap(stack, key, "POST", "/tasks", json={}).json()["task_id"]
    ap(stack, key, "POST", f"/tasks/{task_id}/artifacts",
       files={"file": ("in.txt", b"in", "text/plain")})
    digest = stack.services.embeds.put(b"made", "text/plain")
    log = []
    for n in range(steps):
        query = Message(session_id=task_id, message_id=ids.ulid(), text=f"step {n}")
        log += [query, Message(session_id=task_id, message_id=ids.ulid(), text="thinking",
                               type=MessageType.THOUGHT, in_reply_to=query.message_id),
                Message(session_id=task_id, message_id=ids.ulid(), text=f"answer {n}",
                        type=MessageType.RESPONSE, in_reply_to=query.message_id,
                        embeds={"out.txt": EmbedRef(content_type="text/plain",
                                                    content_hash=digest, size=4)}
                        if n == made_at else {})]
    stack.services.sessions.put_messages(log)
    return task_id, log


def test_a_task_runs_to_its_end_with_the_funcs_real_result(stack, agent_protocol_python):
    key = new_user(stack, "apdice")
    got = run_client(agent_protocol_python, stack, key, "steps",
                     json.dumps({"input": "Roll a d20",
                                 "additional_input": {"agent": "local/dice"}}), "")
    task_id = got["task"]["task_id"]
    assert got["task"]["input"] == "Roll a d20"
    assert got["task"]["additional_input"] == {"agent": "local/dice"}
    [step] = got["steps"]  # the step without input is the task's own
    assert (step["input"], step["status"], step["is_last"]) == ("Roll a d20", "completed", True)
    rolled = re.fullmatch(r"You rolled (\d+)\.", step["output"])
    assert rolled and 1 <= int(rolled.group(1)) <= 20
    assert got["listed"] == [step] and got["listed_pagination"] == {
        "total_items": 1, "total_pages": 1, "current_page": 1, "page_size": 10}
    assert got["tasks"] == [task_id]  # newest first, one a page
    assert got["tasks_pagination"]["total_items"] == 1
    # The same session from GraphQL: the step is a turn, the Func's own result in its trace.
    messages = gql_messages(stack, key, task_id)
    assert messages[0] == ("query", "Roll a d20")
    assert ("result", f"Func[roll] says: {rolled.group(1)}") in messages
    assert messages[-1] == ("response", step["output"])


def test_the_planner_by_default_and_a_new_step_continues_the_task(stack, agent_protocol_python):
    key = new_user(stack, "applanner")
    got = run_client(agent_protocol_python, stack, key, "steps", json.dumps({}),
                     "Roll a d6", "")
    first, again = got["steps"]
    assert got["task"]["input"] is None and got["got"]["input"] == "Roll a d6"
    assert got["got"]["additional_input"] == {"agent": "platform/planner"}
    assert first["is_last"] and re.search(r"\d", first["output"])
    assert again == first  # nothing left to run: the last step again
    raw = ap(stack, key, "GET", f"/tasks/{got['task']['task_id']}").json()
    assert raw["status"] == "completed"


def test_artifacts_are_uploaded_listed_and_downloaded(stack, agent_protocol_python, tmp_path):
    key = new_user(stack, "apfiles")
    task = ap(stack, key, "POST", "/tasks", json={}).json()
    upload = tmp_path / "notes.txt"
    upload.write_text("Remember the milk.\n")
    got = run_client(agent_protocol_python, stack, key, "artifacts", task["task_id"],
                     str(upload))
    assert got["uploaded"]["artifact_id"] == "notes.txt"
    assert got["uploaded"]["file_name"] == "notes.txt"
    assert got["uploaded"]["relative_path"] == "in/"
    assert not got["uploaded"]["agent_created"]
    assert got["listed"] == [got["uploaded"]]
    assert got["pagination"]["total_items"] == 1
    assert got["downloaded"] == "Remember the milk.\n"
    assert got["missing"]["status"] == 404 and "nothing.txt" in got["missing"]["body"]["message"]
    # The artifact is the session's embed: GraphQL and the task's agents see it.
    embed = stack.services.sessions.get_embed(task["task_id"], "notes.txt")
    assert (embed.content_type, embed.size) == ("text/plain", 19)
    # The same name with other bytes is refused (embeds are immutable); nothing changes.
    again = ap(stack, key, "POST", f"/tasks/{task['task_id']}/artifacts",
               files={"file": ("notes.txt", b"other", "text/plain")})
    assert again.status_code == 400 and again.json()["error"]["code"] == "INVALID_INPUT"
    assert stack.services.sessions.get_embed(task["task_id"], "notes.txt") == embed


def test_a_question_is_answered_by_the_next_steps_input(stack, booking, agent_protocol_python):
    agent_id, made = booking
    key = new_user(stack, "apbook")
    got = run_client(agent_protocol_python, stack, key, "steps",
                     json.dumps({"input": "Book a table at Luigi's",
                                 "additional_input": {"agent": agent_id}}), "", "4")
    asked, answered = got["steps"]
    # The question: completed (asking was the step's work), not the last, its output.
    assert (asked["status"], asked["is_last"], asked["output"]) == (
        "completed", False, "For how many people?")
    assert asked["additional_output"]["status"] == "awaiting_input"
    # The next step's input answered it: the paused program went on with it.
    assert answered["input"] == "4" and answered["is_last"]
    assert "Booked Luigi's for 4" in answered["output"]
    assert made[-1] == "Luigi's for 4"
    assert [s["step_id"] for s in got["listed"]] == [asked["step_id"], answered["step_id"]]


def test_a_waiting_task_says_so_and_stays_at_its_question(stack, booking):
    agent_id, _ = booking
    key = new_user(stack, "apwait")
    task = ap(stack, key, "POST", "/tasks", json={"input": "Book a table at Mario's",
                                                  "additional_input": {"agent": agent_id}})
    step = ap(stack, key, "POST", f"/tasks/{task.json()['task_id']}/steps").json()
    assert step["output"] == "For how many people?" and not step["is_last"]
    got = ap(stack, key, "GET", f"/tasks/{step['task_id']}").json()
    assert got["status"] == "awaiting_input"
    # Without an input, the task stays at its question (asked once, not again).
    again = ap(stack, key, "POST", f"/tasks/{step['task_id']}/steps", json={}).json()
    assert again == step
    listed = ap(stack, key, "GET", f"/tasks/{step['task_id']}/steps").json()
    assert listed["steps"] == [step]


def test_bad_input_is_refused_clearly_and_makes_nothing(stack):
    key = new_user(stack, "apbad")
    for body, says in [({"additional_input": {"agent": "nobody/none"}}, "NOT_FOUND"),
                       ({"additional_input": {"model": "x"}}, "INVALID_INPUT"),
                       ({"input": " "}, "INVALID_INPUT"),
                       ({"inputs": "typo"}, "INVALID_INPUT")]:
        r = ap(stack, key, "POST", "/tasks", json=body)
        assert r.json()["error"]["code"] == says, (body, r.text)
        assert r.json()["message"]
    listed = ap(stack, key, "GET", "/tasks").json()
    assert listed["tasks"] == [] and listed["pagination"]["total_items"] == 0
    assert ap(stack, key, "GET", "/tasks?current_page=0").status_code == 400
    assert ap(stack, "wrong", "GET", "/tasks").status_code == 401
    task = ap(stack, key, "POST", "/tasks", json={}).json()
    r = ap(stack, key, "POST", f"/tasks/{task['task_id']}/steps", json={})
    assert r.status_code == 400 and "no input" in r.json()["message"]
    r = ap(stack, key, "POST", f"/tasks/{task['task_id']}/artifacts",
           files={"file": ("../../etc/passwd", b"x", "text/plain")})
    assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_INPUT"


def test_another_users_task_is_not_found(stack):
    mine, theirs = new_user(stack, "apmine"), new_user(stack, "aptheirs")
    task = ap(stack, mine, "POST", "/tasks", json={"input": "Roll a d4"}).json()
    for method, path in [("GET", ""), ("GET", "/steps"), ("POST", "/steps"),
                         ("GET", "/artifacts")]:
        r = ap(stack, theirs, method, f"/tasks/{task['task_id']}{path}")
        assert r.status_code == 404, (method, path, r.text)
    assert ap(stack, theirs, "GET", "/tasks").json()["tasks"] == []


@pytest.mark.parametrize("size", [1, 2])
def test_tasks_come_in_numbered_pages(stack, size):
    key = new_user(stack, f"appages{size}")
    made = [ap(stack, key, "POST", "/tasks", json={}).json()["task_id"] for _ in range(3)]
    seen = []
    for page in (1, 2, 3):
        got = ap(stack, key, "GET", f"/tasks?current_page={page}&page_size={size}").json()
        seen += [t["task_id"] for t in got["tasks"]]
        assert got["pagination"] == {"total_items": 3, "total_pages": -(-3 // size),
                                     "current_page": page, "page_size": size}
    assert seen == made[::-1]


def test_a_page_of_tasks_reads_the_tasks_up_to_its_end_only(stack, monkeypatch):
    """Every page read sessions 200 at a time from the newest until it was filled, so a
    page past the last read all of them (3,000 sessions: 15 queries for an empty page)."""
    from codeshot.usecases.sessions import create_session
    from codeshot.usecases.users import principal_of

    user, key = new_account(stack, "aptasks")
    for _ in range(25):
        create_session(stack.services, principal_of(user))
    store, listed = stack.services.sessions, []
    list_by_owner = store.list_by_owner

    def spied(owner, limit=None, token=None, after=None):
        page = list_by_owner(owner, limit, token, after)
        listed.append(len(page.items))
        return page

    monkeypatch.setattr(store, "list_by_owner", spied)
    shown = {}
    for page in ("2", "3", "4"):
        got = ap(stack, key, "GET", f"/tasks?current_page={page}&page_size=10").json()
        assert "tasks" in got, got
        shown[page] = (len(got["tasks"]), got["pagination"]["total_items"], sum(listed))
        listed.clear()
    assert shown == {"2": (10, 25, 20), "3": (5, 25, 25), "4": (0, 25, 0)}, shown
    far = ap(stack, key, "GET", "/tasks?current_page=1001&page_size=10")
    assert far.status_code == 400 and "newest 10,000" in far.text, far.text


def test_a_page_of_tasks_counts_no_further_than_pages_reach(stack, monkeypatch):
    """GET /tasks counted every session the user had for its total, on every page (each
    counted, so read and billed, by DynamoDB): a user with many sessions made each page
    read them all. The count stops one past the newest that pages reach, as a long
    task's steps do; at exactly that many it is exact."""
    from codeshot.usecases import agent_protocol
    from codeshot.usecases.sessions import create_session
    from codeshot.usecases.users import principal_of

    monkeypatch.setattr(agent_protocol, "LISTED_TASKS", 20)  # 10,000 in production
    user, key = new_account(stack, "apcount")
    for made in (20, 45):
        while stack.services.sessions.count_by_owner(user.user_id) < made:
            create_session(stack.services, principal_of(user))
        with PartitionReads(stack.services.sessions.db, user.user_id) as reads:
            got = ap(stack, key, "GET", "/tasks?current_page=2&page_size=10").json()
        assert len(got["tasks"]) == 10, got
        assert got["pagination"]["total_items"] == min(made, 21), (made, got["pagination"])
        assert reads.read() <= 21 + 20, (made, reads.calls)  # the count, the pages' tasks


def test_a_retried_post_with_an_idempotency_key_makes_and_charges_nothing_new(stack):

    user, key = new_account(stack, "apretry")
    user_id = user.user_id
    used = stack.services.usage.used
    body = {"input": "Roll a d4", "additional_input": {"agent": "local/dice"}}
    task = ap(stack, key, "POST", "/tasks", json=body, headers={"Idempotency-Key": "t-1"})
    again = ap(stack, key, "POST", "/tasks", json=body, headers={"Idempotency-Key": "t-1"})
    assert task.status_code == again.status_code == 200, again.text
    task_id = task.json()["task_id"]
    assert again.json()["task_id"] == task_id and again.json()["input"] == "Roll a d4"
    assert (used("session", user_id), used("query", user_id)) == (1, 1)
    # Another request under the key is refused, nothing made; a new key is a new task.
    other = ap(stack, key, "POST", "/tasks", json={"input": "Roll a d6"},
               headers={"Idempotency-Key": "t-1"})
    assert other.status_code == 400 and other.json()["error"]["code"] == "INVALID_INPUT"
    assert "Idempotency-Key" in other.json()["message"]
    elsewhere = ap(stack, key, "POST", "/tasks", json={"input": "Roll a d4"},  # the planner
                   headers={"Idempotency-Key": "t-1"})
    assert elsewhere.status_code == 400 and "Idempotency-Key" in elsewhere.json()["message"]
    assert ap(stack, key, "POST", "/tasks", json=body,
              headers={"Idempotency-Key": "t-2"}).json()["task_id"] != task_id
    assert (used("session", user_id), used("query", user_id)) == (2, 2)

    step = ap(stack, key, "POST", f"/tasks/{task_id}/steps", json={"input": "Roll a d8"},
              headers={"Idempotency-Key": "s-1"}).json()
    retried = ap(stack, key, "POST", f"/tasks/{task_id}/steps", json={"input": "Roll a d8"},
                 headers={"Idempotency-Key": "s-1"}).json()
    assert retried["step_id"] == step["step_id"] and retried["output"] == step["output"]
    assert used("query", user_id) == 3
    other = ap(stack, key, "POST", f"/tasks/{task_id}/steps", json={"input": "Roll a d10"},
               headers={"Idempotency-Key": "s-1"})
    assert other.status_code == 400 and other.json()["error"]["code"] == "INVALID_INPUT"
    bad = ap(stack, key, "POST", f"/tasks/{task_id}/steps", json={"input": "Roll a d8"},
             headers={"Idempotency-Key": "two words"})
    assert bad.status_code == 400 and "Idempotency-Key" in bad.json()["message"]
    # Without the header, the same step twice is two steps, as before.
    for _ in range(2):
        ap(stack, key, "POST", f"/tasks/{task_id}/steps", json={"input": "Roll a d8"})
    steps = ap(stack, key, "GET", f"/tasks/{task_id}/steps").json()["steps"]
    assert [s["input"] for s in steps] == ["Roll a d4", "Roll a d8", "Roll a d8", "Roll a d8"]
    assert used("query", user_id) == 5


def test_a_retry_of_the_days_last_query_is_the_same_task_and_step_not_rate_limited(stack):

    user, key = new_account(stack, "aplastquery")
    user_id = user.user_id
    stack.services.users.set_limits(user_id, daily_queries=2, daily_tokens=None)
    body = {"input": "Roll a d4", "additional_input": {"agent": "local/dice"}}
    task_id, again = (ap(stack, key, "POST", "/tasks", json=body,
                         headers={"Idempotency-Key": "last-task"}).json()["task_id"]
                      for _ in range(2))
    assert again == task_id
    step, retried = (ap(stack, key, "POST", f"/tasks/{task_id}/steps",
                        json={"input": "Roll a d6"}, headers={"Idempotency-Key": "last-step"})
                     for _ in range(2))
    assert retried.status_code == 200, retried.text
    assert retried.json()["step_id"] == step.json()["step_id"]
    new = ap(stack, key, "POST", f"/tasks/{task_id}/steps", json={"input": "Roll a d6"},
             headers={"Idempotency-Key": "another"})
    assert new.status_code == 429 and new.json()["error"]["code"] == "RATE_LIMITED"


class Killed(BaseException):
    """The API's process ending mid-request, as a Lambda timeout ends it."""


def test_a_retried_task_whose_first_try_died_before_queueing_its_input_is_answered(
        stack, monkeypatch):
    from codeshot.usecases.agent_protocol import create_task
    from codeshot.usecases.users import principal_of

    user, key = new_account(stack, "apkilled")
    principal = principal_of(user)

    def killed(work, again=False):
        raise Killed

    monkeypatch.setattr(stack.services.queue, "enqueue", killed)
    with pytest.raises(Killed):  # the task and its input stored, never queued
        create_task(stack.services, principal, "Roll a d4", {"agent": "local/dice"},
                    idempotency_key="t-killed")
    monkeypatch.undo()
    body = {"input": "Roll a d4", "additional_input": {"agent": "local/dice"}}
    task_id = ap(stack, key, "POST", "/tasks", json=body,
                 headers={"Idempotency-Key": "t-killed"}).json()["task_id"]
    deadline = time.monotonic() + 30
    while not (steps := ap(stack, key, "GET", f"/tasks/{task_id}/steps").json()["steps"]) \
            or not steps[-1].get("output"):
        assert time.monotonic() < deadline, steps
        time.sleep(0.2)
    assert re.fullmatch(r"You rolled \d\.", steps[-1]["output"]), steps


def test_the_same_artifact_uploaded_again_is_not_charged_again(stack):
    from codeshot.usecases.messaging import UPLOAD_BYTES

    user, key = new_account(stack, "apreupload")
    user_id = user.user_id
    task_id = ap(stack, key, "POST", "/tasks", json={}).json()["task_id"]
    data = b"x" * 100_000
    first, again = (ap(stack, key, "POST", f"/tasks/{task_id}/artifacts",
                       files={"file": ("big.bin", data, "application/octet-stream")})
                    for _ in range(2))
    assert first.status_code == again.status_code == 200, again.text
    assert again.json() == first.json()
    assert stack.services.usage.used(UPLOAD_BYTES, user_id) == 100_000


def test_an_artifact_that_loses_its_name_to_a_concurrent_upload_is_not_charged(
        stack, monkeypatch):
    from codeshot.errors import Conflict
    from codeshot.models import Embed
    from codeshot.usecases.agent_protocol import upload_artifact
    from codeshot.usecases.messaging import UPLOAD_BYTES
    from codeshot.usecases.users import principal_of

    user, key = new_account(stack, "aprace")
    task_id = ap(stack, key, "POST", "/tasks", json={}).json()["task_id"]
    services, theirs = stack.services, b"the other upload's notes"
    put = services.embeds.put

    def raced(data: bytes, content_type: str) -> str:  # the other upload binds it first
        services.sessions.bind_embed(Embed(
            key="notes.txt", session_id=task_id, owner=user.user_id, content_type="text/plain",
            content_hash=put(theirs, "text/plain"), size=len(theirs)))
        return put(data, content_type)

    monkeypatch.setattr(services.embeds, "put", raced)
    with pytest.raises(Conflict):
        upload_artifact(services, principal_of(user), task_id, "notes.txt", b"my notes")
    assert services.usage.used(UPLOAD_BYTES, user.user_id) == 0  # before: charged, not bound
    monkeypatch.undo()
    r = ap(stack, key, "GET", f"/tasks/{task_id}/artifacts/notes.txt")
    assert httpx.get(r.headers["location"]).content == theirs


def test_a_download_is_a_redirect_to_s3_as_an_attachment(stack, tmp_path):
    key = new_user(stack, "apredirect")
    task_id = ap(stack, key, "POST", "/tasks", json={}).json()["task_id"]
    page = b"<script>alert(1)</script>"
    ap(stack, key, "POST", f"/tasks/{task_id}/artifacts",
       files={"file": ("page.html", page, "text/html")})
    r = ap(stack, key, "GET", f"/tasks/{task_id}/artifacts/page.html")
    assert r.status_code == 307 and not r.content  # no bytes through the API (Lambda's 6 MB)
    s3 = httpx.get(r.headers["location"], timeout=30)  # presigned: no API key needed
    assert s3.status_code == 200 and s3.content == page
    assert s3.headers["content-disposition"] == 'attachment; filename="page.html"'
    assert s3.headers["content-type"] == "application/octet-stream"  # never rendered


def test_a_long_tasks_requests_read_a_bounded_slice_of_its_log(stack):
    from codeshot.usecases.messaging import Messaging

    key = new_user(stack, "aplong")
    services = stack.services
    task_id, log = long_task(stack, key, 1200, 600)  # 3,600 messages
    made = f"{log[1802].message_id}:out.txt"
    within = {  # path -> (most whole items read, what the answer shows)
        "": (25, lambda r: r["status"] == "completed"),
        "/steps?current_page=61": (40, lambda r: [s["output"] for s in r["steps"]] == [
            f"answer {n}" for n in range(600, 610)] and r["pagination"]["total_items"] == 1200),
        f"/steps/{log[0].message_id}": (1002, lambda r: r["output"] == "answer 0"),
        "/artifacts": (5, lambda r: [a["artifact_id"] for a in r["artifacts"]] == [
            "in.txt", made] and r["pagination"]["total_items"] == 2),
        "/artifacts?current_page=2&page_size=1": (5, lambda r: [
            a["artifact_id"] for a in r["artifacts"]] == [made]),
    }
    for path, (most, shows) in within.items():
        with PartitionReads(services.sessions.db, task_id) as reads:
            r = ap(stack, key, "GET", f"/tasks/{task_id}{path}")
        assert r.status_code == 200 and shows(r.json()), (path, r.text[:500])
        assert reads.items() <= most, (path, reads.calls)
    with PartitionReads(services.sessions.db, task_id) as reads:
        r = ap(stack, key, "GET", f"/tasks/{task_id}/artifacts/{made}")
        step = ap(stack, key, "POST", f"/tasks/{task_id}/steps").json()
        newest = Messaging(services).since(task_id, None)  # the console's first updates
    assert r.status_code == 307 and httpx.get(r.headers["location"]).content == b"made"
    assert step["output"] == "answer 1199" and step["is_last"]
    assert newest[-1].text == "answer 1199" and len(newest) == 100
    assert reads.items() <= 2 + 25 + 100, reads.calls


def test_a_page_of_steps_waiting_for_replies_reads_the_log_once(stack):
    """Steps queued behind one another have their replies after the next step's query:
    each of a page's unanswered steps read up to 1,000 messages of its own (100 steps of
    15 KB queries: 360 reads, 300 MB for one GET). One read of what follows serves them
    all, and a reply stored late is still its step's."""
    from codeshot import ids
    from codeshot.models import Message, MessageType

    _, key = new_account(stack, "apqueued")
    services = stack.services
    task_id = ap(stack, key, "POST", "/tasks", json={}).json()["task_id"]
    queued = [Message(session_id=task_id, message_id=ids.ulid(), text=f"step {n}")
              for n in range(60)]
    late = Message(session_id=task_id, message_id=ids.ulid(), text="late answer",
                   type=MessageType.RESPONSE, in_reply_to=queued[5].message_id)
    services.sessions.put_messages([*queued, late])
    with PartitionReads(services.sessions.db, task_id) as reads:
        r = ap(stack, key, "GET", f"/tasks/{task_id}/steps?page_size=20")
    steps = r.json()["steps"]
    assert [s["input"] for s in steps] == [f"step {n}" for n in range(20)], r.text[:300]
    assert [s.get("output") for s in steps] == [None] * 5 + ["late answer"] + [None] * 14
    assert reads.items() <= 20 + 41 + 2, reads.calls  # the page, what follows, the task


def test_a_retried_task_shows_its_first_uploads_as_a_read_task_does(stack):
    """A POST /tasks retried under its Idempotency-Key answered with every upload the task
    had had since (all of them read, however many); it is the task as GET shows it."""
    _, key = new_account(stack, "apretryup")
    task_id = ap(stack, key, "POST", "/tasks", json={},
                 headers={"Idempotency-Key": "u-1"}).json()["task_id"]
    for n in range(12):
        ap(stack, key, "POST", f"/tasks/{task_id}/artifacts",
           files={"file": (f"f{n:02}.txt", b"up", "text/plain")})
    with PartitionReads(stack.services.sessions.db, task_id) as reads:
        again = ap(stack, key, "POST", "/tasks", json={},
                   headers={"Idempotency-Key": "u-1"}).json()
    shown = ap(stack, key, "GET", f"/tasks/{task_id}").json()
    assert [a["file_name"] for a in again["artifacts"]] == [f"f{n:02}.txt" for n in range(10)]
    assert again["task_id"] == task_id and again["artifacts"] == shown["artifacts"]
    assert reads.read() <= 10 + 2, reads.calls


@pytest.mark.slow
def test_lists_of_steps_and_artifacts_read_a_bounded_part_of_a_huge_log(stack):
    """A listing found its page from the ids of every query in the log and counted every
    artifact in it: a task of 12,000 messages made each GET of steps or artifacts read all
    12,000 (a user could make the API do any amount of work). Now a page is found among
    the log's first 4,000 messages; one that may hold more is refused, and total_items
    counts what they hold, plus one."""

    LOG_READ = 4_000  # as the README says
    _, key = new_account(stack, "aphuge")
    services = stack.services
    task_id, log = long_task(stack, key, 4000, 5)  # 12,000 messages
    made = f"{log[17].message_id}:out.txt"
    among = (LOG_READ + 2) // 3  # the steps whose queries are among the first 4,000
    served = {  # path -> what the answer shows
        "/steps": lambda r: [s["output"] for s in r["steps"]] == [
            f"answer {n}" for n in range(10)] and r["pagination"] == {
            "total_items": among + 1, "total_pages": 134, "current_page": 1,
            "page_size": 10},
        "/steps?current_page=133": lambda r: [s["input"] for s in r["steps"]] == [
            f"step {n}" for n in range(1320, 1330)] and r["steps"][-1]["is_last"],
        "/artifacts?page_size=2": lambda r: [a["artifact_id"] for a in r["artifacts"]] == [
            "in.txt", made] and r["pagination"]["total_items"] == 3,
    }
    for path, shows in served.items():
        with PartitionReads(services.sessions.db, task_id) as reads:
            r = ap(stack, key, "GET", f"/tasks/{task_id}{path}")
        assert reads.read() <= LOG_READ + 100, (path, reads.read(), reads.calls[:20])
        assert r.status_code == 200 and shows(r.json()), (path, r.text[:500])
    # Pages that may hold what lies past those messages (a full page of 10 artifacts).
    for path in ("/steps?current_page=134", "/steps?current_page=400",
                 "/artifacts", "/artifacts?current_page=3&page_size=1"):
        with PartitionReads(services.sessions.db, task_id) as reads:
            r = ap(stack, key, "GET", f"/tasks/{task_id}{path}")
        assert r.status_code == 400, (path, r.text[:300])
        body = r.json()
        assert body["error"]["code"] == "INVALID_INPUT" and "the first 4,000 messages" in \
            body["message"], (path, body)
        assert reads.read() <= LOG_READ + 2, (path, reads.read())
    # The newest step is still read, however long the log.
    step = ap(stack, key, "POST", f"/tasks/{task_id}/steps").json()
    assert step["output"] == "answer 3999" and step["is_last"]


def test_a_task_of_exactly_as_many_messages_as_a_listing_reads_counts_them_exactly(stack):
    """A listing reads a task's first 4,000 messages: one of exactly that many reported a
    step more than it had (DynamoDB's answer at a Query's Limit says more may follow), and
    its last page of steps was refused as if it might hold more."""
    from codeshot import ids
    from codeshot.models import Message

    _, key = new_account(stack, "apexact")
    task_id, _ = long_task(stack, key, 1333, 5)  # 3,999 messages
    stack.services.sessions.put_messages([Message(session_id=task_id,
                                                  message_id=ids.ulid(), text="step 1333")])
    first = ap(stack, key, "GET", f"/tasks/{task_id}/steps").json()
    assert first["pagination"] == {"total_items": 1334, "total_pages": 134,
                                   "current_page": 1, "page_size": 10}, first["pagination"]
    last = ap(stack, key, "GET", f"/tasks/{task_id}/steps?current_page=134")
    assert last.status_code == 200, last.text[:300]
    assert [s["input"] for s in last.json()["steps"]] == [
        f"step {n}" for n in range(1330, 1334)]
    artifacts = ap(stack, key, "GET", f"/tasks/{task_id}/artifacts").json()
    assert [a["file_name"] for a in artifacts["artifacts"]] == ["in.txt", "out.txt"]
    assert artifacts["pagination"]["total_items"] == 2

"""The RFC's option 2 against the local stack: a task's callback_url is asked the agent's
question (``POST {"prompt"}``) and polled (``GET {callback_url}/{prompt_id}``) through the
prompt queue's delayed messages, by a loopback server written here that answers as each
test scripts it. Raw HTTP creates the tasks: the official client (1.1.0) predates the RFC
and drops ``callback_url`` from its TaskRequestBody."""

from __future__ import annotations

import hashlib
import itertools
import json
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import jwt
import pytest
from fastapi import FastAPI, Header, Request, Response

from codeshot import ids
from codeshot.local.http_server import HttpServer
from codeshot.store.queue import PromptWork
from tests.conftest import free_port
from tests.protocols.conftest import new_user, stack_with
from tests.protocols.test_agent_protocol import ap
from tests.raw_server import raw_server

PENDING = (200, {"prompt_id": "p-1", "status": "pending"})
QUESTION = "For how many people?"


@pytest.fixture(scope="module")
def stack():
    yield from stack_with(reply_wait_seconds=20.0, prompt_deadline_seconds=8,
                          prompt_poll_max_seconds=2)


class Callback:
    """The client's prompt endpoint: answers the prompt's POST, then each poll, with the
    scripted replies in turn (the last one again when they run out)."""

    def __init__(self, *replies: tuple[int, object]) -> None:
        self.replies = list(replies)
        self.seen: list[tuple[float, str, str, dict[str, str], bytes]] = []
        self.lock = threading.Lock()
        app = FastAPI()

        @app.api_route("/prompts", methods=["POST"])
        @app.api_route("/prompts/{prompt_id}", methods=["GET"])
        async def prompt(request: Request) -> Response:
            body = await request.body()
            with self.lock:
                self.seen.append((time.monotonic(), request.method, request.url.path,
                                  dict(request.headers), body))
                status, reply = self.replies.pop(0) if len(self.replies) > 1 \
                    else self.replies[0]
            content = reply if isinstance(reply, bytes) else json.dumps(reply).encode()
            return Response(content, status_code=status, media_type="application/json")

        self.server = HttpServer(app, "127.0.0.1", 0)
        self.url = f"{self.server.start()}/prompts"


@pytest.fixture
def callback(request):
    hook = Callback(*request.param)
    yield hook
    hook.server.stop()


def run_task(stack, agent_id: str, callback_url: str, place: str) -> tuple[str, dict, list]:
    """A booking task with ``callback_url``, followed to its end: (key, task, steps)."""
    key = new_user(stack, f"cb{uuid.uuid4().hex[:12]}")
    created = ap(stack, key, "POST", "/tasks", json={
        "input": f"Book a table at {place}", "additional_input": {"agent": agent_id},
        "callback_url": callback_url})
    assert created.status_code == 200, created.text
    task_id = created.json()["task_id"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        task = ap(stack, key, "GET", f"/tasks/{task_id}").json()
        if task["status"] not in ("running", "awaiting_input"):
            break
        time.sleep(0.2)
    steps = ap(stack, key, "GET", f"/tasks/{task_id}/steps").json()["steps"]
    return key, task, steps


@pytest.mark.parametrize("callback", [[PENDING, PENDING, PENDING,
                                       (200, {"prompt_id": "p-1", "status": "resolved",
                                              "answer": "6"})]], indirect=True)
def test_a_resolved_prompt_answers_the_question_after_polls_with_backoff(stack, booking,
                                                                         callback):
    agent_id, made = booking
    queue = stack.services.prompt_queue
    delays: list[int] = []  # what each message on the prompt queue asked SQS to wait

    def scheduled(params: dict, **_: object) -> None:
        if params["QueueUrl"] == queue.url:
            delays.append(params.get("DelaySeconds", 0))

    queue.sqs.meta.events.register("before-parameter-build.sqs.SendMessage", scheduled)
    try:
        _, task, steps = run_task(stack, agent_id, callback.url, "Gino")
    finally:
        queue.sqs.meta.events.unregister("before-parameter-build.sqs.SendMessage", scheduled)
    assert task["status"] == "completed"
    asked, answered = steps
    assert (asked["output"], asked["is_last"]) == (QUESTION, False)
    assert answered["input"] == "6" and answered["is_last"]
    assert "Booked Gino for 6" in answered["output"] and made[-1] == "Gino for 6"
    # The prompt's POST, then three polls of its id, each further apart.
    calls = [(method, path) for _, method, path, _, _ in callback.seen]
    assert calls == [("POST", "/prompts")] + [("GET", "/prompts/p-1")] * 3
    assert json.loads(callback.seen[0][4]) == {"prompt": QUESTION}
    times = [at for at, *_ in callback.seen]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # The POST at once, then 1 s, 2 s and 2 s again (the cap here): SQS held each poll for
    # its delay, nobody waited. Checked on the delays asked for: a loaded machine adds to
    # each gap (0.8 s of slack over 1 s was all a gap had).
    assert delays == [0, 1, 2, 2], delays
    for delay, gap in zip(delays[1:], gaps):
        assert delay * 0.9 <= gap < delay + 3, (delays, gaps)
    # Signed as session callbacks are: the platform's key, this URL, this body.
    for _, _, path, headers, body in (callback.seen[0], callback.seen[1]):
        token = headers["authorization"].split()[1]
        url = callback.url if path == "/prompts" else f"{callback.url}/p-1"
        key = jwt.PyJWKClient(f"{stack.api_url}/.well-known/jwks.json"
                              ).get_signing_key_from_jwt(token)
        claims = jwt.decode(token, key.key, algorithms=["EdDSA"], audience=url)
        assert claims["sid"] == task["task_id"]
        assert claims["body_sha256"] == hashlib.sha256(body).hexdigest()


@pytest.mark.parametrize(("callback", "status", "code", "says"), [
    ([PENDING, (200, {"prompt_id": "p-1", "status": "rejected"})],
     "canceled", "CANCELED", "declined to answer"),
    ([PENDING], "failed", "TIMEOUT", "in time"),  # pending until the deadline
    ([(500, {"oops": True})], "failed", "CALLBACK_FAILED", "HTTP 500"),
    ([PENDING, (200, b"{not json")], "failed", "CALLBACK_FAILED", "did not answer JSON"),
    ([(200, {"prompt_id": "p-1", "status": "maybe"})], "failed", "CALLBACK_FAILED",
     "no status"),
    ([(200, {"status": "resolved", "answer": ""})], "failed", "CALLBACK_FAILED",
     "non-empty text answer"),
], indirect=["callback"])
def test_every_other_end_ends_the_task_with_a_clear_error(stack, booking, callback, status,
                                                          code, says):
    agent_id, made = booking
    before = len(made)
    started = time.monotonic()
    key, task, steps = run_task(stack, agent_id, callback.url, f"Place{code[:4]}")
    assert task["status"] == status
    [step] = steps  # the question's step ends with the error: nothing was booked
    assert step["is_last"] and says in step["output"], step
    assert step["additional_output"]["error"]["code"] == code
    assert len(made) == before
    if code == "TIMEOUT":
        assert time.monotonic() - started >= 8  # the deadline, not earlier
    # The task is idle again: a new step runs (and asks anew).
    again = ap(stack, key, "POST", f"/tasks/{task['task_id']}/steps",
               json={"input": "Book a table at Nino's"}).json()
    assert again["output"] == QUESTION


def test_an_unreachable_callback_ends_the_task(stack, booking):
    agent_id, _ = booking
    _, task, [step] = run_task(stack, agent_id, f"http://127.0.0.1:{free_port()}/prompts",
                               "Closed")
    assert task["status"] == "failed"
    assert step["additional_output"]["error"]["code"] == "CALLBACK_FAILED"
    assert "could not be reached" in step["output"]


def test_a_private_address_is_refused_at_creation_and_when_called(stack, booking):
    agent_id, _ = booking
    key = new_user(stack, "cbprivate")
    for url in ("http://10.1.2.3/prompts", "http://169.254.169.254/latest/meta-data"):
        r = ap(stack, key, "POST", "/tasks", json={
            "input": "Book a table at Tom's", "callback_url": url,
            "additional_input": {"agent": agent_id}})
        assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_INPUT", r.text
    assert ap(stack, key, "GET", "/tasks").json()["tasks"] == []  # nothing was made
    # A name that pointed elsewhere when the task was made is checked again when called.
    task = ap(stack, key, "POST", "/tasks", json={
        "callback_url": "http://127.0.0.1:9/prompts",
        "additional_input": {"agent": agent_id}}).json()
    owner = stack.services.sessions.get(task["task_id"]).owner
    stack.services.sessions.set_callback(task["task_id"], owner,
                                         callback_url="http://10.1.2.3/prompts")
    ap(stack, key, "POST", f"/tasks/{task['task_id']}/steps",
       json={"input": "Book a table at Tom's"})
    for _ in range(100):
        [step] = ap(stack, key, "GET", f"/tasks/{task['task_id']}/steps").json()["steps"]
        if step["is_last"]:
            break
        time.sleep(0.1)
    assert step["additional_output"]["error"]["code"] == "CALLBACK_FAILED"
    assert "10.1.2.3" in step["output"]
    assert httpx.get(f"{stack.api_url}/healthz").status_code == 200


class LambdaContext:
    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 300_000


def asked_without_callback(stack, agent_id: str, place: str) -> tuple[str, str, object]:
    """A booking task that asked its question before it had a callback (so the stack's
    own poller has nothing queued for it): (key, task id, the question)."""
    key = new_user(stack, f"cb{uuid.uuid4().hex[:12]}")
    task_id = ap(stack, key, "POST", "/tasks", json={
        "input": f"Book a table at {place}",
        "additional_input": {"agent": agent_id}}).json()["task_id"]
    assert ap(stack, key, "POST", f"/tasks/{task_id}/steps").json()["output"] == QUESTION
    [asked] = stack.services.sessions.list_messages(task_id, limit=1, newest_first=True).items
    assert asked.type.value == "awaiting_input"
    return key, task_id, asked


def asked_with_the_prompt_queue_down(stack, monkeypatch, agent_id: str, place: str,
                                     url: str) -> tuple[str, str, object]:
    """:func:`asked_without_callback`, given the callback ``url`` after; then the prompt
    queue refuses every send."""
    key, task_id, asked = asked_without_callback(stack, agent_id, place)
    with_callback(stack, task_id, url)

    def queue_down(*_args: object) -> None:
        raise ConnectionError("SQS is down")

    monkeypatch.setattr(stack.services.prompt_queue, "schedule", queue_down)
    return key, task_id, asked


def with_callback(stack, task_id: str, url: str) -> None:
    from codeshot.runner.callbacks import PROMPT_FORMAT

    owner = stack.services.sessions.get(task_id).owner
    stack.services.sessions.set_callback(task_id, owner, callback_url=url,
                                         callback_format=PROMPT_FORMAT)


@pytest.mark.parametrize("callback", [[(200, {"prompt_id": "p-9", "status": "resolved",
                                             "answer": "3"})]], indirect=True)
def test_the_runner_lambda_takes_prompt_queue_batches(stack, booking, callback, monkeypatch):
    """In AWS the runner function reads both queues: a batch from the prompt queue (by its
    event source) goes to the prompt exchange, not to the session runner."""
    import handlers.runner
    from codeshot.store.queue import PromptWork

    agent_id, made = booking
    key, task_id, asked = asked_with_callback(stack, agent_id, "Lino", callback.url)
    monkeypatch.setattr("codeshot.settings.get_settings", lambda: stack.settings)
    handlers.runner._runner.cache_clear()
    handlers.runner._prompts.cache_clear()
    try:
        work = PromptWork(task_id, asked.message_id, time.time() + 60)
        event = {"Records": [{
            "messageId": "m-1", "receiptHandle": "r-1", "body": work.body(),
            "attributes": {"ApproximateReceiveCount": "1"}, "eventSource": "aws:sqs",
            "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:"
                              f"{stack.settings.prompt_queue_name}"}]}
        assert handlers.runner.handler(event, LambdaContext()) == {"batchItemFailures": []}
    finally:
        handlers.runner._runner.cache_clear()
        handlers.runner._prompts.cache_clear()
    assert [m for _, m, *_ in callback.seen] == ["POST"]
    answered = ap(stack, key, "POST", f"/tasks/{task_id}/steps").json()
    assert answered["input"] == "3" and "Booked Lino for 3" in answered["output"]
    assert made[-1] == "Lino for 3"


@pytest.mark.parametrize("callback", [[PENDING]], indirect=True)
def test_the_platforms_own_trouble_is_retried_then_ends_the_question(stack, booking,
                                                                     callback, monkeypatch):
    from codeshot.store.queue import PromptWork
    from codeshot.usecases.prompts import Prompts

    agent_id, _ = booking
    key, task_id, asked = asked_with_the_prompt_queue_down(stack, monkeypatch, agent_id,
                                                           "Rita", callback.url)
    prompts = Prompts(stack.services)
    work = PromptWork(task_id, asked.message_id, time.time() + 60)
    with pytest.raises(ConnectionError):  # redelivered by SQS
        prompts.handle(work)
    assert ap(stack, key, "GET", f"/tasks/{task_id}").json()["status"] == "awaiting_input"
    prompts.handle(work, final_attempt=True)  # the last delivery: the question ends
    [step] = ap(stack, key, "GET", f"/tasks/{task_id}/steps").json()["steps"]
    assert step["additional_output"]["error"]["code"] == "CALLBACK_FAILED"
    assert "answer it with a step" in step["output"]


RESOLVED = (200, {"prompt_id": "p-1", "status": "resolved", "answer": "4"})


def fails_once(monkeypatch, cls: type, name: str) -> list[str]:
    """``cls.name`` raising on its first call, as a runner stopped at that point would
    (the queue then delivers its message again); the calls it failed."""
    real, failed = getattr(cls, name), []

    def once(self, *args):
        if not failed:
            failed.append(name)
            raise RuntimeError(f"the runner stopped before {name}")
        return real(self, *args)

    monkeypatch.setattr(cls, name, once)
    return failed


@pytest.mark.parametrize("callback", [[RESOLVED]], indirect=True)
def test_a_question_stored_before_the_runner_stopped_is_still_asked(stack, booking, callback,
                                                                    monkeypatch):
    """The question was stored, then the runner stopped before queueing its prompt: the
    redelivered query found it answered and did nothing, and the task waited for ever."""
    from codeshot.runner.session_runner import SessionRunner

    agent_id, made = booking
    failed = fails_once(monkeypatch, SessionRunner, "_prompt")
    _, task, steps = run_task(stack, agent_id, callback.url, "Gianni")
    assert failed == ["_prompt"]
    assert task["status"] == "completed", steps
    assert [m for _, m, *_ in callback.seen] == ["POST"]  # asked once
    assert made[-1] == "Gianni for 4"


@pytest.mark.parametrize("callback", [[PENDING, RESOLVED]], indirect=True)
def test_a_prompt_posted_before_the_runner_stopped_is_polled_not_asked_again(
        stack, booking, callback, monkeypatch):
    """The callback took the prompt, then the runner stopped before queueing its poll: the
    redelivered exchange POSTed it again, and the user was asked twice."""
    from codeshot.usecases.prompts import Prompts

    agent_id, made = booking
    failed = fails_once(monkeypatch, Prompts, "_schedule")
    _, task, _ = run_task(stack, agent_id, callback.url, "Pia")
    assert failed == ["_schedule"]
    assert task["status"] == "completed"
    assert [(m, path) for _, m, path, *_ in callback.seen] == [("POST", "/prompts"),
                                                               ("GET", "/prompts/p-1")]
    assert made[-1] == "Pia for 4"


@pytest.mark.parametrize("callback", [[PENDING]], indirect=True)
def test_a_redelivered_query_leaves_a_prompt_taken_up_alone(stack, booking, callback,
                                                            monkeypatch):
    """A redelivered query queued its question's prompt again though the callback was
    asked already (another poll chain), and ended the question when that failed."""
    from codeshot.runner.session_runner import SessionRunner
    from codeshot.store.queue import PromptWork, Work
    from codeshot.usecases.prompts import Prompts

    agent_id, _ = booking
    key, task_id, asked = asked_with_the_prompt_queue_down(stack, monkeypatch, agent_id,
                                                           "Ugo", callback.url)
    with pytest.raises(ConnectionError):  # asked; its first poll not queued
        Prompts(stack.services).handle(PromptWork(task_id, asked.message_id, time.time() + 60))
    SessionRunner(stack.services).handle(Work(task_id, asked.in_reply_to))  # redelivered
    assert ap(stack, key, "GET", f"/tasks/{task_id}").json()["status"] == "awaiting_input"
    assert [m for _, m, *_ in callback.seen] == ["POST"]


@pytest.mark.parametrize("callback", [[PENDING]], indirect=True)
def test_a_question_that_cannot_be_queued_even_at_the_last_delivery_ends(
        stack, booking, callback, monkeypatch):
    """A redelivered query re-queues its question's prompt; when the prompt queue is down
    through its last delivery, the question ends (CALLBACK_FAILED) rather than wait with
    no one asking it."""
    from codeshot.runner.session_runner import SessionRunner
    from codeshot.store.queue import Work

    agent_id, _ = booking
    key, task_id, asked = asked_with_the_prompt_queue_down(stack, monkeypatch, agent_id,
                                                           "Vera", callback.url)
    runner, redelivered = SessionRunner(stack.services), Work(task_id, asked.in_reply_to)
    with pytest.raises(ConnectionError):  # delivered again later
        runner.handle(redelivered)
    assert ap(stack, key, "GET", f"/tasks/{task_id}").json()["status"] == "awaiting_input"
    runner.handle(redelivered, final_attempt=True)
    [step] = ap(stack, key, "GET", f"/tasks/{task_id}/steps").json()["steps"]
    assert step["additional_output"]["error"]["code"] == "CALLBACK_FAILED"
    assert callback.seen == []


@pytest.mark.parametrize("written", [True, False])
@pytest.mark.parametrize("callback", [[(200, {"prompt_id": "p-5", "status": "resolved",
                                             "answer": "5"})]], indirect=True)
def test_a_callbacks_answer_whose_write_timed_out_is_posted_again_and_resumes_the_task(
        stack, booking, callback, monkeypatch, written):
    """The callback's answer to the prompt's first POST: its post's write timed out
    (botocore's last resend), twice, ``written`` by the first or not. The exchange posts
    it again under its key: the task resumes with it, once, and the callback is asked
    once. It left that to a redelivery, which cannot post it (the prompt was POSTed and
    no prompt id kept): a write that had not landed lost the callback's answer, and the
    last delivery ended the question CALLBACK_FAILED."""
    from botocore.exceptions import ReadTimeoutError

    from codeshot.store.queue import PromptWork
    from codeshot.usecases.prompts import Prompts

    agent_id, made = booking
    key, task_id, asked = asked_with_callback(stack, agent_id, "Nico", callback.url)
    db = stack.services.sessions.db
    write, lost = db.transact_write_items, []

    def timed_out(**request):
        if len(lost) < 2 and f"prompt-{asked.message_id}" in str(request):  # the answer's
            if written and not lost:
                write(**request)
            lost.append(1)
            raise ReadTimeoutError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com")
        return write(**request)

    monkeypatch.setattr(db, "transact_write_items", timed_out)
    before = len(made)
    Prompts(stack.services).handle(PromptWork(task_id, asked.message_id, time.time() + 60))
    monkeypatch.undo()
    assert len(lost) == (1 if written else 2)  # then found under its key
    deadline = time.monotonic() + 30
    while ap(stack, key, "GET", f"/tasks/{task_id}").json()["status"] != "completed":
        assert time.monotonic() < deadline, "the answer was never run"
        time.sleep(0.2)
    _, answered = ap(stack, key, "GET", f"/tasks/{task_id}/steps").json()["steps"]
    assert answered["input"] == "5" and "Booked Nico for 5" in answered["output"]
    assert made[before:] == ["Nico for 5"]
    assert [m for _, m, *_ in callback.seen] == ["POST"]


def answer_post_faults(stack, monkeypatch, asked, fault: Callable[[Any], Any]) -> None:
    """The answer's posts (under its key) answered by ``fault(request)``, the rest
    written."""
    db = stack.services.sessions.db
    write = db.transact_write_items

    def faulty(**request):
        if f"prompt-{asked.message_id}" in str(request):
            return fault(request)
        return write(**request)

    monkeypatch.setattr(db, "transact_write_items", faulty)


@pytest.mark.parametrize("callback", [[(200, {"prompt_id": "p-6", "status": "resolved",
                                             "answer": "6"})]], indirect=True)
def test_a_callbacks_answer_refused_after_a_post_not_confirmed_is_redelivered_not_ended(
        stack, booking, callback, monkeypatch):
    """The answer's first post timed out, its write still in flight; the next, under its
    key, collided with it until it gave up (CONFLICT). The exchange is redelivered
    (UNAVAILABLE), the question left waiting for that write. It ended the question
    CONFLICT, though the first write could still land: an answer to a question ended."""
    from botocore.exceptions import ClientError, ReadTimeoutError

    from codeshot.errors import Unavailable
    from codeshot.store.queue import PromptWork
    from codeshot.usecases.prompts import Prompts

    agent_id, _ = booking
    key, task_id, asked = asked_with_callback(stack, agent_id, "Olga", callback.url)
    held: list[dict[str, Any]] = []

    def in_flight(request):
        if not held:
            held.append(request)
            raise ReadTimeoutError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com")
        reasons = [{"Code": "TransactionConflict"}] + \
            [{"Code": "None"}] * (len(request["TransactItems"]) - 1)
        raise ClientError({"Error": {"Code": "TransactionCanceledException", "Message": "busy"},
                           "ResponseMetadata": {"HTTPStatusCode": 400},
                           "CancellationReasons": reasons}, "TransactWriteItems")

    answer_post_faults(stack, monkeypatch, asked, in_flight)
    work = PromptWork(task_id, asked.message_id, time.time() + 60, "p-6", 1)  # a poll
    with pytest.raises(Unavailable):  # redelivered by SQS
        Prompts(stack.services).handle(work)
    monkeypatch.undo()
    assert len(held) == 1
    assert ap(stack, key, "GET", f"/tasks/{task_id}").json()["status"] == "awaiting_input"
    [step] = ap(stack, key, "GET", f"/tasks/{task_id}/steps").json()["steps"]
    assert "error" not in (step.get("additional_output") or {}), step  # not ended


@pytest.mark.parametrize("callback", [[(200, {"prompt_id": "p-8", "status": "resolved",
                                             "answer": "8"})]], indirect=True)
def test_a_callbacks_answer_whose_write_lands_after_the_runner_looked_is_run(
        stack, booking, callback, monkeypatch):
    """The answer's post timed out, every try (UNAVAILABLE: the exchange is redelivered);
    the first try's write landed only after the runner had taken its queued copy and
    found no message. The copy was dropped, and the redelivered exchange found the
    question answered and did nothing: the answer was written and never run."""
    from botocore.exceptions import ReadTimeoutError

    from codeshot.errors import Unavailable
    from codeshot.runner import session_runner
    from codeshot.store.queue import PromptWork
    from codeshot.usecases.prompts import Prompts

    # The test's patience: the write lands within it, on a loaded machine too.
    monkeypatch.setattr(session_runner, "LANDING_SECONDS", 5.0)
    agent_id, made = booking
    key, task_id, asked = asked_with_callback(stack, agent_id, "Rui", callback.url)
    db = stack.services.sessions.db
    write, held = db.transact_write_items, []
    missed, landed = threading.Event(), threading.Event()

    def in_flight(request):
        if not held:  # the first try's write: in flight, it lands later
            held.append(request)
        raise ReadTimeoutError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com")

    answer_post_faults(stack, monkeypatch, asked, in_flight)
    looked = session_runner.SessionRunner._query

    def missing_until_it_lands(self, work, recent):
        found = looked(self, work, recent)
        if not isinstance(found, tuple) and not missed.is_set() and \
                f"MSG#{work.message_id}" in str(held):
            missed.set()  # the runner took the first try's copy: no message yet
            assert landed.wait(10)
        return found

    monkeypatch.setattr(session_runner.SessionRunner, "_query", missing_until_it_lands)
    work = PromptWork(task_id, asked.message_id, time.time() + 60, "p-8", 1)  # a poll
    with pytest.raises(Unavailable):  # redelivered by SQS
        Prompts(stack.services).handle(work)
    assert missed.wait(10), "the runner never took the first try's copy"
    monkeypatch.setattr(db, "transact_write_items", write)
    write(**held[0])  # the write lands, after the runner looked
    landed.set()
    Prompts(stack.services).handle(work)  # the redelivery
    deadline = time.monotonic() + 15
    while ap(stack, key, "GET", f"/tasks/{task_id}").json()["status"] != "completed":
        assert time.monotonic() < deadline, "the answer was written and never run"
        time.sleep(0.2)
    _, answered = ap(stack, key, "GET", f"/tasks/{task_id}/steps").json()["steps"]
    assert answered["input"] == "8" and "Booked Rui for 8" in answered["output"]
    assert made[-1:] == ["Rui for 8"] and made.count("Rui for 8") == 1


@pytest.mark.parametrize("redeliveries", [1, 2])
@pytest.mark.parametrize("callback", [[(200, {"prompt_id": "p-4", "status": "resolved",
                                             "answer": "4"})]], indirect=True)
def test_a_callbacks_answer_landing_after_the_window_is_run_once(stack, booking, callback,
                                                                 monkeypatch, redeliveries):
    """The answer's post timed out, every try (UNAVAILABLE: the exchange is redelivered);
    the first try's write landed only after its queued copy had waited out the landing
    window and been dropped. The redelivered exchange found the question answered and
    did nothing: the answer was written and never run. Queued again by each redelivery
    that finds it so, it runs once."""
    from botocore.exceptions import ReadTimeoutError

    from codeshot.errors import Unavailable
    from codeshot.runner import session_runner
    from codeshot.store.queue import PromptWork
    from codeshot.usecases.prompts import Prompts

    monkeypatch.setattr(session_runner, "LANDING_SECONDS", 1.0)  # the window, shortened
    agent_id, made = booking
    key, task_id, asked = asked_without_callback(stack, agent_id, "Ines")
    before = len(made)
    with_callback(stack, task_id, callback.url)
    db = stack.services.sessions.db
    write, held = db.transact_write_items, []
    dropped = threading.Event()

    def in_flight(request):
        if not held:  # the first try's write: in flight, it lands later
            held.append(request)
        raise ReadTimeoutError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com")

    answer_post_faults(stack, monkeypatch, asked, in_flight)
    looked = session_runner.SessionRunner._pending

    def pending(self, work, final, landing=True):
        found = looked(self, work, final, landing)
        if found is None and landing and f"MSG#{work.message_id}" in str(held):
            dropped.set()  # waited out the window, found nothing
        return found

    monkeypatch.setattr(session_runner.SessionRunner, "_pending", pending)
    queued, enqueue = [], stack.services.queue.enqueue

    def counted(work, again=False):
        queued.append(work.message_id)
        enqueue(work, again)

    monkeypatch.setattr(stack.services.queue, "enqueue", counted)
    work = PromptWork(task_id, asked.message_id, time.time() + 60, "p-4", 1)  # a poll
    with pytest.raises(Unavailable):  # redelivered by SQS
        Prompts(stack.services).handle(work)
    assert dropped.wait(15), "the runner never dropped the first try's copy"
    answer_id = queued[0]  # the first try's (each try is a message of its own)
    monkeypatch.setattr(db, "transact_write_items", write)
    write(**held[0])  # the write lands, after the window
    for _ in range(redeliveries):
        Prompts(stack.services).handle(work)
    deadline = time.monotonic() + 15
    while ap(stack, key, "GET", f"/tasks/{task_id}").json()["status"] != "completed":
        assert time.monotonic() < deadline, "the answer was written and never run"
        time.sleep(0.2)
    assert queued[3:] == [answer_id] * redeliveries  # a copy per try, and per redelivery
    time.sleep(1)  # the other copy's turn
    _, answered = ap(stack, key, "GET", f"/tasks/{task_id}/steps").json()["steps"]
    assert answered["input"] == "4" and "Booked Ines for 4" in answered["output"]
    assert made[before:] == ["Ines for 4"]
    replies = [m for m in stack.services.sessions.list_messages(task_id, limit=50).items
               if m.in_reply_to == answer_id and m.type.value in ("response", "error")]
    assert len(replies) == 1, replies  # answered once


@pytest.mark.parametrize("callback", [[(200, {"prompt_id": "p-7", "status": "resolved",
                                             "answer": "7"})]], indirect=True)
def test_a_callbacks_answer_is_not_posted_again_past_the_invocations_time(
        stack, booking, callback, monkeypatch):
    """The answer's post timed out, using up the invocation's time but 9 s, less than a
    record keeps for its writes: the record is redelivered rather than the post sent
    again, which Lambda could stop midway (it was sent again however little time was
    left); the redelivery's poll posts it."""
    from botocore.exceptions import ReadTimeoutError

    from codeshot.store.queue import PromptWork
    from codeshot.usecases.prompts import Prompts, process_prompts

    agent_id, made = booking
    key, task_id, asked = asked_with_callback(stack, agent_id, "Pia", callback.url)
    sent: list[int] = []

    def timed_out(request):
        sent.append(1)
        raise ReadTimeoutError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com")

    answer_post_faults(stack, monkeypatch, asked, timed_out)
    work = PromptWork(task_id, asked.message_id, time.time() + 60, "p-7", 1)  # a poll
    record = {"messageId": "m-1", "receiptHandle": "r-1", "body": work.body(),
              "attributes": {"ApproximateReceiveCount": "1"}}
    out = process_prompts({"Records": [record]}, Prompts(stack.services),
                          lambda: 9_000 if sent else 16_000)  # the timeout took the rest
    monkeypatch.undo()
    assert out == {"batchItemFailures": [{"itemIdentifier": "m-1"}]}
    assert sent == [1]
    assert ap(stack, key, "GET", f"/tasks/{task_id}").json()["status"] == "awaiting_input"
    before = len(made)
    Prompts(stack.services).handle(work)  # the redelivery
    deadline = time.monotonic() + 30
    while ap(stack, key, "GET", f"/tasks/{task_id}").json()["status"] != "completed":
        assert time.monotonic() < deadline, "the answer was never run"
        time.sleep(0.2)
    assert made[before:] == ["Pia for 7"]


def test_a_huge_or_dripping_callback_reply_is_cut_off(stack, booking):
    agent_id, _ = booking
    with raw_server("huge", limit=64 << 20) as huge:
        _, task, [step] = run_task(stack, agent_id, huge.url, "Flood")
        # Read up to the cap and no further (the whole 64 MiB was read into memory).
        assert huge.sent < 1 << 20, huge.sent
    assert task["status"] == "failed" and "more than 65536 bytes" in step["output"]
    assert step["additional_output"]["error"]["code"] == "CALLBACK_FAILED"
    with raw_server("drip", interval=0.25) as drip:
        began = time.monotonic()
        _, task, [step] = run_task(stack, agent_id, drip.url, "Drip")
        took = time.monotonic() - began
        # Cut off after 5 s in all (each byte came within the read timeout: it held on).
        assert drip.hangs_up(within=2) and took < 15, (took, drip.sent)
    assert task["status"] == "failed" and "did not answer within 5s" in step["output"]


TWO_QUESTIONS = """
Q: Book a table at Luigi's
Ask User: For how many people?
User says: 4
Ask User: On which day?
User says: Friday
Ask Func[book]: Luigi's for 4 on Friday
Func[book] says: Booked Luigi's for 4 on Friday at 19:00
A: Done: Booked Luigi's for 4 on Friday at 19:00.
"""


@pytest.fixture(scope="module")
def booking_day(stack) -> tuple[str, list[str]]:
    """local/bookingday: asks how many people, then which day, then books."""
    from tests.protocols.conftest import serve_agent

    made: list[str] = []

    def book(query) -> str:
        made.append(query.text)
        return f"Booked {query.text} at 19:00"

    agent_id = serve_agent(stack, "bookingday", "I book restaurant tables on a day.",
                           TWO_QUESTIONS, {"book": book},
                           description="Books restaurant tables on a given day.")
    return agent_id, made


def steps_of(stack, key: str, task_id: str) -> list[tuple[str, str, str | None]]:
    """The task's steps: (input, output, error code)."""
    steps = ap(stack, key, "GET", f"/tasks/{task_id}/steps").json()["steps"]
    return [(s["input"], s["output"], (s["additional_output"].get("error") or {}).get("code"))
            for s in steps]


def test_a_callbacks_late_no_to_an_answered_question_leaves_the_next_question(
        stack, booking_day):
    """While the callback was being asked the first question, the user answered it with a
    step and the agent asked the next; the callback then declined the first question, and
    that ended the second one (its paused program dropped, the task canceled)."""
    agent_id, made = booking_day
    key = new_user(stack, f"cb{uuid.uuid4().hex[:12]}")
    second_asked, answered = threading.Event(), []
    app = FastAPI()

    @app.post("/prompts")
    def prompt(request_body: dict, authorization: str = Header()) -> dict:
        if request_body["prompt"] == "On which day?":
            second_asked.set()
            return {"prompt_id": "p-2", "status": "pending"}
        task_id = jwt.decode(authorization.split()[1], options={"verify_signature": False}
                             )["sid"]
        answered.append(ap(stack, key, "POST", f"/tasks/{task_id}/steps",
                           json={"input": "4"}).json()["output"])
        second_asked.wait(4)  # within the 5 s the platform waits for this reply
        return {"prompt_id": "p-1", "status": "rejected"}

    @app.get("/prompts/p-2")
    def poll() -> dict:
        return {"prompt_id": "p-2", "status": "resolved", "answer": "Friday"}

    server = HttpServer(app, "127.0.0.1", 0)
    try:
        task = ap(stack, key, "POST", "/tasks", json={
            "input": "Book a table at Gigi's", "additional_input": {"agent": agent_id},
            "callback_url": f"{server.start()}/prompts"}).json()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and \
                ap(stack, key, "GET", f"/tasks/{task['task_id']}").json()["status"] in (
                    "running", "awaiting_input"):
            time.sleep(0.2)
    finally:
        server.stop()
    assert answered == ["On which day?"]
    assert ap(stack, key, "GET", f"/tasks/{task['task_id']}").json()["status"] == "completed"
    asked, first, second = steps_of(stack, key, task["task_id"])
    assert asked == ("Book a table at Gigi's", QUESTION, None)
    assert first == ("4", "On which day?", None)
    assert second[0] == "Friday" and "Booked Gigi's for 4 on Friday" in second[1], second
    assert made[-1] == "Gigi's for 4 on Friday"


def test_a_callbacks_late_answer_to_an_answered_question_runs_nothing(stack, booking):
    """While the callback was being asked, the user answered the question with a step; the
    callback's "resolved" answer then ran as a new, charged query of its own (the booking
    agent ran on it, and the task had a third step)."""
    from codeshot.store.queue import PromptWork
    from codeshot.usecases.prompts import Prompts

    agent_id, made = booking
    key, task_id, asked = asked_without_callback(stack, agent_id, "Ada's")
    answered: list[str] = []
    app = FastAPI()

    @app.post("/prompts")
    def prompt() -> dict:
        answered.append(ap(stack, key, "POST", f"/tasks/{task_id}/steps",
                           json={"input": "4"}).json()["output"])
        return {"prompt_id": "p-1", "status": "resolved", "answer": "6"}

    server = HttpServer(app, "127.0.0.1", 0)
    try:
        with_callback(stack, task_id, f"{server.start()}/prompts")
        Prompts(stack.services).handle(PromptWork(task_id, asked.message_id,
                                                  time.time() + 60))
    finally:
        server.stop()
    assert len(answered) == 1 and "Booked Ada's for 4" in answered[0], answered
    # The question and the step that answered it: the late "6" is no step of its own.
    steps = ap(stack, key, "GET", f"/tasks/{task_id}/steps").json()["steps"]
    assert [step["input"] for step in steps] == ["Book a table at Ada's", "4"], steps
    owner = stack.services.sessions.get(task_id).owner
    assert stack.services.usage.used("query", owner) == 2
    assert ap(stack, key, "GET", f"/tasks/{task_id}").json()["status"] == "completed"
    assert [m for m in made if m.startswith("Ada's")] == ["Ada's for 4"]


def test_an_answer_to_a_question_answered_since_is_not_the_next_questions_answer(
        stack, booking_day):
    """An answer sent to the first question (a callback's, posted as its prompt was
    answered by a step) is taken after that step resumed the program and the agent asked
    the next question: it answered the next question ("for 4 on 6"). It runs nothing, is
    not charged, and the next question keeps waiting for its own answer."""
    from codeshot.usecases.messaging import Messaging
    from codeshot.usecases.users import principal_of
    from tests.protocols.conftest import new_account

    agent_id, made = booking_day
    user, key = new_account(stack, "late")
    task_id = ap(stack, key, "POST", "/tasks", json={
        "input": "Book a table at Ida's", "additional_input": {"agent": agent_id}}
                 ).json()["task_id"]
    assert ap(stack, key, "POST", f"/tasks/{task_id}/steps").json()["output"] == QUESTION
    [first] = stack.services.sessions.list_messages(task_id, limit=1, newest_first=True).items
    assert ap(stack, key, "POST", f"/tasks/{task_id}/steps",
              json={"input": "4"}).json()["output"] == "On which day?"
    late, _ = Messaging(stack.services).post(principal_of(user), task_id, "6",
                                             answers=first.message_id)
    deadline = time.monotonic() + 30
    while (reply := Messaging(stack.services).reply_to(task_id, late.message_id)) is None:
        assert time.monotonic() < deadline, "the late answer was never answered"
        time.sleep(0.2)
    assert reply.error_code == "CANCELED" and "nothing ran" in reply.text, reply
    assert stack.services.usage.used("query", user.user_id) == 2  # its charge given back
    assert ap(stack, key, "GET", f"/tasks/{task_id}").json()["status"] == "awaiting_input"
    done = ap(stack, key, "POST", f"/tasks/{task_id}/steps", json={"input": "Friday"}).json()
    assert "Booked Ida's for 4 on Friday" in done["output"] and done["is_last"], done
    assert [m for m in made if m.startswith("Ida's")] == ["Ida's for 4 on Friday"]


def test_declining_a_question_answered_since_it_was_read_leaves_the_next_question(
        stack, booking_day, monkeypatch):
    """A decline of the first question (MCP's, by its id) read it as pending; before its
    write, the user answered it and the agent asked the next: the write ended the next
    question. The write holds only while the paused program waits on the declined one."""
    from codeshot.errors import Conflict
    from codeshot.usecases import tasks
    from codeshot.usecases.users import principal_of
    from tests.protocols.conftest import new_account

    agent_id, made = booking_day
    user, key = new_account(stack, "decline")
    task_id = ap(stack, key, "POST", "/tasks", json={
        "input": "Book a table at Lia's", "additional_input": {"agent": agent_id}}
                 ).json()["task_id"]
    assert ap(stack, key, "POST", f"/tasks/{task_id}/steps").json()["output"] == QUESTION
    [first] = stack.services.sessions.list_messages(task_id, limit=1, newest_first=True).items
    store, me = stack.services.sessions, threading.get_ident()
    read = store.list_messages

    def answered_after_the_read(*args, **kwargs):
        found = read(*args, **kwargs)
        if threading.get_ident() == me:  # the decline's read; the API's are left alone
            monkeypatch.setattr(store, "list_messages", read)
            step = ap(stack, key, "POST", f"/tasks/{task_id}/steps", json={"input": "2"})
            assert step.json()["output"] == "On which day?"
        return found

    monkeypatch.setattr(store, "list_messages", answered_after_the_read)
    with pytest.raises(Conflict):
        tasks.cancel(stack.services, principal_of(user), task_id, "declined",
                     question_id=first.message_id)
    assert ap(stack, key, "GET", f"/tasks/{task_id}").json()["status"] == "awaiting_input"
    done = ap(stack, key, "POST", f"/tasks/{task_id}/steps", json={"input": "Monday"}).json()
    assert "Booked Lia's for 2 on Monday" in done["output"] and done["is_last"], done
    assert made[-1] == "Lia's for 2 on Monday"
    assert all(code is None for *_, code in steps_of(stack, key, task_id))


def held_prompts(stack, monkeypatch) -> list:
    """The prompt exchanges queued from now on, held here instead of sent (the stack's
    own poller never takes them): each is handled when the test says."""
    held: list = []
    monkeypatch.setattr(stack.services.prompt_queue, "schedule",
                        lambda work, delay_seconds=0: held.append(work))
    return held


def finished(stack, key: str, task_id: str) -> list[tuple[str, str, str | None]]:
    """The task's steps once it completed (within 30 s)."""
    deadline = time.monotonic() + 30
    while ap(stack, key, "GET", f"/tasks/{task_id}").json()["status"] != "completed":
        assert time.monotonic() < deadline, steps_of(stack, key, task_id)
        time.sleep(0.2)
    return steps_of(stack, key, task_id)


def asked_with_callback(stack, agent_id: str, name: str, url: str):
    """(key, task id, question) of a task asked with no callback, then given ``url``."""
    key, task_id, asked = asked_without_callback(stack, agent_id, name)
    with_callback(stack, task_id, url)
    return key, task_id, asked


def running_slots_taken(stack, task_id: str) -> Callable[[], None]:
    """Every running-query slot of the task's owner taken, as by queries of theirs still
    running; returns what gives them back."""
    from datetime import timedelta

    from codeshot.runner.fairness import RUNNING

    usage, owner = stack.services.usage, stack.services.sessions.get(task_id).owner
    others = [f"other-{n}" for n in range(stack.settings.max_running_queries)]
    for other in others:
        usage.take_lease(RUNNING, owner, stack.settings.max_running_queries, other,
                         timedelta(minutes=5))

    def give_back() -> None:
        for other in others:
            usage.release(RUNNING, owner, other)

    return give_back


def refused_for_the_running_cap(stack, key: str, task_id: str, question) -> None:
    """A step answering ``question`` while all the user's running slots are taken: the
    runner refuses it (RATE_LIMITED), keeping the question."""
    give_back = running_slots_taken(stack, task_id)
    try:
        ap(stack, key, "POST", f"/tasks/{task_id}/steps", json={"input": "2"})
    finally:
        give_back()
    [refused] = stack.services.sessions.list_messages(task_id, limit=1,
                                                      newest_first=True).items
    assert (refused.error_code, refused.keeps_question) == ("RATE_LIMITED",
                                                            question.message_id), refused


@pytest.mark.parametrize("callback", [[PENDING, RESOLVED]], indirect=True)
def test_a_step_refused_for_the_running_cap_leaves_the_question_asked_through_the_callback(
        stack, booking, callback, monkeypatch):
    """While the callback was polled, the user's answer by a step was refused (all their
    running slots taken), which keeps the question; the next poll found the session's
    newest message no question and stopped: the callback's answer was never used, and
    the task waited for a step."""
    from codeshot.store.queue import PromptWork
    from codeshot.usecases.prompts import Prompts

    agent_id, made = booking
    key, task_id, asked = asked_with_callback(stack, agent_id, "Teo's", callback.url)
    held = held_prompts(stack, monkeypatch)
    prompts = Prompts(stack.services)
    prompts.handle(PromptWork(task_id, asked.message_id, time.time() + 60))  # pending
    [poll] = held
    refused_for_the_running_cap(stack, key, task_id, asked)
    prompts.handle(poll)
    assert [(m, path) for _, m, path, *_ in callback.seen] == [("POST", "/prompts"),
                                                               ("GET", "/prompts/p-1")]
    steps = finished(stack, key, task_id)
    assert steps[-1][0] == "4" and "Booked Teo's for 4" in steps[-1][1], steps
    assert [m for m in made if m.startswith("Teo's")] == ["Teo's for 4"]


@pytest.mark.parametrize("callback", [[(200, {"prompt_id": "p-2", "status": "resolved",
                                             "answer": "Friday"})]], indirect=True)
def test_a_late_answer_refused_keeping_the_next_question_leaves_it_asked_through_the_callback(
        stack, booking_day, callback, monkeypatch):
    """The next question's prompt was queued; before it was taken, an answer sent to the
    first question (answered by a step since) was answered CANCELED, keeping the next
    question: the prompt found the session's newest message no question, and the callback
    was never asked it."""
    from codeshot.usecases.messaging import Messaging
    from codeshot.usecases.prompts import Prompts
    from codeshot.usecases.users import principal_of

    agent_id, made = booking_day
    key, task_id, first = asked_without_callback(stack, agent_id, "Eva's")
    with_callback(stack, task_id, callback.url)
    held = held_prompts(stack, monkeypatch)
    assert ap(stack, key, "POST", f"/tasks/{task_id}/steps",
              json={"input": "3"}).json()["output"] == "On which day?"
    [prompt] = held  # the next question's
    owner = stack.services.users.get(stack.services.sessions.get(task_id).owner)
    late, _ = Messaging(stack.services).post(principal_of(owner), task_id, "6",
                                             answers=first.message_id)
    deadline = time.monotonic() + 30
    while (reply := Messaging(stack.services).reply_to(task_id, late.message_id)) is None:
        assert time.monotonic() < deadline, "the late answer was never answered"
        time.sleep(0.2)
    assert (reply.error_code, reply.keeps_question) == ("CANCELED", prompt.question_id), reply
    Prompts(stack.services).handle(prompt)
    assert [m for _, m, *_ in callback.seen] == ["POST"]
    assert json.loads(callback.seen[0][4]) == {"prompt": "On which day?"}
    steps = finished(stack, key, task_id)
    assert steps[-1][0] == "Friday" and "Booked Eva's for 3 on Friday" in steps[-1][1], steps
    assert [m for m in made if m.startswith("Eva's")] == ["Eva's for 3 on Friday"]


@pytest.mark.parametrize("callback", [[RESOLVED]], indirect=True)
def test_a_redelivered_query_asks_its_question_that_a_refusal_kept(stack, booking, callback,
                                                                   monkeypatch):
    """The runner stored the question and stopped before queueing its prompt; a step
    answering it was then refused for the running cap, keeping it. The query's redelivery
    took the refusal, the session's newest message, for no question, and queued nothing:
    nobody asked the callback, and the task waited for a step."""
    from codeshot.runner.session_runner import SessionRunner
    from codeshot.store.queue import Work
    from codeshot.usecases.prompts import Prompts

    agent_id, made = booking
    key, task_id, asked = asked_without_callback(stack, agent_id, "Zoe's")  # none queued
    with_callback(stack, task_id, callback.url)
    held = held_prompts(stack, monkeypatch)
    refused_for_the_running_cap(stack, key, task_id, asked)
    SessionRunner(stack.services).handle(Work(task_id, asked.in_reply_to))  # redelivered
    [prompt] = held
    assert prompt.question_id == asked.message_id
    Prompts(stack.services).handle(prompt)
    assert [m for _, m, *_ in callback.seen] == ["POST"]
    steps = finished(stack, key, task_id)
    assert steps[-1][0] == "4" and "Booked Zoe's for 4" in steps[-1][1], steps
    assert [m for m in made if m.startswith("Zoe's")] == ["Zoe's for 4"]


@pytest.mark.parametrize("callback", [[(200, {"prompt_id": "p-4", "status": "resolved",
                                             "answer": "4"})] * 2], indirect=True)
def test_a_callbacks_answer_throttled_through_every_send_is_redelivered_not_the_end(
        stack, booking, callback, monkeypatch):
    """DynamoDB throttled the answer's post through botocore's retries: nothing written,
    nothing wrong with the answer. It ended the question RATE_LIMITED (the task failed
    and the callback's answer was lost) once a throttled post became RATE_LIMITED; the
    exchange is redelivered instead, and its poll posts the answer."""
    from botocore.exceptions import ClientError

    from codeshot.errors import Throttled
    from codeshot.store.queue import PromptWork
    from codeshot.usecases.prompts import Prompts

    agent_id, made = booking
    key, task_id, asked = asked_with_callback(stack, agent_id, "Tess", callback.url)

    def throttled(_request):
        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow"},
                           "ResponseMetadata": {"HTTPStatusCode": 400}}, "TransactWriteItems")

    answer_post_faults(stack, monkeypatch, asked, throttled)
    work = PromptWork(task_id, asked.message_id, time.time() + 60, "p-4", 1)  # a poll
    with pytest.raises(Throttled):  # redelivered by SQS
        Prompts(stack.services).handle(work)
    monkeypatch.undo()
    assert ap(stack, key, "GET", f"/tasks/{task_id}").json()["status"] == "awaiting_input"
    Prompts(stack.services).handle(work)  # the redelivery polls again
    assert wait_until_completed(stack, key, task_id)
    assert made[-1] == "Tess for 4"


@pytest.mark.parametrize("callback", [[(200, {"prompt_id": "p-4", "status": "resolved",
                                             "answer": "4"})]], indirect=True)
def test_a_callbacks_answer_is_posted_though_a_refused_step_changed_the_session(
        stack, booking, callback, monkeypatch):
    """During the callback's call a step was refused without running (the user's running
    queries all taken: RATE_LIMITED, the question kept). Its post moved the session on,
    so the answer, sent only while nothing was posted since, was CHANGED, and dropped:
    nothing posted or polled again, the question waiting for good."""
    from codeshot.errors import RateLimited
    from codeshot.usecases.prompts import Prompts

    agent_id, made = booking
    key, task_id, asked = asked_with_callback(stack, agent_id, "Ugo", callback.url)
    sessions = stack.services.sessions
    session = sessions.get(task_id)  # as the exchange read it, before the step

    def busy(*_args):
        raise RateLimited("the platform is busy right now; retry in a moment")

    monkeypatch.setattr(sessions, "claim_pause", busy)
    refused = ap(stack, key, "POST", f"/tasks/{task_id}/steps", json={"input": "5"}).json()
    monkeypatch.undo()
    assert "RATE_LIMITED" in str(refused), refused
    prompts = Prompts(stack.services)
    prompts._answer(session, asked, "4", None)  # the callback's answer, after the step
    assert wait_until_completed(stack, key, task_id)
    assert made[-1] == "Ugo for 4"


def wait_until_completed(stack, key: str, task_id: str, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while ap(stack, key, "GET", f"/tasks/{task_id}").json()["status"] != "completed":
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def refusals_of_answers(stack, task_id: str, question_id: str, count: int = 1) -> list:
    """The runner's refusals (at the running cap) of answers to ``question_id``, once there
    are ``count`` of them (within 30 s)."""
    deadline = time.monotonic() + 30
    while True:
        messages = stack.services.sessions.list_messages(task_id, limit=100).items
        refused = [m for m in messages if m.keeps_question == question_id
                   and m.error_code == "RATE_LIMITED"]
        if len(refused) >= count:
            return refused
        assert time.monotonic() < deadline, messages
        time.sleep(0.1)


def answers_posted(stack, task_id: str, question_id: str) -> list:
    return [m for m in stack.services.sessions.list_messages(task_id, limit=100).items
            if m.answers == question_id]


@pytest.mark.parametrize("callback", [[RESOLVED]], indirect=True)
def test_a_callbacks_answer_refused_for_the_running_cap_is_posted_again_once_a_slot_frees(
        stack, booking, callback):
    """The callback's answer was posted while all the user's running slots were taken:
    the runner refused it (RATE_LIMITED), keeping the question, and nothing asked the
    callback or posted the answer again (its exchange was over, and the deadline had no
    work left to end the question): the task waited for a step for good, though the user
    had answered (review s24, finding 1). It is posted again once a slot frees, under a
    key of its own, and runs once; the callback is asked once."""
    from codeshot.store.queue import PromptWork
    from codeshot.usecases.prompts import Prompts

    agent_id, made = booking
    key, task_id, asked = asked_with_callback(stack, agent_id, "Rev6", callback.url)
    give_back = running_slots_taken(stack, task_id)
    try:
        Prompts(stack.services).handle(PromptWork(task_id, asked.message_id, time.time() + 60))
        refusals_of_answers(stack, task_id, asked.message_id)
        time.sleep(1.5)  # while the slots stay taken, nothing more is posted
        assert len(answers_posted(stack, task_id, asked.message_id)) == 1
    finally:
        give_back()
    steps = finished(stack, key, task_id)
    assert steps[-1][0] == "4" and "Booked Rev6 for 4" in steps[-1][1], steps
    assert [m for m in made if m.startswith("Rev6")] == ["Rev6 for 4"]
    assert [m for _, m, *_ in callback.seen] == ["POST"]
    assert len(answers_posted(stack, task_id, asked.message_id)) == 2


@pytest.mark.parametrize("callback", [[RESOLVED]], indirect=True)
def test_a_callbacks_answer_refused_while_the_slots_stay_taken_ends_at_the_deadline(
        stack, booking, callback):
    """As above, but no slot frees: the question ends TIMEOUT at the prompt's deadline
    (8 s here), as one the callback never answered does; it waited for good."""
    from codeshot.store.queue import PromptWork
    from codeshot.usecases.prompts import Prompts

    agent_id, made = booking
    key, task_id, asked = asked_with_callback(stack, agent_id, "Rev7", callback.url)
    give_back = running_slots_taken(stack, task_id)
    try:
        Prompts(stack.services).handle(PromptWork(task_id, asked.message_id, time.time() + 60))
        deadline = time.monotonic() + 30
        while ap(stack, key, "GET", f"/tasks/{task_id}").json()["status"] in (
                "running", "awaiting_input"):
            assert time.monotonic() < deadline, steps_of(stack, key, task_id)
            time.sleep(0.2)
    finally:
        give_back()
    assert ap(stack, key, "GET", f"/tasks/{task_id}").json()["status"] == "failed"
    *_, (_, text, code) = steps_of(stack, key, task_id)
    assert code == "TIMEOUT" and "none of the user's running-query slots was free" in text, text
    assert time.time() >= ids.ulid_time_ms(asked.message_id) / 1000 + 8  # not before it
    assert not [m for m in made if m.startswith("Rev7")]
    assert len(answers_posted(stack, task_id, asked.message_id)) == 1  # no refusal storm


@pytest.mark.parametrize("callback", [[RESOLVED]], indirect=True)
def test_a_refused_callbacks_answer_is_posted_again_though_the_runner_stopped_after_refusing(
        stack, booking, callback, monkeypatch):
    """The runner stored its refusal of the callback's answer, then stopped before
    queueing the answer's post again: the query's redelivery, which finds it answered,
    queues it."""
    from codeshot.runner.session_runner import SessionRunner
    from codeshot.store.queue import PromptWork
    from codeshot.usecases.prompts import Prompts

    agent_id, made = booking
    key, task_id, asked = asked_with_callback(stack, agent_id, "Rev8", callback.url)
    failed = fails_once(monkeypatch, SessionRunner, "_answer_work")
    give_back = running_slots_taken(stack, task_id)
    try:
        Prompts(stack.services).handle(PromptWork(task_id, asked.message_id, time.time() + 60))
        refusals_of_answers(stack, task_id, asked.message_id)
    finally:
        give_back()
    steps = finished(stack, key, task_id)
    assert failed == ["_answer_work"]
    assert steps[-1][0] == "4" and "Booked Rev8 for 4" in steps[-1][1], steps
    assert [m for m in made if m.startswith("Rev8")] == ["Rev8 for 4"]


@pytest.mark.parametrize("callback", [[RESOLVED]], indirect=True)
def test_a_refused_callbacks_answer_posted_again_twice_runs_once(stack, booking, callback,
                                                                 monkeypatch):
    """The post again of a refused answer, delivered twice (SQS delivers at least once):
    the second finds the first's post under its key and posts nothing more."""
    from codeshot.store.queue import PromptWork
    from codeshot.usecases.prompts import Prompts

    agent_id, made = booking
    key, task_id, asked = asked_with_callback(stack, agent_id, "Rev9", callback.url)
    held = held_prompts(stack, monkeypatch)
    give_back = running_slots_taken(stack, task_id)
    try:
        Prompts(stack.services).handle(PromptWork(task_id, asked.message_id, time.time() + 60))
        [refused] = refusals_of_answers(stack, task_id, asked.message_id)
    finally:
        give_back()
    [again] = held  # queued by the runner with its refusal
    assert (again.question_id, again.answer_id) == (asked.message_id, refused.in_reply_to)
    # The refusal says the platform sends it again (it asked the client to: review s24b,
    # finding 4); if the client did too, one of the two would be answered CANCELED.
    assert "the platform sends this answer again once one of your running-query slots " \
        "is free" in refused.text and "send this one again" not in refused.text, refused.text
    prompts = Prompts(stack.services)
    prompts.handle(again)
    prompts.handle(again)  # redelivered, before or after the answer ran
    steps = finished(stack, key, task_id)
    prompts.handle(again)
    assert steps[-1][0] == "4" and "Booked Rev9 for 4" in steps[-1][1], steps
    assert [m for m in made if m.startswith("Rev9")] == ["Rev9 for 4"]
    assert len(answers_posted(stack, task_id, asked.message_id)) == 2
    assert steps_of(stack, key, task_id) == steps


def wait_for(held: list, count: int) -> list:
    """``held`` once it holds ``count`` prompt exchanges (within 30 s)."""
    deadline = time.monotonic() + 30
    while len(held) < count:
        assert time.monotonic() < deadline, held
        time.sleep(0.1)
    return held


def asked_late_by_a_redelivery(stack, agent_id: str, name: str, callback, monkeypatch):
    """(key, task id, question, held prompts) of a task asked with no callback, given one,
    whose query was redelivered past the question's deadline: the prompt it queued held."""
    from codeshot.runner.session_runner import SessionRunner
    from codeshot.store.queue import Work

    key, task_id, asked = asked_without_callback(stack, agent_id, name)  # none queued
    with_callback(stack, task_id, callback.url)
    held = held_prompts(stack, monkeypatch)
    past_the_deadline(asked)
    SessionRunner(stack.services).handle(Work(task_id, asked.in_reply_to))  # redelivered
    return key, task_id, asked, held


def past_the_deadline(asked) -> None:
    """Sleeps until the question ``asked`` is past its prompt deadline (8 s here)."""
    time.sleep(max(0.0, ids.ulid_time_ms(asked.message_id) / 1000 + 8.5 - time.time()))


@pytest.mark.parametrize("callback", [[RESOLVED]], indirect=True)
def test_a_callbacks_answer_refused_past_the_deadline_with_a_slot_free_is_posted_once_more(
        stack, booking, callback, monkeypatch):
    """A redelivered query queued the question's prompt past the question's deadline (in
    AWS, 30 min later: the session queue's visibility timeout); the prompt's deadline was
    counted from then, the post again's from the question. The callback answered at once,
    was refused once at the cap, and its post again ended the question TIMEOUT at once,
    with a slot free, saying the slots "stayed taken" (review s24b, finding 1). Both count
    from the question now, and past it an answer refused is posted once more while a slot
    is free: the booking runs."""
    from codeshot.usecases.prompts import Prompts

    agent_id, made = booking
    key, task_id, asked, held = asked_late_by_a_redelivery(stack, agent_id, "Rev10",
                                                           callback, monkeypatch)
    [prompt] = held
    give_back = running_slots_taken(stack, task_id)
    try:
        Prompts(stack.services).handle(prompt)  # asked late: answered, refused at the cap
        refusals_of_answers(stack, task_id, asked.message_id)
    finally:
        give_back()
    _, again = wait_for(held, 2)
    Prompts(stack.services).handle(again)
    steps = finished(stack, key, task_id)
    assert steps[-1][0] == "4" and "Booked Rev10 for 4" in steps[-1][1], steps
    assert [m for m in made if m.startswith("Rev10")] == ["Rev10 for 4"]
    asked_at = ids.ulid_time_ms(asked.message_id) / 1000
    assert prompt.deadline == again.deadline == asked_at + 8  # one deadline


@pytest.mark.parametrize("callback", [[RESOLVED]], indirect=True)
def test_an_answer_posted_again_past_the_deadline_and_refused_again_ends_the_question(
        stack, booking, callback, monkeypatch):
    """Past the deadline an answer is posted again once, not for as long as a slot looks
    free: refused again so, the question ends TIMEOUT, saying why."""

    from codeshot.usecases import prompts as module

    agent_id, made = booking
    key, task_id, asked = asked_with_callback(stack, agent_id, "Rev11", callback.url)
    held = held_prompts(stack, monkeypatch)
    prompts = module.Prompts(stack.services)
    give_back = running_slots_taken(stack, task_id)
    prompts.handle(PromptWork(task_id, asked.message_id, time.time() + 60))
    [first] = wait_for(held, 1)  # the answer refused in time
    past_the_deadline(asked)
    give_back()
    slot_free, taken = module.running_slot_free, []

    def free_then_taken(services, user_id: str) -> bool:
        free = slot_free(services, user_id)
        if not taken:  # the user's other queries start just after the look
            taken.append(running_slots_taken(stack, task_id))
        return free

    monkeypatch.setattr(module, "running_slot_free", free_then_taken)
    try:
        prompts.handle(first)  # a slot free: posted once more, and refused again
        refusals_of_answers(stack, task_id, asked.message_id, count=2)
        _, second = wait_for(held, 2)
    finally:
        taken[0]()
    prompts.handle(second)  # a slot free again: still the end
    assert ap(stack, key, "GET", f"/tasks/{task_id}").json()["status"] == "failed"
    *_, (_, text, code) = steps_of(stack, key, task_id)
    assert code == "TIMEOUT" and "posted again past the question's deadline" in text, text
    assert not [m for m in made if m.startswith("Rev11")]
    assert len(answers_posted(stack, task_id, asked.message_id)) == 2


def throttled() -> Exception:
    """DynamoDB's throttling as it reaches code past botocore's retries."""
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": "ProvisionedThroughputExceededException",
                                  "Message": "throttled"}}, "UpdateItem")


def platform_busy() -> Exception:
    from codeshot.errors import RateLimited

    return RateLimited("the platform is busy right now; retry in a moment")


@pytest.mark.parametrize("callback", [[RESOLVED]], indirect=True)
@pytest.mark.parametrize("busy_error", [platform_busy, throttled])
def test_the_deadlines_end_refused_busy_is_delivered_again_not_lost(stack, booking, callback,
                                                                  monkeypatch, busy_error):
    """Ending the question at its deadline was refused once, the platform busy: the end was
    dropped with the post again's work (consumed, nothing queued), and the task waited for
    ever (review s24b, finding 2). The work fails, so SQS delivers it again, and that ends
    the question; on its last delivery, it is queued again (AWS's own throttling, a raw
    botocore error, went to the dead-letter queue there: review s24e, finding 4)."""
    from codeshot.usecases.prompts import Prompts

    agent_id, _ = booking
    key, task_id, asked = asked_with_callback(stack, agent_id, "Rev12", callback.url)
    held = held_prompts(stack, monkeypatch)
    prompts = Prompts(stack.services)
    give_back = running_slots_taken(stack, task_id)
    try:
        prompts.handle(PromptWork(task_id, asked.message_id, time.time() + 60))
        [again] = wait_for(held, 1)
        past_the_deadline(asked)
        sessions = stack.services.sessions
        real = sessions.end_pause
        busy_for = [3]  # this delivery's end; the last's, then its own end

        def busy(*args, **kwargs):
            if busy_for[0]:
                busy_for[0] -= 1
                raise busy_error()
            return real(*args, **kwargs)

        monkeypatch.setattr(sessions, "end_pause", busy)
        with pytest.raises(type(busy_error())):  # delivered again by SQS
            prompts.handle(again)
        assert ap(stack, key, "GET", f"/tasks/{task_id}").json()["status"] == \
            "awaiting_input"
        prompts.handle(again, final_attempt=True)  # busy still: queued again
        assert held[1:] == [again]
        prompts.handle(again)
    finally:
        give_back()
    assert ap(stack, key, "GET", f"/tasks/{task_id}").json()["status"] == "failed"
    *_, (_, text, code) = steps_of(stack, key, task_id)
    assert code == "TIMEOUT" and "none of the user's running-query slots was free" in text


@pytest.mark.parametrize("callback", [[RESOLVED]], indirect=True)
def test_an_answer_the_platform_cannot_post_again_ends_unavailable_not_blaming_the_callback(
        stack, booking, callback, monkeypatch):
    """The callback answered; refused at the cap, its post again could not be queued (or
    failed through every delivery): the question ended CALLBACK_FAILED, saying the
    platform could not send the question to the callback, which had answered it (review
    s24b, finding 4). It ends UNAVAILABLE, saying the platform's queue or store failed."""
    from codeshot.usecases.prompts import Prompts

    agent_id, _ = booking
    for place, final_delivery_fails in (("Rev13", False), ("Rev14", True)):
        key, task_id, asked = asked_without_callback(stack, agent_id, place)
        with_callback(stack, task_id, callback.url)
        held = held_prompts(stack, monkeypatch)
        prompts = Prompts(stack.services)
        give_back = running_slots_taken(stack, task_id)
        try:
            if final_delivery_fails:
                prompts.handle(PromptWork(task_id, asked.message_id, time.time() + 60))
                [again] = wait_for(held, 1)
                monkeypatch.setattr("codeshot.usecases.prompts.running_slot_free",
                                    lambda *_: (_ for _ in ()).throw(ConnectionError(
                                        "the usage table is down")))
                prompts.handle(again, final_attempt=True)
            else:
                def answers_unqueued(work, delay_seconds=0, hold=held.append):
                    if work.answer_id is not None:
                        raise ConnectionError("SQS is down")
                    hold(work)

                monkeypatch.setattr(stack.services.prompt_queue, "schedule", answers_unqueued)
                prompts.handle(PromptWork(task_id, asked.message_id, time.time() + 60))
                refusals_of_answers(stack, task_id, asked.message_id)
            deadline = time.monotonic() + 30
            while ap(stack, key, "GET", f"/tasks/{task_id}").json()["status"] != "failed":
                assert time.monotonic() < deadline, steps_of(stack, key, task_id)
                time.sleep(0.2)
        finally:
            give_back()
            monkeypatch.undo()
        *_, (_, text, code) = steps_of(stack, key, task_id)
        assert code == "UNAVAILABLE", (place, text)
        assert "could not post the answer to the question again" in text, text
        assert "not the task's callback" in text


@pytest.mark.parametrize("callback", [[PENDING, RESOLVED]], indirect=True)
def test_a_prompt_asked_past_its_deadline_takes_the_answer_its_last_look_finds(
        stack, booking, callback, monkeypatch):
    """A redelivered query asked the question's prompt past the question's deadline: its
    first poll ended the question TIMEOUT without a look, though the user had been asked
    (review s24e, finding 3). The deadline's poll looks once more: the answer it finds
    runs."""
    from codeshot.usecases.prompts import Prompts

    agent_id, made = booking
    key, task_id, _, held = asked_late_by_a_redelivery(stack, agent_id, "Rev13",
                                                       callback, monkeypatch)
    [prompt] = held
    Prompts(stack.services).handle(prompt)  # asked: pending
    _, poll = wait_for(held, 2)
    Prompts(stack.services).handle(poll)  # past the deadline: one last look, answered
    steps = finished(stack, key, task_id)
    assert steps[-1][0] == "4" and "Booked Rev13 for 4" in steps[-1][1], steps
    assert [m for m in made if m.startswith("Rev13")] == ["Rev13 for 4"]
    assert [m for _, m, *_ in callback.seen] == ["POST", "GET"]

"""A cancel and an answer of the same question at once: exactly one wins. The runner
takes the paused program before it resumes it; a cancel that landed first leaves it
nothing to resume (the answer runs as a query of its own), and one that lands after is
refused. Driven deterministically: the cancel (A2A's CancelTask over HTTP) is sent from
inside the runner, at the moment under test."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

from codeshot import ids
from codeshot.runner.batch import process_batch, record_of
from codeshot.runner.fairness import RUNNING
from codeshot.runner.session_runner import SessionRunner
from codeshot.store.queue import Work
from codeshot.store.sessions import RESUMED_AT, RESUMING, RESUMING_LASTS, SESSION_ITEM
from codeshot.usecases import tasks
from tests.dynamo_faults import refuse
from tests.runner.conftest import register, session
from tests.runner.test_redelivery import post, terminal


def asked(platform, agents, username: str) -> tuple:
    """A booking session that asked "For how many people?": (key, agent, session, its
    task's id, runner)."""
    _, key = platform.user(username)
    booking = register(platform, key, "booking", agents.url + "/booking")
    h = session(platform, key, frontend=booking)
    first = post(platform, key, h, "Book a table at Luigi's")
    runner = SessionRunner(platform.services)
    assert process_batch({"Records": [queued(platform)]}, runner.handle) == {
        "batchItemFailures": []}
    assert terminal(platform, h)[-1].text == "For how many people?"
    return key, booking, h, ids.task_id(h, first), runner


def queued(platform) -> dict:
    """The queue's next message as the runner's Lambda gets it (taken off the queue)."""
    [raw] = platform.services.queue.receive(wait_seconds=1)
    platform.services.queue.delete(raw["ReceiptHandle"])
    return record_of(raw)


class HeldCancel:
    """An A2A CancelTask of a task, held between its check (the question is pending) and
    its write, so the user's answer is posted in between, until :meth:`land`."""

    def __init__(self, platform, key: str, agent_id: str, task_id: str, monkeypatch,
                 after: tuple[object, str] | None = None) -> None:
        """Held just before the store's ``end_pause``, or just after ``after`` returns."""
        self.checked, self.release, self.out = threading.Event(), threading.Event(), []
        where, name = after or (platform.services.sessions, "end_pause")
        real = getattr(where, name)

        def held(*args, **kwargs):
            out = real(*args, **kwargs) if after else None
            self.checked.set()
            assert self.release.wait(30)
            return out if after else real(*args, **kwargs)

        monkeypatch.setattr(where, name, held)
        self.thread = threading.Thread(target=lambda: self.out.append(
            a2a(platform, key, agent_id, "CancelTask", id=task_id)))
        self.thread.start()
        assert self.checked.wait(30)

    def land(self) -> None:
        self.release.set()
        self.thread.join(30)


def a2a(platform, key: str, agent_id: str, method: str, **params) -> dict:
    return platform.rpc(key, f"/a2a/{agent_id}", method, params,
                        headers={"A2A-Version": "1.0"}).json()


def cancel_after_read(sessions, cancel: HeldCancel, monkeypatch) -> None:
    """The held cancel lands just after the runner reads the session's paused program."""
    read = sessions.recent

    def then_cancel(session_id: str, messages: int):
        out = read(session_id, messages)
        cancel.land()
        return out

    monkeypatch.setattr(sessions, "recent", then_cancel)


def booked(agents) -> list[str]:
    return [text for call, text, _ in agents.calls if call == "booking/book"]


def test_a_cancel_landing_after_the_runners_read_wins_and_nothing_is_resumed(
        platform, agents, monkeypatch):
    """The runner read the paused program, the cancel ended the question, and the runner
    still resumed it: the table was booked and the canceled task answered "Done"."""
    key, booking, h, task_id, runner = asked(platform, agents, "cara")
    cancel = HeldCancel(platform, key, booking, task_id, monkeypatch)
    post(platform, key, h, "4")
    sessions = platform.services.sessions
    cancel_after_read(sessions, cancel, monkeypatch)
    before = booked(agents)
    assert process_batch({"Records": [queued(platform)]}, runner.handle) == {
        "batchItemFailures": []}
    assert cancel.out[0]["result"]["status"]["state"] == "TASK_STATE_CANCELED", cancel.out
    assert booked(agents) == before  # nothing of the paused program ran
    monkeypatch.undo()
    got = a2a(platform, key, booking, "GetTask", id=task_id)["result"]
    assert got["status"]["state"] == "TASK_STATE_CANCELED"
    # The question has one reply, the cancel's; the answer one of its own, not a booking.
    replies = terminal(platform, h)
    question = next(m for m in replies if m.text == "For how many people?")
    assert [m.error_code for m in replies if m.in_reply_to == question.message_id] == [
        "CANCELED"]
    assert not any(m.text.startswith("Done") for m in replies)


def test_a_cancel_landing_once_the_runner_resumes_is_refused_and_the_answer_stands(
        platform, agents, monkeypatch):
    """The cancel ended the question while the runner resumed it: both wrote a reply (the
    task read canceled, yet the table was booked)."""
    key, booking, h, task_id, runner = asked(platform, agents, "cody")
    cancel = HeldCancel(platform, key, booking, task_id, monkeypatch)
    post(platform, key, h, "4")
    run = runner._run

    def cancel_then_run(*args, **kwargs):
        cancel.land()
        return run(*args, **kwargs)

    monkeypatch.setattr(runner, "_run", cancel_then_run)
    assert process_batch({"Records": [queued(platform)]}, runner.handle) == {
        "batchItemFailures": []}
    monkeypatch.undo()
    assert cancel.out[0]["error"]["code"] == -32002, cancel.out  # TaskNotCancelable
    assert "not waiting for input" in cancel.out[0]["error"]["message"]
    assert booked(agents)[-1] == "Luigi's"
    got = a2a(platform, key, booking, "GetTask", id=task_id)["result"]
    assert got["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [m.text for m in terminal(platform, h)] == ["For how many people?",
                                                      "Done: Booked Luigi's."]
    assert platform.services.sessions.get(h).status.value == "idle"
    # Its claim ended with its reply: the session's next question can be canceled.
    nino = post(platform, key, h, "Book a table at Nino's")
    assert process_batch({"Records": [queued(platform)]}, runner.handle) == {
        "batchItemFailures": []}
    assert a2a(platform, key, booking, "CancelTask", id=ids.task_id(h, nino))["result"][
        "status"]["state"] == "TASK_STATE_CANCELED"


@pytest.mark.settings(max_running_queries=1)
def test_an_answer_whose_paused_program_is_too_busy_to_take_is_refused_and_kept(
        platform, agents, monkeypatch):
    """The session's item busy through every retry of the take: nothing runs, the slot is
    given back (the cap is 1), and the refusal keeps the question, so the answer sent
    again resumes it."""
    key, _, h, _, runner = asked(platform, agents, "cruz")
    post(platform, key, h, "4")
    refuse(monkeypatch, platform.services.sessions.db, "update_item", RESUMING, times=None)
    assert process_batch({"Records": [queued(platform)]}, runner.handle) == {
        "batchItemFailures": []}
    monkeypatch.undo()
    question, refused = terminal(platform, h)
    assert (refused.error_code, refused.keeps_question) == ("RATE_LIMITED",
                                                            question.message_id)
    post(platform, key, h, "4")
    assert process_batch({"Records": [queued(platform)]}, runner.handle) == {
        "batchItemFailures": []}
    assert terminal(platform, h)[-1].text == "Done: Booked Luigi's."
    assert booked(agents)[-1] == "Luigi's"


@pytest.mark.settings(max_running_queries=1)
def test_a_cancel_landing_before_a_refusal_for_the_cap_leaves_it_nothing_to_keep(
        platform, agents, monkeypatch):
    """The runner read the question, the cancel ended it, and the refusal (the user's one
    running slot taken) still kept it: the canceled task read input-required again, and
    its context took no new task. Written again without the question, the refusal kept
    the day's query charge too, as though the answer had run."""
    key, booking, h, task_id, runner = asked(platform, agents, "rita")
    owner = platform.services.sessions.get(h).owner
    platform.services.usage.take_lease(RUNNING, owner, 1, "other", timedelta(minutes=5))
    cancel = HeldCancel(platform, key, booking, task_id, monkeypatch)
    post(platform, key, h, "4")
    sessions = platform.services.sessions
    cancel_after_read(sessions, cancel, monkeypatch)
    assert process_batch({"Records": [queued(platform)]}, runner.handle) == {
        "batchItemFailures": []}
    monkeypatch.undo()
    assert cancel.out[0]["result"]["status"]["state"] == "TASK_STATE_CANCELED", cancel.out
    refused = terminal(platform, h)[-1]
    assert (refused.error_code, refused.keeps_question) == ("RATE_LIMITED", None)
    assert platform.services.usage.used("query", owner) == 1  # the first's; the answer's back
    assert sessions.get(h).status.value == "idle"
    got = a2a(platform, key, booking, "GetTask", id=task_id)["result"]
    assert got["status"]["state"] == "TASK_STATE_CANCELED"
    new = a2a(platform, key, booking, "SendMessage", configuration={"returnImmediately": True},
              message={"messageId": "m-new", "role": "ROLE_USER",
                       "parts": [{"text": "Book a table at Nino's"}], "contextId": h})
    assert new["result"]["task"]["contextId"] == h, new



def test_a_claim_whose_run_died_before_its_reply_lapses(platform, agents, monkeypatch):
    """The run that took the paused program to resume it died before its reply (its last
    delivery): the claim held for ever, so the answer sent again ran as a query of its
    own, the question dropped. It holds while a run may still write its reply, no longer."""
    key, _, h, _, runner = asked(platform, agents, "dina")
    post(platform, key, h, "4")

    def dies(*args, **kwargs):
        raise RuntimeError("the runner's invocation ended")

    monkeypatch.setattr(runner, "_finish", dies)
    assert process_batch({"Records": [queued(platform)]}, runner.handle)["batchItemFailures"]
    monkeypatch.undo()
    sessions = platform.services.sessions
    assert not sessions.claim_pause(h, "another-answer")  # a run may still be resuming it
    at = {"session_id": {"S": h}, "item": {"S": SESSION_ITEM}}
    sessions.db.update_item(  # taken longer ago than any run lasts
        TableName=sessions.table_name, Key=at, UpdateExpression="SET #t = :t",
        ExpressionAttributeNames={"#t": RESUMED_AT},
        ExpressionAttributeValues={":t": {"N": str(int(time.time()) - RESUMING_LASTS - 1)}})
    post(platform, key, h, "4")
    assert process_batch({"Records": [queued(platform)]}, runner.handle) == {
        "batchItemFailures": []}
    assert terminal(platform, h)[-1].text == "Done: Booked Luigi's."
    assert booked(agents)[-1] == "Luigi's"
    item = sessions.db.get_item(TableName=sessions.table_name, Key=at)["Item"]
    assert RESUMING not in item and RESUMED_AT not in item


@pytest.mark.settings(max_running_queries=1)
@pytest.mark.parametrize("when", ["after-read", "before-read", "no-slot", "given-up"])
def test_an_a2a_answer_to_a_question_canceled_before_it_was_taken_runs_nothing(
        platform, agents, monkeypatch, when, receiver):
    """The answer was sent to its task; a cancel landed before the runner took it, and the
    answer ran as a new task the sender never heard of (and was charged for); then it was
    answered CANCELED, but as a task of its own (listed, and pushed under its own id).
    Given up on its last delivery, or with the user's running slots all taken, it was
    still pushed under its own id, and told to send again a task that is over."""
    key, booking, h, task_id, runner = asked(platform, agents, "anya")
    owner = platform.services.sessions.get(h).owner
    if when == "no-slot":  # the user's one running slot is another query's
        platform.services.usage.take_lease(RUNNING, owner, 1, "other", timedelta(minutes=5))
    cancel = HeldCancel(platform, key, booking, task_id, monkeypatch)
    sent = a2a(platform, key, booking, "SendMessage", configuration={
        "returnImmediately": True, "taskPushNotificationConfig": {"url": receiver.url}},
               message={"messageId": "m-4", "role": "ROLE_USER", "parts": [{"text": "4"}],
                        "taskId": task_id})
    assert sent["result"]["task"]["id"] == task_id, sent
    assert platform.services.usage.used("query", owner) == 2
    if when == "after-read":  # the runner read the paused program, then the cancel landed
        cancel_after_read(platform.services.sessions, cancel, monkeypatch)
    else:
        cancel.land()
    before = len(agents.calls)
    if when == "given-up":
        runner.give_up(Work.parse(queued(platform)["body"]))
    else:
        assert process_batch({"Records": [queued(platform)]}, runner.handle) == {
            "batchItemFailures": []}
    monkeypatch.undo()
    assert cancel.out[0]["result"]["status"]["state"] == "TASK_STATE_CANCELED", cancel.out
    assert len(agents.calls) == before  # the answer ran nowhere
    answer = terminal(platform, h)[-1]
    assert answer.error_code == "CANCELED" and "nothing ran" in answer.text, answer
    assert platform.services.usage.used("query", owner) == 1  # its charge given back
    got = a2a(platform, key, booking, "GetTask", id=task_id)["result"]
    assert got["status"]["state"] == "TASK_STATE_CANCELED"
    # The answer and its refusal are the canceled task's, not a stray task of their own.
    posted = sent["result"]["task"]["history"][-1]["messageId"]
    assert [m["messageId"] for m in got["history"]][-2:] == [posted, answer.message_id]
    stray = a2a(platform, key, booking, "GetTask", id=ids.task_id(h, posted))
    assert stray["error"]["code"] == -32001, stray
    for listing in ({"contextId": h}, {"contextId": h, "historyLength": 5}, {}):
        listed = a2a(platform, key, booking, "ListTasks", **listing)["result"]["tasks"]
        assert [(t["id"], t["status"]["state"]) for t in listed] == [
            (task_id, "TASK_STATE_CANCELED")], (listing, listed)
    [(_, pushed)] = receiver.received
    update = pushed["statusUpdate"]
    assert (update["taskId"], update["status"]["state"]) == (task_id, "TASK_STATE_CANCELED")


def shown(task: dict) -> tuple:
    """What a task's status shows: its id, state, and the message saying why."""
    status = task["status"]
    return (task["id"], status["state"], status["message"]["messageId"],
            status["message"]["parts"][0]["text"])


def read_alike(platform, key: str, agent_id: str, h: str, task_id: str) -> tuple:
    """The task as GetTask shows it, once ListTasks (of its context, and of all the
    caller's tasks) was seen to show it the same."""
    got = shown(a2a(platform, key, agent_id, "GetTask", id=task_id)["result"])
    for listing in ({"contextId": h}, {}):
        listed = a2a(platform, key, agent_id, "ListTasks", **listing)["result"]["tasks"]
        assert [shown(t) for t in listed] == [got], listing
    return got


def answered_during_cancel(platform, key, booking, task_id, monkeypatch) -> HeldCancel:
    """A cancel held once it read the question, and the answer "4" sent meanwhile."""
    cancel = HeldCancel(platform, key, booking, task_id, monkeypatch,
                        after=(tasks, "pending_question"))
    sent = a2a(platform, key, booking, "SendMessage", configuration={"returnImmediately": True},
               message={"messageId": "m-4", "role": "ROLE_USER", "parts": [{"text": "4"}],
                        "taskId": task_id})
    assert sent["result"]["task"]["id"] == task_id, sent
    return cancel


def test_an_answer_posted_between_a_cancels_read_and_its_write_reads_alike_everywhere(
        platform, agents, monkeypatch):
    """The cancel read the question, the answer was posted, and the cancel's message was
    made after it: GetTask (reading forward) showed the cancel's status, ListTasks
    (walking back from the answer's reply, never meeting the cancel) the answer's."""
    key, booking, h, task_id, runner = asked(platform, agents, "ines")
    cancel = answered_during_cancel(platform, key, booking, task_id, monkeypatch)
    cancel.land()
    assert cancel.out[0]["result"]["status"]["state"] == "TASK_STATE_CANCELED", cancel.out
    assert process_batch({"Records": [queued(platform)]}, runner.handle) == {
        "batchItemFailures": []}
    monkeypatch.undo()
    got = read_alike(platform, key, booking, h, task_id)
    assert got[1:2] + got[3:] == ("TASK_STATE_CANCELED", "The user canceled the question.")


@pytest.mark.settings(max_running_queries=1)
def test_a_refusal_keeping_the_question_that_sorts_after_the_cancel_reads_canceled(
        platform, agents, monkeypatch):
    """The answer was posted after the cancel read the question; the cancel's message was
    made; the runner refused the answer (the user's one running slot taken), keeping the
    question, and wrote that before the cancel landed, sorting after it. ListTasks
    (walking back from the refusal) read the canceled task as input-required, GetTask as
    canceled, and the context took no new task though the question was over."""
    key, booking, h, task_id, runner = asked(platform, agents, "iris")
    owner = platform.services.sessions.get(h).owner
    platform.services.usage.take_lease(RUNNING, owner, 1, "other", timedelta(minutes=5))
    minted, write = threading.Event(), threading.Event()
    end = platform.services.sessions.end_pause

    def held_end(*args, **kwargs):  # its message made, not written yet
        minted.set()
        assert write.wait(30)
        return end(*args, **kwargs)

    monkeypatch.setattr(platform.services.sessions, "end_pause", held_end)
    cancel = answered_during_cancel(platform, key, booking, task_id, monkeypatch)
    cancel.release.set()
    assert minted.wait(30)
    assert process_batch({"Records": [queued(platform)]}, runner.handle) == {
        "batchItemFailures": []}
    refused = terminal(platform, h)[-1]
    assert refused.error_code == "RATE_LIMITED" and refused.keeps_question, refused
    write.set()
    cancel.thread.join(30)
    monkeypatch.undo()
    assert cancel.out[0]["result"]["status"]["state"] == "TASK_STATE_CANCELED", cancel.out
    got = read_alike(platform, key, booking, h, task_id)
    assert got[1:2] + got[3:] == ("TASK_STATE_CANCELED", "The user canceled the question.")
    new = a2a(platform, key, booking, "SendMessage", configuration={"returnImmediately": True},
              message={"messageId": "m-new", "role": "ROLE_USER",
                       "parts": [{"text": "Book a table at Nino's"}], "contextId": h})
    assert "result" in new and new["result"]["task"]["contextId"] == h, new


@pytest.mark.parametrize("order", ["QACF", "QAFC", "QCAF", "ACF", "AFC"])
def test_a_questions_end_closes_the_turn_that_keeps_it_whatever_sorts_first(order):
    """The question Q, an answer A refused keeping Q (F), and Q's end C, in each order
    their ids can take (the end's id may be made before the refusal's, or the answer's,
    and written after both), and as a walk back from the refusal reads them (from the
    answer on): one task, canceled, its status C's. With C before F, a read from A on
    left C out (its question not among them) and the task input-required, so the
    context's next message was taken as its answer."""
    from codeshot.models import Message, MessageType, TaskState

    fields: dict[str, dict] = {
        "Q": {"type": MessageType.AWAITING_INPUT, "in_reply_to": "q0"},
        "A": {"answers": "Q"},
        "F": {"type": MessageType.ERROR, "in_reply_to": "A", "keeps_question": "Q",
              "error_code": "RATE_LIMITED"},
        "C": {"type": MessageType.ERROR, "in_reply_to": "Q", "error_code": "CANCELED"},
    }
    first = [Message(session_id="s", message_id="q0", text="Book a table")] \
        if order.startswith("Q") else []
    messages = [*first, *(Message(session_id="s", message_id=name, text=name,
                                  **fields[name]) for name in order)]
    [task] = tasks.chains(messages)
    assert task.state is TaskState.CANCELED
    assert task.turns[-1].reply is not None and task.turns[-1].reply.message_id == "C"

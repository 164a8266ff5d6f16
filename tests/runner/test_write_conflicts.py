"""DynamoDB cancels a write when another transaction is writing one of its items at that
moment (TransactionConflict: the user's next post on the session, another of the user's
replies on the running-query count, any user's planner call on the planner's token
count). Such a write is tried again: a reply is never dropped as if answered already,
and a finished LLM call never fails over the counting of its tokens."""

from __future__ import annotations

from codeshot.runner.batch import process_batch, record_of
from codeshot.runner.budgets import AGENT_TOKENS, USER_TOKENS
from tests.dynamo_faults import refuse
from tests.runner.conftest import register, session
from tests.runner.test_redelivery import post, queued_roll, terminal


def test_a_reply_cancelled_by_a_concurrent_write_is_written_on_the_next_try(platform, agents,
                                                                             monkeypatch):
    h, raw, runner = queued_roll(platform, agents, "pia")
    refused = refuse(monkeypatch, platform.services.sessions.db, "transact_write_items",
                     "ANSWER#", times=2)
    out = process_batch({"Records": [record_of(raw)]}, runner.handle)
    assert refused == [1, 1]
    assert out == {"batchItemFailures": []}
    [reply] = terminal(platform, h)
    assert reply.type.value == "response" and "You rolled" in reply.text
    assert platform.services.sessions.get(h).status.value == "idle"


def test_a_reply_write_busy_at_every_try_is_redelivered_and_answered_once(platform, agents,
                                                                          monkeypatch):
    h, raw, runner = queued_roll(platform, agents, "quin")
    refuse(monkeypatch, platform.services.sessions.db, "transact_write_items", "ANSWER#",
           times=None)
    record = record_of(raw)
    assert process_batch({"Records": [record]}, runner.handle) == {
        "batchItemFailures": [{"itemIdentifier": raw["MessageId"]}]}  # SQS delivers it again
    assert terminal(platform, h) == []
    monkeypatch.undo()
    assert process_batch({"Records": [record]}, runner.handle) == {"batchItemFailures": []}
    # Its agent ran once already: the redelivery says so rather than run it again.
    [reply] = terminal(platform, h)
    assert reply.error_code == "INTERRUPTED"
    assert process_batch({"Records": [record]}, runner.handle) == {"batchItemFailures": []}
    assert len(terminal(platform, h)) == 1


def test_counting_tokens_on_a_busy_counter_never_fails_the_query(platform, agents,
                                                                   monkeypatch):
    h, raw, runner = queued_roll(platform, agents, "rhea")
    session = platform.services.sessions.get(h)
    usage = platform.services.usage
    refused = refuse(monkeypatch, usage.db, "update_item", AGENT_TOKENS + "#", times=1)
    assert process_batch({"Records": [record_of(raw)]}, runner.handle) == {
        "batchItemFailures": []}
    assert refused == [1]
    [reply] = terminal(platform, h)
    assert reply.type.value == "response" and "You rolled" in reply.text
    user, agent = usage.token_usage([(USER_TOKENS, session.owner),
                                     (AGENT_TOKENS, session.frontend_agent_id)])
    assert user.calls == agent.calls == 2 and user.used == agent.used > 0  # both counted


def test_tokens_that_cannot_be_counted_are_logged_and_the_answer_stands(platform, agents,
                                                                        monkeypatch, caplog):
    h, raw, runner = queued_roll(platform, agents, "sami")
    session = platform.services.sessions.get(h)
    usage = platform.services.usage
    refuse(monkeypatch, usage.db, "update_item", AGENT_TOKENS + "#", times=None)
    assert process_batch({"Records": [record_of(raw)]}, runner.handle) == {
        "batchItemFailures": []}
    [reply] = terminal(platform, h)
    assert reply.type.value == "response" and "You rolled" in reply.text
    assert "went uncounted" in caplog.text
    [user] = usage.token_usage([(USER_TOKENS, session.owner)])
    assert user.calls == 2  # the user's counter is its own write


def test_a_post_cancelled_by_a_concurrent_write_is_posted_not_refused(platform, agents,
                                                                      monkeypatch):
    """The user's post and the runner's reply both write the session item: the post that
    collides is tried again, not answered CONFLICT."""
    _, key = platform.user("tove")
    h = session(platform, key, frontend=register(platform, key, "dice", agents.url + "/dice"))
    post(platform, key, h, "Roll 1d20")
    refused = refuse(monkeypatch, platform.services.sessions.db, "transact_write_items",
                     "Roll 3d8", times=1)
    post(platform, key, h, "Roll 3d8")
    assert refused == [1]
    assert [m.text for m in platform.services.sessions.all_messages(h)] == ["Roll 1d20",
                                                                         "Roll 3d8"]

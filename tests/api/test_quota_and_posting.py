import base64
import hashlib
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from codeshot.models import Embed
from codeshot.usecases.messaging import Messaging
from codeshot.usecases.users import principal_of
from tests.conftest import code
from tests.dynamo_reads import PartitionReads

POST = """mutation ($s: String!, $t: String!, $k: String) {
  sendSessionMessage(messageData: {session: $s, text: $t, wait: false, idempotencyKey: $k}) {
    message { id text } } }"""


def new_session(platform, key):
    return platform.gql(key, "mutation { createSession { session { handle } } }")["data"][
        "createSession"
    ]["session"]["handle"]


@pytest.mark.slow
def test_quota_is_exact_under_60_concurrent_posts(platform):
    _, key = platform.user("busy", daily_query_limit=50)
    session = new_session(platform, key)
    with ThreadPoolExecutor(max_workers=60) as pool:
        results = list(
            pool.map(lambda i: platform.gql(key, POST, {"s": session, "t": f"q{i}"}), range(60))
        )
    ok = [r for r in results if not r.get("errors")]
    refused = [r for r in results if r.get("errors")]
    assert len(ok) == 50 and len(refused) == 10
    assert {code(r) for r in refused} == {"RATE_LIMITED"}
    assert all("resets_at" in r["errors"][0]["extensions"]["details"] for r in refused)
    stored = platform.services.sessions.all_messages(session)
    assert len(stored) == 50
    assert {m.text for m in stored} == {
        r["data"]["sendSessionMessage"]["message"]["text"] for r in ok
    }
    used = platform.gql(key, "{ user { dailyQueryLimit dailyUsedQueries } }")["data"]["user"]
    assert used == {"dailyQueryLimit": 50, "dailyUsedQueries": 50}


def test_a_retried_post_is_not_duplicated_nor_charged_twice(platform):
    _, key = platform.user()
    session = new_session(platform, key)
    first = platform.gql(key, POST, {"s": session, "t": "once", "k": "client-retry-1"})
    again = platform.gql(key, POST, {"s": session, "t": "once", "k": "client-retry-1"})
    assert first["data"] == again["data"]
    assert [m.text for m in platform.services.sessions.all_messages(session)] == ["once"]
    assert (
        platform.gql(key, "{ user { dailyUsedQueries } }")["data"]["user"]["dailyUsedQueries"] == 1
    )
    queued = platform.services.queue.receive(wait_seconds=0)
    assert len(queued) == 1  # one unit of work for the runner


class Killed(BaseException):
    """The API's process ending mid-request, as a Lambda timeout ends it."""


def test_a_retry_queues_a_post_whose_first_try_died_before_queueing_it(platform, monkeypatch):
    user_id, key = platform.user()
    session = new_session(platform, key)

    def killed(work, again=False):
        raise Killed

    monkeypatch.setattr(platform.services.queue, "enqueue", killed)
    with pytest.raises(Killed):  # stored and charged, never queued
        Messaging(platform.services).post(principal_of(platform.services.users.get(user_id)),
                                          session, "hello", idempotency_key="k1")
    monkeypatch.undo()
    again = platform.gql(key, POST, {"s": session, "t": "hello", "k": "k1"})
    queued = platform.services.queue.receive(wait_seconds=0)
    assert [json.loads(m["Body"])["message_id"] for m in queued] == [
        again["data"]["sendSessionMessage"]["message"]["id"]]  # the runner will answer it
    assert [m.text for m in platform.services.sessions.all_messages(session)] == ["hello"]


def test_a_concurrent_retry_of_the_days_last_post_gets_that_post(platform, monkeypatch):
    """A retry in flight while its first try commits (it found no post under its key,
    then lost to it) is the first post, not RATE_LIMITED for the charge it lost too."""
    user_id, key = platform.user(daily_query_limit=1)
    session = new_session(platform, key)
    principal = principal_of(platform.services.users.get(user_id))
    messaging = Messaging(platform.services)
    first, _ = messaging.post(principal, session, "hello", idempotency_key="k1")
    sessions = platform.services.sessions
    real, looked = sessions.posted_under, []

    def racing(session_id, key):  # the retry's first look ran before the first try's write
        looked.append(key)
        return None if len(looked) == 1 else real(session_id, key)

    monkeypatch.setattr(sessions, "posted_under", racing)
    again, created = messaging.post(principal, session, "hello", idempotency_key="k1")
    assert (again.message_id, created) == (first.message_id, False)
    assert [m.text for m in sessions.all_messages(session)] == ["hello"]
    assert platform.services.usage.used("query", user_id) == 1


def test_a_post_reads_only_the_embeds_it_names(platform):
    """Posting with embeds reads the keys it sends, however many the session holds
    (before: all of them, each post; 4.9 s at 4,000 embeds on moto)."""
    user_id, key = platform.user()
    session = new_session(platform, key)
    sessions = platform.services.sessions
    old = platform.services.embeds.put(b"old", "text/plain")
    bound = [Embed(key=f"e{n}", session_id=session, owner=user_id, content_type="text/plain",
                   content_hash=old, size=3) for n in range(1000)]
    for start in range(0, len(bound), 25):
        sessions.db.batch_write_item(RequestItems={sessions.table_name: [
            {"PutRequest": {"Item": sessions.embed_item(e)}} for e in bound[start:start + 25]]})
    send = """mutation ($s: String!, $e: [EmbedInput!]) { sendSessionMessage(messageData:
      {session: $s, text: "see", embeds: $e, wait: false}) { message { id } } }"""
    embeds = [{"key": name, "contentType": "text/plain",
               "content": base64.b64encode(data).decode()}
              for name, data in (("e7", b"old"), ("new", b"new"))]
    with PartitionReads(sessions.db, session) as reads:
        out = platform.gql(key, send, {"s": session, "e": embeds})
    assert "errors" not in out, out
    assert reads.items() <= 4, reads.calls  # the session, the two keys: no listing
    assert sorted(sessions.all_messages(session)[0].embeds) == ["e7", "new"]
    assert sessions.get_embed(session, "new").content_hash == hashlib.sha256(b"new").hexdigest()
    rebound = [{"key": "e8", "contentType": "text/plain",
                "content": base64.b64encode(b"other").decode()}]
    assert code(platform.gql(key, send, {"s": session, "e": rebound})) == "INVALID_INPUT"


def test_wait_returns_the_reply_in_the_same_call(platform, echo_runner):
    _, key = platform.user()
    session = new_session(platform, key)
    out = platform.gql(
        key,
        """mutation ($s: String!) { sendSessionMessage(messageData:
        {session: $s, text: "ping"}) { message { text } reply { text type inReplyTo { id } } } }""",
        {"s": session},
    )["data"]["sendSessionMessage"]
    assert out["reply"]["text"] == "echo: ping" and out["reply"]["type"] == "response"


def test_wait_is_bounded_when_no_runner_answers(platform):
    _, key = platform.user()
    session = new_session(platform, key)
    out = platform.gql(
        key,
        """mutation ($s: String!) { sendSessionMessage(messageData:
        {session: $s, text: "anyone?"}) { message { text } reply { text } } }""",
        {"s": session},
        timeout=20,
    )["data"]["sendSessionMessage"]
    assert out == {"message": {"text": "anyone?"}, "reply": None}


def test_paging_messages_with_after(platform):
    _, key = platform.user()
    session = new_session(platform, key)
    ids = [
        platform.gql(key, POST, {"s": session, "t": f"m{i}"})["data"]["sendSessionMessage"][
            "message"
        ]["id"]
        for i in range(5)
    ]
    page = platform.gql(
        key,
        """query ($h: String!, $a: String) { sessionByHandle(handle: $h) {
        messages(after: $a, limit: 2) { text } } }""",
        {"h": session, "a": ids[1]},
    )
    assert page["data"]["sessionByHandle"]["messages"] == [{"text": "m2"}, {"text": "m3"}]


def test_a_client_deleting_what_it_listed_pages_on(platform):
    """List a page, delete it, ask for the next page after its last handle: every session
    comes once (the handle of a deleted session was INVALID_INPUT). Another user's deleted
    session is as unknown as ever."""
    _, key = platform.user()
    made = [new_session(platform, key) for _ in range(5)]
    page = """query ($a: String) { allSessions(after: $a, limit: 2) { handle } }"""
    delete = "mutation ($h: String!) { deleteSession(handle: $h) { session { handle } } }"
    seen, after = [], None
    while True:
        handles = [s["handle"] for s in platform.gql(key, page, {"a": after})["data"][
            "allSessions"]]
        for handle in handles:
            assert "errors" not in platform.gql(key, delete, {"h": handle})
        seen += handles
        if not handles:
            break
        after = handles[-1]
    assert seen == list(reversed(made))
    _, other = platform.user()
    refused = platform.gql(other, page, {"a": made[2]})
    assert code(refused) == "INVALID_INPUT" and made[2] not in json.dumps(refused)


def test_a_bad_page_token_is_invalid_input(platform):
    """``after`` must name an item of the list: anything else is a malformed page token
    (INVALID_INPUT, docs/errors.md), not a lookup that fails naming the storage keys."""
    _, key = platform.user()
    session = new_session(platform, key)
    _, other = platform.user()
    theirs = new_session(platform, other)
    embeds = """query ($h: String!, $a: String) { sessionByHandle(handle: $h) {
        embeds(after: $a) { key } } }"""
    sessions = "query ($a: String) { allSessions(after: $a) { handle } }"
    for query, after in [(embeds, "x" * 3000), (embeds, "no spaces"), (embeds, "EMBED#a"),
                         (sessions, "bogus"), (sessions, theirs), (sessions, "x" * 3000)]:
        out = platform.gql(key, query, {"h": session, "a": after})
        assert code(out) == "INVALID_INPUT", (after[:20], out)
        assert "EMBED#" not in out["errors"][0]["message"]
    # Real tokens still page: an embed key not bound (yet) too, as DynamoDB reads past it.
    assert platform.gql(key, embeds, {"h": session, "a": "a.txt"})["data"][
        "sessionByHandle"]["embeds"] == []
    assert platform.gql(key, sessions, {"a": session})["data"]["allSessions"] == []

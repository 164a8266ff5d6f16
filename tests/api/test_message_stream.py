"""Following a session as its runner stores messages: ``messages(after, waitSeconds)``
long-polls, returning as soon as something newer is stored."""

import threading
import time

from codeshot import ids
from codeshot.models import Message, MessageType
from tests.conftest import code
from tests.store_helpers import add_message

MESSAGES = """query ($h: String!, $after: String, $wait: Float!) {
  sessionByHandle(handle: $h) { messages(after: $after, waitSeconds: $wait) { id text type } } }"""


def new_session(platform, key):
    return platform.gql(key, "mutation { createSession { session { handle } } }")["data"][
        "createSession"]["session"]["handle"]


def store(platform, session, text):
    message = Message(session_id=session, message_id=ids.ulid(), text=text,
                      type=MessageType.THOUGHT, sent_by="test/agent")
    add_message(platform.services.sessions, message)
    return message


def test_a_waiting_read_returns_what_is_stored_meanwhile(platform):
    _, key = platform.user()
    session = new_session(platform, key)
    first = store(platform, session, "first")
    timer = threading.Timer(0.5, store, (platform, session, "second"))
    timer.start()
    started = time.monotonic()
    found = platform.gql(key, MESSAGES, {"h": session, "after": first.message_id, "wait": 4})
    timer.join()
    assert [m["text"] for m in found["data"]["sessionByHandle"]["messages"]] == ["second"]
    assert time.monotonic() - started < 4  # it did not sit out the whole wait


def test_a_waiting_read_with_nothing_new_returns_empty(platform):
    _, key = platform.user()
    session = new_session(platform, key)
    last = store(platform, session, "only")
    found = platform.gql(key, MESSAGES, {"h": session, "after": last.message_id, "wait": 0.3})
    assert found["data"]["sessionByHandle"]["messages"] == []


def test_after_must_be_a_message_id(platform):
    _, key = platform.user()
    session = new_session(platform, key)
    for wait in (0, 1):
        bad = platform.gql(key, MESSAGES, {"h": session, "after": "x" * 5000, "wait": wait})
        assert code(bad) == "INVALID_INPUT"

"""A session's callback URL receives signed terminal events."""

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import jwt
import pytest

from codeshot.runner.callbacks import deliver
from tests.conftest import code
from tests.raw_server import raw_server
from tests.runner.conftest import register, send


@pytest.fixture
def receiver():
    events = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            events.append((self.headers.get("Authorization", ""), body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", events
    server.shutdown()


def test_terminal_events_are_posted_and_verifiable(live, agents, receiver):
    url, events = receiver
    _, key = live.user("vic")
    booking = register(live, key, "booking", agents.url + "/booking")
    made = live.gql(key, """mutation ($f: String, $u: String) { createSession(sessionData:
        {frontendAgentId: $f, callbackUrl: $u}) { session { handle } } }""",
                    {"f": booking, "u": url})
    h = made["data"]["createSession"]["session"]["handle"]
    send(live, key, h, "Book a table at Mario's")
    send(live, key, h, "2")
    deadline = time.monotonic() + 10  # delivered right after the reply is stored
    while len(events) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [json.loads(body)["type"] for _, body in events] == ["awaiting_input", "response"]
    jwks = httpx.get(f"{live.url}/.well-known/jwks.json").json()
    for authorization, body in events:
        token = authorization.removeprefix("Bearer ")
        kid = jwt.get_unverified_header(token)["kid"]
        key_data = next(k for k in jwks["keys"] if k["kid"] == kid)
        claims = jwt.decode(token, jwt.PyJWK(key_data).key, algorithms=["EdDSA"], audience=url,
                            issuer=live.url)
        assert claims["sid"] == h and claims["typ"] == "event"
        assert claims["body_sha256"] == hashlib.sha256(body).hexdigest()
        assert json.loads(body)["session"] == h


def test_callback_urls_are_checked_like_agent_urls(platform):
    _, key = platform.user()
    for bad in ("ftp://example.com/x", "http://169.254.169.254/latest/meta-data",
                "http://10.0.0.8/hook", "not a url"):
        out = platform.gql(key, """mutation ($u: String) { createSession(sessionData:
            {callbackUrl: $u}) { session { handle } } }""", {"u": bad})
        assert code(out) == "INVALID_INPUT", bad
    assert platform.gql(key, "{ allSessions { handle } }")["data"]["allSessions"] == []


def test_a_huge_or_dripping_receiver_does_not_hold_the_runner():
    def delivered(url: str) -> tuple[bool, float]:
        began = time.monotonic()
        done: list[bool] = []
        worker = threading.Thread(target=lambda: done.append(
            deliver(url, b"{}", "token", allow_loopback=True)), daemon=True)
        worker.start()
        worker.join(30)
        assert done, f"still delivering after {time.monotonic() - began:.0f}s"
        return done[0], time.monotonic() - began

    with raw_server("huge", limit=64 << 20) as huge:
        taken, took = delivered(huge.url)
        assert taken and took < 2, took
        assert huge.sent < 1 << 20, huge.sent  # the body is not read (was all 64 MiB)
    with raw_server("drip", interval=0.25) as drip:
        taken, took = delivered(drip.url)
        assert not taken and took < 6, took  # 5 s in all, its retry included


def test_a_header_http_cannot_carry_is_not_delivered_and_does_not_raise(receiver):
    """An A2A push token stored before tokens were checked raised UnicodeEncodeError out
    of the runner's record, holding the session's queue until its redelivery."""
    url, events = receiver
    assert not deliver(url, b"{}", "token", allow_loopback=True,
                       extra_headers={"X-A2A-Notification-Token": "café€"})
    assert events == []

"""An agent's cache of the platform's keys when the platform is briefly unreachable: a
JWKS server on loopback that answers, fails (503) or hangs, as a cold or throttled API
does. Calls with a known key go on; only a key never read waits for the platform."""

from __future__ import annotations

import http.server
import json
import threading
import time
import types
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
import pytest

import codeshot.sdk.auth
from codeshot.auth import tokens
from codeshot.auth.keys import SigningKey
from codeshot.errors import Unauthenticated, Unavailable
from codeshot.runner.agent_client import Reply, _retry_delay
from codeshot.sdk.app import _refusal
from codeshot.sdk.auth import JwksKeys, JwksUnavailable, TokenVerifier

ISSUER = "http://127.0.0.1:9"
AGENT = "alice/notes"


@dataclass
class Jwks:
    url: str
    key: SigningKey
    mode: str = "up"  # "up", "down" (503), "hang" (until released), "slow" (answers once
    # released) or "trickle" (a few bytes a read, each well within a read's timeout)
    requests: int = 0
    released: threading.Event = field(default_factory=threading.Event)
    asked: threading.Event = field(default_factory=threading.Event)  # a request arrived

    def token(self, key: SigningKey | None = None) -> str:
        key = key or self.key
        claims = tokens.agent_token_claims(ISSUER, [ISSUER], AGENT, "u_1", "s_1", 300)
        return "Bearer " + tokens.sign(claims, key.kid, key.private_key())


@contextmanager
def jwks_server() -> Iterator[Jwks]:
    key = SigningKey.generate()
    body = json.dumps({"keys": [key.jwk()]}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            jwks.requests += 1
            jwks.asked.set()
            if jwks.mode in ("hang", "slow"):
                jwks.released.wait(30)
                if jwks.mode == "hang":
                    return
            if jwks.mode == "trickle":
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                for at in range(0, len(body), 16):
                    try:
                        self.wfile.write(body[at:at + 16])
                        self.wfile.flush()
                    except OSError:  # the agent stopped reading
                        return
                    time.sleep(0.2)
                return
            if jwks.mode == "down":
                self.send_response(503)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    jwks = Jwks(f"http://127.0.0.1:{server.server_port}/.well-known/jwks.json", key)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield jwks
    finally:
        jwks.released.set()
        server.shutdown()
        server.server_close()


def age_the_cache(monkeypatch) -> None:
    """The agent's clock moves on past the keys' max-age (301 s)."""
    later = types.SimpleNamespace(monotonic=lambda: time.monotonic() + 301)
    monkeypatch.setattr(codeshot.sdk.auth, "time", later)


def verifier(jwks: Jwks, timeout: float = 1.0) -> TokenVerifier:
    return TokenVerifier(ISSUER, AGENT, JwksKeys(jwks.url, timeout=timeout))


def test_cached_keys_keep_working_when_a_refetch_fails(monkeypatch):
    with jwks_server() as jwks:
        agent = verifier(jwks)
        assert agent.verify(jwks.token()).user_id == "u_1"
        age_the_cache(monkeypatch)
        jwks.mode, before = "down", jwks.requests
        assert [agent.verify(jwks.token()).user_id for _ in range(3)] == ["u_1"] * 3
        assert jwks.requests - before == 1  # failed fetches back off, not one per call


def test_calls_do_not_queue_behind_a_hanging_refetch(monkeypatch):
    with jwks_server() as jwks:
        agent = verifier(jwks)
        agent.verify(jwks.token())
        age_the_cache(monkeypatch)
        jwks.mode, before = "hang", jwks.requests

        def call(_: int) -> tuple[str | None, float]:
            began = time.monotonic()
            return agent.verify(jwks.token()).user_id, time.monotonic() - began

        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(call, range(4)))
        print("seconds per call while the JWKS hangs:", [round(t, 2) for _, t in answers])
        assert [user for user, _ in answers] == ["u_1"] * 4
        assert jwks.requests - before == 1  # one caller fetched; the others did not wait


def test_a_key_never_read_needs_the_platform_and_is_fetched_once_it_is_back(monkeypatch):
    with jwks_server() as jwks:
        jwks.mode = "down"
        agent = verifier(jwks)
        for _ in range(2):
            with pytest.raises(Unavailable, match="cannot read the platform's keys"):
                agent.verify(jwks.token())
        assert jwks.requests == 1  # the second call did not fetch again at once
        jwks.mode = "up"
        monkeypatch.setattr(codeshot.sdk.auth, "MIN_REFETCH_INTERVAL", 0.0)
        assert agent.verify(jwks.token()).user_id == "u_1"


def test_a_key_the_platform_does_not_list_is_unauthenticated(monkeypatch):
    with jwks_server() as jwks:
        agent = verifier(jwks)
        agent.verify(jwks.token())
        monkeypatch.setattr(codeshot.sdk.auth, "MIN_REFETCH_INTERVAL", 0.0)
        before = jwks.requests
        with pytest.raises(Unauthenticated, match="unknown key"):
            agent.verify(jwks.token(SigningKey.generate()))
        assert jwks.requests - before == 1  # refused after the platform was asked


def test_a_key_unknown_while_the_platform_is_down_is_unavailable_not_refused(monkeypatch):
    """The platform reads a 401 as the agent refusing its token; a 503 it calls again."""
    with jwks_server() as jwks:
        agent = verifier(jwks)
        agent.verify(jwks.token())
        jwks.mode = "down"
        monkeypatch.setattr(codeshot.sdk.auth, "MIN_REFETCH_INTERVAL", 0.0)
        with pytest.raises(Unavailable, match="cannot read the platform's keys"):
            agent.verify(jwks.token(SigningKey.generate()))
        assert agent.verify(jwks.token()).user_id == "u_1"  # the keys held still work


def two_calls_while_the_first_fetch_is_under_way(jwks: Jwks, agent: TokenVerifier,
                                                  then: Callable[[], None]) -> list[str]:
    """What two calls with a key not yet read get: the second starts once the first's
    fetch reached the JWKS, and ``then`` runs while both wait for it."""

    def call() -> str:
        try:
            return str(agent.verify(jwks.token()).user_id)
        except (Unauthenticated, Unavailable) as exc:
            return exc.code

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(call)
        assert jwks.asked.wait(10)
        second = pool.submit(call)
        time.sleep(0.3)  # the second is waiting by then (if not, it proves less, not wrong)
        then()
        return [first.result(), second.result()]


def test_a_caller_waiting_for_a_slow_first_fetch_is_accepted():
    with jwks_server() as jwks:
        jwks.mode = "slow"
        agent = verifier(jwks, timeout=10.0)
        assert two_calls_while_the_first_fetch_is_under_way(
            jwks, agent, jwks.released.set) == ["u_1", "u_1"]
        assert jwks.requests == 1  # the second waited for the first's fetch


def test_callers_waiting_for_a_failed_first_fetch_are_told_to_come_back():
    with jwks_server() as jwks:
        jwks.mode = "slow"
        agent = verifier(jwks, timeout=10.0)

        def fail() -> None:
            jwks.mode = "down"
            jwks.released.set()

        assert two_calls_while_the_first_fetch_is_under_way(jwks, agent, fail) == [
            "UNAVAILABLE", "UNAVAILABLE"]
        assert jwks.requests == 1


@pytest.mark.parametrize("mode", ["hang", "trickle"])
def test_a_fetch_has_one_deadline_for_all_its_reads(mode):
    """A JWKS that never answers, or answers a few bytes a read (each read well within
    httpx's timeout, the whole past the deadline): both calls are told to come back,
    neither is refused a valid token."""
    with jwks_server() as jwks:
        jwks.mode = mode
        agent = verifier(jwks, timeout=0.5)
        assert two_calls_while_the_first_fetch_is_under_way(jwks, agent, lambda: None) == [
            "UNAVAILABLE", "UNAVAILABLE"]
        with pytest.raises(JwksUnavailable) as raised:  # a call after them too
            agent.verify(jwks.token())
        assert raised.value.retry_after >= 1


def test_the_agent_s_503_is_one_the_platform_calls_again():
    """The platform retries a 503 only with a short Retry-After (the call surely did not
    run): the agent's refusal for keys it could not read carries one."""
    refusal = _refusal(JwksUnavailable("cannot read the platform's keys", retry_after=4.2))
    reply = Reply(refusal.status_code, httpx.Headers(dict(refusal.headers)), refusal.body)
    assert (reply.status, _retry_delay(reply)) == (503, 5.0)

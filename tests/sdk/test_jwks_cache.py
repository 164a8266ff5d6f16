"""An agent's cache of the platform's keys when the platform is briefly unreachable: a
JWKS server on loopback that answers, fails (503) or hangs, as a cold or throttled API
does. Calls with a known key go on; only a key never read waits for the platform."""

from __future__ import annotations

import http.server
import json
import threading
import time
import types
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

import codeshot.sdk.auth
from codeshot.auth import tokens
from codeshot.auth.keys import SigningKey
from codeshot.errors import Unauthenticated, Unavailable
from codeshot.sdk.auth import JwksKeys, TokenVerifier

ISSUER = "http://127.0.0.1:9"
AGENT = "alice/notes"


@dataclass
class Jwks:
    url: str
    key: SigningKey
    mode: str = "up"  # "up", "down" (503) or "hang" (until released)
    requests: int = 0
    released: threading.Event = field(default_factory=threading.Event)

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
            if jwks.mode == "hang":
                jwks.released.wait(30)
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


def test_an_unknown_key_is_unauthenticated_while_known_keys_are_held(monkeypatch):
    with jwks_server() as jwks:
        agent = verifier(jwks)
        agent.verify(jwks.token())
        jwks.mode = "down"
        monkeypatch.setattr(codeshot.sdk.auth, "MIN_REFETCH_INTERVAL", 0.0)
        with pytest.raises(Unauthenticated, match="unknown key"):
            agent.verify(jwks.token(SigningKey.generate()))
        assert agent.verify(jwks.token()).user_id == "u_1"

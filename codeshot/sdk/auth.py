"""Checking the platform's agent-call JWTs on the agent side.

Keys come from ``{api_url}/.well-known/jwks.json``, cached; an unknown ``kid`` triggers a
refetch (a key rotation), rate-limited so forged kids cannot make the agent hammer the
platform. Audience: the platform's own api_url or a Fixie SDK audience, so tokens minted
with or without ``CODESHOT_FIXIE_AUDIENCES`` are both accepted.

The platform may be briefly unreachable (a cold start, throttling, a deploy): keys that
were good stay in use when a refetch fails, failed fetches back off, and one fetch runs
at a time, on its own thread and within one deadline, so calls go on with the keys held
(or, for a kid not yet known, wait for that one fetch only). A kid that a fetch which read
the keys does not list is 401; one the platform could not be asked about (the fetch
failed or missed its deadline) is 503 with a Retry-After, which the platform retries.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import jwt

from codeshot.auth import tokens
from codeshot.auth.eddsa import verify_key_from_jwk
from codeshot.errors import Forbidden, InvalidInput, Unauthenticated, Unavailable
from codeshot.settings import FIXIE_AUDIENCES

log = logging.getLogger(__name__)

# CODESHOT_AGENT_ID=* accepts tokens minted for any agent: for trying things out only (an
# agent's owner sees every token sent to it and could replay it to such an agent).
ANY_AGENT = "*"
MAX_KEY_AGE = 300.0  # the platform serves its JWKS with max-age=300
MIN_REFETCH_INTERVAL = 5.0  # between fetches, and the first wait after a failed one
MAX_RETRY_INTERVAL = 30.0  # failed fetches back off, doubling, up to this
# One fetch's whole time, not each read's. A cold API Lambda answers its first request
# in about 1-3 s and AWS allows its init up to 10 s, so this waits out a cold start, and
# leaves the Func most of the platform's 30 s per call (CODESHOT_AGENT_CALL_TIMEOUT_SECONDS).
FETCH_TIMEOUT = 10.0


class JwksUnavailable(Unavailable):
    """The platform's JWKS cannot be read, so no token can be checked; ``retry_after``:
    seconds until the next fetch may start (the reply's Retry-After)."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = max(1, math.ceil(retry_after))


@dataclass(frozen=True)
class Claims:
    """A verified token: who the call is for, and the token to forward to the platform."""

    agent_id: str
    user_id: str | None
    session_id: str | None
    token: str

    @property
    def is_anonymous(self) -> bool:
        return self.user_id is None


@dataclass
class _Fetch:
    """A fetch under way: ``done`` is set when it ends, at ``ends`` (time.monotonic())
    at the latest."""

    ends: float
    done: threading.Event = field(default_factory=threading.Event)


class JwksKeys:
    def __init__(self, jwks_url: str, timeout: float = FETCH_TIMEOUT) -> None:
        self.jwks_url = jwks_url
        self.timeout = timeout
        self._keys: dict[str, Any] = {}
        self._fetched_at = float("-inf")  # the last fetch that read the keys
        self._tried_at = float("-inf")  # the last fetch, read or failed
        self._failures = 0  # failed fetches in a row
        self._error = ""  # why the last fetch failed ("" once one read the keys)
        self._fetching: _Fetch | None = None  # the fetch under way
        self._lock = threading.Lock()  # guards the fields above; never held while fetching

    def _fetch(self, ends: float) -> dict[str, Any]:
        """The keys, read by ``ends``: httpx's timeout bounds each read, so the deadline is
        checked between them too (a server trickling its answer is cut off)."""
        body = bytearray()
        with httpx.stream("GET", self.jwks_url, timeout=self.timeout) as response:
            response.raise_for_status()
            for chunk in response.iter_bytes():
                body += chunk
                if time.monotonic() > ends:
                    raise httpx.ReadTimeout(f"no whole answer within {self.timeout:g}s")
        return {k["kid"]: verify_key_from_jwk(k)
                for k in json.loads(body)["keys"] if "kid" in k}

    def _refresh(self, fetch: _Fetch) -> None:
        """One fetch, on its own thread; on failure the keys held stay in use and the next
        try waits."""
        try:
            keys = self._fetch(fetch.ends)
        except (httpx.HTTPError, ValueError, KeyError, TypeError, jwt.PyJWTError) as exc:
            with self._lock:
                self._failures += 1
                self._tried_at = time.monotonic()
                self._error = f"cannot read the platform's keys at {self.jwks_url}: {exc}"
                held = len(self._keys)
            log.warning("%s; keeping the %d keys held", self._error, held)
        else:
            with self._lock:
                self._keys, self._failures, self._error = keys, 0, ""
                self._fetched_at = self._tried_at = time.monotonic()
        finally:
            with self._lock:
                self._fetching = None
            fetch.done.set()

    def _retry_interval(self) -> float:
        """How long after the last fetch the next may start: failures back off."""
        if not self._failures:
            return MIN_REFETCH_INTERVAL
        return min(MAX_RETRY_INTERVAL, MIN_REFETCH_INTERVAL * 2.0 ** (self._failures - 1))

    def key_for_kid(self, kid: str | None) -> Any:
        """The key; 401 only when the last fetch read the platform's keys and ``kid`` is
        not among them, 503 when that fetch failed or has not ended by its deadline."""
        with self._lock:
            known = kid in self._keys
            now = time.monotonic()
            due = (not known or now - self._fetched_at > MAX_KEY_AGE) \
                and now - self._tried_at >= self._retry_interval()
            leading = due and self._fetching is None
            if leading:
                self._fetching = _Fetch(now + self.timeout)
                # Its own thread, so every caller (this one too) waits at most until the
                # deadline, even if a read hangs past it.
                threading.Thread(target=self._refresh, args=(self._fetching,), daemon=True,
                                 name="jwks-fetch").start()
            fetching = self._fetching
        # The caller that started it waits too, so a fetch that keeps its deadline ends
        # within a call (a Lambda is frozen between calls); the others wait only when it
        # may bring their key.
        if fetching is not None and (leading or not known):
            fetching.done.wait(max(0.0, fetching.ends - time.monotonic()))
        with self._lock:
            if kid in self._keys:
                return self._keys[kid]
            now = time.monotonic()
            if self._fetching is not None:
                raise JwksUnavailable(
                    f"the platform's keys at {self.jwks_url} did not arrive within "
                    f"{self.timeout:g}s", retry_after=MIN_REFETCH_INTERVAL)
            if self._error:
                raise JwksUnavailable(
                    self._error, retry_after=self._tried_at + self._retry_interval() - now)
        raise Unauthenticated("token signed by an unknown key")


class TokenVerifier:
    """Verifies ``Authorization: Bearer`` tokens for one agent: each token names the agent
    it was minted for (``aid``), and only ``agent_id``'s are accepted (``*``: any)."""

    def __init__(self, api_url: str, agent_id: str | None, keys: JwksKeys | None = None) -> None:
        if not agent_id:
            raise InvalidInput(
                "CODESHOT_AGENT_ID is not set: set it to this agent's id, owner/handle (it "
                "accepts only tokens minted for it; `codeshot serve --register`, the local "
                "stack and the CDK app set it), or to * to accept any agent's tokens, for "
                "trying things out only")
        self.issuer = api_url.rstrip("/")
        self.agent_id = agent_id
        self.keys = keys or JwksKeys(self.issuer + "/.well-known/jwks.json")

    def verify(self, authorization: str | None) -> Claims:
        token = tokens.bearer(authorization)
        claims = tokens.decode(
            token,
            self.keys.key_for_kid,
            audience=[self.issuer, *FIXIE_AUDIENCES],
            issuer=self.issuer,
            typ=tokens.AGENT_TOKEN_TYPE,
            require=("exp", "aid"),
        )
        if self.agent_id != ANY_AGENT and claims["aid"] != self.agent_id:
            raise Forbidden(f"this token is for agent {claims['aid']}, not {self.agent_id}")
        return Claims(claims["aid"], claims.get("sub"), claims.get("sid"), token)

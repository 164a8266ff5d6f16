"""Checking the platform's agent-call JWTs on the agent side.

Keys come from ``{api_url}/.well-known/jwks.json``, cached; an unknown ``kid`` triggers a
refetch (a key rotation), rate-limited so forged kids cannot make the agent hammer the
platform. Audience: the platform's own api_url or a Fixie SDK audience, so tokens minted
with or without ``CODESHOT_FIXIE_AUDIENCES`` are both accepted.

The platform may be briefly unreachable (a cold start, throttling, a deploy): keys that
were good stay in use when a refetch fails, failed fetches back off, and one caller
fetches at a time, outside the lock, so the others go on with the keys they have (or,
for a kid not yet known, wait for that one fetch only).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
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
FETCH_TIMEOUT = 3.0


class JwksUnavailable(Unavailable):
    """The platform's JWKS cannot be read, so no token can be checked."""


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


class JwksKeys:
    def __init__(self, jwks_url: str, timeout: float = FETCH_TIMEOUT) -> None:
        self.jwks_url = jwks_url
        self.timeout = timeout
        self._keys: dict[str, Any] = {}
        self._fetched_at = float("-inf")  # the last fetch that read the keys
        self._tried_at = float("-inf")  # the last fetch, read or failed
        self._failures = 0  # failed fetches in a row
        self._error = ""  # the last failure, while no key was ever read
        self._fetching: threading.Event | None = None  # set when the fetch under way ends
        self._lock = threading.Lock()  # guards the fields above; never held while fetching

    def _fetch(self) -> dict[str, Any]:
        response = httpx.get(self.jwks_url, timeout=self.timeout)
        response.raise_for_status()
        return {k["kid"]: verify_key_from_jwk(k) for k in response.json()["keys"] if "kid" in k}

    def _refresh(self, done: threading.Event) -> None:
        """One fetch; on failure the keys held stay in use and the next try waits."""
        try:
            keys = self._fetch()
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
            done.set()

    def _retry_interval(self) -> float:
        """How long after the last fetch the next may start: failures back off."""
        if not self._failures:
            return MIN_REFETCH_INTERVAL
        return min(MAX_RETRY_INTERVAL, MIN_REFETCH_INTERVAL * 2.0 ** (self._failures - 1))

    def key_for_kid(self, kid: str | None) -> Any:
        with self._lock:
            known = kid in self._keys
            now = time.monotonic()
            due = (not known or now - self._fetched_at > MAX_KEY_AGE) \
                and now - self._tried_at >= self._retry_interval()
            leading = due and self._fetching is None
            if leading:
                self._fetching = threading.Event()
            fetching = self._fetching
        if leading and fetching is not None:
            self._refresh(fetching)
        elif fetching is not None and not known:  # another caller's fetch may bring it
            fetching.wait(self.timeout)
        with self._lock:
            if kid in self._keys:
                return self._keys[kid]
            if not self._keys and self._error:
                raise JwksUnavailable(self._error)
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

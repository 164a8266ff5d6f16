"""Checking the platform's agent-call JWTs on the agent side.

Keys come from ``{api_url}/.well-known/jwks.json``, cached; an unknown ``kid`` triggers a
refetch (a key rotation), rate-limited so forged kids cannot make the agent hammer the
platform. Audience: the platform's own api_url or a Fixie SDK audience, so tokens minted
with or without ``CODESHOT_FIXIE_AUDIENCES`` are both accepted.
"""

from __future__ import annotations

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

# CODESHOT_AGENT_ID=* accepts tokens minted for any agent: for trying things out only (an
# agent's owner sees every token sent to it and could replay it to such an agent).
ANY_AGENT = "*"
MAX_KEY_AGE = 300.0  # the platform serves its JWKS with max-age=300
MIN_REFETCH_INTERVAL = 5.0


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
    def __init__(self, jwks_url: str, timeout: float = 10.0) -> None:
        self.jwks_url = jwks_url
        self.timeout = timeout
        self._keys: dict[str, Any] = {}
        self._fetched_at = float("-inf")
        self._lock = threading.Lock()

    def _fetch(self) -> None:
        try:
            response = httpx.get(self.jwks_url, timeout=self.timeout)
            response.raise_for_status()
            keys = {k["kid"]: verify_key_from_jwk(k) for k in response.json()["keys"] if "kid" in k}
        except (httpx.HTTPError, ValueError, KeyError, jwt.PyJWTError) as exc:
            raise JwksUnavailable(
                f"cannot read the platform's keys at {self.jwks_url}: {exc}"
            ) from exc
        self._keys, self._fetched_at = keys, time.monotonic()

    def key_for_kid(self, kid: str | None) -> Any:
        with self._lock:
            age = time.monotonic() - self._fetched_at
            if age > MAX_KEY_AGE or (kid not in self._keys and age > MIN_REFETCH_INTERVAL):
                self._fetch()
            if kid not in self._keys:
                raise Unauthenticated("token signed by an unknown key")
            return self._keys[kid]


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

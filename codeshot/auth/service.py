"""Issuing and checking credentials against the platform's key ring and user store."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from codeshot import ids
from codeshot.auth import tokens
from codeshot.auth.keys import KeyRing, SigningKey
from codeshot.errors import Conflict, NotFound, Unauthenticated
from codeshot.models import Principal, User
from codeshot.settings import Settings
from codeshot.store.users import REVOKED_SINCE, IssuedKey, UserStore

MAX_CACHED_KEYS = 10_000  # per warm process; expired entries go when it fills

KEY_PREFIX = "key_"  # API key ids (the key's jti)
DISABLED = "this user has been disabled by an operator"
DELETED = "this user has been deleted"
REVOKED = "API key has been revoked"
NO_USER = "this user does not exist"


def refusal(user: User) -> str | None:
    """Why every credential acting for ``user`` is refused (UNAUTHENTICATED), if it is."""
    return DELETED if user.deleted else DISABLED if user.disabled else None


def check_active(user: User) -> None:
    """UNAUTHENTICATED for a deleted or disabled user."""
    if (why := refusal(user)) is not None:
        raise Unauthenticated(why)


# (agent id, its registration if known, seconds the call may last) -> a call token
CallTokens = Callable[[str, int | None, float], str]


class Auth:
    def __init__(self, settings: Settings, keyring: KeyRing, users: UserStore) -> None:
        self.settings = settings
        self.keyring = keyring
        self.users = users
        self._principals: dict[str, tuple[Principal, float]] = {}  # key id -> (who, until)
        # user id -> (why a credential acting for them is refused, None: it is not; until)
        self._refusals: dict[str, tuple[str | None, float]] = {}

    @property
    def issuer(self) -> str:
        return self.settings.api_url.rstrip("/")

    def sign(self, claims: dict[str, Any]) -> str:
        """Sign claims with the newest key (tokens and signed callback events)."""
        key = self.keyring.signing_key()
        return tokens.sign(claims, key.kid, key.private_key())

    # -- API keys ---------------------------------------------------------------------
    def issue_api_key(self, user: User) -> str:
        """A new API key for ``user``; only its id is stored, so it is shown once."""
        return self.new_api_key(user)[1]

    def new_api_key(self, user: User, most: int | None = None) -> tuple[str, str]:
        """(key id, API key): the id is a ULID, so it tells when the key was made. With
        ``most``: only while the user has fewer keys (INVALID_INPUT). Signed before the id
        is stored: keys that cannot be signed leave no id behind to count or to revoke."""
        issued, key = self._issue(user)
        self.users.add_key(user.user_id, issued.key_id, most)
        return issued.key_id, key

    def api_key_once(self, user: User, most: int, once: str) -> tuple[str, str]:
        """As :meth:`new_api_key`, under the client's idempotency key ``once``: a retry
        (within ``ONCE_SECONDS``) gets the key the first try made, its stored claims
        signed again by the same signing key (Ed25519 is deterministic: the very same
        key), and adds none."""
        issued, key = self._issue(user)
        made = self.users.add_key_once(user.user_id, issued, most, once)
        if made == issued:
            return made.key_id, key
        ring = self.keyring.keys()
        signer = next((k for k in ring if k.kid == made.kid), None)
        if signer is None:  # removed from the ring, which revoked every key it signed
            raise Conflict(REVOKED_SINCE)
        return made.key_id, self._signed(user, made, signer)

    def _issue(self, user: User) -> tuple[IssuedKey, str]:
        signer = self.keyring.signing_key()
        issued = IssuedKey(KEY_PREFIX + ids.ulid(), int(time.time()), signer.kid)
        return issued, self._signed(user, issued, signer)

    def _signed(self, user: User, issued: IssuedKey, signer: SigningKey) -> str:
        claims = tokens.api_key_claims(self.issuer, user.user_id, issued.key_id,
                                       issued.issued_at)
        return tokens.sign(claims, signer.kid, signer.private_key())

    def revoke_api_key(self, user: User, key_id: str) -> None:
        self.users.revoke_key(user.user_id, key_id)
        self._principals.pop(key_id, None)

    def forget_user(self, user_id: str) -> None:
        """Drop this process's cached records of the user (disabled: refused at once)."""
        self._principals = {k: v for k, v in self._principals.items()
                            if v[0].user_id != user_id}
        self._refusals.pop(user_id, None)

    def _remember(self, cache: dict[str, tuple[Any, float]], key: str, value: Any) -> None:
        """Keep ``value`` for ``api_key_cache_seconds`` (none at 0); expired entries go
        when the cache is full."""
        if self.settings.api_key_cache_seconds <= 0:
            return
        now = time.monotonic()
        if len(cache) >= MAX_CACHED_KEYS:
            for stale in [k for k, v in cache.items() if v[1] <= now]:
                del cache[stale]
        cache[key] = (value, now + self.settings.api_key_cache_seconds)

    def user_for_api_key(self, token: str) -> Principal:
        """The key's user, if the key is signed by us and not revoked. The user record (key
        ids, limits) is reused for ``api_key_cache_seconds`` in a warm process."""
        claims = tokens.decode(
            token,
            self.keyring.verification_key,
            audience=tokens.api_key_audience(self.issuer),
            issuer=self.issuer,
            typ=tokens.API_KEY_TYPE,
            require=("sub", "jti"),
        )
        cached = self._principals.get(claims["jti"])
        if cached and cached[1] > time.monotonic() and cached[0].user_id == claims["sub"]:
            return cached[0]
        try:
            user = self.users.get(claims["sub"])
        except NotFound as exc:
            raise Unauthenticated("API key belongs to no user") from exc
        if user.deleted:
            raise Unauthenticated(DELETED)
        if claims["jti"] not in user.api_key_ids:
            raise Unauthenticated(REVOKED)
        if user.disabled:
            raise Unauthenticated(DISABLED)
        principal = Principal(user_id=user.user_id, username=user.username,
                              key_id=claims["jti"], daily_query_limit=user.daily_query_limit)
        self._remember(self._principals, claims["jti"], principal)
        return principal

    def refuse_inactive(self, user_id: str, fresh: bool = False) -> None:
        """Refuse (UNAUTHENTICATED, as their API keys) what acts for ``user_id`` without a
        key of theirs: an agent's call token, an OAuth flow, unless the user is stored,
        not deleted and not disabled. The answer is reused for ``api_key_cache_seconds``
        in a warm process, as a key's user record (:meth:`forget_user` drops it);
        ``fresh``: read now, for a write that must not land for a user deleted a moment
        ago in another process."""
        cached = None if fresh else self._refusals.get(user_id)
        if cached is not None and cached[1] > time.monotonic():
            why = cached[0]
        else:
            why = self._refusal(user_id)
            self._remember(self._refusals, user_id, why)
        if why is not None:
            raise Unauthenticated(why)

    def _refusal(self, user_id: str) -> str | None:
        try:
            return refusal(self.users.get(user_id))
        except NotFound:
            return NO_USER

    # -- agent-call tokens ------------------------------------------------------------
    def agent_token(self, agent_id: str, user_id: str | None, session_id: str | None,
                    registration: int | None = None, lasting: float = 0.0) -> str:
        """A call token for the agent (``registration``: the one it is registered as, when
        it is: see :attr:`codeshot.models.Agent.registration`). It lives the setting's
        seconds, or the call's ``lasting`` seconds when longer: an agent streaming its
        answer for the query's whole time still reaches its storage at the end."""
        return self.sign(
            tokens.agent_token_claims(
                self.issuer,
                self.settings.token_audiences(),
                agent_id,
                user_id,
                session_id,
                max(self.settings.agent_token_ttl_seconds, math.ceil(lasting)),
                registration,
            )
        )

    def call_tokens(self, user_id: str, session_id: str | None) -> CallTokens:
        """Mints call tokens for ``user_id`` (and the session) as an AgentClient asks."""
        return lambda agent_id, registration, lasting: self.agent_token(
            agent_id, user_id, session_id, registration, lasting)

    def principal_for_agent_token(self, token: str) -> Principal:
        """The call token's agent, user and session: refused, as an API key would be, if
        issued for a user since deleted or disabled (whenever it was minted)."""
        claims = tokens.decode(
            token,
            self.keyring.verification_key,
            audience=self.issuer,
            issuer=self.issuer,
            typ=tokens.AGENT_TOKEN_TYPE,
            require=("exp", "aid"),
        )
        if claims.get("sub"):
            self.refuse_inactive(claims["sub"])
        return Principal(
            user_id=claims.get("sub"), agent_id=claims["aid"], session_id=claims.get("sid"),
            issued_at=claims["iat"],
            registration=claims.get("reg"),
        )

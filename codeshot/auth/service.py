"""Issuing and checking credentials against the platform's key ring and user store."""

from __future__ import annotations

from typing import Any

from codeshot import ids
from codeshot.auth import tokens
from codeshot.auth.keys import KeyRing
from codeshot.errors import NotFound, Unauthenticated
from codeshot.models import Principal, User
from codeshot.settings import Settings
from codeshot.store.users import UserStore

KEY_PREFIX = "key_"  # API key ids (the key's jti)


class Auth:
    def __init__(self, settings: Settings, keyring: KeyRing, users: UserStore) -> None:
        self.settings = settings
        self.keyring = keyring
        self.users = users

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
        key_id = KEY_PREFIX + ids.handle(12)
        self.users.add_key(user.user_id, key_id)
        return self.sign(tokens.api_key_claims(self.issuer, user.user_id, key_id))

    def revoke_api_key(self, user: User, key_id: str) -> None:
        self.users.revoke_key(user.user_id, key_id)

    def user_for_api_key(self, token: str) -> Principal:
        claims = tokens.decode(
            token,
            self.keyring.verification_key,
            audience=tokens.api_key_audience(self.issuer),
            issuer=self.issuer,
            typ=tokens.API_KEY_TYPE,
            require=("sub", "jti"),
        )
        try:
            user = self.users.get(claims["sub"])
        except NotFound as exc:
            raise Unauthenticated("API key belongs to no user") from exc
        if claims["jti"] not in user.api_key_ids:
            raise Unauthenticated("API key has been revoked")
        return Principal(user_id=user.user_id, username=user.username, key_id=claims["jti"],
                         daily_query_limit=user.daily_query_limit)

    # -- agent-call tokens ------------------------------------------------------------
    def agent_token(self, agent_id: str, user_id: str | None, session_id: str | None) -> str:
        return self.sign(
            tokens.agent_token_claims(
                self.issuer,
                self.settings.token_audiences(),
                agent_id,
                user_id,
                session_id,
                self.settings.agent_token_ttl_seconds,
            )
        )

    def principal_for_agent_token(self, token: str) -> Principal:
        claims = tokens.decode(
            token,
            self.keyring.verification_key,
            audience=self.issuer,
            issuer=self.issuer,
            typ=tokens.AGENT_TOKEN_TYPE,
            require=("exp", "aid"),
        )
        return Principal(
            user_id=claims.get("sub"), agent_id=claims["aid"], session_id=claims.get("sid")
        )

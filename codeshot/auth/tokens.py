"""JWTs the platform mints and checks: API keys and short-lived agent-call tokens.

Both are EdDSA (Ed25519) and carry ``kid`` so verifiers pick the key from the JWKS.
They differ in audience and ``typ``, so neither can stand in for the other. This module
imports no AWS code: agents (``codeshot.sdk``) verify with it too.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from types import ModuleType
from typing import Any

from codeshot.errors import Unauthenticated

ALGORITHM = "EdDSA"
API_KEY_TYPE = "api_key"
AGENT_TOKEN_TYPE = "agent"  # noqa: S105 - a token type, not a secret
# No call outlives its query, and no query runs longer (query_time_budget_seconds).
MAX_AGENT_TOKEN_SECONDS = 600


def api_key_audience(issuer: str) -> str:
    return issuer.rstrip("/") + "/api-keys"


def _jwt() -> ModuleType:
    """PyJWT with EdDSA on PyNaCl (codeshot.auth.eddsa); imported on first use, not at
    cold start."""
    import jwt

    from codeshot.auth import eddsa

    eddsa.install()
    return jwt


def sign(claims: dict[str, Any], kid: str, private_key: Any) -> str:
    token: str = _jwt().encode(claims, private_key, algorithm=ALGORITHM, headers={"kid": kid})
    return token


def decode(
    token: str,
    key_for_kid: Callable[[str | None], Any],
    *,
    audience: str | list[str],
    issuer: str | None,
    typ: str,
    require: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Verify signature, audience, issuer, expiry and type; raise UNAUTHENTICATED."""
    jwt = _jwt()

    try:
        header = jwt.get_unverified_header(token)
        if header.get("alg") != ALGORITHM:
            raise Unauthenticated("token must be signed with EdDSA")
        claims: dict[str, Any] = jwt.decode(
            token,
            key_for_kid(header.get("kid")),
            algorithms=[ALGORITHM],
            audience=audience,
            issuer=issuer,
            options={"require": ["iat", *require]},
            leeway=5,
        )
    except jwt.ExpiredSignatureError as exc:
        raise Unauthenticated("token has expired") from exc
    except jwt.InvalidAudienceError as exc:
        raise Unauthenticated("token is not for this audience") from exc
    except jwt.InvalidIssuerError as exc:
        raise Unauthenticated("token was issued by someone else") from exc
    except jwt.InvalidSignatureError as exc:
        raise Unauthenticated("token signature is invalid") from exc
    except jwt.MissingRequiredClaimError as exc:
        raise Unauthenticated(f"token lacks the {exc.claim!r} claim") from exc
    except jwt.ImmatureSignatureError as exc:
        raise Unauthenticated("token is not valid yet: check the clocks of the machine "
                              "that made it and of this one") from exc
    except jwt.DecodeError as exc:
        # PyJWT's words ("Not enough segments") mean nothing to someone pasting a key.
        raise Unauthenticated("that is not a key or token of this platform: paste the "
                              "whole API key as it was given") from exc
    except jwt.PyJWTError as exc:
        raise Unauthenticated(f"malformed token: {exc}") from exc
    if claims.get("typ") != typ:
        raise Unauthenticated(f"this is not a{'n' if typ[0] in 'aeiou' else ''} {typ} token")
    return claims


def api_key_claims(issuer: str, user_id: str, key_id: str, issued_at: int | None = None
                   ) -> dict[str, Any]:
    return {
        "iss": issuer,
        "aud": api_key_audience(issuer),
        "sub": user_id,
        "jti": key_id,
        "iat": int(time.time()) if issued_at is None else issued_at,
        "typ": API_KEY_TYPE,
    }


def agent_token_claims(
    issuer: str,
    audiences: list[str],
    agent_id: str,
    user_id: str | None,
    session_id: str | None,
    ttl_seconds: int,
    registration: int | None = None,
) -> dict[str, Any]:
    """``registration``: the agent's registration the token is for (``reg``,
    :attr:`codeshot.models.Agent.registration`), checked exactly when the agent calls the
    platform; a Fixie agent ignores it."""
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": issuer,
        "aud": audiences,
        "aid": agent_id,
        "iat": now,
        "exp": now + min(ttl_seconds, MAX_AGENT_TOKEN_SECONDS),
        "jti": uuid.uuid4().hex,
        "typ": AGENT_TOKEN_TYPE,
    }
    if user_id:
        claims["sub"] = user_id
    if session_id:
        claims["sid"] = session_id
    if registration is not None:
        claims["reg"] = registration
    return claims


def bearer(authorization: str | None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header."""
    if not authorization:
        raise Unauthenticated("missing Authorization header")
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("Authorization header must be 'Bearer <token>'")
    return token.strip()

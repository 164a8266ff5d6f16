"""Accounts in a Cognito user pool: sign up with email and password, confirm the email,
sign in, and verify the ID tokens the pool signs.

The console's own forms call Cognito's public API (SignUp, ConfirmSignUp, InitiateAuth
with USER_PASSWORD_AUTH) from the platform, rather than sending the browser to Cognito's
hosted UI: moto's server implements these calls, so the same code runs in AWS and on the
local stack, and the browser talks only to the platform (its pages allow no other origin).
The pool's rules (``POOL``) are shared by the CDK app and the local stack.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from codeshot import aws
from codeshot.errors import (
    Conflict,
    InvalidInput,
    NotFound,
    RateLimited,
    Unauthenticated,
    Unavailable,
)
from codeshot.settings import Settings

if TYPE_CHECKING:
    import jwt


@dataclass(frozen=True)
class PoolSpec:
    """What the user pool enforces, in AWS and locally alike."""

    password_min_length: int = 12
    password_classes: tuple[str, ...] = ("lowercase", "uppercase", "numbers", "symbols")
    id_token_minutes: int = 60
    console_client: str = "console"
    # The console signs in with a password sent to the platform (USER_PASSWORD_AUTH).
    auth_flows: tuple[str, ...] = ("ALLOW_USER_PASSWORD_AUTH", "ALLOW_REFRESH_TOKEN_AUTH")

    def password_policy(self) -> dict[str, Any]:
        """The policy as Cognito's API spells it (CreateUserPool's PasswordPolicy)."""
        return {"MinimumLength": self.password_min_length,
                **{f"Require{c.capitalize()}": c in self.password_classes
                   for c in ("lowercase", "uppercase", "numbers", "symbols")}}

    def password_rule(self) -> str:
        return (f"at least {self.password_min_length} characters with "
                + ", ".join(self.password_classes[:-1]) + f" and {self.password_classes[-1]}")


POOL = PoolSpec()
# Where the pool's hosted pages send the browser back after Google or GitHub sign-in (the
# app client's callback URL, under the platform's URL).
CONSOLE_CALLBACK = "/console/auth/callback"
MAX_EMAIL = 254
MAX_PASSWORD = 256
# A Cognito sub is a UUID: anything else names no account, nor may it reach a ListUsers
# filter, whose quotes it could leave.
_SUB = re.compile(r"[0-9A-Za-z-]{1,128}")


@dataclass(frozen=True)
class Identity:
    """A verified Cognito ID token's user."""

    sub: str
    email: str | None


class Accounts:
    """The user pool, as the platform uses it."""

    def __init__(self, settings: Settings) -> None:
        if not (settings.user_pool_id and settings.user_pool_client_id):
            raise NotFound("this platform has no accounts: sign in with an API key "
                           "(CODESHOT_USER_POOL_ID and CODESHOT_USER_POOL_CLIENT_ID are unset)")
        self.settings = settings
        self.pool_id: str = settings.user_pool_id
        self.client_id: str = settings.user_pool_client_id
        self.issuer = f"https://cognito-idp.{settings.region}.amazonaws.com/{self.pool_id}"

    @cached_property
    def client(self) -> Any:
        return aws.client("cognito-idp", self.settings)  # type: ignore[call-overload]  # no stubs installed

    @cached_property
    def _jwks(self) -> jwt.PyJWKClient:
        import jwt

        # In AWS the keys are at the issuer; moto serves them at its own address.
        base = f"{self.settings.aws_endpoint_url.rstrip('/')}/{self.pool_id}" \
            if self.settings.aws_endpoint_url else self.issuer
        return jwt.PyJWKClient(f"{base}/.well-known/jwks.json", cache_keys=True, timeout=5)

    # -- what anyone may do -------------------------------------------------------------
    def sign_up(self, email: str, password: str) -> None:
        """A new, unconfirmed account; Cognito mails a code to ``email``."""
        email, password = _email(email), _password(password)
        with _errors("sign_up", email):
            self.client.sign_up(ClientId=self.client_id, Username=email, Password=password,
                                UserAttributes=[{"Name": "email", "Value": email}])

    def confirm(self, email: str, code: str) -> None:
        code = code.strip()
        if not code or len(code) > 20:
            raise InvalidInput("enter the code from the email")
        email = _email(email)
        with _errors("confirm_sign_up", email):
            self.client.confirm_sign_up(ClientId=self.client_id, Username=email,
                                        ConfirmationCode=code)

    def sign_in(self, email: str, password: str) -> str:
        """An ID token for this email and password (valid ``POOL.id_token_minutes``)."""
        email = _email(email)
        with _errors("initiate_auth", email):
            out = self.client.initiate_auth(
                ClientId=self.client_id, AuthFlow="USER_PASSWORD_AUTH",
                AuthParameters={"USERNAME": email, "PASSWORD": _password(password)})
        if "AuthenticationResult" not in out:
            # An MFA or new-password challenge: the console has no form for those yet.
            raise Unauthenticated(f"this account needs {out.get('ChallengeName')} to sign "
                                  "in, which the console does not offer yet")
        token: str = out["AuthenticationResult"]["IdToken"]
        return token

    def is_id_token(self, token: str) -> bool:
        """Whether ``token`` claims to come from this pool (it is verified separately)."""
        import jwt

        try:
            return jwt.decode(token, options={"verify_signature": False}).get("iss") \
                == self.issuer
        except jwt.PyJWTError:
            return False

    def verify(self, token: str) -> Identity:
        """The identity in an ID token this pool signed for the console's client."""
        import jwt

        try:
            key = self._jwks.get_signing_key_from_jwt(token)
        except jwt.PyJWKClientConnectionError as exc:
            raise Unavailable("the user pool's signing keys cannot be fetched") from exc
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"invalid sign-in token: {exc}") from exc
        try:
            claims = jwt.decode(token, key.key, algorithms=["RS256"], audience=self.client_id,
                                issuer=self.issuer, options={"require": ["exp", "sub"]})
        except jwt.ExpiredSignatureError as exc:
            raise Unauthenticated("your sign-in has expired: sign in again") from exc
        except jwt.PyJWTError as exc:
            raise Unauthenticated(f"invalid sign-in token: {exc}") from exc
        if claims.get("token_use") != "id":
            raise Unauthenticated("invalid sign-in token: not an ID token")
        return Identity(sub=claims["sub"], email=claims.get("email"))

    # -- Google and GitHub, through the pool's hosted pages (OAuth code flow + PKCE) -------
    def providers(self) -> list[str]:
        if not self.settings.user_pool_domain:
            return []
        return [p.strip() for p in (self.settings.user_pool_providers or "").split(",")
                if p.strip()]

    def authorize_url(self, provider: str, redirect_uri: str, state: str,
                      verifier: str) -> str:
        """Where the browser goes to sign in with ``provider`` (then back to
        ``redirect_uri`` with a code and ``state``)."""
        import base64
        import hashlib
        from urllib.parse import urlencode

        if provider not in self.providers():
            raise NotFound(f"no sign-in with {provider!r} here")
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
        query = urlencode({
            "identity_provider": provider, "client_id": self.client_id,
            "response_type": "code", "scope": "openid email", "redirect_uri": redirect_uri,
            "state": state, "code_challenge": challenge.decode().rstrip("="),
            "code_challenge_method": "S256"})
        return f"{self._domain}/oauth2/authorize?{query}"

    def exchange_code(self, code: str, redirect_uri: str, verifier: str) -> str:
        """The ID token for an authorization code (verified like any other)."""
        import httpx

        try:
            response = httpx.post(f"{self._domain}/oauth2/token", timeout=10, data={
                "grant_type": "authorization_code", "client_id": self.client_id,
                "code": code, "redirect_uri": redirect_uri, "code_verifier": verifier})
        except httpx.HTTPError as exc:
            raise Unavailable(f"the user pool cannot be reached: {exc}") from exc
        if response.status_code != 200:
            raise Unauthenticated("the sign-in was not accepted: sign in again")
        token = response.json().get("id_token")
        if not isinstance(token, str):
            raise Unauthenticated("the sign-in gave no ID token: sign in again")
        self.verify(token)
        return token

    @property
    def _domain(self) -> str:
        return (self.settings.user_pool_domain or "").rstrip("/")

    # -- what operators do (IAM-authorised Admin* calls) ---------------------------------
    def admin_confirm(self, email: str) -> None:
        """Confirm an account without its code (the email never came; the local stack)."""
        email = _email(email)
        with _errors("admin_confirm_sign_up", email):
            self.client.admin_confirm_sign_up(UserPoolId=self.pool_id, Username=email)

    def set_enabled(self, identity: str, enabled: bool) -> None:
        """Let the identity sign in, or not (Cognito refuses its password from then on)."""
        username = self._username(identity)
        # Each call spelled out: tests/infra reads the IAM actions the role needs from them.
        with _errors("admin_enable_user", identity):
            if enabled:
                self.client.admin_enable_user(UserPoolId=self.pool_id, Username=username)
            else:
                self.client.admin_disable_user(UserPoolId=self.pool_id, Username=username)

    def delete(self, identity: str) -> None:
        """Delete the identity's account, its email with it (a deleted user's); one gone
        already is not an error (a retry)."""
        with suppress(NotFound):
            username = self._username(identity)
            with _errors("admin_delete_user", identity):
                self.client.admin_delete_user(UserPoolId=self.pool_id, Username=username)

    def _username(self, identity: str) -> str:
        """The pool's username of the account whose sub is ``identity``, which the Admin*
        calls take (or its email, which two accounts may share). A password account's
        username is its sub, but one made by a Google or GitHub sign-in is named after
        its provider (``Google_<id>``): with its sub, each call found no account."""
        if not _SUB.fullmatch(identity):
            raise _error("UserNotFoundException", "", "list_users", identity)
        with _errors("list_users", identity):
            found = self.client.list_users(UserPoolId=self.pool_id, Limit=1,
                                           Filter=f'sub = "{identity}"')["Users"]
        if not found:
            raise _error("UserNotFoundException", "", "list_users", identity)
        username: str = found[0]["Username"]
        return username


@contextmanager
def _errors(operation: str, username: str) -> Iterator[None]:
    """Cognito's errors as codeshot's (each with a message a person can act on)."""
    from botocore.exceptions import ClientError

    try:
        yield
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        message = exc.response.get("Error", {}).get("Message", "")
        raise _error(code, message, operation, username) from exc


def _error(code: str, message: str, operation: str, username: str | None) -> Exception:
    # Sign-in never tells a stranger whether an email has an account; confirming or
    # enabling one (an operator, or its owner with a code) says that it does not exist.
    missing = Unauthenticated("wrong email or password") if operation == "initiate_auth" \
        else NotFound(f"there is no account {username} in the user pool")
    known: dict[str, Exception] = {
        "UsernameExistsException": Conflict("an account with this email exists: sign in"),
        "InvalidPasswordException": InvalidInput(f"the password needs {POOL.password_rule()}"),
        "NotAuthorizedException": Unauthenticated(
            "this account is disabled" if "disabled" in message.lower()
            else "wrong email or password"),
        "UserNotFoundException": missing,
        "UserNotConfirmedException": Unauthenticated(
            "confirm your email first with the code we sent"),
        "CodeMismatchException": InvalidInput("that code is not the one we sent"),
        "ExpiredCodeException": InvalidInput("that code has expired: sign up again"),
        "InvalidParameterException": InvalidInput(message or "invalid input"),
        # The pool's throttling and its attempt limits: nothing wrong with the input.
        "TooManyRequestsException": RateLimited("too many attempts: wait a minute"),
        "LimitExceededException": RateLimited(
            # Cognito's own email sends about 50 a day; waiting a minute will not help.
            "the platform cannot send more emails today: try again tomorrow, or ask its "
            "operator to send them through SES (codeshot:sesFromEmail)"
            if "email limit" in message.lower() else "too many attempts: wait a minute"),
    }
    return known.get(code) or Unavailable(f"the user pool refused the request ({code})")


def _email(email: str) -> str:
    email = email.strip().lower()
    local, _, domain = email.partition("@")
    if not local or "." not in domain or len(email) > MAX_EMAIL or any(c.isspace() for c in email):
        raise InvalidInput("enter an email address such as ada@example.com")
    return email


def _password(password: str) -> str:
    if not password or len(password) > MAX_PASSWORD:
        raise InvalidInput(f"enter a password ({POOL.password_rule()})")
    return password

"""``OAuthParams`` and ``OAuthHandler``: an agent acting for a user at a third-party service,
with Fixie 1.0's names and semantics.

Who holds what:

- The agent holds its OAuth client, secret included (``OAuthParams``; the secret from the
  agent's environment or a client secrets file): only the agent talks to the token
  endpoint, so no third-party client secret is ever sent to, or kept by, the platform.
- The platform holds the flow and the tokens: ``get_authorization_url()`` asks it for a
  link whose ``state`` it binds to this user, agent and session (single use, expiring)
  with a PKCE verifier it keeps, and to the browser that continues from its page (a
  cookie); its callback hands the code and verifier to this agent's ``Func[_oauth]`` (as
  Fixie's did), whose ``authorize()`` exchanges them and gives the token back to the
  platform, which stores it encrypted per user and agent. The user can revoke it there.
- ``user_token()`` reads the user's token from the platform, refreshing it here first
  when it has expired; ``require_token()`` is the same, but pauses the conversation to
  ask the user to authorize when there is none, and calls the Func again once they have.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from codeshot.errors import Forbidden
from codeshot.sdk.auth import Claims
from codeshot.sdk.platform_api import TIMEOUT, PlatformApi
from codeshot.sdk.wire import AgentQuery, AgentResponse, Message

EXPIRY_MARGIN_SECONDS = 30  # refresh a token this close to its expiry: it may lapse in flight
ERR_OAUTH = "ERR_OAUTH"  # the platform's OAuth API failed without an error body
OAUTH_API = PlatformApi("the platform's OAuth API", ERR_OAUTH,
                        "I'm sorry, I could not reach your authorization for this agent.")


class MissingOAuthSetting(KeyError):
    """A setting the agent's OAuth client is read from is absent: a KeyError, as Fixie's
    was (in a Func, an error of the agent's, logged there), and a refusal of the agent's
    code when it loads (its line named: codeshot.sdk.project)."""

    def __str__(self) -> str:  # KeyError's would quote the message
        return str(self.args[0])


class ClientSecretsInvalid(ValueError):
    """A client secrets file that cannot be read as one (a ValueError: a refusal of the
    agent's code when it loads, its line named)."""


@dataclass
class OAuthParams:
    """The agent's OAuth client: where users authorize it and what it may access."""

    client_id: str
    client_secret: str
    auth_uri: str
    token_uri: str
    scopes: list[str]

    @classmethod
    def from_client_secrets_file(cls, secrets_path: str | Path, scopes: list[str]
                                 ) -> OAuthParams:
        """From a client secrets file as the Google Cloud Console writes it: a JSON object
        whose "web" (or "installed") object holds client_id, client_secret, auth_uri and
        token_uri."""
        def refuse(problem: str) -> ClientSecretsInvalid:
            return ClientSecretsInvalid(f"OAuthParams.from_client_secrets_file: {secrets_path} "
                                        f"{problem}")

        try:
            data = json.loads(Path(secrets_path).read_text())
        except OSError as exc:
            raise refuse(f"cannot be read ({exc.strerror or exc})") from None
        except ValueError as exc:  # UnicodeDecodeError too
            raise refuse(f"is not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise refuse(f"holds a JSON {type(data).__name__}, not an object with a 'web' or "
                         f"'installed' client")
        if "web" not in data and "installed" not in data:
            raise refuse(f"has neither 'web' nor 'installed' (it has {sorted(data) or 'nothing'}): "
                         f"download the OAuth client's JSON again")
        # An empty or null "web" beside an "installed" client is passed over, as it always was.
        section = "web" if data.get("web") or "installed" not in data else "installed"
        secrets = data[section]
        if not isinstance(secrets, dict):
            raise refuse(f"is not a client secrets file: its '{section}' is not an object")
        fields = ("client_id", "client_secret", "auth_uri", "token_uri")
        if missing := [name for name in fields if name not in secrets]:
            raise MissingOAuthSetting(f"OAuthParams.from_client_secrets_file: {secrets_path}'s "
                                      f"'{section}' has no {', '.join(map(repr, missing))}")
        if blank := [name for name in fields
                     if not isinstance(secrets[name], str) or not secrets[name].strip()]:
            raise refuse(f"is not a client secrets file: its '{section}' needs non-empty "
                         f"strings for {', '.join(map(repr, blank))}")
        return cls(secrets["client_id"], secrets["client_secret"], secrets["auth_uri"],
                   secrets["token_uri"], scopes)

    @classmethod
    def from_env(cls, prefix: str, scopes: list[str]) -> OAuthParams:
        """From the environment: ``{prefix}CLIENT_ID``, ``{prefix}CLIENT_SECRET``,
        ``{prefix}AUTH_URI`` and ``{prefix}TOKEN_URI``."""
        try:
            client_id, secret, auth_uri, token_uri = (
                os.environ[prefix + name]
                for name in ("CLIENT_ID", "CLIENT_SECRET", "AUTH_URI", "TOKEN_URI"))
        except KeyError as exc:
            raise MissingOAuthSetting(f"OAuthParams.from_env: {exc.args[0]} is not set"
                                      ) from None
        return cls(client_id, secret, auth_uri, token_uri, scopes)


class AuthorizationRequired(Exception):
    """Raised by :meth:`OAuthHandler.require_token`: the Func's reply asks the user to
    authorize at ``url``, and the platform calls the Func again once they have."""

    def __init__(self, agent_id: str, url: str) -> None:
        super().__init__(f"the user has not authorized {agent_id}")
        self.agent_id = agent_id
        self.url = url

    def to_response(self) -> AgentResponse:
        question = (f"{self.agent_id} needs your permission to act for you. Authorize it "
                    f"here, then come back: {self.url}")
        return AgentResponse(Message(question), needs_input=True, question=question,
                             repeat_on_answer=True)


class OAuthHandler:
    """One user's OAuth state for this agent (Fixie 1.0's methods)."""

    def __init__(self, oauth_params: OAuthParams, token_claims: Claims,
                 api_url: str | None = None, query: AgentQuery | None = None) -> None:
        if api_url is None:
            from codeshot.settings import get_settings

            api_url = get_settings().api_url
        self.oauth_params = oauth_params
        self.claims = token_claims
        self._base = api_url.rstrip("/") + "/api/oauth"
        self._query = query

    # -- the platform's OAuth API, called with this request's own token ----------------
    def _call(self, method: str, path: str, *, absent_ok: bool = False,
              **kwargs: Any) -> httpx.Response:
        """The platform's answer (see :meth:`PlatformApi.call`); only the token is ever
        absent."""
        if self.claims.is_anonymous:
            raise Forbidden("OAuth needs a token issued for a user")
        return OAUTH_API.call(method, self._base + path, self.claims.token,
                              absent_ok=absent_ok, **kwargs)

    def _client(self) -> Any:
        try:  # only OAuth agents ship authlib (and its cryptography)
            from authlib.integrations.httpx_client import OAuth2Client
        except ImportError as exc:
            raise ImportError("an agent with oauth_params needs authlib: add "
                              "'authlib>=1.3,<2' to its requirements.txt") from exc

        return OAuth2Client(self.oauth_params.client_id, self.oauth_params.client_secret,
                            token_endpoint_auth_method="client_secret_post",  # noqa: S106 - a name
                            timeout=TIMEOUT)

    # -- Fixie 1.0's methods -----------------------------------------------------------
    def get_authorization_url(self) -> str:
        """A URL where the user authorizes this agent; its state is good for one use, for
        this user, agent and session, for a few minutes."""
        params = self.oauth_params
        response = self._call("POST", "/authorizations", json={
            "authUri": params.auth_uri, "clientId": params.client_id, "scopes": params.scopes})
        return str(response.json()["url"])

    def user_token(self) -> str | None:
        """The user's access token, refreshed first if it has expired; None when the user
        has not authorized this agent (or revoked it, or it expired and cannot be
        refreshed: the provider refused, or gave no refresh token)."""
        token = self._stored()
        if token is None or not _expired(token):
            return None if token is None else str(token["access_token"])
        if not token.get("refresh_token"):
            return None
        from authlib.integrations.base_client import OAuthError

        try:
            with self._client() as client:
                fresh = dict(client.refresh_token(self.oauth_params.token_uri,
                                                  refresh_token=token["refresh_token"]))
        except OAuthError:
            # Another call may have refreshed it first (providers that rotate refresh
            # tokens refuse the old one), or the grant is gone at the provider.
            again = self._stored()
            if again is None or _expired(again):
                return None
            return str(again["access_token"])
        fresh.setdefault("refresh_token", token["refresh_token"])  # not always re-issued
        self._save(fresh)
        return str(fresh["access_token"])

    def _stored(self) -> dict[str, Any] | None:
        response = self._call("GET", "/token", absent_ok=True)
        if response.status_code == 404:
            return None
        token: dict[str, Any] = response.json()
        return token

    def require_token(self) -> str:
        """The user's access token; without one, :class:`AuthorizationRequired`, which
        pauses the conversation to ask the user to authorize this agent."""
        token = self.user_token()
        if token is None:
            raise AuthorizationRequired(self.claims.agent_id, self.get_authorization_url())
        return token

    def authorize(self, state: str, code: str) -> None:
        """Exchange the code the user's authorization brought back (``Func[_oauth]``, called
        by the platform's callback) and keep the token. ``state`` stays for Fixie's signature:
        the platform checked it against the flow it started (only it knows that) before
        calling; the query carrying it could only be compared with itself."""
        request: dict[str, Any] = json.loads(self._query.message.text) if self._query else {}
        with self._client() as client:
            token = client.fetch_token(self.oauth_params.token_uri, code=code,
                                       redirect_uri=request.get("redirect_uri"),
                                       code_verifier=request.get("code_verifier"))
        self._save(dict(token))

    def _save(self, token: dict[str, Any]) -> None:
        self._call("PUT", "/token", json={"token": token})


def _expired(token: dict[str, Any]) -> bool:
    """Expired, or about to: it could lapse on its way to the provider."""
    expires_at = token.get("expires_at")
    return expires_at is not None and float(expires_at) <= time.time() + EXPIRY_MARGIN_SECONDS

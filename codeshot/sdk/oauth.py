"""``OAuthParams`` and ``OAuthHandler``: Fixie 1.0's OAuth names, accepted so that agents
declaring OAuth load, register and serve; the flow itself is not run yet.

A Func that takes ``oauth_handler`` gets an :class:`OAuthHandler`; calling any of its
methods raises NOT_SUPPORTED, which the platform shows as that Func's failure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from codeshot.errors import NotSupported
from codeshot.sdk.auth import Claims

MISSING = "OAuth is not supported by this platform yet: {what} needs the platform's OAuth flow"


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
        """From a client secrets file as the Google Cloud Console writes it."""
        data = json.loads(Path(secrets_path).read_text())
        secrets = data.get("web") or data["installed"]
        return cls(secrets["client_id"], secrets["client_secret"], secrets["auth_uri"],
                   secrets["token_uri"], scopes)


class OAuthHandler:
    """One user's OAuth state for this agent (Fixie 1.0's methods)."""

    def __init__(self, oauth_params: OAuthParams, token_claims: Claims) -> None:
        self.oauth_params = oauth_params
        self.claims = token_claims

    def _missing(self, what: str) -> NoReturn:
        raise NotSupported(MISSING.format(what=f"OAuthHandler.{what}()"))

    def get_authorization_url(self) -> str:
        self._missing("get_authorization_url")

    def user_token(self) -> str | None:
        self._missing("user_token")

    def authorize(self, state: str, code: str) -> None:
        self._missing("authorize")

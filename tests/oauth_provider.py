"""A real OAuth 2 authorization server and protected resource for tests, on loopback.

Built from authlib's server pieces (AuthorizationServer, the authorization code grant with
PKCE required, the refresh token grant, a bearer ResourceProtector) behind a small
Starlette app: ``GET /authorize`` (the signed-in user is the ``user`` cookie, as a
browser's session would be; consent is given at once), ``POST /token``, and
``GET /books``, each user's reading list, for a bearer token with scope ``books.read``.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
from authlib.oauth2.rfc6749 import (
    AuthorizationServer,
    ClientMixin,
    JsonRequest,
    OAuth2Error,
    OAuth2Request,
    ResourceProtector,
    TokenMixin,
)
from authlib.oauth2.rfc6749.grants import AuthorizationCodeGrant, RefreshTokenGrant
from authlib.oauth2.rfc6749.requests import BasicOAuth2Payload
from authlib.oauth2.rfc6750 import BearerTokenGenerator, BearerTokenValidator
from authlib.oauth2.rfc7636 import CodeChallenge
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from codeshot.local.http_server import HttpServer

BOOKS = {"alice": ["Middlemarch", "Ulysses"], "bob": ["Beloved", "Solaris"],
         "carol": ["Emma"], "dave": ["Dune"], "erin": ["Walden", "Kindred"],
         "frank": ["Persuasion"], "grace": ["Rebecca"], "heidi": ["Orlando", "Nostromo"]}


@dataclass
class Client(ClientMixin):
    client_id: str
    client_secret: str
    redirect_uris: list[str]

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str:
        return self.redirect_uris[0]

    def get_allowed_scope(self, scope: str) -> str:
        return " ".join(s for s in (scope or "").split() if s == "books.read")

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.redirect_uris

    def check_client_secret(self, client_secret: str) -> bool:
        return secrets.compare_digest(client_secret, self.client_secret)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == "client_secret_post"

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in ("authorization_code", "refresh_token")


@dataclass
class Code:
    code: str
    client_id: str
    redirect_uri: str
    scope: str
    user: str
    code_challenge: str | None
    code_challenge_method: str | None

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope


@dataclass
class Token(TokenMixin):
    client_id: str
    user: str
    access_token: str
    refresh_token: str | None
    scope: str
    expires_in: int
    issued_at: float = field(default_factory=time.time)
    revoked: bool = False

    def check_client(self, client: Client) -> bool:
        return client.client_id == self.client_id

    def get_scope(self) -> str:
        return self.scope

    def get_expires_in(self) -> int:
        return self.expires_in

    def is_expired(self) -> bool:
        return time.time() >= self.issued_at + self.expires_in

    def is_revoked(self) -> bool:
        return self.revoked

    def get_user(self) -> str:
        return self.user


class FormRequest(OAuth2Request):  # type: ignore[misc]
    """A request whose query and form are already read (Starlette reads them async)."""

    def __init__(self, method: str, uri: str, headers: Any, args: dict[str, str],
                 form: dict[str, str]) -> None:
        super().__init__(method, uri, headers=headers)
        self._args, self._form = args, form
        self.payload = BasicOAuth2Payload({**args, **form})

    @property
    def args(self) -> dict[str, str]:
        return self._args

    @property
    def form(self) -> dict[str, str]:
        return self._form


class Provider:
    """The server's state: its client, codes, tokens, and what happened (for asserts)."""

    def __init__(self, client_id: str, client_secret: str, redirect_uri: str) -> None:
        self.client = Client(client_id, client_secret, [redirect_uri])
        self.codes: dict[str, Code] = {}
        self.tokens: list[Token] = []
        self.grants: list[str] = []  # grant types of the token requests answered
        self.reads: list[tuple[str, str]] = []  # (user, access token) of each /books read
        self.expires_in = 3600
        self.server = self._authorization_server()
        self.resource = ResourceProtector()
        provider = self

        class Validator(BearerTokenValidator):  # type: ignore[misc]
            def authenticate_token(self, token_string: str) -> Token | None:
                return next((t for t in provider.tokens if t.access_token == token_string),
                            None)

        self.resource.register_token_validator(Validator())
        self._http: HttpServer | None = None

    def _authorization_server(self) -> AuthorizationServer:
        provider = self

        class Server(AuthorizationServer):  # type: ignore[misc]
            def query_client(self, client_id: str) -> Client | None:
                return provider.client if client_id == provider.client.client_id else None

            def save_token(self, token: dict[str, Any], request: OAuth2Request) -> None:
                provider.tokens.append(Token(
                    request.client.client_id, request.user, token["access_token"],
                    token.get("refresh_token"), token.get("scope", ""), token["expires_in"]))
                provider.grants.append(request.payload.grant_type)

            def create_oauth2_request(self, request: OAuth2Request) -> OAuth2Request:
                return request  # built from the Starlette request by the route

            def create_json_request(self, request: JsonRequest) -> JsonRequest:
                return request

            def handle_response(self, status: int, body: Any, headers: Any) -> Response:
                headers = dict(headers)
                if status == 302:
                    return RedirectResponse(headers["Location"], status_code=302)
                return JSONResponse(body, status_code=status, headers=headers)

            def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
                pass

        class CodeGrant(AuthorizationCodeGrant):  # type: ignore[misc]
            TOKEN_ENDPOINT_AUTH_METHODS = ("client_secret_post",)

            def save_authorization_code(self, code: str, request: OAuth2Request) -> None:
                data = request.payload.data
                provider.codes[code] = Code(
                    code, request.client.client_id, request.payload.redirect_uri,
                    request.payload.scope, request.user, data.get("code_challenge"),
                    data.get("code_challenge_method"))

            def query_authorization_code(self, code: str, client: Client) -> Code | None:
                found = provider.codes.get(code)
                return found if found and found.client_id == client.client_id else None

            def delete_authorization_code(self, authorization_code: Code) -> None:
                provider.codes.pop(authorization_code.code, None)

            def authenticate_user(self, authorization_code: Code) -> str:
                return authorization_code.user

        class Refresh(RefreshTokenGrant):  # type: ignore[misc]
            TOKEN_ENDPOINT_AUTH_METHODS = ("client_secret_post",)
            INCLUDE_NEW_REFRESH_TOKEN = True

            def authenticate_refresh_token(self, refresh_token: str) -> Token | None:
                return next((t for t in provider.tokens if t.refresh_token == refresh_token
                             and not t.revoked), None)

            def authenticate_user(self, refresh_token: Token) -> str:
                return refresh_token.user

            def revoke_old_credential(self, refresh_token: Token) -> None:
                refresh_token.revoked = True

        server = Server()
        server.register_token_generator("default", BearerTokenGenerator(
            lambda **_: secrets.token_urlsafe(24), lambda **_: secrets.token_urlsafe(24),
            lambda client, grant_type: provider.expires_in))
        server.register_grant(CodeGrant, [CodeChallenge(required=True)])
        server.register_grant(Refresh)
        return server

    # -- HTTP ---------------------------------------------------------------------------
    async def _request(self, request: Request) -> OAuth2Request:
        form = dict(await request.form()) if request.method == "POST" else {}
        return FormRequest(request.method, str(request.url), request.headers,
                           dict(request.query_params), {k: str(v) for k, v in form.items()})

    async def authorize(self, request: Request) -> Response:
        user = request.cookies.get("user")
        if user not in BOOKS:
            return JSONResponse({"error": "login_required"}, status_code=401)
        oauth_request = await self._request(request)
        try:
            grant = self.server.get_consent_grant(oauth_request, end_user=user)
        except OAuth2Error as exc:
            return JSONResponse({"error": exc.error}, status_code=400)
        response: Response = self.server.create_authorization_response(
            oauth_request, grant_user=user, grant=grant)
        return response

    async def token(self, request: Request) -> Response:
        response: Response = self.server.create_token_response(await self._request(request))
        return response

    async def books(self, request: Request) -> Response:
        try:
            token = self.resource.validate_request(["books.read"], await self._request(request))
        except OAuth2Error as exc:
            return JSONResponse({"error": exc.error}, status_code=401)
        self.reads.append((token.user, token.access_token))
        return JSONResponse({"books": BOOKS[token.user]})

    def start(self) -> str:
        app = Starlette(routes=[Route("/authorize", self.authorize),
                                Route("/token", self.token, methods=["POST"]),
                                Route("/books", self.books)])
        self._http = HttpServer(app, "127.0.0.1", 0)
        return self._http.start()

    def stop(self) -> None:
        if self._http is not None:
            self._http.stop()


def origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def continue_from_page(browser: httpx.Client, url: str) -> httpx.Response:
    """The platform's link, opened in ``browser``: its page, then its Continue button (a
    form posted from the platform's own origin)."""
    assert urlsplit(url).path == "/api/oauth/start", url
    page = browser.get(url, headers={"Accept": "text/html"})
    assert page.status_code == 200 and "Authorize an agent" in page.text, page.text
    (action,) = re.findall(r'<form method="post" action="([^"]+)"', page.text)
    (state,) = re.findall(r'name="state" value="([^"]+)"', page.text)
    return browser.post(origin(url) + action, data={"state": state},
                        headers={"Origin": origin(url)})

"""OAuth for agents over HTTP: the agent's calls (agent JWT), the link the user opens (a
page; its Continue binds the flow to their browser with a cookie) and the provider's
redirect back to the platform (that browser: the state names the flow, the cookie must be
the one that continued). See :mod:`codeshot.usecases.oauth`."""

from __future__ import annotations

import html
import ipaddress
import secrets
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from pydantic import BaseModel, Field

from codeshot.api.console.web import form
from codeshot.api.rest import agent_caller, get_services
from codeshot.errors import CodeshotError, OAuthBrowserMismatch
from codeshot.models import Principal
from codeshot.services import Services
from codeshot.usecases import oauth
from codeshot.usecases.threads import blocking

router = APIRouter()
# The browser's binding to the flows it opened: random, sent only under /api/oauth/ (the
# link and the callback), never to scripts; SameSite=Lax still comes with the provider's
# redirect, a top-level GET.
BROWSER_COOKIE = "codeshot_oauth"


class AuthorizationRequest(BaseModel):
    authUri: str = Field(max_length=2000)  # the wire's camelCase, as GraphQL's
    clientId: str = Field(max_length=500)
    scopes: list[str] = Field(default_factory=list)


class TokenBody(BaseModel):
    token: dict[str, Any]


@router.post("/api/oauth/authorizations")
def start(body: AuthorizationRequest, caller: Principal = Depends(agent_caller),
          services: Services = Depends(get_services)) -> dict[str, str]:
    return {"url": oauth.authorization_url(services, caller, body.authUri, body.clientId,
                                           body.scopes)}


@router.get("/api/oauth/token")
def read_token(caller: Principal = Depends(agent_caller),
               services: Services = Depends(get_services)) -> dict[str, Any]:
    return oauth.get_token(services, caller)


@router.put("/api/oauth/token")
def write_token(body: TokenBody, caller: Principal = Depends(agent_caller),
                services: Services = Depends(get_services)) -> dict[str, bool]:
    oauth.put_token(services, caller, body.token)
    return {"stored": True}


def _page(title: str, text: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(f"<!doctype html><meta charset=utf-8><title>{html.escape(title)}</title>"
                        f"<h1>{html.escape(title)}</h1><p>{text}</p>", status_code=status,
                        headers={"Cache-Control": "no-store"})


def _refusal(request: Request, exc: CodeshotError) -> Response:
    """A browser (it asks for HTML) reads a page with the error's code; any other client
    gets the JSON error of every REST route."""
    if "text/html" not in request.headers.get("accept", ""):
        raise exc
    return _page("Not authorized", f"{html.escape(exc.message)} ({exc.code})", exc.http_status)


def secure_cookie(api_url: str) -> bool:
    """Secure cookies, but on plain http to this machine (the local stack)."""
    parts = urlsplit(api_url)
    if parts.scheme != "http":
        return True
    try:
        return not ipaddress.ip_address(parts.hostname or "").is_loopback
    except ValueError:
        return parts.hostname != "localhost"


def _api_path(api_url: str) -> str:
    """The path the API is served under ("" at a host's root), which the page's form
    and the cookie's path start with."""
    return urlsplit(api_url).path.rstrip("/")


def _browser_cookie(request: Request) -> str | None:
    """This browser's binding cookie. Two of them (one set for a wider path or a parent
    domain by someone else: cookie tossing) are refused, not guessed between."""
    pairs = request.headers.get("cookie", "").split(";")
    if sum(p.strip().startswith(BROWSER_COOKIE + "=") for p in pairs) > 1:
        raise OAuthBrowserMismatch("this browser sent more than one OAuth cookie; clear this "
                                   "site's cookies and ask the agent again for a new link")
    return request.cookies.get(BROWSER_COOKIE)


def _same_origin(request: Request, api_url: str) -> None:
    """The form on the link's page, posted from this platform's own page (browsers send
    Origin with every POST): not a page elsewhere that submits it for the user."""
    parts = urlsplit(api_url)
    if request.headers.get("origin") != f"{parts.scheme}://{parts.netloc}":
        raise OAuthBrowserMismatch("continue from the page the authorization link opens")


@router.get(oauth.START_PATH)
async def link_page(request: Request, state: str = "",
                    services: Services = Depends(get_services)) -> Response:
    """The link an agent gave the user: a page naming the codeshot account and the agent
    the authorization is for, and where it goes. Nothing is bound until the user
    continues: an attacker's own link opened in a victim's browser (a provider that skips
    its consent screen would send the victim's account back silently) and a link
    preview's fetch change nothing."""
    try:
        page = await blocking(oauth.describe_link, services, state, _browser_cookie(request))
    except CodeshotError as exc:
        return _refusal(request, exc)
    account, agent, host = (html.escape(x) for x in (page.username, page.agent_id,
                                                     page.provider_host))
    action = html.escape(_api_path(services.settings.api_url) + oauth.START_PATH)
    body = (f"The agent <b>{agent}</b> asks to act for the codeshot account <b>{account}"
            f"</b> at <b>{host}</b>.</p><p>Continue only if <b>{account}</b> is your account "
            "and you asked this agent for it just now. If not, close this page: someone may "
            f"be trying to link your {host} account to theirs.</p>"
            f'<form method="post" action="{action}"><input type="hidden" name="state" '
            f'value="{html.escape(state)}"><button>Continue to {host}</button></form><p>')
    response = _page("Authorize an agent", body)
    # Referrer-Policy same-origin, not no-referrer: under no-referrer browsers post the
    # form with "Origin: null", which the same-origin check must refuse.
    response.headers.update({"X-Frame-Options": "DENY", "Referrer-Policy": "same-origin",
                             "Content-Security-Policy": "frame-ancestors 'none'"})
    return response


@router.post(oauth.START_PATH)
async def continue_link(request: Request, services: Services = Depends(get_services)
                        ) -> Response:
    """The user continues from the link's page: bind the flow to this browser, then off
    to the provider."""
    try:
        _same_origin(request, services.settings.api_url)
        state = (await form(request)).get("state", "")
        browser = _browser_cookie(request) or secrets.token_urlsafe(32)
        url = await blocking(oauth.open_link, services, state, browser)
    except CodeshotError as exc:
        return _refusal(request, exc)
    response = RedirectResponse(url, status_code=303, headers={"Cache-Control": "no-store"})
    # Set again each time: it lives as long as the newest flow it opened can.
    response.set_cookie(BROWSER_COOKIE, browser, max_age=services.settings.oauth_state_seconds,
                        path=_api_path(services.settings.api_url) + "/api/oauth/",
                        httponly=True, samesite="lax",
                        secure=secure_cookie(services.settings.api_url))
    return response


@router.get(oauth.CALLBACK_PATH)
async def callback(request: Request, state: str = "", code: str | None = None,
                   error: str | None = None, services: Services = Depends(get_services)
                   ) -> Response:
    try:
        flow, then = await blocking(oauth.complete, services, state,
                                    _browser_cookie(request), code, error)
    except CodeshotError as exc:
        return _refusal(request, exc)
    return _page("Authorized", f"You authorized <b>{html.escape(flow.agent_id)}</b>. "
                 f"{html.escape(then)}; you may close this tab.")

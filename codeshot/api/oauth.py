"""OAuth for agents over HTTP: the agent's calls (agent JWT), the link the user opens
(which binds the flow to their browser with a cookie) and the provider's redirect back to
the platform (that browser: the state names the flow, the cookie must be the one that
opened it). See :mod:`codeshot.usecases.oauth`."""

from __future__ import annotations

import html
import ipaddress
import secrets
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from pydantic import BaseModel, Field

from codeshot.api.rest import agent_caller, get_services
from codeshot.errors import CodeshotError
from codeshot.models import Principal
from codeshot.services import Services
from codeshot.usecases import oauth
from codeshot.usecases.threads import blocking

router = APIRouter()
# The browser's binding to the flows it opened: random, sent only to /api/oauth/ (the link
# and the callback), never to scripts; SameSite=Lax still comes with the provider's
# redirect, a top-level GET.
BROWSER_COOKIE = "codeshot_oauth"
COOKIE_PATH = "/api/oauth/"


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


@router.get(oauth.START_PATH)
async def open_link(request: Request, state: str = "",
                    services: Services = Depends(get_services)) -> Response:
    """The link an agent gave the user: bind the flow to this browser, then off to the
    provider."""
    browser = request.cookies.get(BROWSER_COOKIE) or secrets.token_urlsafe(32)
    try:
        url = await blocking(oauth.open_link, services, state, browser)
    except CodeshotError as exc:
        return _refusal(request, exc)
    response = RedirectResponse(url, status_code=303, headers={"Cache-Control": "no-store"})
    # Set again each time: it lives as long as the newest flow it opened can.
    response.set_cookie(BROWSER_COOKIE, browser, max_age=services.settings.oauth_state_seconds,
                        path=COOKIE_PATH, httponly=True, samesite="lax",
                        secure=secure_cookie(services.settings.api_url))
    return response


@router.get(oauth.CALLBACK_PATH)
async def callback(request: Request, state: str = "", code: str | None = None,
                   error: str | None = None, services: Services = Depends(get_services)
                   ) -> Response:
    try:
        flow, resumed = await blocking(oauth.complete, services, state,
                                       request.cookies.get(BROWSER_COOKIE), code, error)
    except CodeshotError as exc:
        return _refusal(request, exc)
    then = ("Your conversation continues where it paused" if resumed else
            "Ask it again in your conversation")
    return _page("Authorized", f"You authorized <b>{html.escape(flow.agent_id)}</b>. {then}; "
                 "you may close this tab.")

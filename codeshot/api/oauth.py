"""OAuth for agents over HTTP: the agent's calls (agent JWT) and the provider's redirect
back to the platform (the user's browser, no credentials: the state is the binding).
See :mod:`codeshot.usecases.oauth`."""

from __future__ import annotations

import html
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import HTMLResponse
from pydantic import BaseModel, Field

from codeshot.api.rest import agent_caller, get_services
from codeshot.errors import CodeshotError
from codeshot.models import Principal
from codeshot.services import Services
from codeshot.usecases import oauth
from codeshot.usecases.threads import blocking

router = APIRouter()


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


@router.get(oauth.CALLBACK_PATH)
async def callback(request: Request, state: str = "", code: str | None = None,
                   error: str | None = None, services: Services = Depends(get_services)
                   ) -> Response:
    """A browser (it asks for HTML) reads a page, the error's code on it when it failed;
    any other client the JSON error of every REST route."""
    try:
        flow, resumed = await blocking(oauth.complete, services, state, code, error)
    except CodeshotError as exc:
        if "text/html" not in request.headers.get("accept", ""):
            raise
        return _page("Not authorized", f"{html.escape(exc.message)} ({exc.code})",
                     exc.http_status)
    then = ("Your conversation continues where it paused" if resumed else
            "Ask it again in your conversation")
    return _page("Authorized", f"You authorized <b>{html.escape(flow.agent_id)}</b>. {then}; "
                 "you may close this tab.")

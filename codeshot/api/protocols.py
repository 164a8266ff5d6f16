"""Where the agent protocols meet the app: MCP at ``/mcp``, A2A at ``/a2a/...`` and the
agent cards. Their SDKs are heavy to import (``mcp``: about 2 s, ``a2a-sdk``: about
1 s here), so the modules that use them load on the first request that needs them, never
at the API's cold start."""

from __future__ import annotations

import importlib
from typing import Any

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from codeshot.api.rest import get_services
from codeshot.auth.tokens import bearer
from codeshot.models import PLANNER_ID, Agent, Principal
from codeshot.services import Services
from codeshot.usecases.threads import blocking


class LazyEndpoint:
    """An ASGI endpoint built on its first request by ``module.endpoint(services)``."""

    def __init__(self, module: str) -> None:
        self.module = module
        self._app: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._app is None:
            factory: Any = importlib.import_module(self.module).endpoint
            self._app = factory(scope["app"].state.services)
        await self._app(scope, receive, send)


router = APIRouter()


def _principal(services: Services, authorization: str | None, required: bool
               ) -> Principal | None:
    if not authorization and not required:
        return None
    return services.auth.user_for_api_key(bearer(authorization))


@router.get("/.well-known/agent-card.json")
@router.get("/a2a/{owner}/{handle}/.well-known/agent-card.json")
async def a2a_card(owner: str = "platform", handle: str = "planner",
                   authorization: str | None = Header(None),
                   services: Services = Depends(get_services)) -> JSONResponse:
    """An agent's A2A card (published agents' without a key), or the planner's."""
    from codeshot.api import a2a

    principal = await blocking(_principal, services, authorization, False)
    card = await blocking(a2a.card_json, services, principal, Agent.make_id(owner, handle))
    return JSONResponse(card, headers={"Cache-Control": "private, max-age=60"})


@router.post("/a2a/{owner}/{handle}")
async def a2a_jsonrpc(owner: str, handle: str, request: Request,
                      authorization: str | None = Header(None),
                      services: Services = Depends(get_services)) -> Response:
    """A2A JSON-RPC for one agent (or the planner, ``platform/planner``): the caller's API
    key first, then the agent must be one they may use."""
    from codeshot.api import a2a
    from codeshot.usecases.agents import usable_agent

    principal = await blocking(_principal, services, authorization, True)
    assert principal is not None
    agent_id = Agent.make_id(owner, handle)
    if agent_id != PLANNER_ID:
        await blocking(usable_agent, services, principal, agent_id)
    return await a2a.jsonrpc(request, services, principal, agent_id)

"""Where the agent protocols meet the app: MCP at ``/mcp``, A2A at ``/a2a/...`` and the
agent cards. Their SDKs are heavy to import (``mcp``: about 2 s, ``a2a-sdk``: about
1 s here), so the modules that use them load on the first request that needs them, never
at the API's cold start."""

from __future__ import annotations

import importlib
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send


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

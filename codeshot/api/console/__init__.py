"""The web console at ``/console/``: server-rendered pages (Jinja2) updated in place by
htmx, over the same use cases as GraphQL and REST; GraphiQL at ``/graphql``. Every file
a page loads is served from ``/console/static`` (the third-party ones are copied from
npm by ``make assets``), so the console works with no other host reachable."""

from __future__ import annotations

from functools import partial
from urllib.parse import quote

from fastapi import FastAPI
from fastapi.responses import RedirectResponse

from codeshot.api.console import account, agents, chat, operators, sign_in
from codeshot.api.console.graphiql import ConsoleGraphQLRouter
from codeshot.api.console.web import STATIC, STATIC_PREFIX, Assets

__all__ = ["ConsoleGraphQLRouter", "install"]


def install(app: FastAPI) -> None:
    """Serve the console from ``app``: pages, static files, and ``/`` leading to it."""
    app.mount(STATIC_PREFIX, Assets(directory=STATIC), name="console-static")
    for module in (chat, agents, account, sign_in, operators):
        app.include_router(module.router)

    # HEAD too, as the console's pages (ConsoleRoute): uptime probes ask with HEAD.
    redirect = partial(app.api_route, methods=["GET", "HEAD"], include_in_schema=False)

    @redirect("/")
    @redirect("/console")
    def to_console() -> RedirectResponse:
        return RedirectResponse("/console/", status_code=307)

    @redirect("/agents/{owner}/{handle}")
    def to_agent_page(owner: str, handle: str) -> RedirectResponse:
        """Where Fixie kept an agent's page: `fixie serve` prints this URL."""
        return RedirectResponse(f"/console/agents/{quote(owner)}/{quote(handle)}",
                                status_code=307)

    @redirect("/sessions/{handle}")
    def to_session_page(handle: str) -> RedirectResponse:
        """Where Fixie kept a session's page: `fixie console` prints this URL."""
        return RedirectResponse(f"/console/sessions/{quote(handle)}", status_code=307)

"""GraphiQL from the console's own copies of React and GraphiQL: Strawberry's page loads
them from a CDN, which leaves "Loading..." on a machine without internet. The key field
is prefilled from the console's sign-in (session storage), never from the URL."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import HTMLResponse

from codeshot.api.console.web import content_security_policy, html, missing_assets, templates
from codeshot.api.graphql.router import CodeshotGraphQLRouter


class ConsoleGraphQLRouter(CodeshotGraphQLRouter):
    async def render_graphql_ide(self, request: Request) -> HTMLResponse:
        missing = missing_assets()
        # GraphiQL's editor and React set inline styles.
        csp = content_security_policy(styles="'self' 'unsafe-inline'")
        return html(templates.render("graphiql.html", missing=missing),
                    status=503 if missing else 200, headers={"Content-Security-Policy": csp})

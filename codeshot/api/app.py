"""The platform's HTTP API: one FastAPI app for uvicorn (locally) and Mangum (Lambda)."""

from __future__ import annotations

import logging
from typing import Literal

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from codeshot.api import console
from codeshot.api.agent_protocol import router as agent_protocol_router
from codeshot.api.errors import as_codeshot_error, rest_body
from codeshot.api.graphql import Context, build_schema
from codeshot.api.oauth import router as oauth_router
from codeshot.api.openai_proxy import router as openai_proxy_router
from codeshot.api.protocols import LazyEndpoint
from codeshot.api.protocols import router as protocols_router
from codeshot.api.rest import get_services, router
from codeshot.auth.keys import JWKS_MAX_AGE_SECONDS
from codeshot.errors import (
    INTERNAL_MESSAGE,
    CodeshotError,
    Forbidden,
    InvalidInput,
    NotFound,
    RateLimited,
    Unauthenticated,
)
from codeshot.observability import HEADER, correlated
from codeshot.services import Services
from codeshot.settings import Settings, get_settings
from codeshot.usecases.messaging import long_poll_reads

MAX_REQUEST_BYTES = 4 * 1024 * 1024
log = logging.getLogger("codeshot.api")
# Framework errors (unknown route, wrong method, unparsable body) by HTTP status.
HTTP_ERRORS: dict[int, type[CodeshotError]] = {
    e.http_status: e for e in (Unauthenticated, Forbidden, NotFound, RateLimited)}


class Correlation:
    """Each request runs under a correlation id (its X-Correlation-Id, or a new one), which
    goes with the work it queues and is answered in the same header."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(HEADER.lower().encode(), b"")
        with correlated(given.decode("latin-1")) as correlation:

            async def answer(message: Message) -> None:
                if message["type"] == "http.response.start":
                    message = {**message, "headers": [
                        *message.get("headers", []),
                        (HEADER.lower().encode(), correlation.encode())]}
                await send(message)

            await self.app(scope, receive, answer)


class BodyLimit:
    """Refuse request bodies over a size, declared or streamed, before the app sees them.

    A body sent without a Content-Length (chunked) is read here, up to the limit, and
    replayed: refused mid-stream inside the app, every route would report the failure its
    own way (a 500 from the console's and MCP's catch-alls, a 400 from FastAPI's body
    parser) instead of this 413. Memory stays bounded by the limit either way."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            # The server frames the body by its declared length: no more can arrive.
            if declared.isdigit() and int(declared) <= self.limit:
                await self.app(scope, receive, send)
            else:
                await self._refuse(receive, send)
            return
        body = await self._read(receive)
        if body is None:
            await self._refuse(receive, send)  # (a client that left hears nothing)
        else:
            await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive: Receive) -> bytes | None:
        """The whole body; None past the limit or if the client left before its end."""
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _refuse(self, receive: Receive, send: Send) -> None:
        error = InvalidInput(f"request body exceeds {self.limit} bytes")
        response = JSONResponse(rest_body(error), status_code=413)
        await response({"type": "http"}, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the body read ahead, then the server's own messages (a
    disconnect, which streaming responses wait for)."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


def create_app(settings: Settings | None = None, services: Services | None = None) -> FastAPI:
    services = services or Services(settings or get_settings())
    app = FastAPI(title="codeshot", version="0.1.0", docs_url=None, redoc_url=None)
    app.state.services = services

    @app.exception_handler(CodeshotError)
    async def codeshot_error(_: Request, exc: CodeshotError) -> JSONResponse:
        return JSONResponse(rest_body(exc), status_code=exc.http_status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        # Framework errors (unknown route, unparsable body) in our error shape too.
        code = HTTP_ERRORS.get(exc.status_code, InvalidInput).code
        return JSONResponse({"error": {"code": code, "message": str(exc.detail)}},
                            status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def unexpected_error(_: Request, exc: Exception) -> JSONResponse:
        known = as_codeshot_error(exc)
        if known is None:
            log.error("unexpected error", exc_info=exc)
            return JSONResponse(rest_body(CodeshotError(INTERNAL_MESSAGE)), status_code=500)
        return JSONResponse(rest_body(known), status_code=known.http_status)

    @app.exception_handler(RecursionError)
    async def too_deep(_: Request, exc: RecursionError) -> JSONResponse:
        # JSON nested 100,000 deep: the parser gives up; the caller's input is at fault.
        error = as_codeshot_error(exc) or InvalidInput("the request is nested too deeply")
        return JSONResponse(rest_body(error), status_code=error.http_status)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        error = InvalidInput(f"{where}: {first.get('msg', 'invalid request')}")
        return JSONResponse(rest_body(error), status_code=400)

    @app.api_route("/healthz", methods=["GET", "HEAD"])  # HEAD: uptime probes
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/.well-known/jwks.json")
    def jwks(s: Services = Depends(get_services)) -> JSONResponse:
        return JSONResponse(s.keyring.jwks(),
                            headers={"Cache-Control": f"public, max-age={JWKS_MAX_AGE_SECONDS}"})

    async def context(request: Request) -> Context:
        return Context(request.app.state.services, request.headers.get("authorization"),
                       request.headers.get("idempotency-key"))

    settings = services.settings
    schema = build_schema(settings.graphql_introspection, settings.graphql_max_cost,
                          long_poll_reads(settings.reply_wait_seconds))
    # GraphiQL needs introspection to be of any use; without it /graphql answers POSTs only.
    ide: Literal["graphiql"] | None = "graphiql" if settings.graphql_introspection else None
    # Multipart requests (the GraphQL upload spec; python-multipart, which the API bundle
    # keeps for forms) as well as JSON: fixieai 1.0.4 sends createAgentRevision so.
    # Browsers may send multipart cross-site without a preflight, but only a Bearer token
    # authenticates here, which they never attach on their own.
    app.include_router(console.ConsoleGraphQLRouter(schema, context_getter=context,
                                                     graphql_ide=ide,
                                                     multipart_uploads_enabled=True),
                       prefix="/graphql")
    app.include_router(router)
    app.include_router(openai_proxy_router)
    app.include_router(oauth_router)
    app.include_router(protocols_router)
    app.include_router(agent_protocol_router)
    # A plain route, not a mount: a mount redirects /mcp to /mcp/, and MCP clients POST.
    # POST only: a stateless server has no session to DELETE, and its GET stream would
    # stay open sending nothing but pings (405, as the spec allows, tells clients so).
    app.router.routes.append(Route("/mcp", LazyEndpoint("codeshot.api.mcp"),
                                   methods=["POST"]))
    console.install(app)
    app.add_middleware(BodyLimit, limit=MAX_REQUEST_BYTES)
    app.add_middleware(Correlation)
    return app

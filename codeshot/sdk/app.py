"""The HTTP face of an agent: handshake, Func calls and, for standalone agents, queries.

Every request's JWT is verified before anything else, its body included, is read
(:class:`AuthFirst`), and a body is read only up to ``MAX_BODY_BYTES``: anyone who can
reach an agent could otherwise make it buffer and parse any amount. Errors of any kind
answer in the reply shape (``{"message", "error": {"code", "message", "details"}}``),
which is also what the platform's REST clients read (``error.code``, ``error.message``).
No ``from __future__ import annotations``: FastAPI must see the route's real types.
"""

import json
from collections.abc import Iterator
from typing import Annotated, Any, Protocol

import yaml
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from codeshot.errors import (
    ERR_FUNC_NOT_DEFINED,
    ERR_NO_RESPONSE,
    CodeshotError,
    InvalidInput,
    NotFound,
)
from codeshot.sdk.auth import Claims, JwksUnavailable, TokenVerifier
from codeshot.sdk.funcs import Func
from codeshot.sdk.wire import AgentException, AgentQuery
from codeshot.settings import Settings

YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml")
# A query's message and embed URIs: the platform sends a few hundred KB at most.
MAX_BODY_BYTES = 8 * 1024 * 1024


def prefers_yaml(accept: str | None) -> bool:
    """True when Accept ranks a YAML type above JSON (``*/*`` counts as JSON)."""
    best = {"yaml": 0.0, "json": 0.0}
    for part in (accept or "").split(","):
        media, *params = (p.strip() for p in part.split(";"))
        q = next((p[2:] for p in params if p.startswith("q=")), "1")
        try:
            weight = float(q)
        except ValueError:
            continue
        kind = "yaml" if media in YAML_TYPES else "json" if media in (
            "application/json", "*/*", "application/*") else None
        if kind:
            best[kind] = max(best[kind], weight)
    return best["yaml"] > best["json"]


def _error(exc: AgentException) -> JSONResponse:
    return JSONResponse(exc.to_response().to_wire(), status_code=exc.http_status_code)


def _refusal(exc: CodeshotError) -> JSONResponse:
    response = _error(AgentException(exc.message, exc.code, exc.message, exc.http_status))
    if isinstance(exc, JwksUnavailable):  # the platform calls again only with one
        response.headers["Retry-After"] = str(exc.retry_after)
    return response


class BodyTooLarge(InvalidInput):
    http_status = 413


class AuthFirst:
    """Verifies the caller's token, then reads the body (at most ``max_body`` bytes),
    before the app sees the request; the claims go to ``request.state.claims``."""

    def __init__(self, app: ASGIApp, verifier: TokenVerifier, max_body: int) -> None:
        self.app, self.verifier, self.max_body = app, verifier, max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            # In a thread: a key not yet read is fetched from the platform.
            claims = await run_in_threadpool(
                self.verifier.verify, Headers(scope=scope).get("authorization"))
            body = await self._body(scope, receive)
        except CodeshotError as exc:
            await _refusal(exc)(scope, receive, send)
            return
        scope.setdefault("state", {})["claims"] = claims
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:  # what follows the body: the client's disconnect
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _body(self, scope: Scope, receive: Receive) -> bytes:
        too_large = BodyTooLarge(f"the request body is over {self.max_body} bytes")
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body:
            raise too_large  # refused unread
        chunks: list[bytes] = []
        read, more = 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                raise InvalidInput("the client disconnected before sending its request")
            chunks.append(message.get("body", b""))
            read += len(chunks[-1])
            if read > self.max_body:  # sent without a length, or more than it said
                raise too_large
            more = message.get("more_body", False)
        return b"".join(chunks)


def _first_reply(func: Func, query: AgentQuery, claims: Claims, api_url: str) -> JSONResponse:
    try:
        reply = next(func(query, claims, api_url), None)
    except AgentException as exc:
        return _error(exc)
    if reply is None:
        return _error(AgentException("I'm sorry, I have no answer.", ERR_NO_RESPONSE,
                                     f"Func[{func.name}] returned nothing"))
    return JSONResponse(reply.to_wire())


def _stream(func: Func, query: AgentQuery, claims: Claims, api_url: str) -> Iterator[bytes]:
    """Newline-delimited JSON replies; a failure mid-stream becomes the last line."""
    try:
        for reply in func(query, claims, api_url):
            yield (json.dumps(reply.to_wire()) + "\n").encode()
    except AgentException as exc:
        yield (json.dumps(exc.to_response().to_wire()) + "\n").encode()


class ServableAgent(Protocol):
    """What the app serves (:class:`codeshot.sdk.agent.AgentBase` implements it)."""

    @property
    def funcs(self) -> dict[str, Func]: ...

    @property
    def query_func(self) -> Func | None: ...

    def metadata(self) -> dict[str, Any]: ...


def build_app(agent: ServableAgent, settings: Settings) -> FastAPI:
    verifier = TokenVerifier(settings.api_url, settings.agent_id)
    api_url = verifier.issuer
    app = FastAPI(title="codeshot agent", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(AuthFirst, verifier=verifier, max_body=MAX_BODY_BYTES)

    def verified(request: Request) -> Claims:
        claims: Claims = request.state.claims  # AuthFirst's
        return claims

    Caller = Annotated[Claims, Depends(verified)]

    @app.exception_handler(CodeshotError)
    async def codeshot_error(_: Request, exc: CodeshotError) -> JSONResponse:
        return _refusal(exc)

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        first: dict[str, Any] = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return _refusal(InvalidInput(f"{where}: {first.get('msg', 'invalid')}"))

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        # FastAPI's own refusals: a body it cannot parse, a route or method it lacks
        code = NotFound.code if exc.status_code == 404 else InvalidInput.code
        return _error(AgentException(str(exc.detail), code, str(exc.detail), exc.status_code))

    @app.get("/")
    def handshake(request: Request, _: Caller) -> Response:
        document = agent.metadata()
        if prefers_yaml(request.headers.get("accept")):
            return Response(yaml.safe_dump(document, sort_keys=False),
                            media_type="application/yaml")
        return JSONResponse(document)

    @app.post("/{func_name}")
    def call_func(func_name: str, query: AgentQuery, claims: Caller) -> JSONResponse:
        funcs = agent.funcs
        if func_name not in funcs:
            return _error(AgentException(
                f"I'm sorry, Func[{func_name}] is not defined.", ERR_FUNC_NOT_DEFINED,
                "The function was not defined.", 404,
                func_name=func_name, available_funcs=sorted(funcs)))
        return _first_reply(funcs[func_name], query, claims, api_url)

    handle = agent.query_func
    if handle is not None:

        @app.post("/")
        def query(body: AgentQuery, claims: Caller) -> StreamingResponse:
            return StreamingResponse(_stream(handle, body, claims, api_url),
                                     media_type="application/x-ndjson")

    return app

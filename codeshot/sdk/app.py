"""The HTTP face of an agent: handshake, Func calls and, for standalone agents, queries.

Every route verifies the caller's JWT first. Errors of any kind answer in the reply
shape (``{"message", "error": {"code", "message", "details"}}``), which is also what
the platform's REST clients read (``error.code``, ``error.message``).
No ``from __future__ import annotations``: FastAPI must see the route's real types.
"""

import json
from collections.abc import Iterator
from typing import Annotated, Any, Protocol

import yaml
from fastapi import Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse

from codeshot.errors import ERR_FUNC_NOT_DEFINED, ERR_NO_RESPONSE, CodeshotError, InvalidInput
from codeshot.sdk.auth import Claims, TokenVerifier
from codeshot.sdk.funcs import Func
from codeshot.sdk.wire import AgentException, AgentQuery
from codeshot.settings import Settings

YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml")


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

    def verified(authorization: Annotated[str | None, Header()] = None) -> Claims:
        return verifier.verify(authorization)

    Caller = Annotated[Claims, Depends(verified)]

    @app.exception_handler(CodeshotError)
    async def codeshot_error(_: Request, exc: CodeshotError) -> JSONResponse:
        return _error(AgentException(exc.message, exc.code, exc.message, exc.http_status))

    @app.exception_handler(RequestValidationError)
    async def bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        first: dict[str, Any] = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return await codeshot_error(_, InvalidInput(f"{where}: {first.get('msg', 'invalid')}"))

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

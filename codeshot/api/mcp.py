"""The platform as an MCP server at ``/mcp``: streamable HTTP, stateless, API key as Bearer.

Built on the official ``mcp`` SDK's low-level server, imported only when ``/mcp`` is first
hit (``codeshot.api.protocols``): it adds about two seconds of imports the rest of the
API does not need. Every request gets a fresh stateless session manager, so nothing lives
between requests and it runs the same under uvicorn and Mangum (which runs lifespans per
invocation: the SDK's mounted app would fail on the second one).

Tools:
- ``find_agents``: the router's picks for a text, with scores and sample queries;
- ``ask``: a query to the planner or a named agent, in a new session or a given one;
  the answer's text with its embeds as resource links (presigned URLs);
- one tool per agent the caller may use, when ``CODESHOT_MCP_AGENT_TOOLS`` > 0.

An agent's question (``awaiting_input``) becomes an MCP elicitation where the client can
answer one: protocol 2026-07-28's ``InputRequiredResult``, which needs no back channel;
the session id rides in ``requestState``, sealed by the SDK with keys derived from the
platform's signing keys (so any Lambda instance can open it). Other clients get a tool
result that says what was asked and how to answer (``ask`` again with the session).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware, get_access_token
from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.request_state import (
    AESGCMRequestStateCodec,
    RequestStateBoundary,
    RequestStateSecurity,
)
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS, is_version_at_least
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.types import Receive, Scope, Send

from codeshot.api.errors import as_codeshot_error, rest_body
from codeshot.errors import INTERNAL_MESSAGE, Timeout, Unauthenticated
from codeshot.models import PLANNER_ID, MessageType, Principal
from codeshot.services import Services
from codeshot.usecases import agents, tasks
from codeshot.usecases.threads import blocking

log = logging.getLogger("codeshot.api")

SERVER_NAME = "codeshot"
INSTRUCTIONS = (
    "Agents of a codeshot platform. find_agents lists the agents that fit a request, with "
    "sample queries; ask sends a query to the planner (which picks agents) or to one agent "
    "by id. When an agent asks something back, answer it (or call ask again with the "
    "session it names)."
)
# How long a sealed requestState (an agent's pending question) stays answerable.
REQUEST_STATE_TTL_SECONDS = 3600
MAX_FIND_AGENTS = 20
MAX_QUERY = 16_000
# MCP tool names (SEP-986): letters, digits, '.', '_' and '-', 1-128 characters.
TOOL_NAME_RE = re.compile(r"[^A-Za-z0-9._-]")
ANSWER_SCHEMA = {"type": "object", "required": ["answer"],
                 "properties": {"answer": {"type": "string", "title": "Your answer"}}}
SESSION_PROPERTY = {"type": "string", "description": (
    "continue this session (as named by an earlier result); leave out to start a new one")}
QUERY_PROPERTY = {"type": "string", "minLength": 1, "maxLength": MAX_QUERY,
                  "description": "what to ask, in plain language"}

FIND_AGENTS = types.Tool(
    name="find_agents",
    description=("The agents that could answer a request, best first, with their scores, "
                 "descriptions and sample queries. Use an agent's id with ask."),
    input_schema={"type": "object", "required": ["text"], "properties": {
        "text": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY,
                 "description": "what the user wants"},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_FIND_AGENTS, "default": 3}}},
)
ASK = types.Tool(
    name="ask",
    description=("Ask the platform's planner (it picks agents) or one agent a question; "
                 "returns the answer, with any files as links."),
    input_schema={"type": "object", "required": ["query"], "properties": {
        "query": QUERY_PROPERTY,
        "agent": {"type": "string", "description": (
            "an agent id (owner/handle, from find_agents); leave out for the planner")},
        "session": SESSION_PROPERTY}},
)


def tool_name(agent_id: str, taken: set[str]) -> str:
    """A valid, unique MCP tool name for an agent ("alice/dice" -> "alice.dice")."""
    base = TOOL_NAME_RE.sub("_", agent_id.replace("/", "."))[:120] or "agent"
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}-{n}"
    taken.add(name)
    return name


def agent_tool(name: str, agent_id: str, description: str, samples: list[str]) -> types.Tool:
    text = description.strip() or f"The agent {agent_id}."
    if samples:
        text += " For example: " + "; ".join(f'"{q}"' for q in samples[:5])
    return types.Tool(name=name, description=text[:2000], input_schema={
        "type": "object", "required": ["query"],
        "properties": {"query": QUERY_PROPERTY, "session": SESSION_PROPERTY}})


class ApiKeyVerifier:
    """The SDK's TokenVerifier: an API key -> the caller, or None (401)."""

    def __init__(self, services: Services) -> None:
        self.services = services

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            principal = await blocking(self.services.auth.user_for_api_key, token)
        except Unauthenticated:
            return None
        return AccessToken(token=token, client_id=principal.username or "",
                           subject=principal.user_id, scopes=[],
                           claims={"principal": principal.to_dict()})


def caller() -> Principal:
    token = get_access_token()
    if token is None or not token.claims:  # RequireAuthMiddleware lets nobody else in
        raise MCPError(types.INVALID_REQUEST, "not authenticated")
    return Principal.from_dict(token.claims["principal"])


class KeyRingCodec:
    """requestState sealing under keys derived from the platform's signing keys: shared
    by every API instance, rotated with them (the signing key seals, all open: a newer
    key seals only once every instance has read it)."""

    LABEL = b"codeshot/mcp/request-state"

    def __init__(self, services: Services) -> None:
        self.services = services
        self._codec: tuple[tuple[str, ...], AESGCMRequestStateCodec] | None = None

    def _current(self) -> AESGCMRequestStateCodec:
        sealing = self.services.keyring.signing_key()  # cached; read with the API key
        others = self.services.keyring.keys()
        keys = [sealing, *(k for k in others if k != sealing)]  # the first seals
        kids = tuple(k.kid for k in keys)
        if self._codec is None or self._codec[0] != kids:
            material = [hmac.new(k.private_bytes, self.LABEL, hashlib.sha256).digest()
                        for k in keys]
            self._codec = (kids, AESGCMRequestStateCodec(material))
        return self._codec[1]

    def seal(self, payload: bytes) -> str:
        return self._current().seal(payload)

    def unseal(self, token: str) -> bytes:
        return self._current().unseal(token)


def _text(text: str, *, error: bool = False, structured: Any = None) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structured_content=structured, is_error=error)


def _error_text(exc: BaseException) -> str:
    """The stable code and message; nothing unexpected leaks its text."""
    known = as_codeshot_error(exc)
    if known is None:
        log.error("MCP request failed", exc_info=exc)
        return INTERNAL_MESSAGE
    return f"{known.code}: {known.message}"


def _error(exc: BaseException) -> types.CallToolResult:
    return _text(_error_text(exc), error=True)


@dataclass
class AskArguments:
    query: str
    agent_id: str | None
    session_id: str | None


def _string(args: dict[str, Any], name: str, required: bool = False) -> str | None:
    value = args.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (required and not value.strip()):
        raise MCPError(types.INVALID_PARAMS, f"{name} must be a non-empty string")
    return value


class CodeshotMCP:
    """The tools, over the platform's use cases."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.server: Server[Any] = Server(
            SERVER_NAME, version="0.1.0", instructions=INSTRUCTIONS,
            on_list_tools=self.list_tools, on_call_tool=self.call_tool)
        security = RequestStateSecurity(codec=KeyRingCodec(services),
                                        ttl=REQUEST_STATE_TTL_SECONDS)
        self.server.middleware.append(RequestStateBoundary(security,
                                                           default_audience=SERVER_NAME))

    async def _agent_tools(self, principal: Principal) -> dict[str, tuple[str, types.Tool]]:
        """Tool name -> (agent id, tool), for up to CODESHOT_MCP_AGENT_TOOLS agents."""
        limit = self.services.settings.mcp_agent_tools
        if limit <= 0:
            return {}
        visible = await blocking(agents.all_visible_agents, self.services, principal)
        taken = {FIND_AGENTS.name, ASK.name}
        out = {}
        for agent in visible[:limit]:
            name = tool_name(agent.agent_id, taken)
            out[name] = (agent.agent_id, agent_tool(name, agent.agent_id,
                                                    agent.description or agent.name,
                                                    agent.sample_queries))
        return out

    async def list_tools(self, ctx: ServerRequestContext[Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        try:
            extra = await self._agent_tools(caller())
        except Exception as exc:  # the SDK would send its text (an AWS error names the role)
            raise MCPError(types.INTERNAL_ERROR, _error_text(exc)) from exc
        return types.ListToolsResult(tools=[FIND_AGENTS, ASK, *(t for _, t in extra.values())])

    async def call_tool(self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
                        ) -> types.CallToolResult | types.InputRequiredResult:
        """A tool's failure is its result (``isError``, the stable code first); the SDK
        would send any other exception's text as a JSON-RPC error of code 0."""
        try:
            return await self._call_tool(ctx, params)
        except MCPError:
            raise
        except Exception as exc:
            return _error(exc)

    async def _call_tool(self, ctx: ServerRequestContext[Any],
                         params: types.CallToolRequestParams
                         ) -> types.CallToolResult | types.InputRequiredResult:
        principal = caller()
        args = params.arguments or {}
        if params.name == FIND_AGENTS.name:
            return await self._find_agents(principal, args)
        if params.name == ASK.name:
            ask = AskArguments(_string(args, "query", required=params.request_state is None)
                               or "", _string(args, "agent"), _string(args, "session"))
        else:
            target = (await self._agent_tools(principal)).get(params.name)
            if target is None:
                raise MCPError(types.INVALID_PARAMS, f"Unknown tool: {params.name}")
            ask = AskArguments(_string(args, "query", required=params.request_state is None)
                               or "", target[0], _string(args, "session"))
        return await self._ask(ctx, params, principal, ask)

    async def _find_agents(self, principal: Principal, args: dict[str, Any]
                           ) -> types.CallToolResult:
        text = _string(args, "text", required=True) or ""
        limit = args.get("limit", 3)
        if not isinstance(limit, int) or isinstance(limit, bool) \
                or not 1 <= limit <= MAX_FIND_AGENTS:
            return _text(f"INVALID_INPUT: limit must be an integer from 1 to {MAX_FIND_AGENTS}",
                         error=True)
        routes = await blocking(agents.route, self.services, principal, text, limit)
        found = []
        for route in routes:
            agent = await blocking(agents.find_agent, self.services, principal, route.agent_id)
            if agent is not None:
                found.append({"agentId": agent.agent_id, "name": agent.name,
                              "description": agent.description,
                              "score": round(float(route.score), 4),
                              "sampleQueries": agent.sample_queries[:5]})
        lines = [f"{a['agentId']} ({a['score']:.2f}): {a['description'] or a['name']}"
                 for a in found] or ["No agent fits."]
        return _text("\n".join(lines), structured={"agents": found})

    async def _ask(self, ctx: ServerRequestContext[Any], params: types.CallToolRequestParams,
                   principal: Principal, args: AskArguments
                   ) -> types.CallToolResult | types.InputRequiredResult:
        text, session_id = args.query, args.session_id
        key = None
        if params.request_state is not None:  # the client answered our elicitation
            state = json.loads(params.request_state)
            session_id = state["session"]
            # The sealed state stays valid for an hour: a replay of it is the same answer,
            # posted (and charged) once.
            question = state.get("question")
            key = f"answer-{question}" if question else None
            answer = (params.input_responses or {}).get("answer")
            if not isinstance(answer, types.ElicitResult) or answer.action != "accept":
                await blocking(tasks.cancel, self.services, principal, session_id,
                               "The user declined to answer.", question)
                return _text(f"You declined to answer; the question is canceled (session "
                             f"{session_id}).", structured={"session": session_id,
                                                           "status": "canceled"})
            text = str((answer.content or {}).get("answer", "")).strip()
            if key and await blocking(self.services.sessions.posted_under, session_id,
                                      key) is None:
                # An answer to a question since ended would be a new query, or answer
                # another question.
                await blocking(tasks.awaited_question, self.services, principal, session_id,
                               question)
        session, turn = await tasks.ask(self.services, principal, text, agent_id=args.agent_id,
                                        session_id=session_id, idempotency_key=key)
        return self._result(ctx, session.session_id, turn)

    def _result(self, ctx: ServerRequestContext[Any], session_id: str, turn: tasks.Turn
                ) -> types.CallToolResult | types.InputRequiredResult:
        reply = turn.reply
        state = turn.state.value
        if reply is None:
            wait = self.services.settings.reply_wait_seconds
            return _text(f"{Timeout.code}: no answer within {wait:g}s; the task goes on in "
                         f"session {session_id}.", error=True,
                         structured={"session": session_id, "status": state})
        if reply.type is MessageType.AWAITING_INPUT:  # not a refusal that kept one
            if _can_elicit(ctx):
                return types.InputRequiredResult(
                    input_requests={"answer": types.ElicitRequest(
                        params=types.ElicitRequestFormParams(message=reply.text,
                                                             requested_schema=ANSWER_SCHEMA))},
                    request_state=json.dumps({"session": session_id,
                                              "question": reply.message_id}))
            return _text(f"The agent asks: {reply.text}\nTo answer, call ask again with "
                         f'session "{session_id}" and the answer as the query.',
                         structured={"session": session_id, "status": state,
                                     "question": reply.text})
        if reply.error_code:
            return _text(f"{reply.error_code}: {reply.text}", error=True,
                         structured={"session": session_id, "status": state,
                                     "error": reply.error_code})
        links: list[types.ContentBlock] = [
            types.ResourceLink(type="resource_link", name=key, mime_type=ref.content_type,
                               uri=self.services.embeds.get_url(ref.content_hash))
            for key, ref in reply.embeds.items()]
        structured = {"session": session_id, "status": state, "text": reply.text,
                      "sentBy": reply.sent_by or PLANNER_ID}
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=reply.text), *links],
            structured_content=structured)


def _can_elicit(ctx: ServerRequestContext[Any]) -> bool:
    """Whether this client answers InputRequiredResult elicitations (2026-07-28 and up,
    with the elicitation capability declared on this request)."""
    capabilities = ctx.session.client_capabilities
    return (is_version_at_least(ctx.protocol_version or "", MODERN_PROTOCOL_VERSIONS[0])
            and capabilities is not None and capabilities.elicitation is not None)


class RequireApiKey(RequireAuthMiddleware):
    """The SDK's check, its refusal in the platform's error shape (UNAUTHENTICATED) with
    the SDK's WWW-Authenticate header, which MCP clients read."""

    async def _send_auth_error(self, send: Send, status_code: int, error: str,
                               description: str) -> None:
        body = json.dumps(rest_body(Unauthenticated(description))).encode()
        challenge = f'Bearer error="{error}", error_description="{description}"'
        await send({"type": "http.response.start", "status": status_code, "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"www-authenticate", challenge.encode())]})
        await send({"type": "http.response.body", "body": body})


class MCPEndpoint:
    """The ASGI endpoint at /mcp (POST only: stateless, so no GET stream or DELETE):
    Bearer API key, then a stateless streamable-HTTP exchange with a session manager
    made for this request."""

    def __init__(self, services: Services) -> None:
        self.mcp = CodeshotMCP(services)
        self._app = AuthenticationMiddleware(
            AuthContextMiddleware(RequireApiKey(self._serve, required_scopes=[])),
            backend=BearerAuthBackend(ApiKeyVerifier(services)))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        manager = StreamableHTTPSessionManager(app=self.mcp.server, stateless=True,
                                               json_response=True)
        async with manager.run():  # run() may be entered once per manager
            await manager.handle_request(scope, receive, send)


def endpoint(services: Services) -> MCPEndpoint:
    return MCPEndpoint(services)

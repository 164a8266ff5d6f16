"""MCP servers as agents: their tools, read at registration, and calls to them.

An MCP server registered as an agent is a Code Shot agent whose Funcs are the server's
tools: ``Ask Func[tool]: {"a": 1}`` calls ``tools/call`` with those JSON arguments, the
tool's JSON schema shown to the model. Calls go through the official ``mcp`` SDK's
streamable-HTTP client over :func:`~codeshot.net.async_http.public_async_client` (checked
addresses only, a byte cap on replies), each bounded as a whole by a deadline, so a
hostile server can neither reach a private address nor hold the runner nor flood it.

Imported only for MCP agents: the SDK adds ~1 s of imports the runner otherwise skips.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from codeshot.errors import (
    AgentCallDropped,
    AgentFailed,
    AgentUnavailable,
    CallTimeout,
    CodeshotError,
    InvalidInput,
    ReplyTooLarge,
)
from codeshot.net.addresses import RefusedAddress, why_unreachable
from codeshot.net.async_http import ReplyTooLong, public_async_client
from codeshot.net.http import CompressedReply
from codeshot.runner.agent_client import MAX_REPLY_BYTES, refused
from codeshot.text import MAX_REPLY_TEXT_BYTES, as_one_line

log = logging.getLogger("codeshot.runner")
T = TypeVar("T")

# What one agent record may hold of a server's tools (a DynamoDB item is 400 KB at most).
MAX_TOOLS = 64
MAX_TOOL_LIST_PAGES = 8
MAX_TOOL_DESCRIPTION = 1_000
MAX_TOOLS_JSON = 100_000  # bytes of all tools' names, descriptions and schemas
_NOT_A_FUNC_NAME = re.compile(r"\W")  # what FUNC_NAME_RE (\w+) does not take


@dataclass(frozen=True)
class McpTool:
    name: str  # the server's name for it
    func: str  # its Func name in the agent's few-shots (FUNC_NAME_RE)
    description: str
    input_schema: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "func": self.func, "description": self.description,
                "input_schema": self.input_schema}

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> McpTool:
        return cls(name=value["name"], func=value["func"], description=value["description"],
                   input_schema=value["input_schema"])


@dataclass(frozen=True)
class McpServerInfo:
    name: str
    instructions: str
    tools: list[McpTool]

    def description(self) -> str:
        """The agent's description when its owner gives none: what its tools do."""
        tools = "; ".join(f"{t.func}: {t.description}" if t.description else t.func
                          for t in self.tools)
        return as_one_line(f"{self.name} (MCP server). Tools: {tools}", MAX_TOOL_DESCRIPTION)


def func_name(tool: str) -> str:
    return _NOT_A_FUNC_NAME.sub("_", tool)


class McpServer:
    """One MCP server, called for one agent (``authorization``: its Authorization header)."""

    def __init__(self, url: str, authorization: str | None, *, timeout: float,
                 allow_loopback: bool) -> None:
        self.url, self.authorization = url, authorization
        self.timeout, self.allow_loopback = timeout, allow_loopback

    def describe(self) -> McpServerInfo:
        """The server's name, instructions and tools (INVALID_INPUT past the caps)."""
        async def read(client: Client) -> McpServerInfo:
            tools: list[types.Tool] = []
            cursor: str | None = None
            for _ in range(MAX_TOOL_LIST_PAGES):
                page = await client.list_tools(cursor=cursor)
                tools += page.tools
                if len(tools) > MAX_TOOLS:
                    raise InvalidInput(f"the MCP server at {self.url} lists more than "
                                       f"{MAX_TOOLS} tools; an agent holds at most {MAX_TOOLS}")
                cursor = page.next_cursor
                if not cursor:
                    break
            info = client.server_info
            return McpServerInfo(name=as_one_line(info.name if info else "", 100) or "MCP server",
                                 instructions=as_one_line(client.instructions or "",
                                                          MAX_TOOL_DESCRIPTION),
                                 tools=self._checked(tools))

        return self._run(read)

    def _checked(self, tools: list[types.Tool]) -> list[McpTool]:
        out = [McpTool(name=t.name, func=func_name(t.name),
                       description=as_one_line(t.description or t.title or "",
                                               MAX_TOOL_DESCRIPTION),
                       input_schema=dict(t.input_schema or {"type": "object"}))
               for t in tools]
        funcs = [t.func for t in out]
        if len(set(funcs)) != len(funcs):
            raise InvalidInput(f"the MCP server at {self.url} has tools whose names differ "
                               "only in characters a Func name cannot hold")
        size = len(json.dumps([t.to_dict() for t in out]).encode())
        if size > MAX_TOOLS_JSON:
            raise InvalidInput(f"the MCP server at {self.url} describes its tools in {size} "
                               f"bytes; an agent holds at most {MAX_TOOLS_JSON}")
        return out

    def call(self, tool: str, arguments_text: str, who: str) -> str:
        """The tool's result as text. Arguments that are not a JSON object, and a result
        the tool marks as an error, are INVALID_INPUT: the model may ask again. ``who``
        names the tool in errors, which users read: not the server's URL (it may carry a
        token), which goes to the log."""
        try:
            arguments = json.loads(arguments_text) if arguments_text.strip() else {}
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict):
            raise InvalidInput(f"{tool} takes its arguments as one JSON object")

        async def call(client: Client) -> str:
            result = await client.call_tool(tool, arguments)
            text = result_text(result)
            if len(text.encode()) > MAX_REPLY_TEXT_BYTES:
                raise ReplyTooLarge(f"MCP tool {tool} sent over {MAX_REPLY_TEXT_BYTES} bytes")
            if result.is_error:
                raise InvalidInput(as_one_line(f"{tool} failed: {text}", 500))
            return text

        try:
            return self._run(call, who)
        except CodeshotError as exc:
            log.info("MCP call to %s failed (%s): %s", self.url, exc.code, exc.message)
            raise

    def _run(self, use: Callable[[Client], Awaitable[T]], who: str | None = None) -> T:
        """``use`` on a fresh connection, within the deadline, errors as codeshot's,
        naming the server as ``who`` (default: by its URL, for its owner registering it)."""
        headers = {"Authorization": self.authorization} if self.authorization else {}

        async def session() -> T:
            http = public_async_client(allow_loopback=self.allow_loopback,
                                       timeout=self.timeout, max_reply_bytes=MAX_REPLY_BYTES,
                                       headers=headers)
            with anyio.fail_after(self.timeout):
                async with http, Client(streamable_http_client(self.url, http_client=http),
                                        read_timeout_seconds=self.timeout) as client:
                    return await use(client)

        try:
            return asyncio.run(session())
        except BaseException as exc:  # the SDK's task groups wrap what went wrong
            raise self._error(exc, who or f"MCP server at {self.url}") from None

    def _error(self, exc: BaseException, who: str) -> BaseException:
        cause = _first_cause(exc)
        if isinstance(cause, CompressedReply):  # the transport's names the URL
            return CompressedReply(who, cause.problem)
        if isinstance(cause, RefusedAddress):  # and this one the host
            return refused(who, self.url, cause)
        if isinstance(cause, CodeshotError):
            return cause
        if isinstance(cause, httpx2.ConnectError | httpx2.ConnectTimeout):  # nothing sent
            return AgentUnavailable(f"{who} is unreachable: {why_unreachable(cause, self.url)}")
        if isinstance(cause, TimeoutError | httpx2.TimeoutException):
            return CallTimeout(f"{who} did not answer within {self.timeout:g}s")
        if isinstance(cause, ReplyTooLong):
            return AgentFailed(f"{who} sent a reply over {MAX_REPLY_BYTES} bytes")
        if isinstance(cause, MCPError):
            said = as_one_line(cause.message, 300)
            if cause.code == types.INVALID_PARAMS:
                return InvalidInput(f"{who} refused the call: {said}")
            return AgentFailed(f"{who} answered error {cause.code}: {said}")
        if isinstance(cause, httpx2.TransportError):  # it may have run the tool
            return AgentCallDropped(f"{who} dropped the call before answering: "
                                    f"{cause.__class__.__name__}")
        if isinstance(cause, Exception):
            # What a server answered beyond that stays in the logs (see handshake.py).
            log.info("%s failed (%s): %r", who, self.url, cause)
            return AgentFailed(f"{who} failed: {cause.__class__.__name__}")
        return exc  # KeyboardInterrupt, SystemExit: not the server's doing


def _first_cause(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = next((e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)),
                   exc.exceptions[0])
    return exc


def result_text(result: types.CallToolResult) -> str:
    """A tool result as the model reads it: its text parts, else its structured content."""
    texts = [block.text for block in result.content if isinstance(block, types.TextContent)]
    if texts:
        return "\n".join(texts)
    if result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    kinds = sorted({block.type for block in result.content})
    return f"(no text: {', '.join(kinds)})" if kinds else ""

"""How a Python function becomes a Func: what it is given, and what its result means.

A Func may be a plain ``def`` or an ``async def`` (run to completion on the call's worker
thread); a streaming Func is a plain generator.

Parameters are bound as in the Fixie 1.0 SDK: by type (``AgentQuery``, ``Message``,
``UserStorage``, ``OAuthHandler``) or by name (``query``/``message``, ``user_storage``,
``oauth_handler``); a lone remaining untyped first parameter gets the Message, a lone
``str`` one its text. Any other parameters are
typed arguments, parsed from the Ask line's text by the engine's Command rules (a JSON
object, the whole text for one parameter, or comma- or space-separated values) and published
with their JSON schema in the handshake.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from codeshot.engine.components import Command, as_result, command, type_hints
from codeshot.errors import ERR_AGENT_UNHANDLED_EXCEPTION, AgentFailed, CodeshotError
from codeshot.sdk.auth import Claims
from codeshot.sdk.oauth import AuthorizationRequired, OAuthHandler, OAuthParams
from codeshot.sdk.user_storage import UserStorage
from codeshot.sdk.wire import (
    UNHANDLED_TEXT,
    AgentException,
    AgentQuery,
    AgentResponse,
    Message,
)

log = logging.getLogger(__name__)

# (query, claims, api_url) -> the value a parameter receives
Injector = Callable[[AgentQuery, Claims, str], Any]

_MESSAGE_BY_TYPE: dict[Any, Injector] = {
    AgentQuery: lambda q, c, u: q,
    Message: lambda q, c, u: q.message,
    str: lambda q, c, u: q.message.text,
}


def _storage(query: AgentQuery, claims: Claims, api_url: str) -> UserStorage:
    return UserStorage(claims, f"{api_url}/api/userstorage")


@dataclass(frozen=True)
class Func:
    name: str
    impl: Callable[..., Any]
    injected: dict[str, Injector]
    arguments: Command | None  # typed parameters, parsed from the message text

    @property
    def description(self) -> str:
        return inspect.getdoc(self.impl) or ""

    @property
    def parameters(self) -> dict[str, Any]:
        return self.arguments.parameters if self.arguments else {"type": "string"}

    def __call__(self, query: AgentQuery, claims: Claims, api_url: str) -> Iterator[AgentResponse]:
        """The replies of one call; any failure surfaces as an AgentException (no traceback)."""
        try:
            kwargs = {name: inject(query, claims, api_url)
                      for name, inject in self.injected.items()}
            if self.arguments is not None:
                kwargs.update(json.loads(as_result(self.arguments.call(query.message.text)).text))
            result = self.impl(**kwargs)
            if inspect.iscoroutine(result):  # an async def Func: Funcs run on worker threads
                result = asyncio.run(result)
            yield from responses(result)
        except AuthorizationRequired as needed:  # OAuthHandler.require_token(): ask the user
            yield needed.to_response()
        except AgentException:
            raise
        except Exception as exc:
            raise as_agent_exception(exc, self.name) from exc


def as_agent_exception(exc: Exception, func_name: str) -> AgentException:
    if isinstance(exc, CodeshotError):
        return AgentException(exc.message, exc.code, exc.message, exc.http_status)
    log.error("Func[%s] failed", func_name, exc_info=exc)
    return AgentException(UNHANDLED_TEXT, ERR_AGENT_UNHANDLED_EXCEPTION,
                          "An unhandled exception occurred while processing the request.")


def responses(result: Any) -> Iterator[AgentResponse]:
    """A result as replies: AgentResponse, Message, str, an iterator of those (streamed);
    None is no reply (ERR_NO_RESPONSE: a Func that forgot to return, not the text
    "null"); bytes as their UTF-8 text (a subprocess's output), never ``b'...'``; anything
    else (numbers, lists, dicts from typed Funcs) as its JSON text."""
    if result is None:
        return
    if isinstance(result, AgentResponse):
        yield result
    elif isinstance(result, Message):
        yield AgentResponse(result)
    elif isinstance(result, str):
        yield AgentResponse(Message(result))
    elif isinstance(result, bytes | bytearray):
        try:
            yield AgentResponse(Message(bytes(result).decode("utf-8")))
        except UnicodeDecodeError:
            raise AgentFailed(f"the Func returned {len(result)} bytes that are not UTF-8 "
                              "text: return text, or the bytes as an Embed (Embed.content)"
                              ) from None
    elif isinstance(result, Iterator):
        for item in result:
            yield from responses(item)
    else:
        yield AgentResponse(Message(json.dumps(result, default=str)))


def _bind(
    params: dict[str, inspect.Parameter], hints: dict[str, Any],
    by_type: Iterable[tuple[Any, Injector]], by_name: Iterable[tuple[str, Injector]],
) -> tuple[str, Injector] | None:
    """The first parameter matching a type, else a name; removed from ``params``."""
    candidates = [(n, inject) for kind, inject in by_type for n in params if hints.get(n) is kind]
    candidates += [(wanted, inject) for wanted, inject in by_name if wanted in params]
    if not candidates:
        return None
    del params[candidates[0][0]]
    return candidates[0]


def _arguments(fn: Callable[..., Any], name: str, params: list[inspect.Parameter],
               hints: dict[str, Any]) -> Command:
    """The engine's Command for ``fn``'s typed parameters; calling it returns them as JSON."""

    def parsed(**kwargs: Any) -> dict[str, Any]:
        return kwargs

    parsed.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    parsed.__annotations__ = {p.name: hints[p.name] for p in params if p.name in hints}
    parsed.__doc__ = fn.__doc__
    return command(parsed, name=name)


def make_func(fn: Callable[..., Any], name: str, oauth_params: OAuthParams | None = None
              ) -> Func:
    """Bind ``fn``'s parameters; TypeError (at registration) for ones it cannot be given.

    ``oauth_params``: the agent's, given to an ``oauth_handler`` parameter (refused without).
    """
    if not callable(fn):
        raise TypeError(f"Func {name} must be a function, got {type(fn).__name__}")
    if inspect.isasyncgenfunction(fn):
        raise TypeError(f"Func {name} is an async generator: stream replies by yielding "
                        "from a plain def, or return one reply from an async def")
    signature = inspect.signature(fn)
    if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in signature.parameters.values()):
        raise TypeError(f"Func {name} cannot take *args or **kwargs")
    hints = {k: v for k, v in type_hints(fn, name).items() if k != "return"}
    params = dict(signature.parameters)
    first = next(iter(params), None)
    message = _bind(params, hints, [(AgentQuery, _MESSAGE_BY_TYPE[AgentQuery]),
                                    (Message, _MESSAGE_BY_TYPE[Message])],
                    [("query", _MESSAGE_BY_TYPE[Message]), ("message", _MESSAGE_BY_TYPE[Message])])
    if message is not None and hints.get(message[0]) in _MESSAGE_BY_TYPE:
        message = (message[0], _MESSAGE_BY_TYPE[hints[message[0]]])  # query: str gets the text
    storage = _bind(params, hints, [(UserStorage, _storage)], [("user_storage", _storage)])

    def _oauth(query: AgentQuery, claims: Claims, api_url: str) -> OAuthHandler:
        assert oauth_params is not None
        return OAuthHandler(oauth_params, claims, api_url, query)

    oauth = _bind(params, hints, [(OAuthHandler, _oauth)], [("oauth_handler", _oauth)])
    if oauth is not None and oauth_params is None:
        raise TypeError(f"Func {name} takes {oauth[0]!r}, so its agent needs oauth_params")
    if message is None and len(params) == 1:
        (only,) = params
        if only in hints and hints[only] is str:
            message = _bind(params, hints, [], [(only, _MESSAGE_BY_TYPE[str])])
        elif only not in hints and only == first:  # Fixie 1.0: the Message
            message = _bind(params, hints, [], [(only, _MESSAGE_BY_TYPE[Message])])
    injected = dict(b for b in (message, storage, oauth) if b is not None)
    if message is not None and params:
        raise TypeError(f"Func {name} takes the message, so it cannot also take "
                        f"typed arguments {sorted(params)}")
    arguments = _arguments(fn, name, list(params.values()), hints) if params else None
    return Func(name, fn, injected, arguments)

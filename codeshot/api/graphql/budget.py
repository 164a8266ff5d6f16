"""How many bytes of messages one GraphQL response carries: Lambda answers 6 MB at most.

Bytes are counted as Lambda's response holds them: API Gateway's proxy result carries our
JSON body as a JSON string, so each quote and backslash of the body is escaped once more
(Python 3.12's runtime, as the API's own JSON, keeps other characters as UTF-8; with
``\\u`` escapes, Strawberry's default, Japanese text took 6 bytes a character instead of
3, and 83 messages stored in 4 MB answered 7.7 MB). A page DynamoDB reads whole is 4 MB
stored, which text of quotes, or of control characters from an agent, makes four to
seven times as much. So a page of messages ends before ``PAGE_BYTES``, and the pages of
one request stop at ``REQUEST_BYTES`` (more is INVALID_INPUT): 20 aliases of a 4 MB page
made one response of 230 MB. Pages are read ``READS_AT_ONCE`` at a time: one at a time,
100 sessions' messages were 100 storage round trips in a row; all at once, a refused
request would still hold every page it asked for.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from codeshot.errors import InvalidInput

RESPONSE_BYTES = 6 * 1024 * 1024 - 16 * 1024  # Lambda's 6 MB, less its status and headers
PAGE_BYTES = 4 * 1024 * 1024
REQUEST_BYTES = 5 * 1024 * 1024
READS_AT_ONCE = 8
T = TypeVar("T")


def encode(data: object, default: Callable[[Any], Any] | None = None) -> str:
    """``data`` as the API's JSON: UTF-8 text as it is, compact."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=default)


def lambda_bytes(body: str) -> int:
    """The bytes ``body`` takes in Lambda's response: a JSON string in its proxy result."""
    return len(json.dumps(body, ensure_ascii=False).encode())


def lambda_size(data: object) -> int:
    """``lambda_bytes(encode(data))`` for JSON ``data``, counted without making the text:
    a field asked for under twenty aliases repeats its value twenty times in the text, but
    not in ``data``, where each value is measured once."""
    measured: dict[int, int] = {}

    def size(value: object) -> int:
        if isinstance(value, str):
            if id(value) not in measured:
                measured[id(value)] = lambda_bytes(encode(value)) - 2
            return measured[id(value)]
        if isinstance(value, dict):  # {"k":v,...}: braces, a colon each, commas between
            return 1 + max(2 * len(value), 1) + sum(size(k) + size(v) for k, v in value.items())
        if isinstance(value, list):
            return 1 + max(len(value), 1) + sum(size(v) for v in value)
        return len(encode(value))  # a number, true, false or null

    return size(data) + 2


class MessagePages:
    """The pages of messages one request has read, in bytes of Lambda's response."""

    def __init__(self) -> None:
        self.used = 0
        self.refused = False
        self._reads = asyncio.Semaphore(READS_AT_ONCE)

    async def take(self, read: Callable[[], Awaitable[Sequence[T]]], size: Callable[[T], int],
                   keep_newest: bool) -> list[T]:
        """What ``read`` returns (time ordered), cut to ``PAGE_BYTES``: the newest kept with
        ``keep_newest``, else the oldest; INVALID_INPUT once the request's pages pass
        ``REQUEST_BYTES`` (and for every page after, unread)."""
        async with self._reads:
            if not self.refused:
                items = await read()
                kept, taken = _fit(reversed(items) if keep_newest else items, size)
                if not self.refused and self.used + taken <= REQUEST_BYTES:
                    self.used += taken
                    return kept[::-1] if keep_newest else kept
                self.refused = True
        raise InvalidInput(f"the messages this request asks for pass {REQUEST_BYTES:,} bytes, "
                           "more than one response can carry: ask for fewer sessions' "
                           "messages at a time")


def _fit(items: Iterable[T], size: Callable[[T], int]) -> tuple[list[T], int]:
    """The first of ``items`` that fit ``PAGE_BYTES`` together, and their bytes; the
    first one always (a page of none would end a pager's walk through the log)."""
    kept: list[T] = []
    taken = 0
    for item in items:
        more = size(item)
        if kept and taken + more > PAGE_BYTES:
            break
        kept.append(item)
        taken += more
    return kept, taken

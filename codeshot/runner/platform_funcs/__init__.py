"""The platform's own Funcs: any Code Shot agent's few-shots may ask them without defining
them (Fixie 1.0's built-ins, ``fixie_*``). An agent's own Func of the same name wins.

Each Func is ``(text, context) -> answer text``; to add one, write it in a module here and
name it in :data:`LIBRARY` and in :data:`codeshot.models.PLATFORM_FUNC_NAMES`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from codeshot.llm.base import LLM
from codeshot.runner.platform_funcs.calc import calc
from codeshot.runner.platform_funcs.clock import local_datetime
from codeshot.runner.platform_funcs.documents import query_corpus, query_embed
from codeshot.runner.platform_funcs.web import http_get

if TYPE_CHECKING:
    from codeshot.runner.corpora import Passage


class EmbedReader(Protocol):
    """The embeds the current query can name by key (the session's and its Funcs')."""

    def keys(self) -> list[str]: ...

    def read(self, key: str) -> tuple[str, bytes]:
        """(content type, bytes); NOT_FOUND for a key the query cannot name."""
        ...


@dataclass(frozen=True)
class FuncContext:
    """What a platform Func may use: the user's settings, the query's embeds, the LLM."""

    time_zone: Callable[[], str]  # the user's IANA time zone (read on use)
    embeds: EmbedReader
    llm: LLM | None  # None: the offline fewshot provider, which is not a language model
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    allow_loopback: bool = False  # URLs on loopback (the local stack only)
    # (question, k) -> the asking agent's corpus passages, best first; None: no corpus
    corpus: Callable[[str, int], list[Passage]] | None = None
    # The query's end (time.monotonic()): a fetch in a call given up on stops then.
    deadline: float | None = None


PlatformFunc = Callable[[str, FuncContext], str]

LIBRARY: dict[str, PlatformFunc] = {
    "fixie_local_datetime": local_datetime,
    "fixie_query_embed": query_embed,
    "fixie_query_corpus": query_corpus,
    "fixie_calc": calc,
    "fixie_http_get": http_get,
}

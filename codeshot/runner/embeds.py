"""The embeds one query's run can name by key: the session's (uploaded, or attached to
earlier answers), the query's, and those its agents' Funcs return.

A Func's embeds become the platform's own at once: ``data:`` URIs are decoded and URLs
fetched under the SSRF rules, then stored immutably on S3 (content-addressed). An embed
that cannot be stored fails the Func call with the reason (AGENT_ERROR: the Func is not
called again, it ran), so it is never dropped silently; the user sees the failure in the
answer.

A reply's embeds are taken all or none, and bounded as a user's message is: at most
``MAX_EMBEDS_PER_MESSAGE`` of them (more: AGENT_ERROR before anything is fetched), at most
``max_bytes`` stored by one query's agents in all (``CODESHOT_MAX_QUERY_EMBED_BYTES``),
none fetched past the query's deadline (TIMEOUT). A reply refused is the agent's failure.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from codeshot.errors import (
    INTERNAL_MESSAGE,
    AgentFailed,
    CallTimeout,
    CodeshotError,
    InvalidInput,
    NotFound,
    ReplyTooLarge,
    Timeout,
)
from codeshot.models import MAX_EMBEDS_PER_MESSAGE, EmbedRef, check_embed_key
from codeshot.runner.fetch import Fetched
from codeshot.store.embeds import EmbedStore, check_content_type
from codeshot.text import as_one_line

log = logging.getLogger(__name__)
EmbedLink = dict[str, str]  # as agents get an embed: {"content_type", "uri"}
# (URL, deadline: time.monotonic() or None) -> its bytes, or the refusal
UrlFetcher = Callable[[str, float | None], Fetched]


def decode_data_uri(uri: str) -> bytes:
    """A base64 ``data:`` URI's bytes: ``data:<type>;base64,...`` or Fixie 1.0's own
    ``data:base64,...``; INVALID_INPUT for anything else."""
    header, _, payload = uri.partition(",")
    if not header.endswith((";base64", ":base64")):
        raise InvalidInput("a data: embed must be base64 (data:<type>;base64,...)")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidInput("a data: embed is not valid base64") from exc


class EmbedBook:
    def __init__(self, store: EmbedStore, fetch: UrlFetcher,
                 given: Mapping[str, EmbedRef] | None = None, *,
                 max_bytes: int | None = None, deadline: float | None = None,
                 lookup: Callable[[str], EmbedRef | None] | None = None) -> None:
        """``given``: the query's own embeds, which every Func call carries; ``max_bytes``:
        what all replies' embeds may add up to; ``deadline``: the query's end
        (``time.monotonic()``); ``lookup``: the session's embed bound under a key, if any
        (for a key named that is not known: the session's older embeds are not read)."""
        self.store, self.fetch, self.lookup = store, fetch, lookup
        self.max_bytes, self.deadline = max_bytes, deadline
        self.ingested = 0  # bytes of the replies' embeds so far, refused ones included
        self._known: dict[str, EmbedRef] = {}
        self._own = dict(given or {})  # the query's, then what its Funcs returned

    def know(self, refs: Iterable[tuple[str, EmbedRef]]) -> None:
        """The session's other embeds read for the query (its newest), oldest first, which
        keys may name too (the query's own win); a key known again is the most recent."""
        for key, ref in refs:
            self._known.pop(key, None)
            self._known[key] = ref

    def _all(self) -> dict[str, EmbedRef]:
        return {**self._known, **self._own}

    def keys(self) -> list[str]:
        return list(self._all())

    def listing(self, limit: int) -> tuple[dict[str, str], int]:
        """At most ``limit`` embeds to list in a prompt (key -> content type): the query's
        own, then the most recently known; and how many more there are. Any key can be
        named, listed or not."""
        ranked = dict(self._own)
        for key, ref in reversed(self._known.items()):
            ranked.setdefault(key, ref)
        listed = dict(itertools.islice(ranked.items(), limit))
        return {key: ref.content_type for key, ref in listed.items()}, len(ranked) - len(listed)

    def read(self, key: str) -> tuple[str, bytes]:
        ref = self._all().get(key)
        if ref is None and self.lookup is not None:
            ref = self.lookup(key)
        if ref is None:
            raise NotFound(f"there is no embed #{key} in this session")
        return ref.content_type, self.store.read(ref.content_hash)

    def links(self, keys: Iterable[str] | None = None) -> dict[str, EmbedLink]:
        """The query's embeds and those its Funcs returned (or just ``keys`` of them), as
        agents get them: signed URLs."""
        return {key: {"content_type": self._own[key].content_type,
                      "uri": self.store.get_url(self._own[key].content_hash)}
                for key in sorted(self._own if keys is None else keys)}

    def refs(self, links: Mapping[str, Any]) -> dict[str, EmbedRef]:
        """The stored embeds behind links this book gave out (an answer's embeds)."""
        return {key: self._own[key] for key in links if key in self._own}

    def ingest(self, embeds: Mapping[str, Any]) -> dict[str, EmbedLink]:
        """Store an agent reply's embeds, all or none; the error names the one that
        cannot be stored."""
        if len(embeds) > MAX_EMBEDS_PER_MESSAGE:  # before a single fetch
            raise AgentFailed(f"the reply carries {len(embeds)} embeds; at most "
                              f"{MAX_EMBEDS_PER_MESSAGE} are taken")
        stored: dict[str, EmbedRef] = {}
        for key, embed in embeds.items():
            if self.deadline is not None and time.monotonic() >= self.deadline:
                raise CallTimeout("this query's time ran out while storing the reply's "
                                  "embeds")
            try:
                check_embed_key(str(key))
                if not isinstance(embed, Mapping):
                    raise InvalidInput("it is not an object with content_type and uri")
                uri = str(embed.get("uri") or "")
                if uri.startswith("data:"):
                    data = decode_data_uri(uri)
                elif uri.startswith(("http://", "https://")):
                    data = self.fetch(uri, self.deadline).data
                else:
                    raise InvalidInput("its uri must be a data: URI or an http(s) URL")
                self.ingested += len(data)
                if self.max_bytes is not None and self.ingested > self.max_bytes:
                    raise ReplyTooLarge(f"this query's agents sent over {self.max_bytes} "
                                        "bytes of embeds in all")
                content_type = check_content_type(str(embed.get("content_type") or ""))
                digest = self.store.put(data, content_type)
            except Exception as exc:
                # The agent ran the call: whatever failed here, calling it again would
                # repeat what it did. A fetch cut off by the deadline is the query's time.
                # Anything unexpected (S3 refusing the write) is told as no more than that:
                # its text holds the platform's internals (ARNs, bucket names).
                failed = CallTimeout if isinstance(exc, Timeout) else AgentFailed
                if isinstance(exc, CodeshotError):
                    why = as_one_line(exc.message, 300)
                else:
                    log.error("storing embed %r failed", key, exc_info=exc)
                    why = INTERNAL_MESSAGE
                raise failed(f"embed #{as_one_line(str(key), 64)} cannot be stored: "
                             f"{why}") from exc
            stored[str(key)] = EmbedRef(content_type=content_type, content_hash=digest,
                                        size=len(data))
        self._own.update(stored)
        return self.links(stored)

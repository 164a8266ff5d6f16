"""The embeds one query's run can name by key: the session's (uploaded, or attached to
earlier answers), the query's, and those its agents' Funcs return.

A Func's embeds become the platform's own at once: ``data:`` URIs are decoded and URLs
fetched under the SSRF rules, then stored immutably on S3 (content-addressed). An embed
that cannot be stored fails the Func call with the reason, so it is never dropped
silently; the user sees the failure in the answer.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from codeshot.errors import CodeshotError, InvalidInput, NotFound
from codeshot.models import EmbedRef, check_embed_key
from codeshot.runner.fetch import Fetched
from codeshot.store.embeds import EmbedStore, check_content_type

EmbedLink = dict[str, str]  # as agents get an embed: {"content_type", "uri"}
UrlFetcher = Callable[[str], Fetched]  # URL -> its bytes, or the refusal


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
                 given: Mapping[str, EmbedRef] | None = None) -> None:
        """``given``: the query's own embeds, which every Func call carries."""
        self.store, self.fetch = store, fetch
        self._known: dict[str, EmbedRef] = {}
        self._own = dict(given or {})  # the query's, then what its Funcs returned

    def know(self, refs: Mapping[str, EmbedRef]) -> None:
        """The session's other embeds, which keys may name too (the query's own win)."""
        self._known.update(refs)

    def _all(self) -> dict[str, EmbedRef]:
        return {**self._known, **self._own}

    def keys(self) -> list[str]:
        return list(self._all())

    def content_types(self) -> dict[str, str]:
        return {key: ref.content_type for key, ref in self._all().items()}

    def read(self, key: str) -> tuple[str, bytes]:
        ref = self._all().get(key)
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
        """Store a Func reply's embeds; the error names the one that cannot be stored."""
        for key, embed in embeds.items():
            check_embed_key(str(key))
            if not isinstance(embed, Mapping):
                raise InvalidInput(f"embed {key!r} is not an object with content_type and uri")
            uri = str(embed.get("uri") or "")
            try:
                if uri.startswith("data:"):
                    data = decode_data_uri(uri)
                elif uri.startswith(("http://", "https://")):
                    data = self.fetch(uri).data
                else:
                    raise InvalidInput("its uri must be a data: URI or an http(s) URL")
                content_type = check_content_type(str(embed.get("content_type") or ""))
                digest = self.store.put(data, content_type)
            except CodeshotError as exc:
                raise type(exc)(f"embed #{key} cannot be stored: {exc.message}") from exc
            self._own[str(key)] = EmbedRef(content_type=content_type, content_hash=digest,
                                           size=len(data))
        return self.links(str(key) for key in embeds)

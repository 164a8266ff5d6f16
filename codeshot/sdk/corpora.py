"""Fixie 1.0's document corpus names: an agent may declare URL corpora and custom corpus
Funcs, and they are sent in its handshake (``corpora``) and kept on its registry record.

The platform reads URL corpora and searches them for ``Func[fixie_query_corpus]``
(:mod:`codeshot.runner.corpora`); custom corpus Funcs are declared but not read yet. The
data classes have Fixie's fields so agents written for them load.
"""

from __future__ import annotations

import base64
import dataclasses
import warnings
from typing import Any

from pydantic.dataclasses import dataclass


@dataclass
class CorpusRequest:
    """What the platform asks a custom corpus Func for: a partition and a page of it."""

    partition: str | None = None
    page_token: str | None = None


@dataclass
class CorpusPartition:
    partition: str
    first_page_token: str | None = None


@dataclass
class CorpusDocument:
    source_name: str
    content: bytes
    encoding: str = "UTF-8"
    mime_type: str = "text/plain"

    @property
    def text(self) -> str:
        return self.content.decode(self.encoding)


@dataclass
class CorpusPage:
    documents: list[CorpusDocument]
    next_page_token: str | None = None


@dataclass
class CorpusResponse:
    partitions: list[CorpusPartition] | None = None
    page: CorpusPage | None = None

    def to_wire(self) -> dict[str, Any]:
        """Fixie's JSON shape: document contents in base64."""
        body = dataclasses.asdict(self)
        for document in (body.get("page") or {}).get("documents", []):
            document["content"] = base64.b64encode(document["content"]).decode()
        return body


@dataclass
class CustomCorpus:
    """A corpus loaded through a Func registered with ``@agent.register_corpus_func``."""

    func_name: str

    def to_wire(self) -> dict[str, Any]:
        return {"func_name": self.func_name}


@dataclass
class DocumentLoader:
    """Deprecated in Fixie 1.0 (it did nothing there either); kept so agents naming it load."""

    name: str

    def __post_init__(self) -> None:
        warnings.warn("DocumentLoader does nothing: use @agent.register_corpus_func for "
                      "custom document loading", DeprecationWarning, stacklevel=3)


@dataclass
class UrlDocumentCorpus:
    """Documents from URLs; a trailing ``*`` (``https://example.com/*``) means the site
    below it, ``exclude_patterns`` are wildcards of URLs to skip."""

    urls: list[str]
    exclude_patterns: list[str] | None = None
    auth_token_func: str | None = None
    loader: DocumentLoader | None = None

    def to_wire(self) -> dict[str, Any]:
        return {"auth_token_func": self.auth_token_func, "exclude_patterns": self.exclude_patterns,
                "loader": None if self.loader is None else {"name": self.loader.name},
                "urls": list(self.urls)}


DocumentCorpus = UrlDocumentCorpus  # Fixie 1.0's older name

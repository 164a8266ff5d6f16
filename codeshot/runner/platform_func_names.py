"""The names of the platform's own Funcs (:data:`codeshot.runner.platform_funcs.LIBRARY`)
without their code: registration checks few-shots against the names alone, so the
register function neither imports nor can reach what the Funcs call (corpora, the LLM,
the usage table its role cannot touch)."""

from __future__ import annotations

PLATFORM_FUNC_NAMES = frozenset({"fixie_local_datetime", "fixie_query_embed",
                                 "fixie_query_corpus", "fixie_calc", "fixie_http_get"})

"""The GraphQL API: ``types`` and ``inputs``, ``queries`` and ``mutations`` (thin: each
authenticates through the ``context`` and calls one use case), assembled in ``schema``."""

from codeshot.api.graphql.context import Context
from codeshot.api.graphql.schema import build_schema

__all__ = ["Context", "build_schema"]

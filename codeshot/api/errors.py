"""Stable error codes on the wire: GraphQL ``extensions.code`` and REST error bodies."""

from __future__ import annotations

import logging
from typing import Any

from graphql.error import GraphQLError
from pydantic import ValidationError
from strawberry.extensions import MaskErrors

from codeshot.errors import INTERNAL_MESSAGE, CodeshotError, InvalidInput, throttled

log = logging.getLogger("codeshot.api")


def as_codeshot_error(exc: BaseException | None) -> CodeshotError | None:
    if isinstance(exc, CodeshotError):
        return exc
    if isinstance(exc, UnicodeError):  # bodies that are not UTF-8, lone surrogates
        return InvalidInput("text must be valid UTF-8 without lone surrogates")
    if isinstance(exc, RecursionError):  # JSON (or a query) nested beyond any use
        return InvalidInput("the request is nested too deeply")
    busy = throttled(exc)
    if busy is not None:
        return busy
    if isinstance(exc, ValidationError):
        if not exc.errors():
            return InvalidInput("invalid value")
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return InvalidInput(f"{where}: {first['msg']}".strip(": "))
    return None


def rest_body(error: CodeshotError) -> dict[str, Any]:
    return {"error": error.to_dict()}


class ErrorCodes(MaskErrors):
    """Give every GraphQL error a stable code; never show a stack trace or internals."""

    def __init__(self) -> None:
        super().__init__(error_message=INTERNAL_MESSAGE)

    def _process_errors(self, errors: list[GraphQLError]) -> list[GraphQLError]:
        out = []
        for error in errors:
            original = error.original_error
            known = as_codeshot_error(original)
            if known is not None:
                code, message = known.code, known.message
                extensions = {"code": code, **({"details": known.details} if known.details
                                               else {})}
            elif original is None or isinstance(original, GraphQLError):
                # Syntax, validation, depth limit, a variable of the wrong type or missing
                # (graphql-core's own error as the original): the query is at fault.
                message, extensions = error.message, {"code": InvalidInput.code}
            else:
                log.error("unexpected error in %s", error.path, exc_info=original)
                message, extensions = INTERNAL_MESSAGE, {"code": CodeshotError.code}
            out.append(GraphQLError(message, nodes=error.nodes, source=error.source,
                                    positions=error.positions, path=error.path,
                                    extensions=extensions))
        return out

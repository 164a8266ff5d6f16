"""The schema: every Fixie 1.0 operation (docs/fixie-wire-contract.md) plus our own,
with limits on what one request may ask for and stable error codes."""

from __future__ import annotations

from typing import Any

import strawberry
from graphql.error import GraphQLError
from strawberry.extensions import MaxAliasesLimiter, MaxTokensLimiter, QueryDepthLimiter

from codeshot.api.errors import ErrorCodes
from codeshot.api.graphql.mutations import Mutation
from codeshot.api.graphql.queries import Query


class CodeshotSchema(strawberry.Schema):
    def process_errors(self, errors: list[GraphQLError], execution_context: Any = None) -> None:
        return None  # ErrorCodes logs the unexpected ones; expected ones are not news


schema = CodeshotSchema(
    query=Query,
    mutation=Mutation,
    # Our types hold no cycles, so depth bounds little; tokens and aliases bound the
    # amplification a single request can ask for.
    extensions=[
        lambda: QueryDepthLimiter(max_depth=10),
        lambda: MaxAliasesLimiter(max_alias_count=20),
        lambda: MaxTokensLimiter(max_token_count=2000),
        ErrorCodes,
    ],
)

"""The schema: every Fixie 1.0 operation (docs/fixie-wire-contract.md) plus our own,
with limits on what one request may ask for (depth, tokens, aliases, storage reads) and
stable error codes; introspection can be turned off (the CDK app does)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import strawberry
from graphql import DocumentNode, OperationDefinitionNode, ValidationRule
from graphql.error import GraphQLError
from strawberry.extensions import (
    AddValidationRules,
    DisableIntrospection,
    MaxAliasesLimiter,
    MaxTokensLimiter,
    QueryDepthLimiter,
    SchemaExtension,
)

from codeshot.api.errors import ErrorCodes
from codeshot.api.graphql.cost import cost_limit_rule
from codeshot.api.graphql.mutations import Mutation
from codeshot.api.graphql.queries import Query


class _OneOperation(ValidationRule):
    """A document of several operations needs the request to name the one to run (the
    GraphQL spec's rule; Strawberry ran the first, a mutation perhaps)."""

    def enter_document(self, node: DocumentNode, *_: Any) -> None:
        if sum(isinstance(d, OperationDefinitionNode) for d in node.definitions) > 1:
            self.report_error(GraphQLError(
                "this document holds several operations: name the one to run "
                "(operationName)", node))


class OperationNamed(SchemaExtension):
    def on_operation(self) -> Iterator[None]:
        context = self.execution_context
        if context.operation_name is None:
            context.validation_rules = (*context.validation_rules, _OneOperation)
        yield


class CodeshotSchema(strawberry.Schema):
    def process_errors(self, errors: list[GraphQLError], execution_context: Any = None) -> None:
        return None  # ErrorCodes logs the unexpected ones; expected ones are not news


@functools.cache
def build_schema(introspection: bool, max_cost: int, long_poll_reads: int) -> CodeshotSchema:
    """The schema with these settings (CODESHOT_GRAPHQL_INTROSPECTION, _MAX_COST; the
    reads of a long poll of CODESHOT_REPLY_WAIT_SECONDS)."""
    extensions: list[Any] = [
        # Our types hold no cycles, so depth bounds little; tokens, aliases and the cost
        # rule bound the work a single request can ask for.
        lambda: QueryDepthLimiter(max_depth=10),
        lambda: MaxAliasesLimiter(max_alias_count=20),
        lambda: MaxTokensLimiter(max_token_count=2000),
        lambda: AddValidationRules([cost_limit_rule(max_cost, long_poll_reads)]),
        OperationNamed,
        ErrorCodes,
    ]
    if not introspection:
        extensions.insert(0, DisableIntrospection)
    return CodeshotSchema(query=Query, mutation=Mutation, extensions=extensions)

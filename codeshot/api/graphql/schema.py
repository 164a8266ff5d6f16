"""The schema: every Fixie 1.0 operation (docs/fixie-wire-contract.md) plus our own,
with limits on what one request may ask for (depth, tokens, aliases, storage reads) and
stable error codes; introspection can be turned off (the CDK app does)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import strawberry
from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    InlineFragmentNode,
    OperationDefinitionNode,
    SelectionSetNode,
    ValidationRule,
)
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

MAX_EXPANDED_FIELDS = 2_000  # fields a document asks for, its fragments spread out


def expanded_fields(document: DocumentNode, most: int = MAX_EXPANDED_FIELDS) -> int:
    """How many fields the document's operations ask for with every fragment spread out
    (counting stops past ``most``). Each fragment is sized once: spreading out each use
    again, as the validation rules do, doubles with every fragment of a chain that
    spreads the next twice (25 such fragments, 1.3 KB, were minutes of validation)."""
    fragments = {d.name.value: d for d in document.definitions
                 if isinstance(d, FragmentDefinitionNode)}
    sized: dict[str, int] = {}

    def size(selections: SelectionSetNode | None, open_: frozenset[str]) -> int:
        total = 0
        for selection in selections.selections if selections else ():
            if isinstance(selection, FieldNode):
                total += 1 + size(selection.selection_set, open_)
            elif isinstance(selection, InlineFragmentNode):
                total += size(selection.selection_set, open_)
            elif isinstance(selection, FragmentSpreadNode):
                name = selection.name.value
                if name in open_ or name not in fragments:
                    continue  # a cycle or an unknown fragment: validation refuses it
                if name not in sized:
                    sized[name] = size(fragments[name].selection_set, open_ | {name})
                total += sized[name]
            if total > most:
                break
        return total

    total = 0
    for definition in document.definitions:
        if isinstance(definition, OperationDefinitionNode) and total <= most:
            total += size(definition.selection_set, frozenset())
    return total


class ExpansionLimit(SchemaExtension):
    """Refuses a document that spreads out into too many fields before any validation
    rule walks it (they spread fragments out again at every use)."""

    def on_validate(self) -> Iterator[None]:
        context = self.execution_context
        document = context.graphql_document
        if document is not None and expanded_fields(document) > MAX_EXPANDED_FIELDS:
            context.pre_execution_errors = [GraphQLError(  # validation is then skipped
                f"this document asks for more than {MAX_EXPANDED_FIELDS} fields once its "
                "fragments are spread out")]
        yield


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
        # Our types hold no cycles, so depth bounds little; tokens, the fields a document
        # spreads out to, aliases and the cost rule bound the work one request can ask for.
        ExpansionLimit,
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

"""What one GraphQL request may cost: resolver calls that read storage, counted before
anything runs.

Each field that reads DynamoDB or S3 costs its reads (1; a page of ``messages``, which
DynamoDB ends at 1 MB, up to 4), multiplied by the page sizes of the lists it sits in (a
``limit`` argument, or the list's default page; a variable counts as the largest page).
``allSessions { messages embeds }`` is 1 + 50 x (4 + 1); twenty aliases of it, 5,020,
are refused before the first read. A long poll (``messages(waitSeconds)``) reads until a
message comes or the wait ends: it costs the reads of the longest wait as well, so
``allSessions { messages(waitSeconds: 25) }`` cannot poll 50 sessions at once. So does a
``sendSessionMessage`` that waits for its reply. Mutations run one after another, so a
mutation request waits once at most: for one reply, or one long poll anywhere in its
results (twenty waiting aliases held a worker for 500 s; nine ``createSession { session
{ messages(waitSeconds: 25) } }``, 225 s).
Validation rejects a request over the limit with INVALID_INPUT, naming its cost.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from graphql import (
    BooleanValueNode,
    FieldNode,
    FloatValueNode,
    FragmentSpreadNode,
    GraphQLError,
    GraphQLObjectType,
    InlineFragmentNode,
    IntValueNode,
    ObjectValueNode,
    OperationDefinitionNode,
    OperationType,
    SelectionSetNode,
    ValidationRule,
    VariableNode,
    get_named_type,
)

from codeshot.usecases import paging
from codeshot.usecases.agents import MAX_ROUTES

# (type, field) -> the page it returns, for lists of objects whose fields read storage
PAGES: dict[tuple[str, str], paging.PageSize] = {
    ("Query", "allAgents"): paging.AGENTS,
    ("Query", "allSessions"): paging.SESSIONS,
    ("Query", "route"): paging.PageSize(3, MAX_ROUTES),
    ("SessionType", "messages"): paging.MESSAGES,
    ("SessionType", "embeds"): paging.EMBEDS,
}
PAGE_ARGUMENT = {("Query", "route"): "k"}
# Fields whose resolver reads storage, and its reads: every root field (1), and these.
READS = {("SessionType", "messages"): paging.MESSAGES.reads,
         ("SessionType", "embeds"): paging.EMBEDS.reads,
         ("AgentType", "corpusStatus"): 1, ("AgentType", "dailyUsedTokens"): 1}
LONG_POLLS = {("SessionType", "messages"): "waitSeconds"}  # field -> its wait argument
# Mutations that wait for a reply unless their input says ``wait: false``: field -> input
REPLY_WAITS = {("Mutation", "sendSessionMessage"): "messageData"}


def _waits_for_reply(type_name: str, node: FieldNode) -> bool:
    name = REPLY_WAITS.get((type_name, node.name.value))
    if name is None:
        return False
    for argument in node.arguments or ():
        if argument.name.value == name and isinstance(argument.value, ObjectValueNode):
            for field in argument.value.fields:
                if field.name.value == "wait":
                    return not (isinstance(field.value, BooleanValueNode)
                                and not field.value.value)
    return True  # the default waits; so may a variable


def _waits(type_name: str, node: FieldNode) -> bool:
    if _waits_for_reply(type_name, node):
        return True
    name = LONG_POLLS.get((type_name, node.name.value))
    for argument in node.arguments or ():
        if argument.name.value == name:
            value = argument.value
            return not (isinstance(value, IntValueNode | FloatValueNode)
                        and float(value.value) <= 0)
    return False


def _page(type_name: str, node: FieldNode) -> int:
    size = PAGES.get((type_name, node.name.value))
    if size is None:
        return 1
    name = PAGE_ARGUMENT.get((type_name, node.name.value), "limit")
    for argument in node.arguments or ():
        if argument.name.value == name:
            if isinstance(argument.value, IntValueNode):
                return max(1, min(int(argument.value.value), size.maximum))
            if isinstance(argument.value, VariableNode):
                return size.maximum
    return size.default


def cost_limit_rule(max_cost: int, long_poll_reads: int) -> type[ValidationRule]:
    """``long_poll_reads``: what the longest long poll reads."""

    class CostLimit(ValidationRule):
        def enter_operation_definition(self, node: OperationDefinitionNode, *_: Any) -> None:
            root = self.context.schema.get_root_type(node.operation)
            if root is None:
                return
            if node.operation == OperationType.MUTATION:
                waiting = [n for n, inner, through in self._selected(node.selection_set, root)
                           if self._waits_within(n, root, inner, through)]
                if len(waiting) > 1:  # they would run one after another, each its whole wait
                    self.report_error(GraphQLError(
                        f"this request would wait {len(waiting)} times, one after another "
                        "(for a reply, or messages(waitSeconds)); a request waits for one "
                        "at most: send the others with wait: false", node))
            cost = self._cost(node.selection_set, root, 1, frozenset(), is_root=True)
            if cost > max_cost:
                self.report_error(GraphQLError(
                    f"this request would make {cost} storage reads; the limit per request is "
                    f"{max_cost}: ask for smaller pages (limit) or fewer fields", node))

        def _selected(self, selections: SelectionSetNode | None, parent: GraphQLObjectType,
                      spread: frozenset[str] = frozenset()
                      ) -> Iterator[tuple[FieldNode, GraphQLObjectType | None, frozenset[str]]]:
            """The fields selected on ``parent``, fragments' included, each with its object
            type (None: not an object) and the fragments its path went through (a cycle,
            which another rule reports, must not recurse forever here)."""
            for selection in selections.selections if selections else ():
                if isinstance(selection, FieldNode):
                    field = parent.fields.get(selection.name.value)
                    if field is None:
                        continue  # another rule reports unknown fields
                    inner = get_named_type(field.type)
                    yield selection, inner if isinstance(inner, GraphQLObjectType) else None, spread
                elif isinstance(selection, InlineFragmentNode):
                    yield from self._selected(selection.selection_set, parent, spread)
                elif isinstance(selection, FragmentSpreadNode):
                    name = selection.name.value
                    fragment = self.context.get_fragment(name)
                    if fragment is not None and name not in spread:
                        yield from self._selected(fragment.selection_set, parent,
                                                  spread | {name})

        def _waits_within(self, node: FieldNode, parent: GraphQLObjectType,
                          inner: GraphQLObjectType | None, spread: frozenset[str]) -> bool:
            """``node`` or a field in its result waits."""
            return _waits(parent.name, node) or (inner is not None and any(
                self._waits_within(n, inner, i, s)
                for n, i, s in self._selected(node.selection_set, inner, spread)))

        def _cost(self, selections: SelectionSetNode | None, parent: GraphQLObjectType,
                  multiplier: int, spread: frozenset[str], is_root: bool = False) -> int:
            total = 0
            for node, inner, through in self._selected(selections, parent, spread):
                key = (parent.name, node.name.value)
                if is_root or key in READS:
                    wait = long_poll_reads - 1 if _waits(parent.name, node) else 0
                    total += multiplier * (READS.get(key, 1) + wait)
                if inner is not None:
                    total += self._cost(node.selection_set, inner,
                                        multiplier * _page(parent.name, node), through)
            return total

    return CostLimit

"""The agent registry: one item per agent, keyed "owner/handle"."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from codeshot.errors import Conflict, InvalidInput, NotFound
from codeshot.models import Agent, utcnow
from codeshot.settings import Settings
from codeshot.store.base import Repository
from codeshot.store.dynamo import (
    MAX_ITEM_BYTES,
    cancelled_by,
    from_item,
    is_condition_failure,
    item_bytes,
    lookup_key,
    to_item,
)
from codeshot.store.tables import REGISTRY, REGISTRY_VERSION_ID

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient

T = TypeVar("T")


def _to_item(agent: Agent) -> dict[str, Any]:
    values = agent.to_dict(exclude=frozenset({"embeddings"}))
    values["embeddings"] = agent.embeddings
    return to_item(values)


# What the write adds to an agent as checked (its MCP secret's name, its time): kept free.
WRITE_MARGIN = 1_024
MAX_AGENT_BYTES = MAX_ITEM_BYTES - WRITE_MARGIN


def check_size(agent: Agent) -> Agent:
    """INVALID_INPUT unless the agent fits one DynamoDB item: every field within its cap
    may still not (CJK few-shots are 3 bytes a character; vectors 4 bytes a dimension)."""
    size = item_bytes(_to_item(agent))
    if size > MAX_AGENT_BYTES:
        raise InvalidInput(f"agent {agent.agent_id} would take {size:,} bytes stored; an agent "
                           f"takes at most {MAX_AGENT_BYTES:,} (its few-shots, base prompt, "
                           "sample queries and their vectors): make them shorter",
                           limit=MAX_AGENT_BYTES)
    return agent


VERSION_ID = REGISTRY_VERSION_ID  # bumped on every change, so caches know to reload
# Vectors the router keeps beside the agents (the no-agent examples, per embedder), so
# each runner container reads them instead of embedding them again: keys start with "#",
# which no agent id does, and items have no handle, owner or published flag, so no
# listing or scan of agents meets them.
ROWS_PREFIX = "#rows#"
ROWS_PART_BYTES = 300_000  # one item's share of the rows: DynamoDB items hold 400 KB


class AgentRegistry(Repository):
    table = REGISTRY

    def __init__(self, settings: Settings, dynamodb: DynamoDBClient | None = None) -> None:
        super().__init__(settings, dynamodb)
        # What this process read, with the registry version it read it at: see _current()
        self._listed: dict[str, tuple[int, list[Agent]]] = {}
        self._registrations: dict[str, tuple[int, int | None]] = {}

    def _current(self, cache: dict[str, tuple[int, T]], key: str, read: Callable[[], T]) -> T:
        """``read()``, kept in ``cache`` until a write moves the registry's version: one
        consistent GetItem of that small item otherwise. The version is read first, so a
        write between the two only moves it again."""
        version = self.version()
        cached = cache.get(key)
        if cached is None or cached[0] != version:
            cached = (version, read())
            cache[key] = cached
        return cached[1]

    def _bump(self) -> None:
        self.db.update_item(
            TableName=self.table_name,
            Key={"agent_id": {"S": VERSION_ID}},
            UpdateExpression="ADD version :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
        )

    def version(self) -> int:
        item = self.db.get_item(
            TableName=self.table_name, Key={"agent_id": {"S": VERSION_ID}}, ConsistentRead=True
        ).get("Item")
        return int(item["version"]["N"]) if item else 0

    def _rows_part(self, key: str, part: int) -> dict[str, Any] | None:
        item: dict[str, Any] | None = self.db.get_item(
            TableName=self.table_name, Key={"agent_id": {"S": f"{ROWS_PREFIX}{key}#{part}"}},
            ConsistentRead=True,  # the parts the first one counts are all there
        ).get("Item")
        return item

    def rows(self, key: str, version: str) -> bytes | None:
        """Vectors stored with :meth:`put_rows` under ``key`` at ``version``, or None."""
        first = self._rows_part(key, 0)
        if first is None or first["version"]["S"] != version:
            return None
        parts = [first]
        for i in range(1, int(first["parts"]["N"])):
            part = self._rows_part(key, i)
            # Gone, or a writer of another version is midway: never a mixed matrix.
            if part is None or part["version"]["S"] != version:
                return None
            parts.append(part)
        return b"".join(p["data"]["B"] for p in parts)

    def put_rows(self, key: str, version: str, data: bytes) -> None:
        """Keep ``data`` under ``key`` in place of any other version (a new example list
        rewrites the same items; parts past a shorter one's count stay, unread), in parts:
        the first written last, so a reader that finds it at this version finds every
        part. Same version, same bytes: writers may race."""
        chunks = [data[i:i + ROWS_PART_BYTES]
                  for i in range(0, len(data), ROWS_PART_BYTES)] or [b""]
        for part in reversed(range(len(chunks))):
            item: dict[str, Any] = {"agent_id": {"S": f"{ROWS_PREFIX}{key}#{part}"},
                                    "version": {"S": version}, "data": {"B": chunks[part]}}
            if part == 0:
                item["parts"] = {"N": str(len(chunks))}
            self.db.put_item(TableName=self.table_name, Item=item)

    def scan_all(self) -> list[Agent]:
        """Every agent (for the router's index), page by page."""
        return self._scan()

    def _scan(self, **options: Any) -> list[Agent]:
        kwargs: dict[str, Any] = {
            "TableName": self.table_name,
            "FilterExpression": "attribute_exists(handle)",
            **options,
        }
        agents: list[Agent] = []
        while True:
            out = self.db.scan(**kwargs)
            agents += [Agent.from_dict(from_item(i)) for i in out.get("Items", [])]
            if "LastEvaluatedKey" not in out:
                return agents
            kwargs["ExclusiveStartKey"] = out["LastEvaluatedKey"]

    def create(self, agent: Agent) -> Agent:
        check_size(agent)
        try:
            self.db.put_item(
                TableName=self.table_name,
                Item=_to_item(agent),
                ConditionExpression="attribute_not_exists(agent_id)",
            )
        except self.db.exceptions.ConditionalCheckFailedException as exc:
            raise Conflict(f"agent {agent.agent_id} already exists") from exc
        self._bump()
        return agent

    def replace(self, agent: Agent, *, previous_id: str | None = None,
                read_as: Agent | None = None) -> Agent:
        """Write an existing agent back (optionally under a new id, for renames; or only if
        it is still as ``read_as``, else CONFLICT: a change made from what was read)."""
        # Compared as stored: the same text, whatever the datetime's precision.
        modified = _to_item(read_as)["modified"] if read_as else None
        agent = check_size(agent.replace(modified=utcnow()))  # a revision may tip it over
        condition: dict[str, Any] = {"ConditionExpression": "attribute_exists(agent_id)"}
        if modified:
            condition = {"ConditionExpression": "#m = :m",
                         "ExpressionAttributeNames": {"#m": "modified"},
                         "ExpressionAttributeValues": {":m": modified}}
        if previous_id and previous_id != agent.agent_id:
            moves: list[Any] = [
                {"Put": {"TableName": self.table_name, "Item": _to_item(agent),
                         "ConditionExpression": "attribute_not_exists(agent_id)"}},
                # As read: a change made meanwhile is kept.
                {"Delete": {"TableName": self.table_name,
                            "Key": {"agent_id": {"S": previous_id}}, **condition}},
            ]
            try:
                self.db.transact_write_items(TransactItems=moves)
            except Exception as exc:
                if not is_condition_failure(exc):
                    raise
                if cancelled_by(exc)[:1] == ["ConditionalCheckFailed"]:
                    raise Conflict(f"agent {agent.agent_id} already exists") from exc
                raise Conflict(f"agent {previous_id} changed meanwhile: try again") from exc
            self._bump()
            return agent
        try:
            self.db.put_item(TableName=self.table_name, Item=_to_item(agent), **condition)
        except self.db.exceptions.ConditionalCheckFailedException as exc:
            if modified:
                raise Conflict(f"agent {agent.agent_id} changed meanwhile: try again") from exc
            raise NotFound(f"agent {agent.agent_id} not found") from exc
        self._bump()
        return agent

    def keep_embeddings(self, agent: Agent, read_as: Agent) -> bool:
        """Store ``agent``'s vectors (another model's than ``read_as``'s) in its item if it
        is still as read. Derived data: neither its ``modified`` time nor the registry's
        version moves (no process has anything to reload for it). False when it changed
        or went meanwhile (its write embedded it) or the vectors would not fit its item."""
        try:
            check_size(agent)
        except InvalidInput:
            return False
        item = _to_item(agent)
        try:
            self.db.update_item(
                TableName=self.table_name, Key={"agent_id": {"S": agent.agent_id}},
                UpdateExpression="SET #e = :e, #em = :em", ConditionExpression="#m = :m",
                ExpressionAttributeNames={"#e": "embeddings", "#em": "embedding_model",
                                          "#m": "modified"},
                ExpressionAttributeValues={":e": item["embeddings"],
                                           ":em": item["embedding_model"],
                                           ":m": _to_item(read_as)["modified"]})
        except self.db.exceptions.ConditionalCheckFailedException:
            return False
        return True

    def get(self, agent_id: str) -> Agent:
        if lookup_key(agent_id, "agent").startswith("#"):  # the version counter, rows
            raise NotFound(f"agent {agent_id} not found")
        item = self.db.get_item(
            TableName=self.table_name, Key={"agent_id": {"S": agent_id}}, ConsistentRead=True
        ).get("Item")
        if not item:
            raise NotFound(f"agent {agent_id} not found")
        return Agent.from_dict(from_item(item))

    def registration(self, agent_id: str) -> int | None:
        """The agent's :attr:`~codeshot.models.Agent.registration`, None if no agent has
        the id: read again only when a write moved the registry's version, otherwise one
        consistent GetItem of that small item (user storage checks it on every call; an
        agent's item, with its vectors, is many read units)."""
        def read() -> int | None:
            try:
                return self.get(agent_id).registration
            except NotFound:
                return None

        return self._current(self._registrations, agent_id, read)

    def delete(self, agent_id: str, owner: str) -> None:
        lookup_key(agent_id, "agent")
        try:
            self.db.delete_item(
                TableName=self.table_name,
                Key={"agent_id": {"S": agent_id}},
                ConditionExpression="#o = :owner",
                ExpressionAttributeNames={"#o": "owner"},
                ExpressionAttributeValues={":owner": {"S": owner}},
            )
        except self.db.exceptions.ConditionalCheckFailedException as exc:
            # Someone else's agent and a missing one look the same to the caller. Bumped
            # all the same: a retry whose first try deleted the item but failed to bump
            # would otherwise leave every process's cache holding the deleted agent.
            self._bump()
            raise NotFound(f"agent {agent_id} not found") from exc
        self._bump()

    def listed(self) -> list[Agent]:
        """Every agent without its vectors, as of the registry's version: scanned again
        only when a write moved it, otherwise one consistent GetItem (listings and the
        public planner card scanned the whole table on every request)."""
        return self._current(self._listed, "", self._scan_without_vectors)

    def _scan_without_vectors(self) -> list[Agent]:
        fields = [f.name for f in dataclasses.fields(Agent)
                  if f.name not in ("embeddings", "embedding_model")]
        return self._scan(
            ProjectionExpression=", ".join(f"#f{i}" for i in range(len(fields))),
            ExpressionAttributeNames={f"#f{i}": name for i, name in enumerate(fields)},
            # Kept until the next write: never a scan that missed the write it follows.
            ConsistentRead=True,
        )

    def all_agents(self, viewer: str | None) -> list[Agent]:
        """Published agents plus the viewer's own."""
        return [a for a in self.listed() if a.published or (viewer and a.owner == viewer)]


class AgentCache:
    """Agents by id, kept per container until the registry changes: a warm runner reads
    an agent once, not on every call."""

    def __init__(self, registry: AgentRegistry) -> None:
        self.registry = registry
        self._agents: dict[str, Agent] = {}
        self._version: int | None = None

    def refresh(self) -> None:
        """Forget every agent if the registry changed since the last refresh (one
        consistent GetItem of its version). The runner refreshes once a query, so no query
        calls an agent as it was registered before a change it can see: a call token
        stamped with a deleted registration would be refused by the agent registered
        anew at its id (its OAuth and user storage calls)."""
        version = self.registry.version()
        if version != self._version:
            self._agents.clear()
            self._version = version

    def get(self, agent_id: str) -> Agent:
        agent = self._agents.get(agent_id)
        if agent is None:
            agent = self._agents[agent_id] = self.registry.get(agent_id)
        return agent

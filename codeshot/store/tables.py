"""The one definition of every DynamoDB table, key, index and TTL, the embeds bucket and
the session queue.

CDK (``infra/``), the local stack and the tests all build their resources from these
specs, so the three can never disagree. Physical names come from :mod:`codeshot.settings`
(``setting`` names the field that holds each one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# The TTL attribute (epoch seconds) of the tables whose items expire.
EXPIRES_AT = "expires_at"


@dataclass(frozen=True)
class Index:
    name: str
    pk: str
    sk: str | None = None
    projection: str = "ALL"  # or "KEYS_ONLY": an index that only finds items' keys,
    # or "INCLUDE": the keys and these attributes
    include: tuple[str, ...] = ()

    def projection_kwargs(self) -> dict[str, Any]:
        """The index's ``Projection`` as DynamoDB's ``create_table`` takes it."""
        if self.projection == "INCLUDE":
            return {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(self.include)}
        return {"ProjectionType": self.projection}


@dataclass(frozen=True)
class Table:
    logical: str
    setting: str  # Settings field holding the physical table name
    pk: str
    sk: str | None = None
    indexes: tuple[Index, ...] = ()
    ttl: str | None = None
    # Key attributes are all strings in this design; kept explicit for CDK and create_table.
    attribute_types: dict[str, str] = field(default_factory=dict)

    def key_attributes(self) -> dict[str, str]:
        names = [self.pk, self.sk] + [a for i in self.indexes for a in (i.pk, i.sk)]
        return {n: self.attribute_types.get(n, "S") for n in names if n}

    def page_key(self, index: str | None = None) -> frozenset[str]:
        """The attributes of a Query's LastEvaluatedKey on the table (or ``index``): the
        table's key, and the index's."""
        names = [self.pk, self.sk]
        names += [a for i in self.indexes if i.name == index for a in (i.pk, i.sk)]
        return frozenset(n for n in names if n)

    def create_table_kwargs(self, physical_name: str) -> dict[str, Any]:
        """Arguments for DynamoDB ``create_table`` (local stack and tests)."""

        def schema(pk: str, sk: str | None) -> list[dict[str, str]]:
            keys = [{"AttributeName": pk, "KeyType": "HASH"}]
            if sk:
                keys.append({"AttributeName": sk, "KeyType": "RANGE"})
            return keys

        kwargs: dict[str, Any] = {
            "TableName": physical_name,
            "BillingMode": "PAY_PER_REQUEST",
            "KeySchema": schema(self.pk, self.sk),
            "AttributeDefinitions": [
                {"AttributeName": n, "AttributeType": t} for n, t in self.key_attributes().items()
            ],
        }
        if self.indexes:
            kwargs["GlobalSecondaryIndexes"] = [
                {
                    "IndexName": i.name,
                    "KeySchema": schema(i.pk, i.sk),
                    "Projection": i.projection_kwargs(),
                }
                for i in self.indexes
            ]
        return kwargs


# Read by id, or scanned whole (listings and the router keep every agent in memory).
REGISTRY = Table(logical="registry", setting="registry_table", pk="agent_id")
REGISTRY_VERSION_ID = "#version"  # the registry's counter, bumped on every change

# One partition per session: the SESSION item, MSG#<ulid> messages, EMBED#<key> embeds,
# STATE (a paused program); once deleted, DELETED (its place in the owner's list, a week).
# Only SESSION items carry `owner`, so by_owner is sparse. Only SESSION and EMBED# items
# carry `created` (messages have `timestamp`): by_created finds a session's newest embeds
# (the runner lists a few in each prompt, however many the session has); it projects
# only what embeds have, so updates of the SESSION item never write it. Only EMBED# items
# and HELD#<hash> items (bytes a reply's agent embed names, written with the reply) carry
# `content_hash`: by_content tells whether another user's session holds the same bytes
# (one object on S3), which a deleted user's erasure then keeps.
# Every item expires CODESHOT_SESSION_TTL_DAYS after it was last written.
SESSIONS = Table(
    logical="sessions",
    setting="sessions_table",
    pk="session_id",
    sk="item",
    indexes=(Index("by_owner", pk="owner", sk="created"),
             Index("by_created", pk="session_id", sk="created", projection="INCLUDE",
                   include=("content_type", "content_hash", "size")),
             Index("by_content", pk="content_hash", sk="embed_owner", projection="KEYS_ONLY")),
    ttl=EXPIRES_AT,
)

# "<user_id>#<agent_id>" / key, and a count item (key " ") per scope. Each item carries
# the agent registration that wrote it, "<agent_id>#<Agent.registration>": the key of the
# keys-only index that finds a deleted registration's items, every user's, to sweep them
# (codeshot/store/user_storage.py); the scope as its sort key lets a busy agent's index
# partition split. Items written before that lack it (a sparse index).
USER_STORAGE = Table(
    logical="user_storage",
    setting="user_storage_table",
    pk="scope",
    sk="key",
    indexes=(Index("by_registration", pk="registration", sk="scope", projection="KEYS_ONLY"),),
)

USAGE = Table(
    logical="usage",
    setting="usage_table",
    pk="counter",  # "<kind>#<subject>#<window>"
    ttl=EXPIRES_AT,
)

# Users by id; a guard item "@<username>" per user makes usernames unique (written in the
# same transaction as the user) and doubles as the strongly consistent username index.
# TTL: only createApiKey's idempotency keys expire (codeshot/store/users.py), users never.
USERS = Table(logical="users", setting="users_table", pk="user_id", ttl=EXPIRES_AT)

# Agents' document corpora: an item per ingestion ("v#<ulid>"), its index on S3.
CORPORA = Table(logical="corpora", setting="corpora_table", pk="agent_id", sk="version")

# OAuth for agents (codeshot/store/oauth.py): "STATE#<state>" / "STATE", a flow waiting
# for its callback (expires); "USER#<user_id>" / "AGENT#<agent_id>", a user's encrypted
# token for an agent (a user's tokens are one partition: listing them is one query).
# Both carry `agent_id`: a deleted agent's flows and tokens, for every user, are one query
# of the keys-only index (no sealed token is copied into it).
OAUTH = Table(logical="oauth", setting="oauth_table", pk="pk", sk="sk", ttl="expires_at",
              indexes=(Index("by_agent", pk="agent_id", sk="pk", projection="KEYS_ONLY"),))

TABLES: tuple[Table, ...] = (REGISTRY, SESSIONS, USER_STORAGE, USAGE, USERS, CORPORA, OAUTH)


@dataclass(frozen=True)
class Bucket:
    setting: str
    prefix: str  # the platform's content-addressed objects: "<prefix><sha256>"
    # Users' uploads, "<uploads_prefix><user id>/<sha256>", each only its uploader's until
    # bound to a message (then copied under ``prefix``); unbound ones expire.
    uploads_prefix: str
    uploads_expire_days: int


EMBEDS_BUCKET = Bucket(setting="embeds_bucket", prefix="embeds/", uploads_prefix="uploads/",
                       uploads_expire_days=1)
# Corpus indexes in the same bucket: "<prefix><sha256>", written by the runner only.
CORPUS_OBJECTS_PREFIX = "corpora/"


@dataclass(frozen=True)
class Queue:
    setting: str  # Settings field holding the queue name (a URL is set in Lambda)
    visibility_timeout_seconds: int
    max_receive_count: int
    retention_seconds: int
    fifo: bool = True

    def dlq_name(self, name: str) -> str:
        return name.removesuffix(".fifo") + ("-dlq.fifo" if self.fifo else "-dlq")


# The runner Lambda's timeout (infra): its batch stops starting queries before it ends.
RUNNER_TIMEOUT_SECONDS = 300

# FIFO: message group = session id (in order per session), dedup id = message id.
# AWS's advice for a Lambda SQS trigger: a visibility timeout of at least 6x the function's
# timeout (the poller retries throttled batches within it) and a maxReceiveCount of at
# least 5 (a throttled or put-back delivery counts as a receive too).
SESSION_QUEUE = Queue(
    setting="queue_name",
    visibility_timeout_seconds=6 * RUNNER_TIMEOUT_SECONDS,
    max_receive_count=5,
    retention_seconds=4 * 24 * 3600,
)

# Standard (per-message delays, which FIFO queues lack): an Agent Protocol task's callback
# polls (RFC option 2), each delayed by its backoff; read by the runner Lambda.
PROMPT_QUEUE = Queue(
    setting="prompt_queue_name",
    visibility_timeout_seconds=6 * RUNNER_TIMEOUT_SECONDS,
    max_receive_count=5,
    retention_seconds=4 * 24 * 3600,
    fifo=False,
)


# Marks a sessions table whose every reply's embeds are held (HELD# items): made with
# them, or backfilled (SessionStore.hold_replies). An erasure deletes an embed's object
# only then.
REPLIES_HELD_MARK = {"session_id": {"S": "#replies-held"}, "item": {"S": "#replies-held"}}

# The eraser Lambda's timeout (infra): each part of an erasure is a few dozen deletes.
ERASER_TIMEOUT_SECONDS = 120

# Standard (per-message delays): a deleted user's erasure, a part a message, each queueing
# the next; read by the eraser Lambda. A part failing on each delivery goes to the DLQ.
ERASURE_QUEUE = Queue(
    setting="erasure_queue_name",
    visibility_timeout_seconds=6 * ERASER_TIMEOUT_SECONDS,
    max_receive_count=5,
    retention_seconds=4 * 24 * 3600,
    fifo=False,
)


@dataclass(frozen=True)
class SeedSecret:
    """A secret as it is made at deploy time: a random text of ``seed_length`` letters and
    digits under ``seed_key`` (CloudFormation's GenerateSecretString; the local stack does
    the same), from which a key is derived."""

    setting: str
    seed_key: str
    seed_length: int
    description: str


# The first Ed25519 signing key derives from it (``codeshot.auth.keys``).
SIGNING_SECRET = SeedSecret(setting="signing_secret_id", seed_key="seed", seed_length=64,
                            description="codeshot Ed25519 signing keys")
# The key that encrypts users' OAuth tokens derives from it (``codeshot.store.oauth``).
OAUTH_KEY_SECRET = SeedSecret(setting="oauth_key_secret_id", seed_key="seed", seed_length=64,
                              description="codeshot OAuth token encryption key")

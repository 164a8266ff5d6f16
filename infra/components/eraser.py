"""The eraser: deleted users' data erased (codeshot/usecases/erasure.py) by a function of
its own, on a role of its own, fed by a queue of its own (standard, for the first part's
delay; encrypted, with a dead-letter queue).

Its role is the only one that deletes agents, sessions, storage, OAuth tokens and uploads
of a user other than the caller, and agents' secrets outside an owner's own request: the
runner, which handles untrusted agent and LLM traffic, holds none of that. It reads keys
to delete the items, never the values of user storage or sealed OAuth tokens (its Query
of those tables may name their keys alone).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as events
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from codeshot.store import tables
from codeshot.store.sessions import DELETED_MARKER_FIELDS
from codeshot.store.users import ERASURE_FIELDS
from infra.bundling import ERASER_FUNCTION, Target
from infra.components import access
from infra.components.access import DELETE, GET, PUT, QUERY, SCAN
from infra.components.corpus_vectors import CorpusVectors
from infra.components.data import EmbedsBucket, PlatformTables, SessionQueue
from infra.components.function import PythonFunction
from infra.settings_env import settings_env

ERASER_TIMEOUT = Duration.seconds(tables.ERASER_TIMEOUT_SECONDS)
ERASER_MEMORY_MB = 512  # mostly waiting on DynamoDB and S3
# Parts of different users' erasures side by side; one user's parts come one at a time.
ERASER_MAX_CONCURRENCY = 2
# Each part bounded (codeshot/usecases/erasure.py): up to EMBEDS_PART objects and
# SESSIONS_PART x ITEMS_PART items deleted, INDEX_READS_PART index reads and as many user
# reads, about a thousand calls of a few ms at worst: five fit in the timeout.
ERASER_BATCH_SIZE = 5
# What its code calls on each table (tests/infra/test_function_actions.py checks both
# ways); besides these, a key-only Query of user storage and OAuth (access.key_query), the
# OAuth agent index's sweep, and updates limited to the registry's version item and to a
# tombstone's count of parts done.
ERASER_TABLES: dict[str, tuple[str, ...]] = {
    # a deleted user's agents: listed, and deleted
    tables.REGISTRY.logical: (GET, SCAN, DELETE),
    # their sessions: listed (by_owner), embeds found (by_content), items deleted key by
    # key (and the session's DELETED marker put: access.limited_update'd, no other item;
    # no BatchWriteItem, which could put any; a large session's rest is the runner's purge)
    tables.SESSIONS.logical: (GET, QUERY, DELETE),
    tables.USERS.logical: (GET,),  # the tombstone; its part count is access.item_update'd
    tables.USAGE.logical: (DELETE,),  # their counters
    tables.USER_STORAGE.logical: (DELETE,),
    tables.OAUTH.logical: (DELETE,),
    tables.CORPORA.logical: (QUERY, DELETE),  # their agents' corpora
}
assert tables.ERASURE_QUEUE.visibility_timeout_seconds >= 6 * ERASER_TIMEOUT.to_seconds()


class Eraser(Construct):
    def __init__(self, scope: Construct, id: str, *, code: lambda_.Code, target: Target,
                 environment: Mapping[str, Any], data: PlatformTables, embeds: EmbedsBucket,
                 session_queue: sqs.IQueue, corpus_vectors: CorpusVectors | None,
                 agent_secrets_prefix: str) -> None:
        super().__init__(scope, id)
        self.queue = SessionQueue(self, "Queue", tables.ERASURE_QUEUE)
        self.function = PythonFunction(
            self, "Function", code=code, handler=ERASER_FUNCTION.handler, target=target,
            description="Eraser: a deleted user's data, a bounded part a queued message",
            memory_mb=ERASER_MEMORY_MB, timeout=ERASER_TIMEOUT,
            # It queues each part's next part: a chain that ends with the last step.
            recursive_loop=lambda_.RecursiveLoop.ALLOW,
            environment=dict(environment) | settings_env(
                erasure_queue_url=self.queue.queue.queue_url,
                erasure_queue_name=self.queue.queue.queue_name,
                # A deleted agent's storage sweep and a large session's purge: the runner's.
                queue_url=session_queue.queue_url, queue_name=session_queue.queue_name),
        )
        self.function.function.add_event_source(events.SqsEventSource(
            self.queue.queue, batch_size=ERASER_BATCH_SIZE,
            max_concurrency=ERASER_MAX_CONCURRENCY, report_batch_item_failures=True))
        role = self.function.role
        data.grant(role, ERASER_TABLES)
        for spec in (tables.USER_STORAGE, tables.OAUTH):
            access.key_query(role, data.by_spec(spec), spec)
        (by_agent,) = tables.OAUTH.indexes  # users' tokens for an agent it removes
        access.index_sweep(role, data.by_spec(tables.OAUTH), by_agent.name)
        # The registry's version (its removals move it); a tombstone's count of parts done,
        # where the next goes on and when the last ran, whether embeds' objects were kept
        # (`deleted` only in its condition: IAM's Attributes name what a write's condition
        # evaluates too).
        access.limited_update(role, data.by_spec(tables.REGISTRY), key=tables.REGISTRY_VERSION_ID)
        access.limited_update(role, data.by_spec(tables.USERS), attributes=(
            tables.USERS.pk, *ERASURE_FIELDS, "erased", "deleted", "embeds_kept",
            "embeds_crowded"))
        # A session's DELETED marker (every write into it refused from then on), no other
        # item: its attributes alone (codeshot/store/sessions.py SessionStore.delete).
        access.limited_update(role, data.by_spec(tables.SESSIONS), action=PUT, attributes=(
            tables.SESSIONS.pk, str(tables.SESSIONS.sk), *DELETED_MARKER_FIELDS, tables.EXPIRES_AT))
        access.send_messages(role, self.queue.queue)
        access.send_messages(role, session_queue)
        # An embed's object deleted, and restored if another user named it meanwhile.
        access.object_delete(role, embeds.bucket, embeds.prefix, markers=True)
        access.object_delete(role, embeds.bucket, embeds.uploads_prefix, listed=True)
        access.object_delete(role, embeds.bucket, tables.CORPUS_OBJECTS_PREFIX)
        if corpus_vectors is not None:
            corpus_vectors.grant_index_deletion(role)
        access.agent_secrets(role, agent_secrets_prefix, actions=access.AGENT_SECRETS_DELETE)

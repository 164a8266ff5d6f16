"""Agents' document corpora: one item per ingestion (a version) in DynamoDB, and each
finished index as one immutable, content-addressed object on S3.

An ingestion is written as ``ingesting`` when it is queued, then ``ready`` (with the S3
object of its chunks and vectors) or ``failed`` (with its errors, and no object). Searches
use the newest ``ready`` version, so a failed or running ingestion never takes away the
corpus a query can search; older versions go once a newer one is ready, their data (the
S3 object, the S3 Vectors index) before their item, so what a failure leaves is still
named by an item and goes with the next. Objects are content-addressed within an agent
(``corpora/<agent id>/<sha256>``): deleting one agent's never takes another's.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import time
from collections.abc import Callable
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar

from botocore.exceptions import ClientError

from codeshot import aws, ids
from codeshot.errors import Unavailable
from codeshot.models import Record, _datetime, utcnow
from codeshot.settings import Settings
from codeshot.store.base import Repository
from codeshot.store.dynamo import from_item, to_item
from codeshot.store.tables import CORPORA, CORPUS_OBJECTS_PREFIX, EMBEDS_BUCKET
from codeshot.text import as_one_line

if TYPE_CHECKING:
    from types_boto3_dynamodb import DynamoDBClient
    from types_boto3_s3 import S3Client

log = logging.getLogger("codeshot.store")

MAX_ERRORS = 20  # kept per version, each one line
MAX_ERROR_CHARS = 300  # of each: an error names a URL, which may be any length
UNSTORED = "the ingestion's outcome could not be stored"
VERSION_PREFIX = "v#"
RECENT_VERSIONS = 10  # read to find the newest ready one
# Versions an agent's deletion forgets per request, a page at a time (each its object, its
# S3 Vectors index, then its item), for at most DELETE_SECONDS of the API's 29: more is left
# for the same delete again, which goes on from there.
DELETE_PAGE = 100
DELETE_PAGES = 10
DELETE_SECONDS = 10.0  # checked between pages: a page of 100 may take seconds more


class CorpusState(str, Enum):
    INGESTING = "ingesting"
    READY = "ready"
    FAILED = "failed"


@dataclasses.dataclass(kw_only=True)
class CorpusVersion(Record):
    agent_id: str
    version: str  # "v#<ulid>": sorts by time
    corpora: list[dict[str, Any]] = dataclasses.field(default_factory=list)  # as declared
    state: CorpusState = CorpusState.INGESTING
    documents: int = 0
    chunks: int = 0
    bytes: int = 0  # of documents fetched
    errors: list[str] = dataclasses.field(default_factory=list)
    object_key: str | None = None  # the index on S3, once ready
    embedding_model: str | None = None
    started: datetime = dataclasses.field(default_factory=utcnow)
    finished: datetime | None = None

    COERCE: ClassVar[dict[str, Any]] = {"state": CorpusState, "started": _datetime,
                                        "finished": _datetime}


class CorpusStore(Repository):
    table = CORPORA

    def __init__(self, settings: Settings, dynamodb: DynamoDBClient | None = None,
                 s3: S3Client | None = None) -> None:
        super().__init__(settings, dynamodb)
        self._s3 = s3
        self.bucket: str = getattr(settings, EMBEDS_BUCKET.setting)

    @property
    def s3(self) -> S3Client:
        # Made on first use: a registration that deletes no agent calls no S3.
        if self._s3 is None:
            self._s3 = aws.client("s3", self.settings)
        return self._s3

    def start(self, agent_id: str, corpora: list[dict[str, Any]]) -> CorpusVersion:
        """A new version of these declared corpora, ``ingesting``."""
        version = CorpusVersion(agent_id=agent_id, version=VERSION_PREFIX + ids.ulid(),
                                corpora=corpora)
        self.db.put_item(TableName=self.table_name, Item=to_item(version.to_dict()),
                         ConditionExpression="attribute_not_exists(version)")
        return version

    def progress(self, version: CorpusVersion) -> bool:
        """What an ingestion has read so far (documents, bytes), while it runs; nothing
        once the version is forgotten (its agent deleted or renamed meanwhile): False."""
        return self._rewrite(version)

    def _rewrite(self, version: CorpusVersion) -> bool:
        """Write the version over its item if it still has one: False if it was forgotten
        meanwhile (an unconditional put would bring a deleted agent's corpus back)."""
        try:
            self.db.put_item(TableName=self.table_name, Item=to_item(version.to_dict()),
                             ConditionExpression="attribute_exists(version)")
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                raise
            return False
        return True

    def finish(self, version: CorpusVersion,
               drop: Callable[[CorpusVersion], None] | None = None) -> CorpusVersion:
        """Store how the ingestion ended (returned as stored); once ready, drop the older
        versions: their objects, what ``drop`` deletes of each (its S3 Vectors index),
        then their items. A version forgotten while it ran (its agent deleted or renamed)
        is not stored again: its object and index are deleted. An outcome DynamoDB
        refuses (an item too large) is stored as failed instead: left ``ingesting``, the
        ingestion would be delivered and run again."""
        version = version.replace(
            errors=[as_one_line(e, MAX_ERROR_CHARS) for e in version.errors[:MAX_ERRORS]],
            finished=utcnow())
        try:
            stored = self._rewrite(version)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "ValidationException":
                raise  # throttled, say: the redelivery stores it
            log.exception("storing %s %s failed", version.agent_id, version.version)
            unstored = CorpusVersion(agent_id=version.agent_id, version=version.version,
                                     state=CorpusState.FAILED, errors=[UNSTORED],
                                     started=version.started, finished=version.finished)
            if self._rewrite(unstored):
                self._discard(version, drop)  # what it wrote: no item names it
                return unstored
            stored = False
        if not stored:
            log.info("%s %s was forgotten while it ran", version.agent_id, version.version)
            self._discard(version, drop)
            return version
        if version.state is CorpusState.READY:
            for older in self.recent(version.agent_id, RECENT_VERSIONS * 10):
                if older.version < version.version:
                    if drop is not None:
                        drop(older)
                    self._forget(older, keep=version.object_key)
        return version

    def _discard(self, version: CorpusVersion,
                 drop: Callable[[CorpusVersion], None] | None) -> None:
        """What an ingestion wrote that no stored item names: its index, and its object
        unless a version of the agent holds the same bytes or may be about to (one still
        ingesting writes its object before its item names it; content-addressed, it
        may be this one)."""
        if drop is not None:
            drop(version)
        key = version.object_key
        others = self.recent(version.agent_id, RECENT_VERSIONS * 10)
        if key and key.startswith(object_prefix(version.agent_id)) and not any(
                v.object_key == key or v.state is CorpusState.INGESTING for v in others
                if v.version != version.version):
            self.s3.delete_object(Bucket=self.bucket, Key=key)

    def _forget(self, version: CorpusVersion, keep: str | None = None) -> None:
        """A version's object (unless it is ``keep``: the same bytes ingested again), then
        its item. An object under the shared ``corpora/<sha256>`` of before objects were
        an agent's own may be another agent's too: it stays."""
        key = version.object_key
        if key and key != keep and key.startswith(object_prefix(version.agent_id)):
            self.s3.delete_object(Bucket=self.bucket, Key=key)
        self.db.delete_item(TableName=self.table_name, Key={
            "agent_id": {"S": version.agent_id}, "version": {"S": version.version}})

    def recent(self, agent_id: str, limit: int = RECENT_VERSIONS) -> list[CorpusVersion]:
        """The agent's versions, newest first."""
        out = self.db.query(TableName=self.table_name, KeyConditionExpression="agent_id = :a",
                            ExpressionAttributeValues={":a": {"S": agent_id}},
                            ScanIndexForward=False, Limit=limit)
        return [CorpusVersion.from_dict(from_item(i)) for i in out.get("Items", [])]

    def newest_ready(self, agent_id: str) -> CorpusVersion | None:
        return next((v for v in self.recent(agent_id) if v.state is CorpusState.READY), None)

    def put_index(self, agent_id: str, data: bytes) -> str:
        """Store an agent's index bytes once, under their SHA-256; returns the object's
        key."""
        key = f"{object_prefix(agent_id)}{hashlib.sha256(data).hexdigest()}"
        try:
            self.s3.put_object(Bucket=self.bucket, Key=key, Body=data,
                               ContentType="application/json", IfNoneMatch="*")
        except ClientError as exc:  # the same bytes are there already
            if exc.response["Error"]["Code"] not in ("PreconditionFailed", "412"):
                raise
        return key

    def read_index(self, key: str) -> bytes:
        body: bytes = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return body

    def delete_agent(self, agent_id: str, drop: Callable[[CorpusVersion], None] | None = None,
                     seconds: float | None = None) -> None:
        """Forget an agent's versions, their objects and what ``drop`` deletes of each (its
        S3 Vectors index), all of them: a new agent of the id must not search the deleted
        one's corpus, nor its data outlive it. Past ``DELETE_PAGES`` pages or ``seconds``
        (``DELETE_SECONDS``) it stops, UNAVAILABLE, the agent still registered: the same
        request again goes on."""
        ends = time.monotonic() + (DELETE_SECONDS if seconds is None else seconds)
        for page in range(DELETE_PAGES):
            if page and time.monotonic() > ends:  # one page at least: each request goes on
                break
            if not self.delete_some(agent_id, DELETE_PAGE, drop):
                return
        if self.recent(agent_id, 1):
            raise Unavailable(f"agent {agent_id} has more corpus versions than one request "
                              "deletes: send the same request again to go on")


    def delete_some(self, agent_id: str, most: int,
                    drop: Callable[[CorpusVersion], None] | None = None) -> bool:
        """Forget up to ``most`` of the agent's versions (as :meth:`delete_agent`); whether
        any may be left."""
        versions = self.recent(agent_id, most)
        for version in versions:
            if drop is not None:
                drop(version)
            self._forget(version)
        return len(versions) == most


class VectorIndexes:
    """The S3 Vectors indexes of corpus versions (``CODESHOT_CORPUS_SEARCH=s3vectors``),
    one per version: named here, written and searched by the runner, deleted by whoever
    forgets their version."""

    def __init__(self, settings: Settings, client: Any | None = None) -> None:
        self.settings = settings
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = aws.client("s3vectors", self.settings)
        return self._client

    @staticmethod
    def index_name(agent_id: str, version: str) -> str:
        # Index names: 3-63 of a-z 0-9 '-' '.'; one index per agent version, so a search
        # never sees a half-written one.
        safe = "".join(c if c.isalnum() else "-" for c in agent_id.lower())[:30]
        return f"{safe}-{version.removeprefix(VERSION_PREFIX).lower()}"

    def drop(self, version: CorpusVersion) -> None:
        """Delete a version's index (none for one that failed before writing)."""
        try:
            self.client.delete_index(vectorBucketName=self.settings.corpus_vector_bucket,
                                     indexName=self.index_name(version.agent_id,
                                                               version.version))
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "NotFoundException":
                raise


def object_prefix(agent_id: str) -> str:
    """Where an agent's index objects are."""
    return f"{CORPUS_OBJECTS_PREFIX}{agent_id}/"

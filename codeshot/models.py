"""Domain types shared by the store, the API, the runner and the SDK."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, field_validator

HANDLE_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def utcnow() -> datetime:
    return datetime.now(UTC)


def validate_handle(value: str, what: str = "handle") -> str:
    if not HANDLE_RE.match(value or ""):
        from codeshot.errors import InvalidInput

        raise InvalidInput(
            f"{what} {value!r} must be 1-63 characters of a-z, 0-9, '_' or '-', "
            "starting with a letter or digit"
        )
    return value


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)


class AgentKind(str, Enum):
    CODE_SHOT = "code_shot"
    STANDALONE = "standalone"


class Agent(_Model):
    agent_id: str  # "owner/handle"
    owner: str
    handle: str
    name: str = ""
    description: str = ""
    query_url: str | None = None
    func_url: str | None = None
    more_info_url: str | None = None
    published: bool = False
    kind: AgentKind = AgentKind.STANDALONE
    base_prompt: str = ""
    few_shots: list[str] = Field(default_factory=list)
    sample_queries: list[str] = Field(default_factory=list)
    embeddings: bytes | None = None  # float32 rows, one per sample query
    embedding_model: str | None = None
    created: datetime = Field(default_factory=utcnow)
    modified: datetime = Field(default_factory=utcnow)

    @staticmethod
    def make_id(owner: str, handle: str) -> str:
        return f"{owner}/{handle}"


class SessionStatus(str, Enum):
    IDLE = "idle"
    RUNNING = "running"
    AWAITING_INPUT = "awaiting_input"


class Session(_Model):
    session_id: str  # the Fixie "handle"
    owner: str  # user id
    owner_name: str | None = None  # the owner's username: agents they may use are theirs
    name: str = ""
    description: str = ""
    frontend_agent_id: str | None = None
    status: SessionStatus = SessionStatus.IDLE
    callback_url: str | None = None
    created: datetime = Field(default_factory=utcnow)
    modified: datetime = Field(default_factory=utcnow)


class MessageType(str, Enum):
    QUERY = "query"
    THOUGHT = "thought"
    AGENT_CALL = "agent_call"
    FUNC_CALL = "func_call"
    RESULT = "result"
    AWAITING_INPUT = "awaiting_input"
    RESPONSE = "response"
    ERROR = "error"


class EmbedRef(_Model):
    """An embed as a message carries it: what it is and where its bytes live."""

    content_type: str
    content_hash: str  # sha256 hex; also the S3 object name
    size: int = 0


class Message(_Model):
    session_id: str
    message_id: str  # ULID: sorts by time
    text: str = ""
    type: MessageType = MessageType.QUERY
    sent_by: str = "user"  # "user" or an agent id
    in_reply_to: str | None = None
    embeds: dict[str, EmbedRef] = Field(default_factory=dict)
    error_code: str | None = None
    timestamp: datetime = Field(default_factory=utcnow)

    @field_validator("embeds")
    @classmethod
    def _embed_keys(cls, value: dict[str, EmbedRef]) -> dict[str, EmbedRef]:
        for key in value:
            if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", key):
                raise ValueError(f"embed key {key!r} must be 1-64 of A-Z a-z 0-9 _ . -")
        return value


class Embed(_Model):
    """An immutable attachment of a session, addressed by its content hash."""

    key: str
    session_id: str
    owner: str
    content_type: str
    content_hash: str
    size: int
    created: datetime = Field(default_factory=utcnow)


class User(_Model):
    user_id: str
    username: str
    first_name: str | None = None
    last_name: str | None = None
    email: str | None = None
    daily_query_limit: int | None = None  # None: the platform default
    api_key_ids: set[str] = Field(default_factory=set)
    created: datetime = Field(default_factory=utcnow)


class Principal(_Model):
    """Who is calling: a user (API key) or an agent acting for a user (agent JWT)."""

    user_id: str | None
    username: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    key_id: str | None = None
    # The user's own daily query limit (None: the platform default), read with the user
    # when the API key was checked, so posting a message needs no second read.
    daily_query_limit: int | None = None

"""Domain types shared by the store, the API, the runner and the SDK.

Plain dataclasses, not pydantic models: the runner handles every query with these, and
pydantic's import and schema builds were most of its cold start (benchmarks/cold_start.py).
Input from people is validated where it enters (GraphQL, REST, agent replies); values read
back from storage are coerced by :meth:`Record.from_dict`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any, ClassVar, TypeVar

from codeshot import ids
from codeshot.errors import InvalidInput
from codeshot.text import as_one_line, check_text, is_one_line

HANDLE_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
# The planner's agent id: the sender of its messages, its A2A path; asking it is asking
# the platform.
PLANNER_ID = "platform/planner"
EMBED_KEY_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MAX_EMBEDS_PER_MESSAGE = 20  # a user's message, and an agent's reply
R = TypeVar("R", bound="Record")


def utcnow() -> datetime:
    return datetime.now(UTC)


# What tells the time where a rule depends on it (usage windows): ``utcnow`` in the
# platform, a clock the test controls in tests.
Clock = Callable[[], datetime]


def validate_handle(value: str, what: str = "handle") -> str:
    if not HANDLE_RE.fullmatch(value or ""):
        raise InvalidInput(
            f"{what} {value!r} must be 1-63 characters of a-z, 0-9, '_' or '-', "
            "starting with a letter or digit"
        )
    return value


def stamp(value: datetime) -> str:
    """A time as stored: ISO with microseconds always (fixed width: sorts as text, and a
    stored ``modified`` compares equal to the one a read saw)."""
    return value.isoformat(timespec="microseconds")


def _datetime(value: Any) -> datetime:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return stamp(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


class Record:
    """What the domain dataclasses share: plain dicts out, coerced dicts in.

    ``from_dict`` expects values as :func:`codeshot.store.dynamo.from_item` returns them
    (numbers as int/float, Binary as bytes)."""

    # field name -> how a stored value becomes the field's type
    COERCE: ClassVar[dict[str, Any]] = {}

    def __post_init__(self) -> None:
        for name, convert in self.COERCE.items():
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, convert(value))

    def to_dict(self, exclude: frozenset[str] = frozenset()) -> dict[str, Any]:
        """Attributes as JSON types, except bytes (DynamoDB stores them as Binary)."""
        return {f.name: _jsonable(getattr(self, f.name))
                for f in dataclasses.fields(self) if f.name not in exclude}  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[R], values: dict[str, Any]) -> R:
        """A record from stored attributes; attributes it does not know are dropped."""
        names = _field_names(cls)  # type: ignore[arg-type]  # classes hash; type[R] is not Hashable to mypy
        return cls(**{k: v for k, v in values.items() if k in names})

    def replace(self: R, **changes: Any) -> R:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]



@functools.cache
def _field_names(cls: type[Record]) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]


@dataclasses.dataclass(kw_only=True)
class Revision(Record):
    """One deployment of an agent, Fixie 1.0's agent revision: where it answers."""

    revision_id: str
    query_url: str | None = None
    func_url: str | None = None
    metadata: dict[str, str] = dataclasses.field(default_factory=dict)  # the client's
    created: datetime = dataclasses.field(default_factory=utcnow)
    once: str | None = None  # the idempotency key it was made under, if any

    COERCE: ClassVar[dict[str, Any]] = {"created": _datetime}

    @property
    def url(self) -> str | None:
        return self.func_url or self.query_url


def _revisions(values: list[Any]) -> list[Revision]:
    return [v if isinstance(v, Revision) else Revision.from_dict(v) for v in values]


# GraphQL's Int is 32-bit: the most a count, size or limit the API shows may be (a larger
# one fails the whole field, INTERNAL). Settings and agents' values that reach it are
# bounded by it.
MAX_INT = 2**31 - 1


def _llm_settings(values: dict[str, Any]) -> dict[str, Any]:
    """Stored LLM settings; a ``maximum_tokens`` over MAX_INT (registered before handshakes
    were held to it) reads as MAX_INT: the same effect (it only lowers the engine's limit),
    and every user's agent listing showing it stays readable."""
    tokens = values.get("maximum_tokens")
    return values | {"maximum_tokens": MAX_INT} if tokens and tokens > MAX_INT else values


class AgentKind(str, Enum):
    CODE_SHOT = "code_shot"
    STANDALONE = "standalone"


@dataclasses.dataclass(kw_only=True)
class Agent(Record):
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
    few_shots: list[str] = dataclasses.field(default_factory=list)
    sample_queries: list[str] = dataclasses.field(default_factory=list)
    # From a Code Shot agent's handshake (Fixie 1.0's fields):
    conversational: bool = False  # its earlier turns in a session go into its prompt
    llm_settings: dict[str, Any] | None = None  # {temperature, model, maximum_tokens}
    corpora: list[dict[str, Any]] | None = None  # declared document corpora (not indexed yet)
    funcs: list[str] | None = None  # its Funcs, when the handshake lists them (None: unknown)
    # An MCP server whose tools are its Funcs (instead of a Fixie agent's func_url): the
    # tools as read at registration (codeshot.runner.mcp_servers.McpTool dicts), and the
    # Secrets Manager name of the Authorization header its owner gave for it, if any.
    mcp_url: str | None = None
    mcp_tools: list[dict[str, Any]] | None = None
    mcp_auth_secret: str | None = None
    embeddings: bytes | None = None  # float32 rows, one per sample query
    embedding_model: str | None = None
    # Its revisions (codeshot/usecases/revisions.py) once it has had more than the one it
    # was registered with, and which is current (None: that first, implicit one). The
    # current one answers at query_url/func_url above, whatever its entry here says (a
    # registration may have changed them since).
    revisions: list[Revision] = dataclasses.field(default_factory=list)
    current_revision: str | None = None
    created: datetime = dataclasses.field(default_factory=utcnow)
    modified: datetime = dataclasses.field(default_factory=utcnow)

    COERCE: ClassVar[dict[str, Any]] = {
        "kind": AgentKind, "created": _datetime, "modified": _datetime,
        "revisions": _revisions, "llm_settings": _llm_settings}

    @staticmethod
    def make_id(owner: str, handle: str) -> str:
        return f"{owner}/{handle}"

    @property
    def registration(self) -> int:
        """This registration of the agent, exactly: ``created`` in microseconds since the
        epoch (an agent registered again at a deleted one's id, or renamed onto it, has
        another). Its call tokens carry it, so the next agent of its id refuses them."""
        return (self.created - _EPOCH) // timedelta(microseconds=1)

    def usable_by(self, username: str | None) -> bool:
        """Published agents are everyone's; unpublished ones only their owner's."""
        return self.published or self.owner == username

    def current_revision_id(self) -> str | None:
        """The revision it answers at now. An agent registered the usual way (a URL, no
        revision made) has one, implicit: its id is derived from the agent's, so every
        read names it the same. None for an agent with no URL (inline few-shots only, an
        MCP server)."""
        if not (self.query_url or self.func_url):
            return None
        return self.current_revision or ids.derived_ulid(
            int(self.created.timestamp() * 1000), self.agent_id)

    def all_revisions(self) -> list[Revision]:
        """Its revisions, oldest first, the current one with the URLs it answers at."""
        current = self.current_revision_id()
        revisions = [r for r in self.revisions if r.revision_id != current]
        if current:
            revisions.append(next((r for r in self.revisions if r.revision_id == current),
                                  Revision(revision_id=current, created=self.created)
                                  ).replace(query_url=self.query_url, func_url=self.func_url))
        return sorted(revisions, key=lambda r: (r.created, r.revision_id))

    def revision(self, revision_id: str) -> Revision | None:
        return next((r for r in self.all_revisions() if r.revision_id == revision_id), None)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# Caps on what an agent's record holds: it must fit one DynamoDB item (400 KB, with a
# float32 embedding row per sample query), and lists of agents must stay small to send.
MAX_AGENT_NAME = 100
MAX_AGENT_DESCRIPTION = 1_000
MAX_BASE_PROMPT = 10_000
MAX_FEW_SHOTS = 50
MAX_FEW_SHOT = 4_000  # characters in one few-shot
MAX_SAMPLE_QUERIES = 50
MAX_SAMPLE_QUERY = 500
MAX_URL = 2_048
MAX_CORPORA = 10  # declared in a handshake: each is an ingestion's crawl
MAX_CORPUS_URLS = 50  # a corpus's (an ingestion reads at most 1,000 pages in all)
MAX_EXCLUDE_PATTERNS = 100  # a corpus's: every link it finds is tried against them
MAX_CORPORA_JSON = 100_000  # characters of all corpora as stored, whatever else they hold
MAX_FUNCS = 100  # listed in a handshake (an MCP server has at most 64 tools)
MAX_FUNC_NAME = 128  # as MCP tool names may be
FUNC_NAME_RE = re.compile(r"\w+")  # Func[name] in few-shots, tool names, registrations
# The platform's own Funcs (codeshot.runner.platform_funcs.LIBRARY) by name alone: the SDK
# and registration check few-shots against them without their code (the register
# function neither imports nor can reach what they call: corpora, the LLM, usage).
PLATFORM_FUNC_NAMES = frozenset({"fixie_local_datetime", "fixie_query_embed",
                                 "fixie_query_corpus", "fixie_calc", "fixie_http_get"})


def check_sample_query(query: str) -> str:
    """A sample query: one line of text, not blank (the router would embed nothing)."""
    if not query.strip():
        raise InvalidInput("a sample query must not be empty")
    return check_text(query, "a sample query", MAX_SAMPLE_QUERY, one_line=True)


def as_sample_query(text: str) -> str:
    """``text`` as a valid sample query: a few-shot's Q line (up to a few-shot's length, and
    its grammar allows tabs and other controls), or one stored whole before this, is made
    one line and cut rather than refused: its owner wrote a few-shot, not this sample query,
    and the router needs only its words. One already valid is kept as it is."""
    if len(text) <= MAX_SAMPLE_QUERY and is_one_line(text):
        return text
    return as_one_line(text, MAX_SAMPLE_QUERY)


def check_prompts(base_prompt: str, few_shots: list[str]) -> None:
    """INVALID_INPUT unless the base prompt and few-shots are within their caps (the SDK
    checks them when an agent is made, the platform when it is registered)."""
    check_text(base_prompt, "basePrompt", MAX_BASE_PROMPT)
    if len(few_shots) > MAX_FEW_SHOTS:
        raise InvalidInput(f"{len(few_shots)} few-shots; an agent has at most {MAX_FEW_SHOTS}")
    for i, shot in enumerate(few_shots, 1):
        check_text(shot, f"few-shot {i}", MAX_FEW_SHOT)


def check_agent_fields(agent: Agent) -> Agent:
    """INVALID_INPUT unless every field is within its cap; the name and description are
    one line (the planner shows them to an LLM)."""
    check_text(agent.name, "name", MAX_AGENT_NAME, one_line=True)
    check_text(agent.description, "description", MAX_AGENT_DESCRIPTION, one_line=True)
    check_prompts(agent.base_prompt, agent.few_shots)
    for what, url in (("queryUrl", agent.query_url), ("funcUrl", agent.func_url),
                      ("mcpUrl", agent.mcp_url), ("moreInfoUrl", agent.more_info_url)):
        check_text(url or "", what, MAX_URL, one_line=True)
    if len(agent.sample_queries) > MAX_SAMPLE_QUERIES:
        raise InvalidInput(f"{len(agent.sample_queries)} sample queries; an agent has at most "
                           f"{MAX_SAMPLE_QUERIES}")
    queries = [as_sample_query(query) for query in agent.sample_queries]
    for query in queries:
        check_text(query, "a sample query", MAX_SAMPLE_QUERY, one_line=True)
    _check_corpora(agent.corpora or [])
    funcs = agent.funcs or []
    if len(funcs) > MAX_FUNCS:
        raise InvalidInput(f"{len(funcs)} funcs; an agent has at most {MAX_FUNCS}")
    for name in funcs:
        if not FUNC_NAME_RE.fullmatch(name) or len(name) > MAX_FUNC_NAME:
            raise InvalidInput(f"func name {name[:MAX_FUNC_NAME]!r} must be 1-"
                               f"{MAX_FUNC_NAME} letters, digits or '_'")
    # A blank, long or multi-line one is refused as given (check_sample_query); one a
    # few-shot or handshake gives, or one stored before that was checked, is dropped, or
    # made one line and cut: not a reason to refuse other changes.
    return agent.replace(sample_queries=[q for q in queries if q.strip()])


def _check_corpora(corpora: list[Any]) -> None:
    """A handshake's corpora: INVALID_INPUT unless each is a mapping whose ``urls`` and
    ``exclude_patterns`` are lists of text within their caps."""
    if len(corpora) > MAX_CORPORA:
        raise InvalidInput(f"{len(corpora)} corpora; an agent has at most {MAX_CORPORA}")
    for n, corpus in enumerate(corpora, 1):
        if not isinstance(corpus, dict):
            raise InvalidInput(f"corpus {n} is not a mapping")
        for key, cap in (("urls", MAX_CORPUS_URLS), ("exclude_patterns",
                                                    MAX_EXCLUDE_PATTERNS)):
            values = corpus.get(key) or []
            if not isinstance(values, list) or len(values) > cap:
                raise InvalidInput(f"corpus {n}'s {key} must be a list of at most {cap}")
            for value in values:
                if not isinstance(value, str):
                    raise InvalidInput(f"corpus {n}'s {key} must be text")
                check_text(value, f"corpus {n}'s {key}", MAX_URL, one_line=True)
    if len(json.dumps(corpora, default=str)) > MAX_CORPORA_JSON:
        raise InvalidInput(f"the corpora are over {MAX_CORPORA_JSON} characters")


class SessionStatus(str, Enum):
    IDLE = "idle"
    RUNNING = "running"
    AWAITING_INPUT = "awaiting_input"


@dataclasses.dataclass(kw_only=True)
class Session(Record):
    session_id: str  # the Fixie "handle"
    owner: str  # user id
    owner_name: str | None = None  # the owner's username: agents they may use are theirs
    name: str = ""
    description: str = ""
    frontend_agent_id: str | None = None
    status: SessionStatus = SessionStatus.IDLE
    callback_url: str | None = None
    # Push notifications in A2A's form ("a2a": a StreamResponse, the client's token in
    # X-A2A-Notification-Token, under the config id it chose); None: codeshot's events.
    callback_format: str | None = None
    callback_token: str | None = None
    callback_id: str | None = None
    created: datetime = dataclasses.field(default_factory=utcnow)
    modified: datetime = dataclasses.field(default_factory=utcnow)
    embed_count: int = 0  # embeds bound: the runner lists them only when there are some

    COERCE: ClassVar[dict[str, Any]] = {
        "status": SessionStatus, "created": _datetime, "modified": _datetime,
        "embed_count": int}


class MessageType(str, Enum):
    QUERY = "query"
    THOUGHT = "thought"
    AGENT_CALL = "agent_call"
    FUNC_CALL = "func_call"
    RESULT = "result"
    AWAITING_INPUT = "awaiting_input"
    RESPONSE = "response"
    ERROR = "error"


class TaskState(str, Enum):
    """A session seen as an agent protocol's task: the state of its newest turn (a user
    message and the agent's terminal reply). The names are A2A's, lower case."""

    SUBMITTED = "submitted"  # nothing asked yet (a task created without a message)
    WORKING = "working"  # a message has no terminal reply yet
    INPUT_REQUIRED = "input_required"  # the agent asked the user (awaiting_input)
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"  # the user turned the agent's question down

    @classmethod
    def of_reply(cls, reply: Message | None) -> TaskState:
        """The state a turn is in with this terminal reply (None: still working)."""
        if reply is None:
            return cls.WORKING
        if reply.type is MessageType.AWAITING_INPUT or reply.keeps_question:
            return cls.INPUT_REQUIRED
        if reply.type is MessageType.RESPONSE:
            return cls.COMPLETED
        from codeshot.errors import Canceled

        return cls.CANCELED if reply.error_code == Canceled.code else cls.FAILED


@dataclasses.dataclass(kw_only=True)
class EmbedRef(Record):
    """An embed as a message carries it: what it is and where its bytes live."""

    content_type: str
    content_hash: str  # sha256 hex; also the S3 object name
    size: int = 0


def check_embed_key(key: str) -> str:
    if not isinstance(key, str) or not EMBED_KEY_RE.fullmatch(key):
        raise InvalidInput(f"embed key {key!r} must be 1-64 of A-Z a-z 0-9 _ . -")
    return key


def _embed_ref(key: str, ref: EmbedRef | dict[str, Any]) -> EmbedRef:
    check_embed_key(key)
    return ref if isinstance(ref, EmbedRef) else EmbedRef.from_dict(ref)


@dataclasses.dataclass(kw_only=True)
class Message(Record):
    session_id: str
    message_id: str  # ULID: sorts by time
    text: str = ""
    type: MessageType = MessageType.QUERY
    sent_by: str = "user"  # "user" or an agent id
    in_reply_to: str | None = None
    embeds: dict[str, EmbedRef] = dataclasses.field(default_factory=dict)
    error_code: str | None = None
    timestamp: datetime = dataclasses.field(default_factory=utcnow)
    # A refusal of a message that was never taken in (all the user's running slots were
    # taken, or the session too busy) while the session waited on this question, which
    # still waits: the message is to be sent again, and its task still requires input.
    keeps_question: str | None = None
    # The question a user message was sent to answer (A2A, by its task's id; a task's
    # callback_url): if it was ended, or answered (and another asked), before the runner
    # took the message, nothing runs.
    answers: str | None = None
    # That task (the id of its first message): the one its reply is pushed for then.
    task: str | None = None

    COERCE: ClassVar[dict[str, Any]] = {"type": MessageType, "timestamp": _datetime,
              "embeds": lambda refs: {k: _embed_ref(k, v) for k, v in refs.items()}}


@dataclasses.dataclass(kw_only=True)
class Embed(Record):
    """An immutable attachment of a session, addressed by its content hash."""

    key: str
    session_id: str
    owner: str
    content_type: str
    content_hash: str
    size: int
    path: str | None = None  # where an Agent Protocol client keeps it (relative_path)
    created: datetime = dataclasses.field(default_factory=utcnow)

    COERCE: ClassVar[dict[str, Any]] = {"created": _datetime}


# The highest daily limit a user may have (a profile shows it).
MAX_DAILY_LIMIT = MAX_INT


@dataclasses.dataclass(kw_only=True)
class User(Record):
    user_id: str
    username: str
    first_name: str | None = None
    last_name: str | None = None
    email: str | None = None
    daily_query_limit: int | None = None  # None: the platform default
    daily_token_limit: int | None = None  # LLM tokens per day; None: the platform default
    time_zone: str | None = None  # IANA name (Europe/Paris) for local times; None: UTC
    api_key_ids: set[str] = dataclasses.field(default_factory=set)
    created: datetime = dataclasses.field(default_factory=utcnow)
    identity: str | None = None  # the Cognito user (sub) who signs in as this user
    disabled: bool = False  # an operator turned the user off: every credential is refused
    operator: bool = False  # may list users, set their limits and disable them
    # When the user was deleted: what is left is this tombstone (the username stays taken,
    # so nobody inherits its agent ids), every credential refused, the rest being erased
    # by the eraser (codeshot/usecases/erasure.py), which counts its parts done here.
    deleted: datetime | None = None
    erasure_part: int = 0  # parts counted done
    erasure_step: int = 0  # the step the next part runs, and where in it (its cursor)
    erasure_after: str | None = None
    erasure_by: str | None = None  # the send (ErasureWork.sent) whose part was counted last
    erasure_ran: datetime | None = None  # when the last part counted ran
    # Embeds' objects the erasure deleted (or is about to), to look at again: written
    # before the first delete, so a part that fails after it still has them looked at.
    erasure_recheck: set[str] = dataclasses.field(default_factory=set)
    erased: datetime | None = None  # when the erasure's last part ran
    # Embeds' objects the erasure kept, the sessions table not marked as holding every
    # reply's embeds (SessionStore.replies_held): they stay on S3 for good.
    embeds_kept: bool = False
    # Some kept as more deleted users' sessions held them than a look reads past.
    embeds_crowded: bool = False

    COERCE: ClassVar[dict[str, Any]] = {"api_key_ids": set, "erasure_recheck": set,
                                        "created": _datetime,
                                        "deleted": _datetime, "erased": _datetime,
                                        "erasure_ran": _datetime}


@dataclasses.dataclass(kw_only=True)
class Principal(Record):
    """Who is calling: a user (API key) or an agent acting for a user (agent JWT)."""

    user_id: str | None
    username: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    key_id: str | None = None
    # An agent token's issue time (seconds) and the registration it was issued to
    # (Agent.registration; None in tokens of an older platform, or for no registration).
    issued_at: int | None = None
    registration: int | None = None
    # The user's own daily query limit (None: the platform default), read with the user
    # when the API key was checked, so posting a message needs no second read.
    daily_query_limit: int | None = None

    def issued_to(self, registration: int) -> bool:
        """Whether this agent token was issued to its agent as registered now
        (``registration``: :attr:`Agent.registration`), not to a deleted agent of its id
        (whose call may still be in flight): by the registration it carries, or, in a
        token without one, by its issue time (whole seconds: a token issued in the second
        of the registration passes)."""
        if self.registration is not None:
            return self.registration == registration
        return self.issued_at is not None and self.issued_at >= registration // 1_000_000

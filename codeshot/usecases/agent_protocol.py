"""The Agent Protocol (v1) over sessions: a task is a session, a step is a turn
(:class:`codeshot.usecases.tasks.Turn`: a user message and the agent's terminal reply),
an artifact is an embed. The same data GraphQL, the console, the Fixie endpoints, MCP and
A2A read; only the names differ.

- Creating a task with an ``input`` posts it at once (the agent starts working); a step
  executed without input is that work: it waits for the newest turn's reply (or returns
  it, done). So the protocol's usual loop (create the task, execute steps until
  ``is_last``) works, and so does a client that sends each step's input itself.
- A step whose agent asks the user is ``completed`` (asking was its work) and not
  ``is_last``, the question its output: the next step's input answers it and the paused
  program resumes (the RFC's option 1; see :func:`step_status`).
- Artifacts are the session's embeds (uploaded ones, ``agent_created`` false, by key) and
  those the agents' replies carry (``agent_created`` true, ``<message id>:<key>``).
- No request reads a task's whole log: a task shows its newest messages and its first
  (:func:`listed_task`), a step is read by its id, an artifact by what its id names, and
  lists of steps and artifacts are filtered in DynamoDB (only their items come back)
  among the first ``LOG_READ`` messages of the log: a page that may hold more is refused.
- ``Idempotency-Key`` makes creating a task or a step safe to retry: the same request
  again returns the first task or step and charges nothing (:func:`create_task`).
"""

from __future__ import annotations

import math
import mimetypes
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from codeshot import ids
from codeshot.errors import Conflict, InvalidInput, NotFound
from codeshot.models import (
    PLANNER_ID,
    Embed,
    EmbedRef,
    Message,
    MessageType,
    Principal,
    Session,
    TaskState,
    check_embed_key,
)
from codeshot.runner.callbacks import PROMPT_FORMAT
from codeshot.services import Services
from codeshot.store.embeds import check_content_type, content_hash
from codeshot.store.usage import UPLOAD_BYTES
from codeshot.text import check_text
from codeshot.usecases import paging, tasks
from codeshot.usecases.agents import usable_agent
from codeshot.usecases.messaging import (
    TERMINAL,
    UPLOAD_LIMIT,
    Messaging,
    wait_for_reply,
)
from codeshot.usecases.sessions import get_session
from codeshot.usecases.threads import blocking
from codeshot.usecases.users import user_id_of
from codeshot.usecases.waits import waiting

T = TypeVar("T")
PAGE = paging.PageSize(10, 100)  # the protocol's default page size is 10
# Numbered pages of tasks are read from the newest on: a page ends this far in at most
# (reaching page 4,500 of 45,000 tasks read them all, 225 queries), and their count
# stops one past it.
LISTED_TASKS = 10_000
# A page of steps or artifacts is found by reading its task's log from the start: at most
# this many messages (and uploads), however long the log (a listing of a task of 40,000
# messages read all 40,000).
LOG_READ = 4_000
AGENT = "agent"  # the additional_input key naming the task's agent
TASK_OPTIONS = frozenset({AGENT})
MAX_RELATIVE_PATH = 512
IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,100}")  # printable ASCII, no spaces
STEP_TYPES = frozenset({MessageType.QUERY}) | TERMINAL  # what a step list reads
AGENT_TYPES = frozenset(MessageType) - {MessageType.QUERY}  # messages with agents' embeds


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page as the protocol numbers them (from 1), with the totals it reports (past
    what one request reads, a lower bound: see ``LISTED_TASKS`` and ``LOG_READ``)."""

    items: list[T]
    total_items: int
    current_page: int
    page_size: int

    @property
    def total_pages(self) -> int:
        return math.ceil(self.total_items / self.page_size)


def page_numbers(current_page: int | None, page_size: int | None) -> tuple[int, int]:
    if current_page is not None and current_page < 1:
        raise InvalidInput("current_page must be at least 1")
    if page_size is not None and page_size < 1:
        raise InvalidInput("page_size must be at least 1")
    return current_page or 1, PAGE.of(page_size)


@dataclass(frozen=True)
class Task:
    session: Session
    messages: list[Message]  # what :func:`listed_task` reads (a new task: its input)

    @property
    def turns(self) -> list[tasks.Turn]:
        return tasks.turns(self.messages)

    @property
    def input(self) -> str | None:
        return next((m.text for m in self.messages if m.type is MessageType.QUERY), None)

    @property
    def agent(self) -> str:
        return self.session.frontend_agent_id or PLANNER_ID


@dataclass(frozen=True)
class Artifact:
    artifact_id: str
    agent_created: bool
    file_name: str
    relative_path: str | None
    ref: EmbedRef
    created: datetime


def step_status(turn: tasks.Turn) -> str:
    """The step's status in the protocol's terms: ``running`` until the agent replies,
    then ``completed``, a question included. The RFC's ``awaiting_input`` is not in v1's
    enum, which clients check (the official client refuses any other value); a question
    shows as ``is_last`` false, with ``awaiting_input`` in the step's additional_output
    and as the task's status."""
    return "running" if turn.reply is None else "completed"


def is_last(turn: tasks.Turn) -> bool:
    """The task has nothing left to do until given new input: answered, or failed (a
    question, or a refused answer that kept it, waits for the next step's input)."""
    return turn.reply is not None and turn.state is not TaskState.INPUT_REQUIRED


# -- tasks --------------------------------------------------------------------------------
def task_options(additional_input: dict[str, Any] | None) -> str | None:
    """The agent a task's additional_input names (None: the planner)."""
    options = additional_input or {}
    unknown = set(options) - TASK_OPTIONS
    if unknown:
        raise InvalidInput(f"additional_input takes only {sorted(TASK_OPTIONS)}, "
                           f"not {sorted(unknown)}")
    agent = options.get(AGENT)
    if agent is not None and not isinstance(agent, str):
        raise InvalidInput("additional_input.agent must be an agent id, owner/handle")
    return agent or None


def check_idempotency_key(key: str | None) -> str | None:
    if key is not None and not IDEMPOTENCY_KEY.fullmatch(key):
        raise InvalidInput("Idempotency-Key must be 1-100 printable ASCII characters, "
                           "no spaces")
    return key


def create_task(services: Services, principal: Principal, text: str | None,
                additional_input: dict[str, Any] | None = None,
                callback_url: str | None = None, idempotency_key: str | None = None
                ) -> Task:
    """A new session with the agent additional_input names (the planner by default);
    its input, if any, is posted at once. With ``callback_url`` (checked: a public
    address), the agent's questions are asked there (:mod:`codeshot.usecases.prompts`).
    Nothing is made for input that is refused.

    With ``idempotency_key``, the same request again returns the task the first one made
    (the session made, charged and keyed in one transaction; its input posted once);
    another request under that key is a Conflict."""
    agent_id = task_options(additional_input)
    key = check_idempotency_key(idempotency_key)
    once = f"ap:{key}" if key else None
    messaging = Messaging(services)
    made = services.sessions.guarded(user_id_of(principal), once) if once else None
    if made is None:
        if text:
            messaging.precheck(principal, text)
        session = tasks.open_session(services, principal, agent_id, None,
                                     callback_url=callback_url or None,
                                     callback_format=PROMPT_FORMAT if callback_url else None,
                                     once=once)
    else:  # a retry: no quota precheck (the first one's query may be the day's last)
        session = get_session(services, principal, made)
    first = services.sessions.posted_under(session.session_id, once) if once else None
    if once and not _same_task(services, principal, session, agent_id, callback_url, text,
                               first):
        raise Conflict("this Idempotency-Key was already used to create a different "
                       "task; use a new key for a new task")
    if not text:
        return Task(session, [])
    # A retry's input is posted again: post finds it under the key and queues it again
    # (the first request may have died before it did).
    query = messaging.post(principal, session.session_id, text, idempotency_key=once)[0]
    return Task(session, [query])


def _same_task(services: Services, principal: Principal, session: Session,
               agent_id: str | None, callback_url: str | None, text: str | None,
               first: Message | None) -> bool:
    """Whether a task made under a key is what this request asks for: its agent, its
    callback and its input (none posted yet: the first request stopped before it)."""
    frontend = tasks.frontend_of(agent_id)
    if frontend and frontend != session.frontend_agent_id:  # a handle: its full id
        frontend = usable_agent(services, principal, frontend).agent_id
    if frontend != session.frontend_agent_id or (callback_url or None) != session.callback_url:
        return False
    if first is None:
        return True
    return first.text == text


def get_task(services: Services, principal: Principal, task_id: str) -> Task:
    """The task as :func:`listed_task` reads it: a few reads however long its log."""
    return listed_task(services, get_session(services, principal, task_id))


def list_tasks(services: Services, principal: Principal, current_page: int | None,
               page_size: int | None) -> Page[Task]:
    """A page of the caller's sessions, newest first: those before it read (not past the
    newest ``LISTED_TASKS``), none past the last. The total counts those and one past
    them (a lower bound), not every session the user has, on every page."""
    page, size = page_numbers(current_page, page_size)
    start = (page - 1) * size
    if start + size > LISTED_TASKS:
        raise InvalidInput(f"pages of tasks reach the newest {LISTED_TASKS:,}: ask for an "
                           "earlier page (each task is still read by its id)")
    user_id = user_id_of(principal)
    total = services.sessions.count_by_owner(user_id, most=LISTED_TASKS)
    found: list[Session] = []
    token = None
    while start < total and len(found) < start + size:
        batch = services.sessions.list_by_owner(
            user_id, min(paging.SESSIONS.maximum, start + size - len(found)), token)
        found += batch.items
        token = batch.next_token
        if not token:
            break
    return Page([listed_task(services, s) for s in found[start:start + size]], total, page,
                size)


def listed_task(services: Services, session: Session) -> Task:
    """A task as a listing shows it, from a few reads however long its log: its input
    (the first message), state and newest answer (:func:`tasks.newest`), and the
    artifacts among those messages and its first ``LISTED_MESSAGES`` uploads."""
    messages = tasks.newest(services, session.session_id)
    first = services.sessions.list_messages(session.session_id, limit=1).items
    if first and first[0].message_id not in {m.message_id for m in messages}:
        messages = first + messages
    return Task(session, messages)


# -- steps --------------------------------------------------------------------------------
async def execute_step(services: Services, principal: Principal, task_id: str,
                       text: str | None, additional_input: dict[str, Any] | None = None,
                       idempotency_key: str | None = None) -> tasks.Turn:
    """Post ``text`` as the task's next step and wait (the reply wait at most) for its
    reply; without text, wait for the step the task is working on, or return its last one
    (a question stays the last step until a step's input answers it). With
    ``idempotency_key``, the same step again is the first one (posted and charged once)."""
    if additional_input:
        raise InvalidInput("a step takes no additional_input; name the agent when "
                           "creating the task")
    key = check_idempotency_key(idempotency_key)
    wait = services.settings.reply_wait_seconds
    if text:
        _, turn = await tasks.ask(services, principal, text, session_id=task_id, wait=wait,
                                  idempotency_key=f"ap-step:{key}" if key else None)
        return turn
    task = await blocking(get_task, services, principal, task_id)
    found = task.turns
    if not found:
        raise InvalidInput(f"task {task_id} has no input yet: give this step an input")
    last = found[-1]
    if last.reply is None:
        async with waiting(services, principal, wait):
            reply = await wait_for_reply(Messaging(services), last.query, wait)
        return tasks.Turn(last.query, reply)
    return last


def get_step(services: Services, principal: Principal, task_id: str, step_id: str
             ) -> tasks.Turn:
    """The step by its id (its query's), with its reply from one page of what followed."""
    session = get_session(services, principal, task_id)
    missing = NotFound(f"step {step_id} not found in task {task_id}")
    if not ids.is_ulid(step_id):
        raise missing
    try:
        query = services.sessions.get_message(session.session_id, step_id)
    except NotFound:
        raise missing from None
    if query.type is not MessageType.QUERY:
        raise missing
    return _step(services, query)


def _step(services: Services, query: Message) -> tasks.Turn:
    """A step's turn: its query and what answers it among the next page of messages."""
    return tasks.turns([query, *Messaging(services).newer(query.session_id,
                                                          query.message_id)])[0]


def list_steps(services: Services, principal: Principal, task_id: str,
               current_page: int | None, page_size: int | None) -> Page[tasks.Turn]:
    """A page of the task's steps in order: the ids of its queries among the first
    ``LOG_READ`` messages (keys only), then the page's queries and replies, filtered in
    DynamoDB. A page that may hold more than they show is refused (:func:`_past_read`)."""
    page, size = page_numbers(current_page, page_size)
    session = get_session(services, principal, task_id)
    queries, whole = services.sessions.message_ids(session.session_id, [MessageType.QUERY],
                                                   LOG_READ)
    start = (page - 1) * size
    shown = queries[start:start + size]
    if len(shown) < size and not whole:
        raise _past_read("steps", task_id)
    total = len(queries) + (0 if whole else 1)
    if not shown:
        return Page([], total, page, size)
    following = queries[start + size] if start + size < len(queries) else None
    # Up to ``following`` the page lies among the messages just read: this read ends there.
    read, _ = services.sessions.messages_of(session.session_id, STEP_TYPES, LOG_READ,
                                            shown[0], following)
    found = tasks.turns(read)[:len(shown)]
    if following and any(t.reply is None for t in found):
        # A reply stored after the next step's query (queued behind it) is past the read:
        # one page of what follows answers every step of this page (a page per step read
        # the same log up to 100 times).
        later = Messaging(services).newer(session.session_id, following)
        found = tasks.turns([*read, *later])[:len(found)]
    return Page(found, total, page, size)


def _past_read(what: str, task_id: str) -> InvalidInput:
    """A page of steps or artifacts one request cannot fill: it may hold more than the
    first ``LOG_READ`` messages of the task's log (or, for artifacts, uploads) show."""
    return InvalidInput(
        f"this page of {what} may hold more than the first {LOG_READ:,} messages (and "
        f"uploads) of task {task_id} show, and one request reads no further: ask for an "
        "earlier page (total_items counts what those hold, plus one); read a step by its "
        "id, the newest with POST /steps, or the whole log with GraphQL's messages")


# -- artifacts ----------------------------------------------------------------------------
def uploaded(embed: Embed) -> Artifact:
    """A session embed as an artifact (the user's: uploaded, or sent with a step)."""
    return Artifact(embed.key, False, embed.key, embed.path, EmbedRef(
        content_type=embed.content_type, content_hash=embed.content_hash, size=embed.size),
        embed.created)


def artifacts_of(services: Services, task: Task) -> list[Artifact]:
    """The task's embeds: its first ``LISTED_MESSAGES`` uploads (the session's, by key),
    then those agents sent among the task's messages."""
    found = [uploaded(e) for e in (services.sessions.list_embeds(
        task.session.session_id, limit=tasks.LISTED_MESSAGES)
        if task.session.embed_count else [])]
    for message in task.messages:
        if message.type is not MessageType.QUERY:  # a user's are the session's: above
            found += message_artifacts(message)
    return found


def list_artifacts(services: Services, principal: Principal, task_id: str,
                   current_page: int | None, page_size: int | None) -> Page[Artifact]:
    """A page of the task's artifacts (as :func:`artifacts_of` orders them): the uploads
    up to the page's end, and the agents' messages that carry embeds (filtered in
    DynamoDB) among the first ``LOG_READ`` of its log. A page that may hold more than
    they show is refused (:func:`_past_read`)."""
    page, size = page_numbers(current_page, page_size)
    session = get_session(services, principal, task_id)
    start, end, uploads = (page - 1) * size, page * size, session.embed_count
    if start < uploads and min(end, uploads) > LOG_READ:
        raise _past_read("artifacts", task_id)
    carrying, whole = services.sessions.messages_of(session.session_id, AGENT_TYPES,
                                                    LOG_READ, with_embeds=True)
    sent = [a for m in carrying for a in message_artifacts(m)]
    if end > uploads + len(sent) and not whole:
        raise _past_read("artifacts", task_id)
    found = [uploaded(e) for e in services.sessions.list_embeds(
        session.session_id, limit=min(end, uploads))[start:end]] if start < uploads else []
    found += sent[max(0, start - uploads):max(0, end - uploads)]
    return Page(found, uploads + len(sent) + (0 if whole else 1), page, size)


def message_artifacts(message: Message) -> list[Artifact]:
    """The embeds an agent's message carries."""
    return [Artifact(f"{message.message_id}:{key}", True, key, None, ref, message.timestamp)
            for key, ref in message.embeds.items()]


def upload_artifact(services: Services, principal: Principal, task_id: str,
                    file_name: str, data: bytes, content_type: str | None = None,
                    relative_path: str | None = None) -> Artifact:
    """Attach a file to the task (a session embed under its file name): the agents of
    the task's next steps see it. Its size counts against the daily upload allowance."""
    check_embed_key(file_name)
    content_type = check_content_type(content_type or mimetypes.guess_type(file_name)[0]
                                      or "application/octet-stream")
    if relative_path:
        check_text(relative_path, "relative_path", MAX_RELATIVE_PATH, one_line=True)
    limit = services.settings.max_embed_bytes
    if len(data) > limit:
        raise InvalidInput(f"{file_name} is {len(data)} bytes; an artifact has at most {limit}")
    session = get_session(services, principal, task_id)
    user_id = user_id_of(principal)
    try:  # an embed is immutable: a key taken by other bytes is refused before any charge
        taken = services.sessions.get_embed(session.session_id, file_name)
    except NotFound:
        taken = None
    if taken is not None:
        if taken.content_hash != content_hash(data):
            raise Conflict(f"artifact {file_name!r} already exists in task {task_id}; "
                           "artifacts are immutable, upload under another name")
        return uploaded(taken)  # the same file again (a retry): nothing new to charge
    # Checked before the bytes go to S3, charged with the binding (one transaction): a
    # refused upload, or one that loses its key to a concurrent one, stores or charges
    # nothing (a concurrent upload taking the allowance's last bytes first leaves these
    # bytes stored, uncharged, as a post's may: messaging.Messaging._checked_embeds).
    allowance = services.settings.daily_upload_bytes
    charge = services.usage.charge_request(UPLOAD_BYTES, user_id, allowance, amount=len(data))
    services.usage.check_room(UPLOAD_BYTES, user_id, len(data), allowance, UPLOAD_LIMIT)
    digest = services.embeds.put(data, content_type)
    bound = services.sessions.bind_embed(Embed(
        key=file_name, session_id=session.session_id, owner=user_id,
        content_type=content_type, content_hash=digest, size=len(data),
        path=relative_path or None), charge)
    if bound is None:
        raise services.usage.rate_limited(UPLOAD_LIMIT, allowance, "day")
    return uploaded(bound)


def get_artifact(services: Services, principal: Principal, task_id: str,
                 artifact_id: str) -> Artifact:
    """The artifact its id names: an upload by its key, an agent's by its message."""
    session = get_session(services, principal, task_id)
    missing = NotFound(f"artifact {artifact_id} not found in task {task_id}")
    message_id, sent, _ = artifact_id.partition(":")
    try:
        if not sent:
            return uploaded(services.sessions.get_embed(session.session_id, artifact_id))
        if ids.is_ulid(message_id):
            message = services.sessions.get_message(session.session_id, message_id)
            if message.type is not MessageType.QUERY:
                for artifact in message_artifacts(message):
                    if artifact.artifact_id == artifact_id:
                        return artifact
    except NotFound:
        pass
    raise missing

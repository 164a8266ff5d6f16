"""Sessions as the tasks of agent protocols: MCP's ``ask``, A2A tasks.

A turn is one user message with the agent's terminal reply (response, error, or a
question: ``awaiting_input``). MCP and the Agent Protocol see a session as one task whose
state is its newest turn's (:func:`state_of`). A2A's tasks are immutable once finished,
so there a session is a context and a task a :class:`Chain`: a turn and the turns that
answer its questions (:func:`chains`), read from its first message on (:func:`read_task`).
Every protocol reads the same data GraphQL, the console and the Fixie endpoints read;
only the names differ.

A listing of tasks reads a few of each one's messages, never its whole log
(:func:`newest`): its state, newest answer and what came with them; an A2A task read
alone shows its newest ``SHOWN_MESSAGES``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from codeshot import ids
from codeshot.errors import Canceled, Conflict, InvalidInput, NotFound
from codeshot.models import PLANNER_ID, Message, MessageType, Principal, Session, TaskState
from codeshot.services import Services
from codeshot.usecases.agents import usable_agent
from codeshot.usecases.messaging import TERMINAL, EmbedUpload, Messaging, wait_for_reply
from codeshot.usecases.sessions import create_session, get_session
from codeshot.usecases.threads import blocking
from codeshot.usecases.users import user_id_of

LISTED_MESSAGES = 10  # a task listing reads at most this many of each task's messages
SHOWN_MESSAGES = 100  # an A2A task (GetTask, SendMessage's answer) shows its newest ones
TASK_PAGE = 200  # an A2A task is read from its first message on, this many at a time
_CHAIN = 3  # a step or reply -> the question it answers -> the query: the turn's query


@dataclass(frozen=True)
class Turn:
    """A user's message and the agent's terminal reply to it (None while working)."""

    query: Message
    reply: Message | None = None

    @property
    def state(self) -> TaskState:
        return TaskState.of_reply(self.reply)


def frontend_of(agent_id: str | None) -> str | None:
    """The session's frontend agent for an agent id (the planner's id: None)."""
    return None if agent_id in (None, "", PLANNER_ID) else agent_id


def turns(messages: Sequence[Message]) -> list[Turn]:
    """A session's turns in order: each user message with its terminal reply. A reply
    that ends a paused question (a cancel, a failed callback) answers the question's turn.
    """
    out: list[Turn] = []
    by_message: dict[str, int] = {}
    for message in messages:
        if message.type is MessageType.QUERY:
            by_message[message.message_id] = len(out)
            out.append(Turn(message))
        elif message.type in TERMINAL and message.in_reply_to in by_message:
            at = by_message[message.in_reply_to]
            out[at] = Turn(out[at].query, message)
            by_message[message.message_id] = at  # a question's own replies end its turn
    return out


@dataclass(frozen=True)
class Chain:
    """An A2A task: a turn, and each later turn that answered the question the one
    before it ended with (the runner resumes a paused program with the session's next
    message), with the messages of them all."""

    turns: tuple[Turn, ...]
    messages: tuple[Message, ...] = ()

    @property
    def first(self) -> Message:
        """The user message that began it: its id names the task."""
        return self.turns[0].query

    @property
    def state(self) -> TaskState:
        return self.turns[-1].state

    @property
    def replies(self) -> list[Message]:
        return [t.reply for t in self.turns if t.reply is not None]


def chains(messages: Sequence[Message]) -> list[Chain]:
    """The tasks (:class:`Chain`) of a run of a session's messages, in order, each with
    its own messages (steps of a turn whose query is not among them are left out)."""
    found = turns(messages)
    out: list[Chain] = []
    at: list[int] = []  # turn index -> chain index
    for turn in found:
        if out and out[-1].state is TaskState.INPUT_REQUIRED:
            out[-1] = Chain((*out[-1].turns, turn))
        else:
            out.append(Chain((turn,)))
        at.append(len(out) - 1)
    owner: dict[str, int] = {}  # a query or a question -> its chain
    for index, turn in enumerate(found):
        owner[turn.query.message_id] = at[index]
        if turn.reply is not None:
            owner[turn.reply.message_id] = at[index]
    members: list[list[Message]] = [[] for _ in out]
    for message in messages:
        chain = owner.get(message.message_id, owner.get(message.in_reply_to or ""))
        if chain is not None:
            members[chain].append(message)
    return [Chain(c.turns, tuple(m)) for c, m in zip(out, members)]


def first_query(services: Services, session_id: str, query_id: str) -> Message:
    """The user message that began a task (NOT_FOUND: no user message of that id)."""
    first = services.sessions.get_message(session_id, query_id)
    if first.type is not MessageType.QUERY:
        raise NotFound(f"task {query_id} not found")
    return first


def read_task(services: Services, session_id: str, query_id: str) -> Chain:
    """The task that ``query_id`` began in a session the caller was checked to own
    (NOT_FOUND: no user message of that id, or one that answered the question of the
    task before it), read from that message on, page by page until its last turn is over
    or the log ends: however long the log, a task costs only its own messages, a page
    after them, and the user message and answers of the turn before it."""
    first = first_query(services, session_id, query_id)
    before = _turn_before(services, session_id, query_id)
    read, token = [first], None
    while True:
        page = services.sessions.list_messages(session_id, limit=TASK_PAGE, token=token,
                                               after=query_id)
        read += page.items
        found = chains([*before, *read])
        at = next((n for n, c in enumerate(found) if c.first.message_id == query_id), None)
        if at is None:
            raise NotFound(f"task {query_id} not found: that message answered a question "
                           "of the task before it")
        # Over once another task began after its last turn ended, or the log ends.
        if (len(found) > at + 1 and found[at].turns[-1].reply is not None) or \
                not page.next_token:
            return found[at]
        token = page.next_token


def _turn_before(services: Services, session_id: str, query_id: str) -> list[Message]:
    """The user message and terminal replies of the turn before ``query_id`` (what tells
    whether that message answered its question), in time order; DynamoDB filters out the
    turn's steps."""
    found: list[Message] = []
    for message in services.sessions.earlier_of(session_id, {MessageType.QUERY, *TERMINAL},
                                                query_id):
        found.append(message)
        if message.type is MessageType.QUERY:
            break
    return found[::-1]


def task_chains(services: Services, session_id: str) -> list[Chain]:
    """Every task of a session, in order, with only its user messages and terminal
    replies (DynamoDB filters out the steps: a listing sends back no log)."""
    return chains(services.sessions.messages_of(session_id, {MessageType.QUERY, *TERMINAL}))


FINISHED = frozenset({TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED})


def newest(services: Services, session_id: str, limit: int = LISTED_MESSAGES
           ) -> list[Message]:
    """The session's newest ``limit`` messages in time order, led by its newest turn's
    query when that turn has more steps than ``limit`` (so :func:`turns` gives its
    state): one page of ``limit`` and at most three single reads, however long the log."""
    found = services.sessions.newest_messages(session_id, limit)
    by_id = {m.message_id: m for m in found}
    current = found[-1] if found else None
    for _ in range(_CHAIN):
        if current is None or current.type is MessageType.QUERY or not current.in_reply_to:
            break
        parent = by_id.get(current.in_reply_to)
        if parent is None:  # older than the window: older than all of it
            try:
                parent = services.sessions.get_message(session_id, current.in_reply_to)
            except NotFound:  # expired (the session's TTL): the turn is what is left
                break
            found.insert(0, parent)
            by_id[parent.message_id] = parent
        current = parent
    return found


def state_of(messages: Sequence[Message]) -> TaskState:
    found = turns(messages)
    return found[-1].state if found else TaskState.SUBMITTED


def open_session(services: Services, principal: Principal, agent_id: str | None,
                 session_id: str | None, **fields: str | None) -> Session:
    """The caller's session ``session_id``, or a new one talking to ``agent_id`` (default:
    the planner) with ``fields`` (see :func:`create_session`). An existing session must
    talk to that agent."""
    frontend = frontend_of(agent_id)
    if frontend:  # its full id: a bare handle is the caller's own agent
        frontend = usable_agent(services, principal, frontend).agent_id
    if session_id:
        session = get_session(services, principal, session_id)
        if agent_id and session.frontend_agent_id != frontend:
            raise InvalidInput(f"task {session_id} belongs to "
                               f"{session.frontend_agent_id or PLANNER_ID}, not {agent_id}")
        return session
    return create_session(services, principal, frontend, **fields)  # type: ignore[arg-type]


async def ask(services: Services, principal: Principal, text: str, *,
              agent_id: str | None = None, session_id: str | None = None,
              embeds: list[EmbedUpload] | None = None, wait: float | None = None,
              idempotency_key: str | None = None, unchanged_since: datetime | None = None,
              callback: Mapping[str, str | None] | None = None) -> tuple[Session, Turn]:
    """Post ``text`` to a session (the given one, or a new one with ``agent_id``; only if
    unchanged since a check read it ``modified`` then, and with its ``callback`` fields:
    see :meth:`Messaging.post`) and wait (at most ``wait`` seconds, by default the reply
    wait) for its terminal reply."""
    messaging = Messaging(services)
    if session_id is None:  # nothing is made for a post that would be refused
        await blocking(messaging.precheck, principal, text, bool(embeds))
    session = await blocking(open_session, services, principal, agent_id, session_id)
    query, _ = await blocking(messaging.post, principal, session.session_id, text, embeds,
                              idempotency_key, unchanged_since, callback)
    timeout = services.settings.reply_wait_seconds if wait is None else wait
    reply = await wait_for_reply(messaging, query, timeout) if timeout > 0 else None
    return session, Turn(query, reply)


def cancel(services: Services, principal: Principal, session_id: str,
           reason: str = "The user canceled the question.", question_id: str | None = None
           ) -> Message:
    """Turn down the question a paused session asks (``question_id``, when given: not a
    later one): its program ends with a CANCELED error. Only a session waiting for input
    can be canceled (a running one cannot be stopped midway, a finished one has nothing to
    stop)."""
    session = get_session(services, principal, session_id)
    return end_question(services, session, reason, Canceled.code, owner=user_id_of(principal),
                        question_id=question_id)


def awaited_question(services: Services, principal: Principal, session_id: str,
                     question_id: str) -> Message:
    """The caller's session's pending question, if it is ``question_id``; else CONFLICT."""
    return _pending_question(services, get_session(services, principal, session_id).session_id,
                             question_id)


def _pending_question(services: Services, session_id: str, question_id: str | None = None
                      ) -> Message:
    """The question the session waits on (``question_id``, when given); else CONFLICT."""
    pending = services.sessions.list_messages(session_id, limit=1, newest_first=True).items
    if not pending or pending[0].type is not MessageType.AWAITING_INPUT:
        raise Conflict(f"task {session_id} is not waiting for input")
    if question_id is not None and pending[0].message_id != question_id:
        raise Conflict(f"task {session_id} no longer waits on that question: it asks "
                       "another (read the task for it)")
    return pending[0]


def end_question(services: Services, session: Session, text: str, code: str,
                 owner: str | None = None, question_id: str | None = None) -> Message:
    """End a session's pending question (``question_id``, when given) with an error
    ``code`` (stored as the question's reply), drop its paused program, and make it idle:
    exactly once."""
    pending = _pending_question(services, session.session_id, question_id)
    message = Message(session_id=session.session_id, message_id=ids.ulid(), text=text,
                      type=MessageType.ERROR, sent_by="platform",
                      in_reply_to=pending.message_id, error_code=code)
    services.sessions.end_pause(message, owner=owner)
    return message

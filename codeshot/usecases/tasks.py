"""Sessions as the tasks of agent protocols: MCP's ``ask``, A2A tasks.

A task is a session and a turn is one user message with the agent's terminal reply
(response, error, or a question: ``awaiting_input``). Every protocol reads the same
data GraphQL, the console and the Fixie endpoints read; only the names differ. The
state of a task is the state of its newest turn (:func:`state_of`).

A listing of tasks reads a few of each one's messages, never its whole log
(:func:`newest`): its state, newest answer and what came with them; an A2A task read
alone shows its newest ``SHOWN_MESSAGES``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
              idempotency_key: str | None = None) -> tuple[Session, Turn]:
    """Post ``text`` to a session (the given one, or a new one with ``agent_id``) and wait
    (at most ``wait`` seconds, by default the reply wait) for its terminal reply."""
    messaging = Messaging(services)
    if session_id is None:  # nothing is made for a post that would be refused
        await blocking(messaging.precheck, principal, text, bool(embeds))
    session = await blocking(open_session, services, principal, agent_id, session_id)
    query, _ = await blocking(messaging.post, principal, session.session_id, text, embeds,
                              idempotency_key)
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

"""Sessions as the tasks of agent protocols: MCP's ``ask``, A2A tasks.

A turn is one user message with the agent's terminal reply (response, error, or a
question: ``awaiting_input``; a refusal that kept the question the message answered,
``keeps_question``, leaves the task waiting on that question). MCP and the Agent
Protocol see a session as one task whose state is its newest turn's (:func:`state_of`).
A2A's tasks are immutable once finished, so there a session is a context and a task a
:class:`Chain`: a turn and the turns that answer its questions (:func:`chains`), read
from its first message on (:func:`read_task`).
Every protocol reads the same data GraphQL, the console and the Fixie endpoints read;
only the names differ.

A listing of tasks reads a few of each one's messages, never its whole log
(:func:`newest`, :func:`newest_task`): its state, newest answer and what came with them;
an A2A task read alone shows its newest ``SHOWN_MESSAGES``. No read scans a log: a turn's
start is found from its last message by the ids it replies to (:func:`turn_before`), so
what an A2A request costs is bounded by its page size and ``TASK_READS``/``TASK_TURNS``,
never by the session's size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from codeshot import ids
from codeshot.errors import Canceled, Conflict, InvalidInput, NotFound
from codeshot.models import PLANNER_ID, Agent, Message, MessageType, Principal, Session, TaskState
from codeshot.services import Services
from codeshot.store.sessions import Place
from codeshot.usecases.agents import usable_agent
from codeshot.usecases.messaging import TERMINAL, EmbedUpload, Messaging, wait_for_reply
from codeshot.usecases.sessions import create_session, get_session
from codeshot.usecases.threads import blocking
from codeshot.usecases.users import user_id_of
from codeshot.usecases.waits import waiting

LISTED_MESSAGES = 10  # a task listing reads at most this many of each task's messages
SHOWN_MESSAGES = 100  # an A2A task (GetTask, SendMessage's answer) shows its newest ones
TASK_PAGE = 200  # an older A2A task is read from its first message on, this many a page
TASK_READS = 10  # ... in at most this many pages (2,000 messages): a longer one is refused
TASK_TURNS = 100  # questions an A2A task is read back through, at most
LISTED_CONTEXTS = 20  # contexts a page of a user's tasks reads at most (one read each)
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
    that ends a paused question (a cancel, a failed callback) answers the question's turn,
    or the turn of the last refused answer that kept it (``keeps_question``): that is the
    one left waiting on it, whichever of the end and the refusal sorts first. A refusal
    keeps a question only while it is asked, so it was written before the end, whose id
    may still be the older (made before the refusal's, written after it): the end is that
    turn's reply all the same.
    """
    keeper = {m.keeps_question: m.in_reply_to for m in messages
              if m.keeps_question and m.type in TERMINAL}
    out: list[Turn] = []
    by_message: dict[str, int] = {}
    ended: set[int] = set()  # turns a question's end closed
    for message in messages:
        if message.type is MessageType.QUERY:
            by_message[message.message_id] = len(out)
            out.append(Turn(message))
        elif message.type in TERMINAL:
            asked = message.in_reply_to or ""
            at = by_message.get(keeper.get(asked) or "", by_message.get(asked))
            if at is None:  # its turn began before these messages
                continue
            by_message[message.message_id] = at  # a question's own replies end its turn
            if message.keeps_question and at in ended:
                continue  # written before the end that closed the turn
            if asked != out[at].query.message_id:
                ended.add(at)
            out[at] = Turn(out[at].query, message)
    return out


@dataclass(frozen=True)
class Chain:
    """An A2A task: a turn, and each later turn that answered the question the one
    before it ended with (the runner resumes a paused program with the session's next
    message), with the messages of them all (an answer that came too late among them:
    :func:`_too_late`)."""

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

    @property
    def question(self) -> Message | None:
        """The question it waits on (None: it waits on none): its newest reply, or the
        one a refusal of its answer kept."""
        reply = self.turns[-1].reply
        if self.state is not TaskState.INPUT_REQUIRED or reply is None:
            return None
        asked = reply.keeps_question or reply.message_id
        return next((r for r in self.replies if r.message_id == asked), None)


def _too_late(chain: Chain, turn: Turn) -> bool:
    """Whether ``turn``'s query was sent to answer the question ``chain``'s last reply
    ended (A2A, by its task, before a cancel landed: the runner answered it CANCELED and
    ran nothing). Its messages are that task's, but not a turn of it: a finished task
    never changes, so its state and status stay what the end made them."""
    ended = chain.turns[-1].reply
    return turn.query.answers is not None and ended is not None and \
        ended.in_reply_to == turn.query.answers


def chains(messages: Sequence[Message]) -> list[Chain]:
    """The tasks (:class:`Chain`) of a run of a session's messages, in order, each with
    its own messages (steps of a turn whose query is not among them are left out)."""
    found = turns(messages)
    out: list[Chain] = []
    at: list[int] = []  # turn index -> chain index
    for turn in found:
        if out and out[-1].state is TaskState.INPUT_REQUIRED:
            out[-1] = Chain((*out[-1].turns, turn))
        elif not (out and _too_late(out[-1], turn)):
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


FINISHED = frozenset({TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELED})


def first_query(services: Services, session_id: str, query_id: str) -> Message:
    """The user message that began a task (NOT_FOUND: no user message of that id)."""
    first = services.sessions.get_message(session_id, query_id)
    if first.type is not MessageType.QUERY:
        raise NotFound(f"task {query_id} not found")
    return first


def _led(services: Services, session_id: str, found: list[Message]) -> list[Message]:
    """``found`` (in time order) led by the messages its last one replies to, up to its
    turn's query: at most ``_CHAIN`` single reads of those older than ``found``. A turn
    of an answer refused without running (:func:`_unrun`) read so is read whole (one
    read): the end of the question it answered may sort inside it."""
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
            if _unrun(parent, current):
                between = services.sessions.list_messages(
                    session_id, limit=LISTED_MESSAGES, after=parent.message_id).items
                return _merged(found, [m for m in between
                                       if m.message_id < current.message_id])
        current = parent
    return found


def _unrun(query: Message, reply: Message) -> bool:
    """Whether ``reply`` refused the answer ``query`` without running it: a refusal that
    kept the question, or the CANCELED of an answer whose question was ended first.
    Nothing of it ran, so only the end of that question (made before the reply, perhaps
    before the answer) can sort between them."""
    return reply.in_reply_to == query.message_id and (
        reply.keeps_question is not None or
        (query.answers is not None and reply.error_code == Canceled.code))


def newest(services: Services, session_id: str, limit: int = LISTED_MESSAGES
           ) -> list[Message]:
    """The session's newest ``limit`` messages in time order, led by its newest turn's
    query when that turn has more steps than ``limit`` (so :func:`turns` gives its
    state): one page of ``limit`` and at most three single reads (and a page for an
    answer refused unrun: :func:`_led`), however long the log."""
    return _led(services, session_id, services.sessions.newest_messages(session_id, limit))


def turn_before(services: Services, session_id: str, message_id: str) -> list[Message]:
    """The turn that ended just before ``message_id`` (what tells whether that message
    answered its question): the message before it, led by its turn's query and the
    question it answers; one read of one item and at most ``_CHAIN`` single reads (and a
    page of ``LISTED_MESSAGES`` for an answer refused unrun: :func:`_led`), however many
    steps that turn took. Empty at the log's start."""
    before = services.sessions.list_messages(session_id, limit=1, newest_first=True,
                                             before=message_id).items
    return _led(services, session_id, before)


def _continued(before: list[Message], query: Message) -> bool:
    """Whether the user message ``query`` is of the task of the turn ``before`` it (as
    :func:`turn_before` reads it): it answered that task's question."""
    found = chains([*before, query])
    return found[-1].first.message_id != query.message_id


def _from_first(services: Services, session_id: str, messages: list[Message]
                ) -> tuple[list[Message], list[Message]]:
    """``messages`` (in time order, from a turn's query on) led by the user messages and
    answers of the turns whose questions it answered, back to its task's first message:
    per turn, what :func:`turn_before` reads; at most ``TASK_TURNS`` turns. And the turn
    before the task (the end of the one before it), as read."""
    for _ in range(TASK_TURNS):
        first = next((m for m in messages if m.type is MessageType.QUERY), None)
        if first is None:
            return messages, []
        before = turn_before(services, session_id, first.message_id)
        if not _continued(before, first):
            return messages, before
        messages = [*before, *messages]
    raise Conflict(f"this task asked more than {TASK_TURNS} questions: A2A does not read "
                   "it (read the context's messages)")


def first_of(services: Services, session_id: str, query: Message) -> str:
    """The id of the first message of the task a user message belongs to (itself, or
    the first of the task whose question it answered: see :func:`_from_first`)."""
    messages, _ = _from_first(services, session_id, [query])
    return next(m.message_id for m in messages if m.type is MessageType.QUERY)


def _merged(*runs: Sequence[Message]) -> list[Message]:
    """Messages of several reads, each once, in time order (ids are ULIDs)."""
    return sorted({m.message_id: m for run in runs for m in run}.values(),
                  key=lambda m: m.message_id)


def check_task(services: Services, session_id: str, query_id: str
               ) -> tuple[Message, list[Message]]:
    """The user message that began a task, and the turn before it (NOT_FOUND: no user
    message of that id, or one that answered the question of the task before it)."""
    first = first_query(services, session_id, query_id)
    before = turn_before(services, session_id, query_id)
    if _continued(before, first):
        raise NotFound(f"task {query_id} not found: that message answered a question of "
                       "the task before it")
    return first, before


def read_task(services: Services, session_id: str, query_id: str) -> Chain:
    """The task that ``query_id`` began in a session the caller was checked to own
    (NOT_FOUND: see :func:`check_task`), read from that message on, ``TASK_PAGE`` at a
    time, until its last turn is over or the log ends: a task costs its own messages and
    a page after them, at most ``TASK_READS`` pages however long the log. A task longer
    than that is read as :func:`newest_task` reads it if it is its context's newest (its
    newest ``SHOWN_MESSAGES``), else refused."""
    first, before = check_task(services, session_id, query_id)
    read, token = [first], None
    for _ in range(TASK_READS):
        page = services.sessions.list_messages(session_id, limit=TASK_PAGE, token=token,
                                               after=query_id)
        read += page.items
        found = chains([*before, *read])
        at = next(n for n, c in enumerate(found) if c.first.message_id == query_id)
        # Over once another task began after its last turn ended, or the log ends.
        if (len(found) > at + 1 and found[at].turns[-1].reply is not None) or \
                not page.next_token:
            return found[at]
        token = page.next_token
    newest_one = newest_task(services, session_id, SHOWN_MESSAGES)
    if newest_one is not None and newest_one.first.message_id == query_id:
        return newest_one
    raise Conflict(f"task {query_id} has more than {TASK_READS * TASK_PAGE} messages: A2A "
                   "does not read it (read the context's messages)")


def newest_task(services: Services, session_id: str, limit: int = LISTED_MESSAGES
                ) -> Chain | None:
    """The session's newest task (None: no message yet) with its newest messages: one
    page of ``limit`` (:func:`newest`) and, when the task began before them, the user
    messages and questions of its earlier turns (:func:`_from_first`)."""
    window = newest(services, session_id, limit)
    found = chains(window)
    if len(found) == 1:  # it may have begun before the window
        found = chains(_from_first(services, session_id, window)[0])
    return found[-1] if found else None


def tasks_before(services: Services, session_id: str, before: str | None, count: int,
                 history: int = 0, skip_long: bool = False) -> tuple[list[Chain], str | None]:
    """Up to ``count`` of the session's tasks that began before the message ``before``
    (None: from the newest), newest first, each with its user messages and answers and
    its newest ``history`` messages; and where the next page begins (None: no older
    task). Steps are never scanned: a task costs, per turn, what :func:`turn_before`
    reads, and one page of ``history`` messages. A task of more than ``TASK_TURNS``
    questions is refused (CONFLICT), or with ``skip_long`` ends the session's tasks (where
    it began, hence those before it, is not read) so a listing goes on past it."""
    out: list[Chain] = []
    last = turn_before(services, session_id, before) if before else \
        newest(services, session_id, 1)
    for _ in range(2 * count):  # a message whose turn expired is skipped, not listed
        if not last:
            return out, None
        try:
            messages, older_end = _from_first(services, session_id, last)
        except Conflict:
            if not skip_long:
                raise
            return out, None
        found = chains(messages)
        if found:
            window = services.sessions.list_messages(
                session_id, limit=history, newest_first=True, before=before).items[::-1] \
                if history else []
            found = chains(_merged(found[-1].messages, window))
            out.append(found[-1])
            before = found[-1].first.message_id
        else:
            before = last[0].message_id
            older_end = turn_before(services, session_id, before)
        last = older_end
        if len(out) == count:
            break
    return out, before if last else None


def _resumed(services: Services, owner: str, frontend: str | None, token: str
             ) -> tuple[Place, str | None]:
    """Where a page of :func:`users_tasks` goes on from its ``token``: after a context's
    place in the owner's list, and first among that context's tasks that began before a
    message (None: none of them; so too once the context was deleted)."""
    context, dot, before = token.rpartition(".")
    if not dot or not context or (before and not ids.is_ulid(before)):
        raise InvalidInput("pageToken is not one this listing gave")
    try:
        if before:
            session = services.sessions.get(context, owner)
            if session.frontend_agent_id != frontend:
                raise InvalidInput("pageToken is not one this listing gave")
            return Place(context, session.to_dict()["created"]), before
        return services.sessions.place(context, owner), None
    except NotFound:
        try:  # deleted since (its place is kept a while): its tasks are gone
            return services.sessions.place(context, owner), None
        except NotFound:
            raise InvalidInput("pageToken is not one this listing gave") from None


def users_tasks(services: Services, owner: str, frontend: str | None, token: str | None,
                count: int, history: int = 0) -> tuple[list[Chain], str | None]:
    """Up to ``count`` of the owner's tasks with ``frontend`` (None: the planner), newest
    first: their contexts newest first, each context's tasks newest first (as
    :func:`tasks_before` reads them: a task costs its turns, never its steps), from where
    ``token`` says (None: the newest); and the next page's token (None: no more): the
    last task listed, ``<context>.<its first message>``, or ``<context>.`` once that
    context's tasks are all listed (a task of more than ``TASK_TURNS`` questions ends
    them: it and those before it are not listed). A page reads one page of the owner's
    index (at most ``LISTED_CONTEXTS`` contexts) and may come short of ``count``, with a
    token to go on: a context costs a read even with no task, and the index is filtered
    by agent."""
    out: list[Chain] = []
    place, before = _resumed(services, owner, frontend, token) if token else (None, None)
    if place is not None and before is not None:
        out, before = tasks_before(services, place.session_id, before, count, history,
                                   skip_long=True)
        if before is not None:
            return out, ids.task_id(place.session_id, before)
        if len(out) == count:
            return out, f"{place.session_id}."
    contexts = services.sessions.list_by_frontend(owner, frontend, LISTED_CONTEXTS,
                                                  after=place)
    for at, session in enumerate(contexts.items):
        found, before = tasks_before(services, session.session_id, None, count - len(out),
                                     history, skip_long=True)
        out += found
        if before is not None:
            return out, ids.task_id(session.session_id, before)
        if len(out) == count:
            more = at + 1 < len(contexts.items) or contexts.next_token
            return out, f"{session.session_id}." if more else None
    if contexts.next_token is None:
        return out, None
    last = contexts.items[-1].session_id if contexts.items else \
        services.sessions.place_at(owner, contexts.next_token).session_id
    return out, f"{last}."


def state_of(messages: Sequence[Message]) -> TaskState:
    found = turns(messages)
    return found[-1].state if found else TaskState.SUBMITTED


def open_session(services: Services, principal: Principal, agent_id: str | Agent | None,
                 session_id: str | None, **fields: str | None) -> Session:
    """The caller's session ``session_id``, or a new one talking to ``agent_id`` (default:
    the planner; an agent already read, :func:`usable_agent`, is not read again) with
    ``fields`` (see :func:`create_session`). An existing session must talk to that
    agent."""
    if isinstance(agent_id, Agent):
        agent: Agent | None = agent_id
        agent_id = agent_id.agent_id
    elif frontend := frontend_of(agent_id):  # its full id: a bare handle is the caller's
        agent = usable_agent(services, principal, frontend)
    else:
        agent = None
    if session_id:
        session = get_session(services, principal, session_id)
        if agent_id and session.frontend_agent_id != (agent.agent_id if agent else None):
            raise InvalidInput(f"task {session_id} belongs to "
                               f"{session.frontend_agent_id or PLANNER_ID}, not {agent_id}")
        return session
    return create_session(services, principal, agent, **fields)  # type: ignore[arg-type]


async def ask(services: Services, principal: Principal, text: str, *,
              agent_id: str | None = None, session_id: str | None = None,
              embeds: list[EmbedUpload] | None = None, wait: float | None = None,
              idempotency_key: str | None = None, unchanged_since: datetime | None = None,
              callback: Mapping[str, str | None] | None = None, answers: str | None = None,
              task: str | None = None) -> tuple[Session, Turn]:
    """Post ``text`` to a session (the given one, or a new one with ``agent_id``; only if
    unchanged since a check read it ``modified`` then, with its ``callback`` fields and
    the question of the A2A ``task`` it ``answers``: see :meth:`Messaging.post`) and wait
    (at most ``wait`` seconds, by default the reply wait) for its terminal reply."""
    messaging = Messaging(services)
    timeout = services.settings.reply_wait_seconds if wait is None else wait
    agent: str | Agent | None = agent_id
    if session_id is None:  # before a waiting slot: bad input gets its own error, makes nothing
        await blocking(messaging.precheck, principal, text, bool(embeds))
        if frontend := frontend_of(agent_id):
            agent = await blocking(usable_agent, services, principal, frontend)
    # In a session there already, the post takes the slot (refusing bad input before);
    # a new one is made first, so the slot is taken before it.
    async with waiting(services, principal, timeout, posting=session_id is not None) as slot:
        session = await blocking(open_session, services, principal, agent, session_id)
        query, _ = await blocking(messaging.post, principal, session.session_id, text, embeds,
                                  idempotency_key, unchanged_since, callback, answers,
                                  task, slot)
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
    return pending_question(services, get_session(services, principal, session_id).session_id,
                            question_id)


def pending_question(services: Services, session_id: str, question_id: str | None = None
                     ) -> Message:
    """The question the session waits on (``question_id``, when given); else CONFLICT.
    Its newest message, or the question a refusal of its answer kept (one more read)."""
    pending = services.sessions.list_messages(session_id, limit=1, newest_first=True).items
    if pending and pending[0].keeps_question:
        pending = [services.sessions.get_message(session_id, pending[0].keeps_question)]
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
    pending = pending_question(services, session.session_id, question_id)
    message = Message(session_id=session.session_id, message_id=ids.ulid(), text=text,
                      type=MessageType.ERROR, sent_by="platform",
                      in_reply_to=pending.message_id, error_code=code)
    services.sessions.end_pause(message, owner=owner)
    return message

"""Every agent as an A2A agent: its card and a JSON-RPC endpoint at ``/a2a/{owner}/{handle}``
(the planner at ``/a2a/platform/planner``, its card also at ``/.well-known/agent-card.json``).

The official ``a2a-sdk`` parses and answers the JSON-RPC (A2A 1.0's ``SendMessage``,
``SendStreamingMessage``, ``GetTask`` ... and 0.3's ``message/send``, ``message/stream``,
``tasks/get``, ``tasks/cancel``, ``tasks/pushNotificationConfig/*`` on the same URL); its
``RequestHandler`` here maps A2A onto codeshot's sessions, because agents run in the
runner (SQS), never in this process:

- a context is a session (context id = session handle) and a task one turn of it: a user
  message and the agent's terminal reply, with the later turns that answer its questions
  (``tasks.Chain``); task id = ``<session>.<id of its first message>``, so it needs no
  storage of its own and reaches nothing the session's owner check does not allow;
- a message with neither id begins a session and its first task; with a context id only,
  a new task in it, once its newest is over; with a task id, it answers that task's
  question. A finished task never changes (A2A's task immutability): a message naming it,
  or a working one, is UnsupportedOperation and writes nothing;
- a task's state is its newest turn's (``input-required`` = ``awaiting_input``), its
  artifacts its answers, its history its own messages (every step, with its type and
  sender in the metadata);
- push notifications are the session's signed callback, sent in A2A's form with the
  client's token: one config per context, each push naming its task.

Imported on the first A2A request (``codeshot.api.protocols``), not at cold start.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.jsonrpc_models import JSONRPCError
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.server.request_handlers.response_helpers import EXCEPTION_MAP, agent_card_to_dict
from a2a.server.routes.common import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Artifact,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    HTTPAuthSecurityScheme,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    Part,
    Role,
    SecurityRequirement,
    SecurityScheme,
    SendMessageRequest,
    StringList,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import (
    A2A_ERROR_REASONS,
    JSON_RPC_ERROR_CODE_MAP,
    A2AError,
    ContentTypeNotSupportedError,
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from starlette.requests import Request
from starlette.responses import Response

from codeshot import ids, models
from codeshot.api.errors import as_codeshot_error
from codeshot.errors import (
    INTERNAL_MESSAGE,
    Changed,
    CodeshotError,
    Conflict,
    InvalidInput,
    NotFound,
    RateLimited,
)
from codeshot.models import PLANNER_ID, Agent, MessageType, Principal, Session
from codeshot.services import Services
from codeshot.usecases import agents, sessions, tasks
from codeshot.usecases.messaging import TERMINAL, Messaging, follow
from codeshot.usecases.threads import blocking
from codeshot.usecases.users import user_id_of
from codeshot.usecases.waits import take_slot, waiting

log = logging.getLogger("codeshot.api")

A2A_FORMAT = "a2a"  # Session.callback_format of a push-notification config
DEFAULT_PUSH_CONFIG_ID = "default"
# A push config's token rides in a header of every push, its id on the session's item:
# printable ASCII (what a header can carry), of bounded length.
PUSH_TOKEN = re.compile(r"[\x20-\x7e]{1,1024}")
PUSH_CONFIG_ID = re.compile(r"[\x21-\x7e]{1,128}")
MAX_SKILLS = 50
MAX_LIST_PAGE = 20  # tasks a ListTasks page shows at most (each read back turn by turn)
MAX_PAGE_SIZE = 100  # A2A's bound: a larger pageSize is refused
PLANNER_SKILL = AgentSkill(id="ask", name="Ask", tags=["planner"],
                           description="Ask anything: the planner routes it to an agent.")
T = TypeVar("T")


# -- cards ------------------------------------------------------------------------------
def _security() -> dict[str, Any]:
    scheme = SecurityScheme(http_auth_security_scheme=HTTPAuthSecurityScheme(
        scheme="bearer", description="a codeshot API key"))
    return {"security_schemes": {"apiKey": scheme},
            "security_requirements": [SecurityRequirement(schemes={"apiKey": StringList()})]}


def _card(services: Services, agent_id: str, name: str, description: str,
          skills: list[AgentSkill]) -> AgentCard:
    url = f"{services.settings.api_url.rstrip('/')}/a2a/{agent_id}"
    return AgentCard(
        name=name, description=description or name, version="1",
        # The endpoint speaks both versions' method names; a 0.3 client reads the card's
        # url and preferredTransport from the 0.3 interface.
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC",
                                             protocol_version=version)
                              for version in ("1.0", "0.3")],
        capabilities=AgentCapabilities(streaming=True, push_notifications=True),
        default_input_modes=["text/plain"], default_output_modes=["text/plain"],
        skills=skills[:MAX_SKILLS], **_security())


def agent_card(services: Services, agent: Agent) -> AgentCard:
    """An agent's card: one skill, the agent, with its sample queries as examples."""
    skill = AgentSkill(id=agent.handle, name=agent.name or agent.handle,
                       description=agent.description or agent.name or agent.agent_id,
                       tags=[agent.owner, agent.kind.value],
                       examples=agent.sample_queries[:10])
    return _card(services, agent.agent_id, agent.name or agent.agent_id, agent.description,
                 [skill])


def planner_card(services: Services, visible: list[Agent]) -> AgentCard:
    """The planner's card: a skill per agent it can route to, or (none visible) one
    skill, asking it (a card has at least one)."""
    skills = [AgentSkill(id=a.agent_id.replace("/", "."), name=a.name or a.agent_id,
                         description=a.description or a.agent_id, tags=[a.owner],
                         examples=a.sample_queries[:3]) for a in visible] or [PLANNER_SKILL]
    return _card(services, PLANNER_ID, "codeshot planner",
                 "Answers by routing each request to the platform's agents.", skills)


def card_json(services: Services, principal: Principal | None, agent_id: str
              ) -> dict[str, Any]:
    """The card of ``agent_id`` as the caller may see it (published agents are public;
    unpublished ones only their owner's, others get NOT_FOUND)."""
    viewer = principal or Principal(user_id=None)
    if agent_id == PLANNER_ID:
        visible = agents.visible_agents(services, viewer) if principal else \
            [a for a in services.registry.all_agents(None) if a.published]
        return agent_card_to_dict(planner_card(services, visible))
    return agent_card_to_dict(agent_card(services, agents.usable_agent(services, viewer,
                                                                        agent_id)))


# -- sessions as contexts, turns as tasks -------------------------------------------------
def _parts(services: Services, message: models.Message) -> list[Part]:
    parts = [Part(text=message.text)]
    parts += [Part(url=services.embeds.get_url(ref.content_hash), media_type=ref.content_type,
                   filename=key) for key, ref in message.embeds.items()]
    return parts


def wire_message(services: Services, message: models.Message, task_id: str) -> Message:
    """A session message as an A2A message of task ``task_id``: the user's own are the
    user's, every other step (thoughts, calls, results, answers) the agent's, its type and
    sender in metadata."""
    out = Message(message_id=message.message_id, context_id=message.session_id,
                  task_id=task_id, parts=_parts(services, message),
                  role=Role.ROLE_USER if message.type is MessageType.QUERY else Role.ROLE_AGENT)
    out.metadata.update({"type": message.type.value, "sentBy": message.sent_by,
                         **({"errorCode": message.error_code} if message.error_code else {})})
    return out


def _state(state: models.TaskState) -> Any:
    return TaskState.Value("TASK_STATE_" + state.name)


def _status(services: Services, turn: tasks.Turn, task_id: str) -> TaskStatus:
    status = TaskStatus(state=_state(turn.state))
    status.timestamp.FromDatetime((turn.reply or turn.query).timestamp)
    if turn.reply is not None:
        status.message.CopyFrom(wire_message(services, turn.reply, task_id))
    return status


def _artifact(services: Services, reply: models.Message) -> Artifact:
    return Artifact(artifact_id=reply.message_id, name="answer", parts=_parts(services, reply))


def task_of(services: Services, session_id: str, chain: tasks.Chain,
            history_length: int | None = None, artifacts: bool = True) -> Task:
    """A task as A2A shows it: its newest turn's status, its answers as artifacts, and
    its own newest messages (at most ``tasks.SHOWN_MESSAGES``) as its history."""
    task_id = ids.task_id(session_id, chain.first.message_id)
    messages = list(chain.messages[-tasks.SHOWN_MESSAGES:])
    if history_length is not None:
        messages = messages[-history_length:] if history_length else []
    return Task(id=task_id, context_id=session_id,
                status=_status(services, chain.turns[-1], task_id),
                artifacts=[_artifact(services, t.reply) for t in chain.turns
                           if artifacts and t.reply is not None
                           and t.state is models.TaskState.COMPLETED],
                history=[wire_message(services, m, task_id) for m in messages])


def _text_of(message: Message) -> str:
    texts = []
    for part in message.parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            from google.protobuf.json_format import MessageToJson

            texts.append(MessageToJson(part.data, indent=None))
        else:
            raise ContentTypeNotSupportedError(
                message="codeshot agents take text and data parts; send files as links")
    return "\n".join(texts)


def _history_length(params: Any) -> int | None:
    """A request's historyLength (None: not given); a negative one is refused."""
    if not params.HasField("history_length"):
        return None
    if params.history_length < 0:
        raise InvalidParamsError(message="historyLength must not be negative")
    return int(params.history_length)


# -- the request handler ----------------------------------------------------------------
class CodeshotUser(User):
    def __init__(self, principal: Principal) -> None:
        self.principal = principal

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self.principal.username or self.principal.user_id or ""


class ContextBuilder(DefaultServerCallContextBuilder):
    def build_user(self, request: Request) -> User:
        principal: Principal = request.state.codeshot_principal
        return CodeshotUser(principal)


class RateLimitedError(A2AError):
    """A quota is used up: a server error of A2A's own range (-32000 to -32099), its
    reset time in the data, since A2A has no code of its own for it."""


RATE_LIMITED_RPC_CODE = -32029
# The SDK picks an error's JSON-RPC code, body model and reason by its class from these
# tables (it has no other way to add a server error). A 0.3 client, whose protocol lacks
# the code, gets -32603 with the same message and data.
JSON_RPC_ERROR_CODE_MAP.setdefault(RateLimitedError, RATE_LIMITED_RPC_CODE)
EXCEPTION_MAP.setdefault(RateLimitedError, JSONRPCError)
A2A_ERROR_REASONS.setdefault(RateLimitedError, RateLimited.code)


def _data(exc: CodeshotError) -> dict[str, str]:
    """An error's stable code and details as the error's data (google.rpc.ErrorInfo's
    metadata in A2A 1.0: a map of strings)."""
    return {"code": exc.code, **{k: str(v) for k, v in exc.details.items()}}


def _a2a_error(error: Exception) -> A2AError:
    """codeshot's errors in A2A's terms (AWS throttling is RATE_LIMITED); nothing
    unexpected leaks its details."""
    if isinstance(error, A2AError):
        return error
    exc: Exception = as_codeshot_error(error) or error
    if isinstance(exc, NotFound):
        return TaskNotFoundError(message=exc.message)
    if isinstance(exc, InvalidInput):  # Conflict too: only a cancel makes it not-cancelable
        return InvalidParamsError(message=exc.message, data=_data(exc))
    if isinstance(exc, RateLimited):
        return RateLimitedError(message=exc.message, data=_data(exc))
    if isinstance(exc, CodeshotError):
        return InternalError(message=exc.message, data={"code": exc.code})
    log.error("A2A request failed", exc_info=error)
    return InternalError(message=INTERNAL_MESSAGE)


POST_TRIES = 3  # checks and posts of a message whose task changed between the two


@dataclass(frozen=True)
class _Target:
    """Where a message goes (see :meth:`SessionTasks._target`)."""

    session: Session | None = None
    continued: str | None = None  # the query that began the task it continues
    checked: bool = False  # its task's or context's state was read: posted only if unchanged
    answers: str | None = None  # the question of the task it continues


@dataclass(frozen=True)
class _Checked:
    """A message checked before anything is held or made for it (:meth:`SessionTasks.
    _check`): it, its text, push config, idempotency key (its messageId) and where it
    goes, as then."""

    message: Message
    text: str
    push: TaskPushNotificationConfig | None
    key: str | None
    target: _Target


def _refused(task_id: str, state: models.TaskState, new_task: bool = False
             ) -> UnsupportedOperationError:
    """Why a message is refused by task ``task_id`` in ``state`` (``new_task``: it asked
    for a new task in the context this task is the newest of), and what to do instead."""
    if new_task:
        why = ("waits for input: answer it (its taskId) or cancel it before beginning "
               "another" if state is models.TaskState.INPUT_REQUIRED else
               "is still working: begin the next once it is over (GetTask, SubscribeToTask)")
        return UnsupportedOperationError(message=f"task {task_id} of this context {why}")
    why = ("is still working: it takes a message only when it asks for input; wait for it "
           "(GetTask, SubscribeToTask)" if state is models.TaskState.WORKING else
           f"is {state.value} and cannot be continued: send the next message with its "
           "contextId (no taskId) to begin a new task in its context")
    return UnsupportedOperationError(message=f"task {task_id} {why}")


def _callback(config: TaskPushNotificationConfig) -> dict[str, str | None]:
    """A checked push config as the session's callback fields."""
    return {"callback_url": config.url, "callback_token": config.token or None,
            "callback_id": config.id or DEFAULT_PUSH_CONFIG_ID, "callback_format": A2A_FORMAT}


class SessionTasks(RequestHandler):
    """A2A's operations for one agent's endpoint, over the caller's sessions with it."""

    def __init__(self, services: Services, agent_id: str) -> None:
        self.s = services
        self.agent_id = agent_id
        self.frontend = tasks.frontend_of(agent_id)

    @staticmethod
    def _principal(context: ServerCallContext) -> Principal:
        user = context.user
        assert isinstance(user, CodeshotUser)
        return user.principal

    async def _call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        try:
            return await fn(*args)
        except Exception as exc:  # every failure becomes an A2A error
            raise _a2a_error(exc) from exc

    async def _session(self, principal: Principal, session_id: str) -> Session:
        """One of the caller's sessions with this agent (others' look absent)."""
        session = await blocking(sessions.get_session, self.s, principal, session_id)
        if session.frontend_agent_id != self.frontend:
            raise TaskNotFoundError(message=f"{session_id} is not {self.agent_id}'s")
        return session

    async def _context(self, principal: Principal, context_id: str) -> Session:
        try:
            return await self._session(principal, context_id)
        except (NotFound, TaskNotFoundError):
            raise InvalidInput(f"context {context_id[:80]!r} is none of your contexts with "
                               f"{self.agent_id}: leave contextId out to begin a new one"
                               ) from None

    async def _find(self, principal: Principal, task_id: str) -> tuple[Session, str]:
        """The session of one of the caller's tasks and the query that began it; a
        malformed id, or another's task, is TaskNotFound."""
        parts = ids.split_task_id(task_id)
        if parts is None:
            raise TaskNotFoundError(message=f"task {task_id[:80]!r} not found")
        session = await self._session(principal, parts[0])
        return session, parts[1]

    async def _read(self, principal: Principal, task_id: str
                    ) -> tuple[Session, tasks.Chain]:
        session, query_id = await self._find(principal, task_id)
        return session, await blocking(tasks.read_task, self.s, session.session_id, query_id)

    async def _task(self, principal: Principal, task_id: str,
                    history_length: int | None = None) -> Task:
        session, chain = await self._read(principal, task_id)
        return task_of(self.s, session.session_id, chain, history_length)

    async def _retried(self, session: Session, key: str | None, query_id: str | None
                       ) -> bool:
        """Whether this message (its messageId) was posted to the session before: a retry
        gets what the first try got, whatever the tasks' states now. It must name the
        task the first try went to (``query_id``: the task's first message; None: a new
        task); else INVALID_INPUT, as any idempotency key sent with another request."""
        earlier = None if key is None else await blocking(
            self.s.sessions.posted_under, session.session_id, key)
        if earlier is None:
            return False
        first = await blocking(tasks.first_of, self.s, session.session_id, earlier)
        if first != (query_id or earlier.message_id):
            raise Conflict("this messageId was already used for a message to another task; "
                           "use a new messageId for a new message")
        return True

    async def _target(self, principal: Principal, message: Message, key: str | None
                      ) -> _Target:
        """Where a message goes: its task's session and the query that began the task, a
        context for a new task in it, or nowhere yet (a new task in a new context). Only a
        task waiting for input takes a message (A2A: a finished task never changes; a
        working one is answered before the next), and a context takes a new task only
        once its newest is over (the session runs one turn at a time, and a paused run
        takes the next message as its answer)."""
        if message.task_id:
            session, query_id = await self._find(principal, message.task_id)
            if message.context_id and message.context_id != session.session_id:
                raise InvalidParamsError(message=f"contextId {message.context_id[:80]!r} is "
                                                 "not the context of that task")
            if not await self._retried(session, key, query_id):
                chain = await blocking(tasks.read_task, self.s, session.session_id, query_id)
                if chain.state is not models.TaskState.INPUT_REQUIRED:
                    raise _refused(message.task_id, chain.state)
                question = chain.question
                return _Target(session, query_id, checked=True,
                               answers=question.message_id if question else None)
            return _Target(session, query_id)
        if message.context_id:
            session = await self._context(principal, message.context_id)
            if await self._retried(session, key, None):
                return _Target(session)
            last = await blocking(tasks.newest_task, self.s, session.session_id)
            if last is not None and last.state not in tasks.FINISHED:
                raise _refused(ids.task_id(session.session_id, last.first.message_id),
                               last.state, new_task=True)
            return _Target(session, checked=True)
        return _Target()

    async def _check(self, params: SendMessageRequest, principal: Principal) -> _Checked:
        """A message to send, checked (text, quota, push config, where it goes): bad
        input is refused before a waiting slot is taken or anything is made for it."""
        text = _text_of(params.message)
        await blocking(Messaging(self.s).precheck, principal, text)
        config = params.configuration
        push = config.task_push_notification_config \
            if config.HasField("task_push_notification_config") else None
        if push is not None:
            await self._check_push(push)
        key = params.message.message_id[:128] or None
        return _Checked(params.message, text, push, key,
                        await self._target(principal, params.message, key))

    async def _post(self, principal: Principal, checked: _Checked, wait: float
                    ) -> tuple[str, tasks.Turn]:
        """Post a checked message (to its task, as a new task in its context, or in a new
        one): refused input made, charged and stored nothing. A retried message (same
        messageId) is the first one: posted and charged once. Returns the task's id and
        the turn posted."""
        target, key, push = checked.target, checked.key, checked.push
        for _ in range(POST_TRIES):
            session = target.session if target.session is not None else await blocking(
                tasks.open_session, self.s, principal, self.agent_id, None,
                once=f"a2a:{self.agent_id}:{key}" if key else None)
            try:
                # A checked post holds only if no post or reply came since the check read
                # the session: two answers at once are one answer and one refusal. The
                # push config is written with the post (so its answer is pushed): a
                # refused or repeated message changes none.
                session, turn = await tasks.ask(
                    self.s, principal, checked.text, agent_id=self.agent_id,
                    session_id=session.session_id, wait=wait, idempotency_key=key,
                    unchanged_since=session.modified if target.checked else None,
                    callback=_callback(push) if push is not None else None,
                    answers=target.answers,
                    task=target.continued if target.answers else None)
            except Changed:  # check again, as it is now
                target = await self._target(principal, checked.message, key)
                continue
            return ids.task_id(session.session_id,
                               target.continued or turn.query.message_id), turn
        raise Conflict("the task kept changing while this message was checked; send it again")

    async def on_message_send(self, params: SendMessageRequest, context: ServerCallContext
                              ) -> Task:
        length = _history_length(params.configuration)

        async def send() -> Task:
            principal = self._principal(context)
            checked = await self._check(params, principal)
            wait = 0 if params.configuration.return_immediately else \
                self.s.settings.reply_wait_seconds
            # A waiting slot once the input is checked, before the task's context is made
            # (see usecases/waits.py).
            async with waiting(self.s, principal, wait):
                task_id, _ = await self._post(principal, checked, wait)
            return await self._task(principal, task_id, length)

        return await self._call(send)

    async def on_message_send_stream(self, params: SendMessageRequest,
                                     context: ServerCallContext) -> AsyncGenerator[Event]:
        principal = self._principal(context)
        try:
            checked = await self._check(params, principal)
            # Its slot before the post (see usecases/waits.py), given back as it ends.
            slot = await take_slot(self.s, principal)
        except Exception as exc:
            raise _a2a_error(exc) from exc
        try:
            try:
                task_id, turn = await self._post(principal, checked, 0)
                task = await self._task(principal, task_id, 0)
            except Exception as exc:
                raise _a2a_error(exc) from exc
            yield task
            async for event in self._updates(task_id, turn.query):
                yield event
        finally:
            await slot.release()

    async def _updates(self, task_id: str, query: models.Message
                       ) -> AsyncGenerator[Event]:
        """Each step after ``query`` as a working status, then the answer as an artifact
        and the final status; the stream ends at the terminal reply, or at the reply wait
        with the task's status then (still working: read or subscribe again later)."""
        try:
            async for event in self._follow(task_id, query):
                yield event
        except Exception as exc:  # the SDK would stream its text (an AWS error names the role)
            raise _a2a_error(exc) from exc

    async def _follow(self, task_id: str, query: models.Message) -> AsyncGenerator[Event]:
        timeout = max(self.s.settings.reply_wait_seconds, 1.0)
        context_id = query.session_id
        status = _status(self.s, tasks.Turn(query), task_id)
        async for message in follow(Messaging(self.s), query, timeout):
            terminal = message.in_reply_to == query.message_id and \
                message.type in TERMINAL
            turn = tasks.Turn(query, message if terminal else None)
            if terminal and turn.state is models.TaskState.COMPLETED:
                yield TaskArtifactUpdateEvent(task_id=task_id, context_id=context_id,
                                              artifact=_artifact(self.s, message),
                                              last_chunk=True)
            status = _status(self.s, turn, task_id)
            if terminal:
                yield TaskStatusUpdateEvent(task_id=task_id, context_id=context_id,
                                            status=status)
                return
            status.message.CopyFrom(wire_message(self.s, message, task_id))
            yield TaskStatusUpdateEvent(task_id=task_id, context_id=context_id, status=status)
        yield TaskStatusUpdateEvent(task_id=task_id, context_id=context_id, status=status)

    async def on_subscribe_to_task(self, params: SubscribeToTaskRequest,
                                   context: ServerCallContext) -> AsyncGenerator[Event]:
        try:
            session, chain = await self._read(self._principal(context), params.id)
        except Exception as exc:
            raise _a2a_error(exc) from exc
        if chain.state in tasks.FINISHED:  # A2A: nothing more will happen to it
            raise UnsupportedOperationError(message=f"task {params.id} is "
                                                    f"{chain.state.value}: read it with GetTask")
        last = chain.turns[-1]
        if last.reply is not None:  # waiting for input: nothing to follow
            yield task_of(self.s, session.session_id, chain, 0)
            return
        try:  # still working: followed to its end, holding a waiting slot (see waits.py)
            slot = await take_slot(self.s, self._principal(context))
        except Exception as exc:
            raise _a2a_error(exc) from exc
        try:
            yield task_of(self.s, session.session_id, chain, 0)
            async for event in self._updates(params.id, last.query):
                yield event
        finally:
            await slot.release()

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext
                          ) -> Task | None:
        return await self._call(self._task, self._principal(context), params.id,
                                _history_length(params))

    async def on_list_tasks(self, params: ListTasksRequest, context: ServerCallContext
                            ) -> ListTasksResponse:
        if params.status or params.HasField("status_timestamp_after"):
            # A task's state is its newest turn's, not stored: filtering by it would read
            # every task's messages.
            raise InvalidParamsError(message="ListTasks filters only by contextId; "
                                             "read each task's status instead")
        if not 0 <= params.page_size <= MAX_PAGE_SIZE:
            raise InvalidParamsError(message=f"pageSize must be from 1 to {MAX_PAGE_SIZE}")
        if params.context_id and params.page_token and not ids.is_ulid(params.page_token):
            raise InvalidParamsError(message="pageToken is not one this listing gave")
        length = _history_length(params) or 0
        size = min(params.page_size or MAX_LIST_PAGE, MAX_LIST_PAGE)

        async def listing() -> ListTasksResponse:
            principal = self._principal(context)
            if params.context_id:
                listed, total, token = await self._in_context(principal, size, length, params)
            else:
                listed, total, token = await self._callers(principal, size, length, params)
            return ListTasksResponse(tasks=listed, page_size=size, total_size=total,
                                     next_page_token=token or "")

        return await self._call(listing)

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext
                             ) -> Task | None:
        async def cancel() -> Task:
            principal = self._principal(context)
            session, chain = await self._read(principal, params.id)
            question = chain.question
            if question is None:
                raise TaskNotCancelableError(message=(
                    f"task {params.id} is {chain.state.value}: only a task waiting for "
                    "input can be canceled (a running one cannot be stopped midway)"))
            try:
                await blocking(tasks.cancel, self.s, principal, session.session_id,
                               question_id=question.message_id)
            except Conflict as exc:  # answered meanwhile: nothing to cancel
                raise TaskNotCancelableError(message=exc.message, data=_data(exc)) from exc
            return await self._task(principal, params.id)

        return await self._call(cancel)

    async def _in_context(self, principal: Principal, size: int, length: int,
                          params: ListTasksRequest) -> tuple[list[Task], int, str | None]:
        """A page of one context's tasks, newest first (another's context has none), each
        read back from the page token without its steps (:func:`tasks.tasks_before`). The
        total is a lower bound, as counting them all would read the whole log: this
        page's tasks, and one more while a next page follows."""
        try:
            session = await self._session(principal, params.context_id)
        except (NotFound, TaskNotFoundError):
            return [], 0, None
        page, token = await blocking(tasks.tasks_before, self.s, session.session_id,
                                     params.page_token or None, size,
                                     min(length, tasks.SHOWN_MESSAGES))
        listed = [task_of(self.s, session.session_id, chain, length,
                          artifacts=params.include_artifacts) for chain in page]
        return listed, len(page) + (1 if token else 0), token

    async def _callers(self, principal: Principal, size: int, length: int,
                       params: ListTasksRequest) -> tuple[list[Task], int, str | None]:
        """A page of the caller's tasks with this agent, newest first, context by context
        (:func:`tasks.users_tasks`); the total a lower bound, as in :meth:`_in_context`."""
        page, token = await blocking(tasks.users_tasks, self.s, user_id_of(principal),
                                     self.frontend, params.page_token or None, size,
                                     min(length, tasks.SHOWN_MESSAGES))
        listed = [task_of(self.s, chain.first.session_id, chain, length,
                          artifacts=params.include_artifacts) for chain in page]
        return listed, len(page) + (1 if token else 0), token

    # -- push notifications: the session's signed callback, in A2A's form ---------------
    async def _check_push(self, config: TaskPushNotificationConfig) -> None:
        if config.HasField("authentication"):
            raise InvalidParamsError(message=(
                "push notifications carry the platform's signed JWT in Authorization "
                "(verify it with /.well-known/jwks.json); leave authentication out"))
        if config.token and not PUSH_TOKEN.fullmatch(config.token):
            raise InvalidParamsError(message="a push config's token must be 1-1024 "
                                             "printable ASCII characters")
        if config.id and not PUSH_CONFIG_ID.fullmatch(config.id):
            raise InvalidParamsError(message="a push config's id must be 1-128 printable "
                                             "ASCII characters without spaces")
        await blocking(sessions.check_callback_url, self.s, config.url)

    async def _set_push(self, principal: Principal, session_id: str,
                        config: TaskPushNotificationConfig) -> TaskPushNotificationConfig:
        """Store a checked config (:meth:`_check_push`) as the context's callback: it
        pushes each of the context's tasks' updates, each naming its task."""
        await blocking(self.s.sessions.set_callback, session_id, user_id_of(principal),
                       **_callback(config))
        return TaskPushNotificationConfig(id=config.id or DEFAULT_PUSH_CONFIG_ID,
                                          task_id=config.task_id, url=config.url,
                                          token=config.token)

    async def _push_config(self, principal: Principal, task_id: str
                           ) -> tuple[Session, TaskPushNotificationConfig | None]:
        session, query_id = await self._find(principal, task_id)
        await blocking(tasks.check_task, self.s, session.session_id, query_id)
        if session.callback_format != A2A_FORMAT or not session.callback_url:
            return session, None
        return session, TaskPushNotificationConfig(
            id=session.callback_id or DEFAULT_PUSH_CONFIG_ID, task_id=task_id,
            url=session.callback_url, token=session.callback_token or "")

    async def on_create_task_push_notification_config(
            self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        async def create() -> TaskPushNotificationConfig:
            principal = self._principal(context)
            session, _ = await self._push_config(principal, params.task_id)
            await self._check_push(params)
            return await self._set_push(principal, session.session_id, params)

        return await self._call(create)

    async def on_get_task_push_notification_config(
            self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        async def get() -> TaskPushNotificationConfig:
            _, config = await self._push_config(self._principal(context), params.task_id)
            if config is None or (params.id and params.id != config.id):
                raise InvalidParamsError(message=f"task {params.task_id} has no push "
                                                 f"notification config {params.id!r}")
            return config

        return await self._call(get)

    async def on_list_task_push_notification_configs(
            self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        async def listing() -> ListTaskPushNotificationConfigsResponse:
            _, config = await self._push_config(self._principal(context), params.task_id)
            return ListTaskPushNotificationConfigsResponse(configs=[config] if config else [])

        return await self._call(listing)

    async def on_delete_task_push_notification_config(
            self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        async def delete() -> None:
            principal = self._principal(context)
            session, config = await self._push_config(principal, params.task_id)
            if config is not None and (not params.id or params.id == config.id):
                await blocking(self.s.sessions.set_callback, session.session_id,
                               user_id_of(principal), callback_url=None, callback_token=None,
                               callback_id=None, callback_format=None)

        await self._call(delete)

    async def on_get_extended_agent_card(self, params: GetExtendedAgentCardRequest,
                                         context: ServerCallContext) -> AgentCard:
        raise ExtendedAgentCardNotConfiguredError


async def jsonrpc(request: Request, services: Services, principal: Principal,
                  agent_id: str) -> Response:
    """Answer one JSON-RPC request (1.0 and 0.3 method names) for ``agent_id``. A
    notification (no ``id``) is not answered, as JSON-RPC 2.0 says, and does nothing: A2A
    defines none (the a2a-sdk's dispatcher ran it, an agent's query among them)."""
    with contextlib.suppress(ValueError):  # not JSON: the dispatcher answers -32700
        body = await request.json()
        if isinstance(body, dict) and "id" not in body and body.get("jsonrpc") == "2.0" \
                and isinstance(body.get("method"), str):  # else -32600 (id null)
            return Response(status_code=204)
    request.state.codeshot_principal = principal
    dispatcher = JsonRpcDispatcher(SessionTasks(services, agent_id),
                                   context_builder=ContextBuilder(), enable_v0_3_compat=True)
    return await dispatcher.handle_requests(request)

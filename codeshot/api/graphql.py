"""The GraphQL schema: every Fixie 1.0 operation (FIXIE_COMPAT.md) plus our own.

Resolvers are thin: they authenticate through the context, run blocking store calls in
worker threads (the event loop must keep serving while a call waits for a reply) and
map domain models to GraphQL types.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import datetime
from functools import cached_property, partial
from typing import Annotated, Any, TypeVar

import anyio.to_thread
import strawberry
from strawberry.extensions import MaxAliasesLimiter, MaxTokensLimiter, QueryDepthLimiter
from strawberry.fastapi import BaseContext
from strawberry.types import Info

from codeshot.api.errors import ErrorCodes
from codeshot.api.messaging import EmbedUpload, Messaging
from codeshot.auth.tokens import bearer
from codeshot.errors import InvalidInput, NotFound
from codeshot.models import Agent, Embed, Message, Principal, Session
from codeshot.services import Services

T = TypeVar("T")


class Context(BaseContext):
    def __init__(self, services: Services, authorization: str | None) -> None:
        super().__init__()
        self.services = services
        self.authorization = authorization

    @cached_property
    def principal(self) -> Principal:
        return self.services.auth.user_for_api_key(bearer(self.authorization))


async def blocking(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await anyio.to_thread.run_sync(partial(fn, *args, **kwargs))


def ctx(info: Info) -> Context:
    return info.context


# -- types ---------------------------------------------------------------------------
@strawberry.type
class OrganizationType:
    handle: str
    name: str | None = None


@strawberry.type
class UserType:
    username: str
    first_name: str | None = None
    last_name: str | None = None
    email: str | None = None
    organization: OrganizationType | None = None
    avatar: str | None = None
    daily_query_limit: int = 0
    daily_used_queries: int = 0


OwnerType = Annotated[UserType | OrganizationType, strawberry.union("OwnerType")]


@strawberry.type
class AgentType:
    agent_id: str
    handle: str
    name: str
    description: str
    queries: list[str]
    more_info_url: str | None
    published: bool
    owner: OwnerType
    query_url: str | None
    func_url: str | None
    created: datetime
    modified: datetime
    kind: str
    base_prompt: str
    few_shots: list[str]

    @classmethod
    def of(cls, a: Agent) -> AgentType:
        return cls(
            agent_id=a.agent_id, handle=a.handle, name=a.name, description=a.description,
            queries=a.sample_queries, more_info_url=a.more_info_url, published=a.published,
            owner=UserType(username=a.owner), query_url=a.query_url, func_url=a.func_url,
            created=a.created, modified=a.modified, kind=a.kind.value,
            base_prompt=a.base_prompt, few_shots=a.few_shots,
        )


@strawberry.type
class SenderType:
    handle: str
    agent_id: str | None = None


@strawberry.type
class MessageRefType:
    id: str


@strawberry.type
class EmbedOwnerType:
    username: str


@strawberry.type
class EmbedType:
    id: str
    content_type: str
    created: datetime
    content_hash: str
    size: int
    owner: EmbedOwnerType
    url: str


@strawberry.type
class SessionEmbedType:
    key: str
    embed: EmbedType


@strawberry.type
class MessageEmbedType:
    key: str
    content_type: str
    content_hash: str
    size: int
    url: str


@strawberry.type(name="MessageType")
class MessageGQL:
    id: str
    text: str
    type: str
    sent_by: SenderType
    in_reply_to: MessageRefType | None
    timestamp: datetime
    error_code: str | None
    embeds: list[MessageEmbedType]

    @classmethod
    def of(cls, m: Message, services: Services) -> MessageGQL:
        agent = m.sent_by if "/" in m.sent_by else None
        return cls(
            id=m.message_id, text=m.text, type=m.type.value,
            sent_by=SenderType(handle=m.sent_by.rsplit("/", 1)[-1], agent_id=agent),
            in_reply_to=MessageRefType(id=m.in_reply_to) if m.in_reply_to else None,
            timestamp=m.timestamp, error_code=m.error_code,
            embeds=[
                MessageEmbedType(key=k, content_type=e.content_type, content_hash=e.content_hash,
                                 size=e.size, url=services.embeds.get_url(e.content_hash))
                for k, e in m.embeds.items()
            ],
        )


@strawberry.type
class SessionType:
    handle: str
    name: str
    description: str
    frontend_agent_id: str | None
    callback_url: str | None
    status: str
    created: datetime
    modified: datetime

    @strawberry.field(description="Messages in time order; `after` = only newer than that id.")
    async def messages(
        self, info: Info, after: str | None = None, limit: int | None = None
    ) -> list[MessageGQL]:
        services = ctx(info).services
        if limit is None and after is None:
            found = await blocking(services.sessions.all_messages, self.handle)
        else:
            page = await blocking(services.sessions.list_messages, self.handle,
                                  limit=limit, after=after)
            found = page.items
        return [MessageGQL.of(m, services) for m in found]

    @strawberry.field
    async def embeds(self, info: Info) -> list[SessionEmbedType]:
        services = ctx(info).services
        found = await blocking(services.sessions.list_embeds, self.handle)
        return [SessionEmbedType(key=e.key, embed=_embed(e, services)) for e in found]

    @classmethod
    def of(cls, s: Session) -> SessionType:
        return cls(handle=s.session_id, name=s.name, description=s.description,
                   frontend_agent_id=s.frontend_agent_id, callback_url=s.callback_url,
                   status=s.status.value,
                   created=s.created, modified=s.modified)


def _embed(e: Embed, services: Services) -> EmbedType:
    return EmbedType(id=e.content_hash, content_type=e.content_type, created=e.created,
                     content_hash=e.content_hash, size=e.size,
                     owner=EmbedOwnerType(username=e.owner),
                     url=services.embeds.get_url(e.content_hash))


# -- inputs and payloads -------------------------------------------------------------
@strawberry.input
class AgentInput:
    handle: str
    name: str | None = None
    description: str | None = None
    query_url: str | None = None
    func_url: str | None = None
    more_info_url: str | None = None
    published: bool | None = None
    base_prompt: str | None = None
    few_shots: list[str] | None = None
    sample_queries: list[str] | None = None
    new_handle: str | None = None


@strawberry.input
class DeleteAgentInput:
    owner: str | None = None
    handle: str


@strawberry.input
class SessionInput:
    frontend_agent_id: str | None = None
    name: str | None = None
    description: str | None = None
    callback_url: str | None = strawberry.field(
        default=None, description="receives signed response/error/awaiting_input events")


@strawberry.input
class EmbedInput:
    key: str
    content_type: str
    content: str | None = strawberry.field(default=None, description="base64, small only")
    content_hash: str | None = strawberry.field(
        default=None, description="SHA-256 of bytes uploaded with createEmbedUpload")


@strawberry.input
class MessageInput:
    session: str
    text: str = ""
    embeds: list[EmbedInput] | None = None
    wait: bool = strawberry.field(default=True, description="wait (bounded) for the reply")
    idempotency_key: str | None = None


@strawberry.type
class AgentPayload:
    agent: AgentType


@strawberry.type
class SessionPayload:
    session: SessionType


@strawberry.type
class MessagePayload:
    message: MessageGQL
    reply: MessageGQL | None = strawberry.field(
        description="the reply, when it arrived within the wait")


@strawberry.type
class HeaderType:
    name: str
    value: str


@strawberry.type
class EmbedUploadType:
    url: str
    headers: list[HeaderType]
    content_hash: str


def _registration(services: Services, data: AgentInput) -> tuple[Any, Any]:
    """The registration service and the fields to set; imported on use because agent
    registration (handshakes, few-shot grammar, embeddings) is rare and heavy to import."""
    from dataclasses import fields

    from codeshot.api.agents import AgentFields, AgentRegistration

    # AgentInput carries every AgentFields field under the same (snake_case) name.
    values = {f.name: getattr(data, f.name) for f in fields(AgentFields)}
    return AgentRegistration(services), AgentFields(**values)


# -- operations ----------------------------------------------------------------------
@strawberry.type
class Query:
    @strawberry.field(description="Published agents and your own.")
    async def all_agents(self, info: Info) -> list[AgentType]:
        c = ctx(info)
        p = await blocking(lambda: c.principal)
        agents = await blocking(c.services.registry.all_agents, p.username)
        return [AgentType.of(a) for a in sorted(agents, key=lambda a: a.agent_id)]

    @strawberry.field
    async def agent_by_id(self, info: Info, agent_id: str) -> AgentType | None:
        c = ctx(info)
        p = await blocking(lambda: c.principal)
        try:
            agent = await blocking(c.services.registry.get, agent_id)
        except NotFound:
            return None
        return AgentType.of(agent) if agent.published or agent.owner == p.username else None

    @strawberry.field
    async def user(self, info: Info) -> UserType:
        c = ctx(info)
        p = await blocking(lambda: c.principal)
        user = await blocking(c.services.users.get, p.user_id)
        used = await blocking(c.services.usage.used, "query", user.user_id)
        return UserType(username=user.username, first_name=user.first_name,
                        last_name=user.last_name, email=user.email,
                        daily_query_limit=c.services.daily_limit(user.daily_query_limit),
                        daily_used_queries=used)

    @strawberry.field(description="Your sessions, newest first.")
    async def all_sessions(self, info: Info) -> list[SessionType]:
        c = ctx(info)
        p = await blocking(lambda: c.principal)
        sessions: list[Session] = []
        token = None
        while True:
            page = await blocking(c.services.sessions.list_by_owner, p.user_id, 200, token)
            sessions += page.items
            if not (token := page.next_token):
                break
        return [SessionType.of(s) for s in sessions]

    @strawberry.field(description="The agents the router would pick for this text, best first.")
    async def route(self, info: Info, text: str, k: int = 3) -> list[RouteType]:
        c = ctx(info)
        p = await blocking(lambda: c.principal)
        if not text.strip() or len(text) > c.services.settings.max_message_length:
            raise InvalidInput("text must be non-empty and within the message length limit")
        if not 1 <= k <= 50:
            raise InvalidInput("k must be between 1 and 50")
        routes = await blocking(c.services.router.route, text, k, p.username)
        return [RouteType(agent_id=r.agent_id, score=r.score, matched=r.matched) for r in routes]

    @strawberry.field
    async def session_by_handle(self, info: Info, handle: str) -> SessionType:
        c = ctx(info)
        p = await blocking(lambda: c.principal)
        return SessionType.of(await blocking(c.services.sessions.get, handle, p.user_id))


@strawberry.type
class RouteType:
    agent_id: str
    score: float
    matched: str = strawberry.field(description="the sample query that matched best")


@strawberry.type
class Mutation:
    @strawberry.mutation
    async def create_agent(self, info: Info, agent_data: AgentInput) -> AgentPayload:
        c = ctx(info)
        p = await blocking(lambda: c.principal)
        reg, fields = _registration(c.services, agent_data)
        agent = await blocking(reg.create, p, agent_data.handle, fields)
        return AgentPayload(agent=AgentType.of(agent))

    @strawberry.mutation
    async def update_agent(self, info: Info, agent_data: AgentInput) -> AgentPayload:
        c = ctx(info)
        p = await blocking(lambda: c.principal)
        reg, fields = _registration(c.services, agent_data)
        agent = await blocking(reg.update, p, agent_data.handle, fields, agent_data.new_handle)
        return AgentPayload(agent=AgentType.of(agent))

    @strawberry.mutation
    async def delete_agent(self, info: Info, agent_data: DeleteAgentInput) -> AgentPayload:
        c = ctx(info)
        p = await blocking(lambda: c.principal)
        from codeshot.api.agents import AgentRegistration

        reg = AgentRegistration(c.services)
        agent = await blocking(reg.delete, p, agent_data.owner or p.username or "",
                               agent_data.handle)
        return AgentPayload(agent=AgentType.of(agent))

    @strawberry.mutation
    async def create_session(
        self, info: Info, session_data: SessionInput | None = None
    ) -> SessionPayload:
        c = ctx(info)
        p = await blocking(lambda: c.principal)
        data = session_data or SessionInput()
        session = await blocking(create_session, c.services, p, data.frontend_agent_id,
                                 data.name or "", data.description or "", data.callback_url)
        return SessionPayload(session=SessionType.of(session))

    @strawberry.mutation
    async def delete_session(self, info: Info, handle: str) -> SessionPayload:
        c = ctx(info)
        p = await blocking(lambda: c.principal)
        session = await blocking(c.services.sessions.delete, handle, p.user_id)
        return SessionPayload(session=SessionType.of(session))

    @strawberry.mutation
    async def send_session_message(self, info: Info, message_data: MessageInput) -> MessagePayload:
        c = ctx(info)
        p = await blocking(lambda: c.principal)
        uploads = [EmbedUpload(key=e.key, content_type=e.content_type,
                               content_base64=e.content, content_hash=e.content_hash)
                   for e in message_data.embeds or []]
        messaging = Messaging(c.services)
        message, _ = await blocking(messaging.post, p, message_data.session, message_data.text,
                                    uploads, message_data.idempotency_key)
        reply = None
        if message_data.wait:
            reply = await wait_for_reply(messaging, message, c.services.settings.reply_wait_seconds)
        return MessagePayload(
            message=MessageGQL.of(message, c.services),
            reply=MessageGQL.of(reply, c.services) if reply else None,
        )

    @strawberry.mutation(description="A presigned URL to upload an embed's bytes to.")
    async def create_embed_upload(
        self, info: Info, content_type: str, size: int, content_hash: str
    ) -> EmbedUploadType:
        c = ctx(info)
        await blocking(lambda: c.principal)
        upload = c.services.embeds.put_url(content_hash, content_type, size)
        return EmbedUploadType(
            url=upload["url"], content_hash=content_hash,
            headers=[HeaderType(name=k, value=v) for k, v in upload["headers"].items()],
        )


def create_session(
    services: Services, principal: Principal, frontend_agent_id: str | None,
    name: str = "", description: str = "", callback_url: str | None = None,
) -> Session:
    from codeshot import ids
    from codeshot.runner.agent_urls import check_agent_url

    if callback_url:
        check_agent_url(callback_url, allow_loopback=services.settings.local_mode)
    if frontend_agent_id:
        agent = services.registry.get(frontend_agent_id)
        if not (agent.published or agent.owner == principal.username):
            raise NotFound(f"agent {frontend_agent_id} not found")
    if len(name) > 200 or len(description) > 2000:
        raise InvalidInput("session name or description is too long")
    assert principal.user_id
    return services.sessions.create(Session(
        session_id=ids.handle(), owner=principal.user_id, owner_name=principal.username,
        frontend_agent_id=frontend_agent_id,
        name=name, description=description, callback_url=callback_url,
    ))


async def wait_for_reply(messaging: Messaging, message: Message, timeout: float) -> Message | None:
    """Poll for the reply with a growing interval, never holding a worker thread."""
    deadline = time.monotonic() + timeout
    delay = 0.05
    while True:
        reply = await blocking(messaging.reply_to, message.session_id, message.message_id)
        if reply or time.monotonic() >= deadline:
            return reply
        await asyncio.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 1.5, 0.25)


class CodeshotSchema(strawberry.Schema):
    def process_errors(self, errors: list, execution_context: Any = None) -> None:
        return None  # ErrorCodes logs the unexpected ones; expected ones are not news


schema = CodeshotSchema(
    query=Query,
    mutation=Mutation,
    # Our types hold no cycles, so depth bounds little; tokens and aliases bound the
    # amplification a single request can ask for.
    extensions=[
        lambda: QueryDepthLimiter(max_depth=10),
        lambda: MaxAliasesLimiter(max_alias_count=20),
        lambda: MaxTokensLimiter(max_token_count=2000),
        ErrorCodes,
    ],
)

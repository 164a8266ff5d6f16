"""The GraphQL types (what queries return) and how domain models become them."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import strawberry
from strawberry.types import Info

from codeshot.api.graphql.context import ctx
from codeshot.models import Agent, Embed, Message, Session
from codeshot.services import Services
from codeshot.usecases import sessions
from codeshot.usecases.threads import blocking

if TYPE_CHECKING:
    from codeshot.routing.index import Route  # numpy: not at the API's cold start
    from codeshot.usecases.messaging import PresignedUpload
    from codeshot.usecases.users import Profile


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
    time_zone: str = strawberry.field(
        default="UTC", description="where platform Funcs give your local time")

    @classmethod
    def of(cls, p: Profile) -> UserType:
        u = p.user
        return cls(username=u.username, first_name=u.first_name, last_name=u.last_name,
                   email=u.email, daily_query_limit=p.daily_query_limit,
                   daily_used_queries=p.daily_used_queries, time_zone=u.time_zone or "UTC")


OwnerType = Annotated[UserType | OrganizationType, strawberry.union("OwnerType")]


@strawberry.type(description="What an agent asks its LLM for (Fixie 1.0's LlmSettings).")
class LlmSettingsType:
    model: str | None = None
    temperature: float | None = None
    maximum_tokens: int | None = None


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
    conversational: bool = False
    llm_settings: LlmSettingsType | None = None

    @classmethod
    def of(cls, a: Agent) -> AgentType:
        return cls(
            agent_id=a.agent_id, handle=a.handle, name=a.name, description=a.description,
            queries=a.sample_queries, more_info_url=a.more_info_url, published=a.published,
            owner=UserType(username=a.owner), query_url=a.query_url, func_url=a.func_url,
            created=a.created, modified=a.modified, kind=a.kind.value,
            base_prompt=a.base_prompt, few_shots=a.few_shots,
            conversational=a.conversational,
            llm_settings=LlmSettingsType(**a.llm_settings) if a.llm_settings else None,
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

    session: strawberry.Private[Session]  # read with the owner's check

    @strawberry.field(description="Messages in time order; `after` = only newer than that id.")
    async def messages(
        self, info: Info, after: str | None = None, limit: int | None = None
    ) -> list[MessageGQL]:
        services = ctx(info).services
        found = await blocking(sessions.list_messages, services, self.session, after, limit)
        return [MessageGQL.of(m, services) for m in found]

    @strawberry.field
    async def embeds(self, info: Info) -> list[SessionEmbedType]:
        services = ctx(info).services
        found = await blocking(sessions.list_embeds, services, self.session)
        return [SessionEmbedType(key=e.key, embed=_embed(e, services)) for e in found]

    @classmethod
    def of(cls, s: Session) -> SessionType:
        return cls(handle=s.session_id, name=s.name, description=s.description,
                   frontend_agent_id=s.frontend_agent_id, callback_url=s.callback_url,
                   status=s.status.value,
                   created=s.created, modified=s.modified, session=s)


def _embed(e: Embed, services: Services) -> EmbedType:
    return EmbedType(id=e.content_hash, content_type=e.content_type, created=e.created,
                     content_hash=e.content_hash, size=e.size,
                     owner=EmbedOwnerType(username=e.owner),
                     url=services.embeds.get_url(e.content_hash))


@strawberry.type
class RouteType:
    agent_id: str
    score: float
    matched: str = strawberry.field(description="the sample query that matched best")

    @classmethod
    def of(cls, r: Route) -> RouteType:
        return cls(agent_id=r.agent_id, score=r.score, matched=r.matched)


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

    @classmethod
    def of(cls, upload: PresignedUpload) -> EmbedUploadType:
        return cls(url=upload.url, content_hash=upload.content_hash,
                   headers=[HeaderType(name=k, value=v) for k, v in upload.headers.items()])

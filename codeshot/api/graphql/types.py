"""The GraphQL types (what queries return) and how domain models become them."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import strawberry
from strawberry.types import Info
from strawberry.types.nodes import SelectedField, Selection
from strawberry.utils.str_converters import to_camel_case

from codeshot.api.graphql import budget
from codeshot.api.graphql.context import caller, ctx
from codeshot.models import Agent, Embed, Message, Principal, Revision, Session
from codeshot.services import Services
from codeshot.usecases import agents, sessions, users
from codeshot.usecases.messaging import Messaging, next_messages
from codeshot.usecases.threads import blocking
from codeshot.usecases.waits import waiting

if TYPE_CHECKING:
    from codeshot.routing.index import Candidate  # not at the API's cold start
    from codeshot.store.oauth import Grant
    from codeshot.usecases.messaging import PresignedUpload
    from codeshot.usecases.users import ApiKey, Profile


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
    daily_token_limit: int = 0  # LLM tokens (prompt + completion) per day
    daily_used_tokens: int = 0
    daily_quota_resets_at: datetime | None = strawberry.field(
        default=None,
        description="when dailyUsedQueries and dailyUsedTokens start again from zero")
    time_zone: str = strawberry.field(
        default="UTC", description="where platform Funcs give your local time")

    @classmethod
    def of(cls, p: Profile) -> UserType:
        u = p.user
        return cls(username=u.username, first_name=u.first_name, last_name=u.last_name,
                   email=u.email, daily_query_limit=p.daily_query_limit,
                   daily_used_queries=p.daily_used_queries,
                   daily_token_limit=p.daily_token_limit, daily_used_tokens=p.daily_used_tokens,
                   daily_quota_resets_at=p.quota_resets_at, time_zone=u.time_zone or "UTC")


@strawberry.type(description="One of your active API keys: only its id is kept.")
class ApiKeyType:
    id: str
    created: datetime | None = strawberry.field(
        description="when it was made (unknown for keys older than time-ordered ids)")
    current: bool = strawberry.field(description="the key this request came with")

    @classmethod
    def of(cls, key: ApiKey) -> ApiKeyType:
        return cls(id=key.key_id, created=key.created, current=key.current)


@strawberry.type(description="An agent holding your OAuth token for a third-party service "
                 "(the token itself is never shown).")
class OAuthGrantType:
    agent_id: str
    created: datetime = strawberry.field(description="when you first authorized it")
    modified: datetime = strawberry.field(description="when the token last changed "
                                          "(authorized again or refreshed)")

    @classmethod
    def of(cls, grant: Grant) -> OAuthGrantType:
        return cls(agent_id=grant.agent_id, created=grant.created, modified=grant.modified)


@strawberry.type(description="A new API key: `key` is shown this once, never stored.")
class NewApiKeyType:
    id: str
    created: datetime | None
    key: str


OwnerType = Annotated[UserType | OrganizationType, strawberry.union("OwnerType")]


@strawberry.type(description="What an agent asks its LLM for (Fixie 1.0's LlmSettings).")
class LlmSettingsType:
    model: str | None = None
    temperature: float | None = None
    maximum_tokens: int | None = None


@strawberry.type(description="The newest ingestion of an agent's document corpora.")
class CorpusStatusType:
    state: str = strawberry.field(description="ingesting, ready or failed")
    documents: int
    chunks: int
    bytes: int
    errors: list[str]
    started: datetime
    finished: datetime | None


@strawberry.type(name="RevisionMetadataKeyValuePair")
class RevisionMetadataType:
    key: str
    value: str


@strawberry.type(name="ExternalDeployment")
class ExternalDeploymentType:
    url: str | None


@strawberry.type(name="AgentRevision", description="A place the agent answers at (Fixie "
                 "1.0's agent revisions); the current one is where it answers now.")
class AgentRevisionType:
    id: strawberry.ID
    created: datetime
    is_current: bool
    metadata: list[RevisionMetadataType]
    external_deployment: ExternalDeploymentType

    @classmethod
    def of(cls, revision: Revision, current: bool) -> AgentRevisionType:
        return cls(id=strawberry.ID(revision.revision_id), created=revision.created,
                   is_current=current,
                   metadata=[RevisionMetadataType(key=k, value=v)
                             for k, v in revision.metadata.items()],
                   external_deployment=ExternalDeploymentType(url=revision.url))


@strawberry.type
class AgentRevisionPayload:
    revision: AgentRevisionType


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
    agent: strawberry.Private[Agent]

    @strawberry.field(description="its document corpora's newest ingestion; its owner's eyes "
                      "only (null when it declares none)")
    async def corpus_status(self, info: Info) -> CorpusStatusType | None:
        services, principal = await caller(info)
        version = await blocking(agents.corpus_status, services, principal, self.agent)
        if version is None:
            return None
        return CorpusStatusType(state=version.state.value, documents=version.documents,
                                chunks=version.chunks, bytes=version.bytes,
                                errors=version.errors, started=version.started,
                                finished=version.finished)

    @strawberry.field(description="the revision it answers at; its owner's eyes only")
    async def current_revision(self, info: Info) -> AgentRevisionType | None:
        _, principal = await caller(info)
        return next((r for r in self._revisions(principal) if r.is_current), None)

    @strawberry.field(description="its revisions, oldest first; its owner's eyes only "
                      "(null for others)")
    async def all_revisions(self, info: Info) -> list[AgentRevisionType] | None:
        _, principal = await caller(info)
        return self._revisions(principal) if agents.is_owner(principal, self.agent) else None

    def _revisions(self, principal: Principal) -> list[AgentRevisionType]:
        if not agents.is_owner(principal, self.agent):
            return []
        current = self.agent.current_revision_id()
        return [AgentRevisionType.of(r, r.revision_id == current)
                for r in self.agent.all_revisions()]

    @strawberry.field(description="LLM tokens this agent spent today; its owner's eyes only")
    async def daily_used_tokens(self, info: Info) -> int | None:
        services, principal = await caller(info)
        return await blocking(users.agent_tokens_today, services, principal, self.agent)
    conversational: bool = False
    llm_settings: LlmSettingsType | None = None
    mcp_url: str | None = None
    mcp_tools: list[str] | None = strawberry.field(
        default=None, description="an MCP agent's tools, as its Funcs are named")

    @classmethod
    def of(cls, a: Agent) -> AgentType:
        return cls(agent=a,
            agent_id=a.agent_id, handle=a.handle, name=a.name, description=a.description,
            queries=a.sample_queries, more_info_url=a.more_info_url, published=a.published,
            owner=UserType(username=a.owner), query_url=a.query_url, func_url=a.func_url,
            created=a.created, modified=a.modified, kind=a.kind.value,
            base_prompt=a.base_prompt, few_shots=a.few_shots,
            conversational=a.conversational,
            llm_settings=LlmSettingsType(**a.llm_settings) if a.llm_settings else None,
            mcp_url=a.mcp_url,
            mcp_tools=None if a.mcp_tools is None else [t["func"] for t in a.mcp_tools],
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
                                 size=e.size,
                                 url=services.embeds.get_url(e.content_hash, e.content_type))
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

    @strawberry.field(description=(
        "Messages in time order, a page at a time (at most 1,000, or 4 MiB as sent; "
        "one request's pages 5 MiB in all): the newest page, or with `after` the oldest "
        "ones newer than that id. `waitSeconds` (at most the reply wait) long-polls: with "
        "nothing newer yet, wait for the next message (RATE_LIMITED while you already "
        "have CODESHOT_MAX_WAITING_REQUESTS requests waiting)."))
    async def messages(
        self, info: Info, after: str | None = None, limit: int | None = None,
        wait_seconds: float = 0,
    ) -> list[MessageGQL]:
        services = ctx(info).services
        if wait_seconds > 0:
            wait = min(wait_seconds, services.settings.reply_wait_seconds)
            _, principal = await caller(info)
            async with waiting(services, principal, wait):
                await next_messages(Messaging(services), self.session.session_id, after, wait)

        async def read() -> list[MessageGQL]:
            found = await blocking(sessions.list_messages, services, self.session, after, limit)
            return [MessageGQL.of(m, services) for m in found]

        asked = _names([s for field in info.selected_fields for s in field.selections])
        return await ctx(info).message_pages.take(
            read, lambda m: _lambda_bytes(m, asked), keep_newest=after is None)

    @strawberry.field(description="Embeds by key, a page at a time; `after` = the last key of "
                      "the previous page.")
    async def embeds(self, info: Info, after: str | None = None,
                     limit: int | None = None) -> list[SessionEmbedType]:
        services = ctx(info).services
        found = await blocking(sessions.list_embeds, services, self.session, after, limit)
        if not found:
            return []
        owner = EmbedOwnerType(username=await blocking(services.users.owner_name,
                                                         self.session))
        return [SessionEmbedType(key=e.key, embed=_embed(e, owner, services)) for e in found]

    @classmethod
    def of(cls, s: Session) -> SessionType:
        return cls(handle=s.session_id, name=s.name, description=s.description,
                   frontend_agent_id=s.frontend_agent_id, callback_url=s.callback_url,
                   status=s.status.value,
                   created=s.created, modified=s.modified, session=s)


def _names(selections: list[Selection]) -> set[str]:
    """The fields selected, fragments' included."""
    names: set[str] = set()
    for selection in selections:
        if isinstance(selection, SelectedField):
            names.add(selection.name)
        else:
            names |= _names(selection.selections)
    return names


def _lambda_bytes(m: MessageGQL, asked: set[str]) -> int:
    """What ``m`` takes in Lambda's response with the fields ``asked`` (each once, and all
    of an object field: the response's own measure catches a field under many aliases)."""
    fields = {k: v for k, v in dataclasses.asdict(m).items() if to_camel_case(k) in asked}
    return budget.lambda_bytes(budget.encode(fields, default=str))


def _embed(e: Embed, owner: EmbedOwnerType, services: Services) -> EmbedType:
    """``owner``: the session's owner, who bound its embeds (Fixie 1.0's
    ``owner { username }`` is a username; ``e.owner`` is their user id)."""
    return EmbedType(id=e.content_hash, content_type=e.content_type, created=e.created,
                     content_hash=e.content_hash, size=e.size, owner=owner,
                     url=services.embeds.get_url(e.content_hash, e.content_type))


@strawberry.type(description="An agent the router proposes for a text, as the planner sees it.")
class RouteType:
    agent_id: str
    score: float = strawberry.field(
        description="dense and lexical similarity fused, 0 to 1; compare with `fits`")
    matched_sample: str = strawberry.field(
        description="the agent's sample query (or name and description) closest to the text")
    fits: bool = strawberry.field(
        description="the score reaches the router's floor; when no candidate fits, the "
                    "planner answers that no agent can help")
    matched: str = strawberry.field(deprecation_reason="use matchedSample")

    @classmethod
    def of(cls, c: Candidate) -> RouteType:
        return cls(agent_id=c.agent_id, score=c.score, matched_sample=c.matched_sample,
                   fits=c.fits, matched=c.matched_sample)


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

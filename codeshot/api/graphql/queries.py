"""GraphQL queries: each authenticates the caller and runs one use case off the loop."""

from __future__ import annotations

import strawberry
from strawberry.types import Info

from codeshot.api.graphql.context import caller
from codeshot.api.graphql.types import (
    AgentType,
    ApiKeyType,
    OAuthGrantType,
    RouteType,
    SessionType,
    UserType,
)
from codeshot.usecases import agents, oauth, sessions, users
from codeshot.usecases.threads import blocking


@strawberry.type
class Query:
    @strawberry.field(description="Published agents and your own, by id, a page at a time: "
                      "`after` = the last agent id of the previous page.")
    async def all_agents(self, info: Info, after: str | None = None,
                         limit: int | None = None) -> list[AgentType]:
        services, p = await caller(info)
        found = await blocking(agents.visible_agents, services, p, after, limit)
        return [AgentType.of(a) for a in found]

    @strawberry.field
    async def agent_by_id(self, info: Info, agent_id: str) -> AgentType | None:
        services, p = await caller(info)
        agent = await blocking(agents.find_agent, services, p, agent_id)
        return AgentType.of(agent) if agent else None

    @strawberry.field
    async def user(self, info: Info) -> UserType:
        services, p = await caller(info)
        return UserType.of(await blocking(users.profile, services, p))

    @strawberry.field(description="Your active API keys, oldest first.")
    async def api_keys(self, info: Info) -> list[ApiKeyType]:
        services, p = await caller(info)
        return [ApiKeyType.of(k) for k in await blocking(users.list_api_keys, services, p)]

    @strawberry.field(description="The agents holding your OAuth token for a third-party "
                      "service (you authorized them), by agent id.")
    async def oauth_grants(self, info: Info) -> list[OAuthGrantType]:
        services, p = await caller(info)
        return [OAuthGrantType.of(g) for g in await blocking(oauth.grants, services, p)]

    @strawberry.field(description="Your sessions, newest first, a page at a time: `after` = "
                      "the last handle of the previous page.")
    async def all_sessions(self, info: Info, after: str | None = None,
                           limit: int | None = None) -> list[SessionType]:
        services, p = await caller(info)
        found = await blocking(sessions.list_sessions, services, p, after, limit)
        return [SessionType.of(s) for s in found]

    @strawberry.field(description="The agents the router would pick for this text, best first.")
    async def route(self, info: Info, text: str, k: int = 3) -> list[RouteType]:
        services, p = await caller(info)
        return [RouteType.of(r) for r in await blocking(agents.route, services, p, text, k)]

    @strawberry.field(description="The platform's LLM provider: bedrock, openai, or fewshot "
                      "(an offline replay of the agents' examples, not a language model).")
    async def llm_provider(self, info: Info) -> str:
        services, _ = await caller(info)
        return services.settings.llm

    @strawberry.field
    async def session_by_handle(self, info: Info, handle: str) -> SessionType:
        services, p = await caller(info)
        return SessionType.of(await blocking(sessions.get_session, services, p, handle))

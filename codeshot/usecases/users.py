"""Users, their API keys and their quota."""

from __future__ import annotations

from dataclasses import dataclass

from codeshot.errors import Conflict, NotFound, Unauthenticated
from codeshot.models import Agent, Principal, User
from codeshot.runner.budgets import AGENT_TOKENS, USER_TOKENS, WINDOW
from codeshot.services import Services


def user_id_of(principal: Principal) -> str:
    """The calling user's id; an agent acting for no user has none."""
    if not principal.user_id:
        raise Unauthenticated("this needs a user's credentials")
    return principal.user_id


def principal_of(user: User) -> Principal:
    """``user`` as the caller (the platform acting for them: deploys, the local stack)."""
    return Principal(user_id=user.user_id, username=user.username,
                     daily_query_limit=user.daily_query_limit)


def create_user(services: Services, username: str) -> tuple[User, str]:
    """A new user and their first API key (shown once: only its id is stored)."""
    user = services.users.create(username)
    return user, services.auth.issue_api_key(user)


def ensure_user(services: Services, username: str) -> User:
    """The user with this name, created (without API keys) if there is none yet."""
    try:
        return services.users.get_by_username(username)
    except NotFound:
        pass
    try:
        return services.users.create(username)
    except Conflict:  # created concurrently (another deploy's registration)
        return services.users.get_by_username(username)


def find_user(services: Services, username: str) -> User:
    return services.users.get_by_username(username)


@dataclass(frozen=True)
class Profile:
    user: User
    daily_query_limit: int
    daily_used_queries: int
    daily_token_limit: int
    daily_used_tokens: int


def profile(services: Services, principal: Principal) -> Profile:
    """The caller's profile with today's quota and LLM token budget, and use of them."""
    user = services.users.get(user_id_of(principal))
    used = services.usage.used("query", user.user_id)
    [tokens] = services.usage.token_usage([(USER_TOKENS, user.user_id)], WINDOW)
    token_limit = services.settings.daily_token_limit if user.daily_token_limit is None \
        else user.daily_token_limit
    return Profile(user, services.daily_limit(user.daily_query_limit), used, token_limit,
                   tokens.used)


def agent_tokens_today(services: Services, principal: Principal, agent: Agent) -> int | None:
    """The LLM tokens ``agent`` spent today across its users; only its owner sees them."""
    if principal.username is None or principal.username != agent.owner:
        return None
    [tokens] = services.usage.token_usage([(AGENT_TOKENS, agent.agent_id)], WINDOW)
    return tokens.used


def set_limits(services: Services, username: str, daily_queries: int | None = None,
               daily_tokens: int | None = None) -> User:
    """An operator's per-user limits (None leaves a limit as it is)."""
    return services.users.set_limits(find_user(services, username).user_id,
                                     daily_queries, daily_tokens)

"""Users, their API keys and their quota."""

from __future__ import annotations

from dataclasses import dataclass

from codeshot.auth.service import KEY_PREFIX
from codeshot.errors import Conflict, InvalidInput, NotFound, Unauthenticated
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


MAX_API_KEYS = 20  # active keys one user may hold


@dataclass(frozen=True)
class ApiKey:
    key_id: str
    current: bool  # the key this request came with


def create_api_key(services: Services, principal: Principal) -> tuple[str, str]:
    """A new API key of the caller's: (its id, the key, shown once)."""
    user = services.users.get(user_id_of(principal))
    if len(user.api_key_ids) >= MAX_API_KEYS:
        raise InvalidInput(f"you have {MAX_API_KEYS} API keys; revoke one first")
    key = services.auth.issue_api_key(user)
    return key_id_of(key), key


def list_api_keys(services: Services, principal: Principal) -> list[ApiKey]:
    """The ids of the caller's active API keys (keys themselves are never stored)."""
    user = services.users.get(user_id_of(principal))
    return [ApiKey(k, k == principal.key_id) for k in sorted(user.api_key_ids)]


def revoke_api_key(services: Services, principal: Principal, key_id: str) -> ApiKey:
    """Revoke one of the caller's keys (the one in use too: that signs out). Another
    user's key, or none, is NOT_FOUND; the last key cannot go (the user would be locked
    out: create another first)."""
    user = services.users.get(user_id_of(principal))
    return _revoke(services, user, key_id, principal.key_id)


def revoke_key_of(services: Services, username: str, key: str) -> ApiKey:
    """Revoke ``username``'s key, named by its id or given whole (the CLI, an operator)."""
    user = services.users.get_by_username(username)
    return _revoke(services, user, key if key.startswith(KEY_PREFIX) else key_id_of(key), None)


def _revoke(services: Services, user: User, key_id: str, current: str | None) -> ApiKey:
    if key_id not in user.api_key_ids:
        raise NotFound(f"no active API key {key_id!r}")
    if len(user.api_key_ids) == 1:
        raise InvalidInput("this is the last API key; create another before revoking it")
    services.auth.revoke_api_key(user, key_id)
    return ApiKey(key_id, key_id == current)


def key_id_of(key: str) -> str:
    """The id (``jti``) inside an API key, unverified: it only names the key to revoke."""
    import jwt

    try:
        key_id = jwt.decode(key, options={"verify_signature": False}).get("jti")
    except jwt.PyJWTError:
        key_id = None
    if not isinstance(key_id, str) or not key_id.startswith(KEY_PREFIX):
        raise InvalidInput("give an API key id (key_...) or the API key itself")
    return key_id


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

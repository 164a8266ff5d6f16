"""Users, their API keys and their quota."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime

from codeshot import ids
from codeshot.auth.service import KEY_PREFIX
from codeshot.errors import Conflict, InvalidInput, NotFound, Unauthenticated, UserDeleted
from codeshot.models import MAX_INT, Agent, Principal, User
from codeshot.runner.budgets import AGENT_TOKENS, USER_TOKENS, WINDOW
from codeshot.services import Services
from codeshot.store.usage import Window
from codeshot.text import check_idempotency_key

MAX_API_KEYS = 20  # active keys per user: revoke one to make another


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
    """A new user and their first API key (shown once: only its id is stored). The
    signing key is read first: keys that cannot be read leave no user without a key."""
    services.auth.keyring.signing_key()
    user = services.users.create(username)
    return user, services.auth.issue_api_key(user)


def ensure_user(services: Services, username: str) -> User:
    """The owner of the kit's deployed agents: the user with this name, created (without
    API keys) if there is none yet. Never one who signed up under that name: the agents,
    their users' queries and call tokens would be theirs."""
    try:
        user = services.users.get_by_username(username)
    except NotFound:
        try:
            user = services.users.create(username)
        except Conflict:  # created concurrently (another deploy's registration)
            user = services.users.get_by_username(username)
    if user.identity:
        raise Conflict(f"username {username!r} belongs to an account that signed up: "
                       "deploy the agents under another codeshot:adminUsername")
    return not_deleted(user)


def not_deleted(user: User) -> User:
    """``user``, unless deleted: a tombstone owns nothing new and gets no key."""
    if user.deleted:
        raise UserDeleted(f"user {user.username!r} has been deleted")
    return user


@functools.cache
def _zone_names() -> frozenset[str]:
    """The IANA zone names this machine (or tzdata) knows: read from disk once."""
    from zoneinfo import available_timezones

    return frozenset(available_timezones())


def set_time_zone(services: Services, principal: Principal, time_zone: str | None) -> User:
    """The caller's time zone (an IANA name such as Europe/Paris; None or "" for UTC),
    in which platform Funcs give local times."""
    user_id = user_id_of(principal)
    # Looked up, not opened: ZoneInfo("America") (a directory) or a very long name fails
    # with OSError, not the errors a bad name gives.
    if time_zone and time_zone not in _zone_names():
        raise InvalidInput(f"{time_zone[:100]!r} is not a time zone name such as "
                           "Europe/Paris or America/New_York")
    services.users.set_time_zone(user_id, time_zone or None)
    return services.users.get(user_id)


def find_user(services: Services, username: str) -> User:
    """The user an operator names; a deleted one is refused."""
    return not_deleted(services.users.get_by_username(username))


@dataclass(frozen=True)
class Profile:
    user: User
    daily_query_limit: int
    daily_used_queries: int
    daily_token_limit: int
    daily_used_tokens: int
    quota_resets_at: datetime  # when today's counts start again from zero


def profile(services: Services, principal: Principal) -> Profile:
    """The caller's profile with today's quota and LLM token budget, use of them, and when
    they reset."""
    user = services.users.get(user_id_of(principal))
    now = services.clock()
    used = services.usage.used("query", user.user_id, now=now)
    [tokens] = services.usage.token_usage([(USER_TOKENS, user.user_id)], WINDOW, now=now)
    token_limit = services.settings.daily_token_limit if user.daily_token_limit is None \
        else user.daily_token_limit
    return Profile(user, services.daily_limit(user.daily_query_limit), used, token_limit,
                   _shown(tokens.used), Window.of(WINDOW, now).end)


def _shown(tokens: int) -> int:
    """A day's tokens as the API shows them: at most MAX_INT (GraphQL's Int), which they
    pass only under a limit of MAX_INT, by the last calls that each check let through."""
    return min(tokens, MAX_INT)


def agent_tokens_today(services: Services, principal: Principal, agent: Agent) -> int | None:
    """The LLM tokens ``agent`` spent today across its users; only its owner sees them."""
    if principal.username is None or principal.username != agent.owner:
        return None
    [tokens] = services.usage.token_usage([(AGENT_TOKENS, agent.agent_id)], WINDOW)
    return _shown(tokens.used)


def set_limits(services: Services, username: str, daily_queries: int | None = None,
               daily_tokens: int | None = None) -> User:
    """An operator's per-user limits (None leaves a limit as it is)."""
    return services.users.set_limits(find_user(services, username).user_id,
                                     daily_queries, daily_tokens)


@dataclass(frozen=True)
class ApiKey:
    """An active API key as its owner sees it: the key itself is shown only once."""

    key_id: str
    created: datetime | None  # None: a key made before key ids carried their time
    current: bool = False  # the key this request came with

    @classmethod
    def of(cls, key_id: str, current_key_id: str | None = None) -> ApiKey:
        stamp = key_id.removeprefix(KEY_PREFIX)
        try:
            created = datetime.fromtimestamp(ids.ulid_time_ms(stamp) / 1000, UTC) \
                if len(stamp) == ids.ULID_LENGTH else None
        except ValueError:  # not Crockford base 32: an older random id
            created = None
        return cls(key_id, created, key_id == current_key_id)


def list_api_keys(services: Services, principal: Principal) -> list[ApiKey]:
    """The caller's active API keys, oldest first (keys themselves are never stored)."""
    user = services.users.get(user_id_of(principal))
    keys = [ApiKey.of(k, principal.key_id) for k in user.api_key_ids]
    return sorted(keys, key=lambda k: (k.created is not None, k.created or 0, k.key_id))


def create_api_key(services: Services, principal: Principal,
                   idempotency_key: str | None = None) -> tuple[ApiKey, str]:
    """A new API key for the caller: (its record, the key, shown this once). With
    ``idempotency_key``, a retry within a day gets the key the first try made (the very
    same key: a lost answer is not a key nobody saw) and adds none."""
    user = not_deleted(services.users.get(user_id_of(principal)))
    if idempotency_key is None:
        key_id, key = services.auth.new_api_key(user, most=MAX_API_KEYS)
    else:
        key_id, key = services.auth.api_key_once(user, MAX_API_KEYS,
                                                 check_idempotency_key(idempotency_key))
    return ApiKey.of(key_id, principal.key_id), key


def revoke_api_key(services: Services, principal: Principal, key_id: str) -> ApiKey:
    """Revoke one of the caller's keys (the one in use too: that signs out). Another
    user's key, or none, is NOT_FOUND; the last key of a user with no account (email and
    password) cannot go (the user would be locked out: create another first)."""
    user = services.users.get(user_id_of(principal))
    return _revoke(services, user, key_id, principal.key_id)


def revoke_key_of(services: Services, username: str, key: str) -> ApiKey:
    """Revoke ``username``'s key, named by its id or given whole (the CLI, an operator)."""
    user = find_user(services, username)
    return _revoke(services, user, key if key.startswith(KEY_PREFIX) else key_id_of(key), None)


def _revoke(services: Services, user: User, key_id: str, current: str | None) -> ApiKey:
    # The rules (the user's own key, not the last of a user without an account, who signs
    # in without keys) are checked by the write itself: two revokes at once left none.
    services.auth.revoke_api_key(user, key_id)
    return ApiKey.of(key_id, current)


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

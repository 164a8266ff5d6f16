"""Users, their API keys and their quota."""

from __future__ import annotations

from dataclasses import dataclass

from codeshot.errors import Conflict, InvalidInput, NotFound, Unauthenticated
from codeshot.models import Principal, User
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


def set_time_zone(services: Services, principal: Principal, time_zone: str | None) -> User:
    """The caller's time zone (an IANA name such as Europe/Paris; None or "" for UTC),
    in which platform Funcs give local times."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    user_id = user_id_of(principal)
    if time_zone:
        try:
            ZoneInfo(time_zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise InvalidInput(f"{time_zone!r} is not a time zone name such as "
                               "Europe/Paris or America/New_York") from None
    services.users.set_time_zone(user_id, time_zone or None)
    return services.users.get(user_id)


def find_user(services: Services, username: str) -> User:
    return services.users.get_by_username(username)


@dataclass(frozen=True)
class Profile:
    user: User
    daily_query_limit: int
    daily_used_queries: int


def profile(services: Services, principal: Principal) -> Profile:
    """The caller's profile with today's quota and use of it."""
    user = services.users.get(user_id_of(principal))
    used = services.usage.used("query", user.user_id)
    return Profile(user, services.daily_limit(user.daily_query_limit), used)

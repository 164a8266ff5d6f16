"""Accounts: signing up and in with email and password (a Cognito user pool), the codeshot
user an account becomes on its first sign-in, and what operators do to users.

A console request carries either an API key or an ID token from the pool; both become
the same :class:`Principal`. An account with no username yet is signed in but is no user:
its requests get :class:`NoUsername` until it picks one.
"""

from __future__ import annotations

from dataclasses import dataclass

from codeshot.auth.cognito import Identity
from codeshot.auth.service import REVOKED, check_active
from codeshot.errors import Forbidden, InvalidInput, Unauthenticated
from codeshot.models import Principal, User
from codeshot.services import Services
from codeshot.settings import Settings
from codeshot.usecases.erasure_start import start_erasure
from codeshot.usecases.users import find_user


class NoUsername(Forbidden):
    """A signed-in account that has not picked its username yet."""

    def __init__(self, identity: Identity) -> None:
        super().__init__("pick a username first")
        self.identity = identity


def sign_up(services: Services, email: str, password: str) -> None:
    services.accounts.sign_up(email, password)


def confirm(services: Services, email: str, code: str) -> None:
    services.accounts.confirm(email, code)


def sign_in(services: Services, email: str, password: str) -> str:
    """An ID token the console sends as its Bearer credential."""
    return services.accounts.sign_in(email, password)


def principal_for_token(services: Services, token: str) -> Principal:
    """The user behind a console credential: an API key, or an ID token of the pool."""
    if not (services.settings.user_pool_id and services.accounts.is_id_token(token)):
        return services.auth.user_for_api_key(token)
    identity = services.accounts.verify(token)
    user = services.users.find_by_identity(identity.sub)
    if user is None:
        raise NoUsername(identity)
    check_active(user)
    return Principal(user_id=user.user_id, username=user.username,
                     daily_query_limit=user.daily_query_limit)


# Not for self sign-up: the owner of the kit's deployed agents (the CDK app's
# codeshot:adminUsername, which the API has as CODESHOT_DEPLOY_OWNER; the default too),
# which would otherwise go to whoever signs up first.
DEFAULT_DEPLOY_OWNER = Settings.deploy_owner


def choose_username(services: Services, token: str, username: str) -> User:
    """The codeshot user for this account, named ``username`` (unique, as any user's)."""
    identity = services.accounts.verify(token)
    if username.strip() in {DEFAULT_DEPLOY_OWNER, services.settings.deploy_owner}:
        raise InvalidInput(f"username {username.strip()!r} is reserved: choose another")
    return services.users.create(username.strip(), identity=identity.sub, email=identity.email)


# -- operators ---------------------------------------------------------------------------
def require_operator(services: Services, principal: Principal) -> User:
    user = services.users.get(principal.user_id or "")
    if not user.operator:
        raise Forbidden("only operators may manage users")
    return user


@dataclass(frozen=True)
class UserPage:
    users: list[User]
    after: str | None  # where the next page starts; None: this is the last


def list_users(services: Services, after: str | None = None) -> UserPage:
    users, last = services.users.list(after)
    return UserPage(sorted(users, key=lambda u: u.username), last)


def set_disabled(services: Services, username: str, disabled: bool) -> User:
    """Turn a user off (every API key and sign-in refused) or on again. An account's
    password is turned off in the pool too, so it cannot even sign in.

    The pool first: if it refuses, nothing has changed and the operator is told (the
    user's flag written first stayed set while the pool still took their password). Both
    writes are idempotent, so a retry after the flag's write failed agrees them."""
    user = find_user(services, username)
    if user.identity and services.settings.user_pool_id:
        services.accounts.set_enabled(user.identity, not disabled)
    user = services.users.set_flag(user.user_id, "disabled", disabled)
    services.auth.forget_user(user.user_id)
    return user


def set_operator(services: Services, username: str, operator: bool) -> User:
    return services.users.set_flag(find_user(services, username).user_id, "operator", operator)


# -- deletion ----------------------------------------------------------------------------
def delete_account(services: Services, principal: Principal, confirm_username: str) -> User:
    """Delete the caller's own user, who confirms by typing their username (never an
    agent acting for them)."""
    if principal.agent_id:
        raise Forbidden("only the user may delete their account")
    user = services.users.get(principal.user_id or "")
    # Read fresh, not as a key another API process still caches (a while): a key revoked
    # or a user disabled since cannot make this change, the one with no undo.
    check_active(user)
    if principal.key_id and principal.key_id not in user.api_key_ids:
        raise Unauthenticated(REVOKED)
    if confirm_username.strip() != user.username:
        raise InvalidInput("type your username to confirm the deletion of your account")
    _refuse_deploy_owner(user.username, services.settings.deploy_owner)
    return _delete(services, user)


def _refuse_deploy_owner(username: str, deploy_owner: str | None, hint: str = "") -> None:
    if username == deploy_owner:
        raise InvalidInput(f"{username!r} owns the deployed agents "
                           "(codeshot:adminUsername): deleting it deletes them, and deploys "
                           f"under that name fail from then on{hint}")


def delete_user(services: Services, username: str, deploy_owner: str | None = None) -> User:
    """An operator's deletion of ``username``; again for a deleted user whose erasure is
    not over, it queues their erasure again (one that went to the dead-letter queue goes
    on); for one erased, it does nothing. ``deploy_owner`` (the owner of the kit's
    deployed agents) is refused: its agents would go, and every later deploy with it."""
    _refuse_deploy_owner(username.strip(), deploy_owner, "; --force deletes it all the same")
    user = services.users.get_by_username(username)
    return user if user.erased else _delete(services, user)


def _delete(services: Services, user: User) -> User:
    """Queue the user's erasure, delete their account in the user pool (its email with
    it), then make them a tombstone: every API key, token and sign-in refused from then on,
    the username never taken again (nobody inherits their agent ids). The tombstone last:
    the user can no longer ask again once it is written, and an erasure that finds no
    tombstone erases nothing. Each write is idempotent, so a retry of a deletion that
    failed half-way finishes it. A user with an account, and no pool to delete it from
    (an operator's environment without it), is refused: their account and its email
    would stay, for good."""
    if user.identity and not services.settings.user_pool_id:
        raise InvalidInput(f"{user.username!r} has an account in the user pool, and "
                           "CODESHOT_USER_POOL_ID is not set (the stack's UserPoolId "
                           "output): deleting them would keep the account and its email")
    start_erasure(services, user)
    if user.identity:
        services.accounts.delete(user.identity)
    tombstone = services.users.mark_deleted(user.user_id, services.clock().isoformat())
    services.auth.forget_user(user.user_id)
    return tombstone

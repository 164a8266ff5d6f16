"""Accounts a Google or GitHub sign-in made: the pool names them after the provider
(``Google_<id>``), not by their sub, which is all codeshot keeps of an account. Operators
disable, enable and delete them all the same, as they do password accounts (moto's
Cognito, in process, in a pool made as the CDK app makes it)."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from codeshot import aws
from codeshot.errors import NotFound
from codeshot.services import Services
from codeshot.store.provision import create_user_pool
from codeshot.usecases import accounts

PASSWORD = "Correct-horse-9"


@pytest.fixture
def pooled(aws):
    return Services(create_user_pool(aws.replace(local_mode=True)))


def google_account(services: Services, google_id: str, email: str) -> str:
    """The account a first Google sign-in makes, as the pool holds it; its sub. The pool's
    hosted pages make it, which moto has not, and AdminCreateUser refuses a username that
    is no email in a pool whose usernames are emails (as Cognito does): so it goes into
    moto's pool directly."""
    from moto.cognitoidp.models import CognitoIdpUser, cognitoidp_backends

    account = aws.client("sts", services.settings).get_caller_identity()["Account"]  # type: ignore[call-overload]
    pool_id = services.settings.user_pool_id
    pool = cognitoidp_backends[account][services.settings.region].user_pools[pool_id]
    user = CognitoIdpUser(pool_id, f"Google_{google_id}", None, "EXTERNAL_PROVIDER", [
        {"Name": "email", "Value": email},
        {"Name": "identities", "Value": f'[{{"providerName":"Google","userId":"{google_id}"}}]'}])
    pool.users[user.username] = user
    return user.id


def password_account(services: Services, email: str) -> str:
    """An account signed up with a password and confirmed; its sub."""
    accounts.sign_up(services, email, PASSWORD)
    services.accounts.admin_confirm(email)
    return sub_of(services, email)


def pool_user(services: Services, username: str) -> dict:
    return services.accounts.client.admin_get_user(  # type: ignore[no-any-return]
        UserPoolId=services.settings.user_pool_id, Username=username)


def sub_of(services: Services, username: str) -> str:
    return next(a["Value"] for a in pool_user(services, username)["UserAttributes"]
                if a["Name"] == "sub")


def test_a_google_account_is_disabled_and_enabled_by_its_sub(pooled):
    """Its sub as the username, the pool found no account: NOT_FOUND, nothing changed."""
    sub = google_account(pooled, "1234567890", "gia@example.com")
    assert sub != "Google_1234567890"
    pooled.users.create("gia", identity=sub, email="gia@example.com")

    accounts.set_disabled(pooled, "gia", True)
    assert pool_user(pooled, "Google_1234567890")["Enabled"] is False
    accounts.set_disabled(pooled, "gia", False)
    assert pool_user(pooled, "Google_1234567890")["Enabled"] is True


def test_deleting_a_google_accounts_user_deletes_the_account(pooled):
    """Its sub as the username, the pool found no account, which a deletion takes for one
    gone already (a retry): the account and its email stayed for good, the user told
    they were deleted."""
    pooled.users.create("gil", identity=google_account(pooled, "987", "gil@example.com"))
    assert accounts.delete_user(pooled, "gil").deleted is not None
    with pytest.raises(ClientError, match="UserNotFound"):
        pool_user(pooled, "Google_987")
    # Again, as a retry of a deletion that failed half-way: the account is gone already.
    assert accounts.delete_user(pooled, "gil").deleted is not None


def test_each_account_goes_by_its_own_sub_when_a_google_and_a_password_one_share_an_email(
        pooled):
    """A password account (its username its sub) is found as before; and the Google
    account with the same email is not touched, as a lookup by email could have."""
    email = "pat@example.com"
    local = password_account(pooled, email)
    google = google_account(pooled, "42", email)
    pooled.users.create("pat", identity=local, email=email)
    pooled.users.create("patg", identity=google, email=email)

    accounts.set_disabled(pooled, "pat", True)
    assert (pool_user(pooled, local)["Enabled"], pool_user(pooled, "Google_42")["Enabled"]) \
        == (False, True)
    accounts.set_disabled(pooled, "pat", False)
    assert pool_user(pooled, local)["Enabled"] is True

    accounts.delete_user(pooled, "pat")
    with pytest.raises(ClientError, match="UserNotFound"):
        pool_user(pooled, local)
    assert sub_of(pooled, "Google_42") == google


def test_enabling_an_account_the_pool_has_not_is_not_found(pooled):
    pooled.users.create("ghost", identity="9f3a1c2e-0000-4000-8000-000000000000")
    with pytest.raises(NotFound, match="no account 9f3a1c2e-0000-4000-8000-000000000000"):
        accounts.set_disabled(pooled, "ghost", False)
    assert pooled.users.get_by_username("ghost").disabled is False

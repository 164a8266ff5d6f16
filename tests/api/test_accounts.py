"""Accounts over HTTP and the CLI against the local stack's user pool (moto's Cognito):
what sign-up refuses, what an ID token must be to be accepted, the username an account
picks once, and what operators do (the browser flows are in tests/browser)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from moto.utilities.utils import load_resource

from codeshot import ids
from codeshot.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    RateLimited,
    Unauthenticated,
    Unavailable,
)
from codeshot.store.tables import REPLIES_HELD_MARK
from codeshot.usecases import accounts

PASSWORD = "Correct-horse-9"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def stack(live_stack_object):
    return live_stack_object


def new_email() -> str:
    return f"api-{ids.ulid().lower()[-10:]}@example.com"


def confirmed(stack, email: str | None = None) -> tuple[str, str]:
    """A confirmed account with no username yet: (email, ID token)."""
    email = email or new_email()
    accounts.sign_up(stack.services, email, PASSWORD)
    stack.services.accounts.admin_confirm(email)
    return email, accounts.sign_in(stack.services, email, PASSWORD)


def whoami(stack, token: str) -> dict:
    return httpx.post(f"{stack.api_url}/graphql", json={"query": "{ user { username } }"},
                      headers={"Authorization": f"Bearer {token}"}, timeout=10).json()


def error_code(answer: dict) -> str:
    return answer["errors"][0]["extensions"]["code"]


def cli(stack, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    """`codeshot ...` run where the stack's .codeshot/local.json is, as an operator does
    (with this test run's own table names, or ``settings``)."""
    names = ("users_table", "usage_table", "registry_table", "sessions_table",
             "signing_secret_id")
    env = {**os.environ, "PYTHONPATH": str(REPO)} | {
        f"CODESHOT_{name.upper()}": settings.get(name, getattr(stack.settings, name))
        for name in names}
    return subprocess.run([sys.executable, "-m", "codeshot.cli", *args],
                          cwd=stack.state_path.parents[1], env=env, capture_output=True,
                          text=True, timeout=60, check=False)


def pool_users(stack) -> int:
    return len(stack.services.accounts.client.list_users(
        UserPoolId=stack.settings.user_pool_id)["Users"])


@pytest.mark.parametrize(("email", "password", "message"), [
    ("not-an-email", PASSWORD, "enter an email address"),
    ("ada@example.com", "short", "the password needs at least 12 characters"),
    ("ada@example.com", "alllowercase-with-dash", "the password needs"),
    ("ada@example.com", "", "enter a password"),
])
def test_sign_up_refuses_bad_input_and_creates_nothing(stack, email, password, message):
    before = pool_users(stack)
    with pytest.raises(InvalidInput, match=message):
        accounts.sign_up(stack.services, email, password)
    assert pool_users(stack) == before


@pytest.mark.parametrize("refusal", ["TooManyRequestsException", "LimitExceededException"])
def test_the_pools_throttling_is_rate_limited_not_bad_input(stack, monkeypatch, refusal):
    """Cognito throttling a sign-in (or its attempt limit) says nothing of the input: the
    caller is told to wait (RATE_LIMITED), as docs/errors.md says of AWS throttling."""
    from botocore.exceptions import ClientError

    email, _ = confirmed(stack)

    def throttled(**request):
        raise ClientError({"Error": {"Code": refusal, "Message": "Rate exceeded"}},
                          "InitiateAuth")

    monkeypatch.setattr(stack.services.accounts.client, "initiate_auth", throttled)
    with pytest.raises(RateLimited, match="too many attempts: wait a minute") as refused:
        accounts.sign_in(stack.services, email, PASSWORD)
    assert refused.value.code == "RATE_LIMITED"


def test_the_pools_daily_email_limit_says_so(stack, monkeypatch):
    """Cognito's own sender stops at about 50 emails a day: "wait a minute" had people
    retry sign-up all day."""
    from botocore.exceptions import ClientError

    def over(**request):
        raise ClientError({"Error": {"Code": "LimitExceededException", "Message": (
            "Exceeded daily email limit for the operation or the account. If a higher "
            "limit is required, please configure your user pool to use your own Amazon "
            "SES configuration for sending email.")}}, "SignUp")

    monkeypatch.setattr(stack.services.accounts.client, "sign_up", over)
    with pytest.raises(RateLimited, match="cannot send more emails today: try again "
                                          "tomorrow") as refused:
        accounts.sign_up(stack.services, new_email(), PASSWORD)
    assert refused.value.code == "RATE_LIMITED"


def test_one_account_per_email_and_none_signs_in_before_confirming(stack):
    email = new_email()
    accounts.sign_up(stack.services, email.upper(), PASSWORD)  # emails are case-blind
    with pytest.raises(Conflict, match="an account with this email exists"):
        accounts.sign_up(stack.services, email, PASSWORD)
    with pytest.raises(Unauthenticated, match="confirm your email first"):
        accounts.sign_in(stack.services, email, PASSWORD)
    made = cli(stack, "users", "confirm", email)  # an operator, when the email never came
    assert made.returncode == 0 and "is confirmed" in made.stdout, made.stderr
    with pytest.raises(Unauthenticated, match="wrong email or password"):
        accounts.sign_in(stack.services, email, "Wrong-horse-99")
    assert accounts.sign_in(stack.services, email, PASSWORD)


def test_an_unknown_account_is_not_found_except_at_sign_in(stack):
    email = new_email()  # no account has it
    made = cli(stack, "users", "confirm", email)
    assert made.returncode == 2, made.stderr
    assert made.stderr == f"codeshot: error: there is no account {email} in the user pool " \
        "(NOT_FOUND)\n"
    with pytest.raises(NotFound) as missing:
        accounts.confirm(stack.services, email, "123456")
    assert missing.value.message == f"there is no account {email} in the user pool"
    with pytest.raises(Unauthenticated) as refused:
        accounts.sign_in(stack.services, email, PASSWORD)
    assert refused.value.message == "wrong email or password"  # no hint that it does not exist


def test_an_id_token_is_accepted_only_as_the_pool_signed_it_for_the_console(stack):
    _, token = confirmed(stack)
    assert error_code(whoami(stack, token)) == "FORBIDDEN"  # no username yet
    claims = jwt.decode(token, options={"verify_signature": False})
    accounts.choose_username(stack.services, token, f"id{ids.ulid().lower()[-8:]}")
    assert whoami(stack, token)["data"]["user"]["username"].startswith("id")

    forger = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    forged = jwt.encode(claims, forger, algorithm="RS256", headers={"kid": "dummy"})
    # moto signs every pool's tokens with a key it ships: an expired token signed by it.
    pool_key = jwt.PyJWK(load_resource("cognitoidp/resources/jwks-private.json")).key
    expired = jwt.encode(claims | {"exp": int(time.time()) - 60}, pool_key, algorithm="RS256",
                         headers={"kid": "dummy"})
    assert accounts.principal_for_token(stack.services, jwt.encode(
        claims, pool_key, algorithm="RS256", headers={"kid": "dummy"})).user_id  # the key
    header, _, signature = token.split(".")
    other = jwt.utils.base64url_encode(json.dumps(claims | {"sub": "someone-else"}).encode())
    tampered = ".".join([header, other.decode(), signature])
    # An ID token of the same pool issued to another app client is not the console's.
    client = stack.services.accounts.client.create_user_pool_client(
        UserPoolId=stack.settings.user_pool_id, ClientName="other",
        ExplicitAuthFlows=["ALLOW_USER_PASSWORD_AUTH"])["UserPoolClient"]["ClientId"]
    email = claims["email"]
    for_other = stack.services.accounts.client.initiate_auth(
        ClientId=client, AuthFlow="USER_PASSWORD_AUTH",
        AuthParameters={"USERNAME": email, "PASSWORD": PASSWORD})["AuthenticationResult"]
    for bad in (forged, expired, tampered, for_other["IdToken"], for_other["AccessToken"]):
        answer = whoami(stack, bad)
        assert error_code(answer) == "UNAUTHENTICATED", answer


def test_an_account_picks_one_username_that_no_one_else_has(stack, monkeypatch):
    _, token = confirmed(stack)
    with pytest.raises(Conflict, match="username 'local' is taken"):
        accounts.choose_username(stack.services, token, "local")
    with pytest.raises(InvalidInput, match="username"):
        accounts.choose_username(stack.services, token, "Not Valid!")
    # The deployed agents' default owner, and the planner's owner ("platform/planner").
    with pytest.raises(InvalidInput, match="'admin' is reserved"):
        accounts.choose_username(stack.services, token, "admin")
    # codeshot:adminUsername set to another name
    monkeypatch.setattr(stack.services, "settings", stack.settings.replace(deploy_owner="ops"))
    with pytest.raises(InvalidInput, match="'ops' is reserved"):
        accounts.choose_username(stack.services, token, "ops")
    monkeypatch.undo()
    with pytest.raises(InvalidInput, match="'platform' is the platform's own"):
        accounts.choose_username(stack.services, token, "platform")
    name = f"pick{ids.ulid().lower()[-8:]}"
    user = accounts.choose_username(stack.services, token, name)
    assert user.identity and user.email
    with pytest.raises(Conflict, match="this account already has a username"):
        accounts.choose_username(stack.services, token, name + "x")
    with pytest.raises(Exception, match="not found"):  # the refused name was not written
        stack.services.users.get_by_username(name + "x")
    assert accounts.principal_for_token(stack.services, token).username == name


def test_disabling_refuses_every_key_the_id_token_and_the_password_at_once(stack):
    email, token = confirmed(stack)
    name = f"off{ids.ulid().lower()[-8:]}"
    user = accounts.choose_username(stack.services, token, name)
    key = stack.services.auth.issue_api_key(user)
    other_key = stack.services.auth.issue_api_key(user)

    off = cli(stack, "users", "disable", name)
    assert off.returncode == 0 and off.stdout.strip() == f"{name} is disabled", off.stderr
    for credential in (key, other_key, token):
        answer = whoami(stack, credential)
        assert error_code(answer) == "UNAUTHENTICATED" and "disabled" in \
            answer["errors"][0]["message"]
    with pytest.raises(Unauthenticated, match="this account is disabled"):
        accounts.sign_in(stack.services, email, PASSWORD)
    listed = cli(stack, "users", "list")
    assert f"{name}\t{email}\t" in listed.stdout and "disabled" in listed.stdout

    on = cli(stack, "users", "enable", name)
    assert on.returncode == 0 and on.stdout.strip() == f"{name} is enabled", on.stderr
    assert whoami(stack, key)["data"]["user"]["username"] == name
    assert accounts.sign_in(stack.services, email, PASSWORD)


def test_a_pool_refusing_to_disable_an_account_changes_nothing(stack, monkeypatch):
    """The operator is told, and the user's keys and password work as before: a disabled
    flag written while the pool still took the password left the two disagreeing."""
    from botocore.exceptions import ClientError

    email, token = confirmed(stack)
    name = f"keep{ids.ulid().lower()[-8:]}"
    key = stack.services.auth.issue_api_key(
        accounts.choose_username(stack.services, token, name))

    def refused(**request):
        raise ClientError({"Error": {"Code": "InternalErrorException", "Message": "x"}},
                          "AdminDisableUser")

    monkeypatch.setattr(stack.services.accounts.client, "admin_disable_user", refused)
    with pytest.raises(Unavailable, match="the user pool refused the request"):
        accounts.set_disabled(stack.services, name, True)
    assert not stack.services.users.get_by_username(name).disabled
    assert whoami(stack, key)["data"]["user"]["username"] == name
    assert accounts.sign_in(stack.services, email, PASSWORD)


def test_only_operators_manage_users(stack):
    _, token = confirmed(stack)
    name = f"op{ids.ulid().lower()[-8:]}"
    accounts.choose_username(stack.services, token, name)
    page = {"Authorization": f"Bearer {token}", "HX-Request": "true", "HX-Target": "main"}
    refused = httpx.get(f"{stack.api_url}/console/users", headers=page)
    assert refused.status_code == 403 and "only operators" in refused.text
    disable = httpx.post(f"{stack.api_url}/console/users/local/disable", headers=page)
    assert disable.status_code == 403
    assert not stack.services.users.get_by_username("local").disabled
    with pytest.raises(Forbidden):
        accounts.require_operator(stack.services, accounts.principal_for_token(
            stack.services, token))

    made = cli(stack, "users", "operator", name)
    assert made.returncode == 0 and made.stdout.strip() == f"{name} is an operator"
    listing = httpx.get(f"{stack.api_url}/console/users", headers=page)
    assert listing.status_code == 200 and 'data-user="local"' in listing.text
    me = httpx.post(f"{stack.api_url}/console/users/{name}/disable", headers=page)
    assert me.status_code == 400 and "cannot disable yourself" in me.text
    for bad in ("-3", "²", str(10**40)):  # "²".isdigit(); 10**40 was written, then 500s
        limit = httpx.post(f"{stack.api_url}/console/users/local/limit", headers=page,
                           data={"daily_queries": bad})
        assert limit.status_code == 400 and "from 0 to 2,147,483,647" in limit.text, bad
        assert stack.services.users.get_by_username("local").daily_query_limit is None
    assert httpx.get(f"{stack.api_url}/console/users", headers=page).status_code == 200
    huge = cli(stack, "users", "limits", "local", "--daily-queries", str(10**40))
    assert huge.returncode == 2 and huge.stderr.strip().endswith("(INVALID_INPUT)"), huge.stderr
    assert stack.services.users.get_by_username("local").daily_query_limit is None
    assert cli(stack, "users", "operator", name, "--off").stdout.strip() == \
        f"{name} is not an operator"
    assert httpx.get(f"{stack.api_url}/console/users", headers=page).status_code == 403


def test_deleting_a_user_refuses_them_everywhere_and_operators_touch_them_no_more(stack):
    email, token = confirmed(stack)
    name = f"gone{ids.ulid().lower()[-8:]}"
    key = stack.services.auth.issue_api_key(accounts.choose_username(stack.services, token,
                                                                     name))

    assert cli(stack, "users", "delete", name).returncode == 2  # --yes is required
    # The owner of the deployed agents (cdk.json's codeshot:adminUsername) only if forced.
    cdk_json = stack.state_path.parents[1] / "cdk.json"
    cdk_json.write_text(json.dumps({"context": {"codeshot:adminUsername": name}}))
    try:
        owner = cli(stack, "users", "delete", name, "--yes")
    finally:
        cdk_json.unlink()
    assert owner.returncode == 2 and "owns the deployed agents" in owner.stderr
    assert owner.stderr.strip().endswith("(INVALID_INPUT)"), owner.stderr
    assert stack.services.users.get_by_username(name).deleted is None
    # (Not used before: a warm API reuses a key's user record for 30 s, which the
    # erasure waits out.)
    gone = cli(stack, "users", "delete", name, "--yes", "--force")
    assert gone.returncode == 0 and gone.stdout.startswith(f"{name} is deleted"), gone.stderr
    for credential in (key, token):
        answer = whoami(stack, credential)
        assert error_code(answer) == "UNAUTHENTICATED" and "deleted" in \
            answer["errors"][0]["message"]
    # The account is gone with its email: signing in finds none, and the email may sign
    # up again (a new account: it names a new user).
    with pytest.raises(Unauthenticated, match="wrong email or password"):
        accounts.sign_in(stack.services, email, PASSWORD)
    assert cli(stack, "users", "delete", name, "--yes").returncode == 0  # again: no error
    accounts.sign_up(stack.services, email, PASSWORD)
    for command in (("new-key", name), ("disable", name), ("limits", name, "--daily-queries",
                                                          "5")):
        refused = cli(stack, "users", *command)
        assert refused.returncode == 2 and "(USER_DELETED)" in refused.stderr, refused.stderr
    [listed] = [line for line in cli(stack, "users", "list").stdout.splitlines()
                if line.startswith(f"{name}\t")]
    # no email; the erasure's state (an operator sees one stuck)
    assert listed.startswith(f"{name}\t-\t") and "\tdeleted (erasure not started; due 20" in listed
    assert listed in cli(stack, "users", "list", "--erasing").stdout.splitlines()


def test_users_create_needs_no_sessions_table(stack):
    """As README's "Deploy to AWS" runs it, with the users table and signing secret alone:
    a user made touches no sessions table (the stack's creation marked it)."""
    made = cli(stack, "users", "create", f"new{ids.ulid().lower()[-8:]}",
               sessions_table="no-such-sessions-table")
    assert made.returncode == 0 and made.stdout.strip(), made.stderr


def test_holding_old_replies_marks_the_sessions_table_for_erasures(stack):
    """`users hold-replies`, once after upgrading: until it has gone through the table, an
    erasure deletes no embed's object (a reply from before may name the same bytes)."""
    db, table = stack.services.sessions.db, stack.settings.sessions_table
    db.delete_item(TableName=table, Key=REPLIES_HELD_MARK)  # a table from before HELD#
    assert not stack.services.sessions.replies_held()
    held = cli(stack, "users", "hold-replies")
    assert held.returncode == 0 and "reply embeds held" in held.stdout, held.stderr
    assert stack.services.sessions.replies_held()

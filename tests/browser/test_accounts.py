"""Accounts in the console against the local stack's user pool (moto's Cognito): sign up
with email and password, confirm, sign in, pick a username, make an API key and use it
with the real fixieai client, revoke it, sign out; one account cannot see another's
sessions; an operator sets a user's limit and disables them, whose keys are then refused.

Locally no email is sent and moto's ConfirmSignUp checks no code: the confirm form is
the one AWS users fill in, and any code confirms here (README, Accounts)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import httpx
from playwright.sync_api import expect

from codeshot import ids
from codeshot.usecases import accounts
from tests.browser.conftest import open_console
from tests.browser.test_console import send, start_session

PASSWORD = "Correct-horse-9"


def new_email() -> str:
    return f"user-{ids.ulid().lower()[-10:]}@example.com"


def new_username() -> str:
    return f"acct{ids.ulid().lower()[-8:]}"


def make_account(stack, email: str, username: str, *, operator: bool = False) -> None:
    """An account made as the console makes one (sign-up, an operator's confirmation,
    sign-in, the username), for tests about what comes after."""
    services = stack.services
    accounts.sign_up(services, email, PASSWORD)
    services.accounts.admin_confirm(email)
    accounts.choose_username(services, accounts.sign_in(services, email, PASSWORD), username)
    if operator:
        accounts.set_operator(services, username, True)


def sign_in_with_email(console, email: str, password: str = PASSWORD) -> None:
    form = console.page.locator("#signin-page form[data-account][hx-post$='sign-in']")
    form.get_by_label("Email").fill(email)
    form.get_by_label("Password").fill(password)
    form.get_by_role("button", name="Sign in with email").click()


def fixie_user(fixie_python: Path, stack, key: str, home: Path) -> subprocess.CompletedProcess[str]:
    """`fixie user` (the real fixieai 1.0.4 CLI) with this key: who the platform says it is."""
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "FIXIE_API_URL": stack.api_url,
           "FIXIE_API_KEY": key}
    return subprocess.run([str(fixie_python.with_name("fixie")), "user"], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def test_sign_up_confirm_sign_in_pick_a_username_use_and_revoke_a_key_sign_out(
        console, stack, fixie_python, tmp_path):
    page = console.page
    email, username = new_email(), new_username()
    console.open("/")
    expect(page.get_by_role("heading", name="New here? Create an account")).to_be_visible()
    assert console.axe_violations() == []

    signup = page.locator("form[hx-post$='sign-up']")
    signup.get_by_label("Email").fill(email)
    signup.get_by_label("New password").fill("short")
    signup.get_by_role("button", name="Create account").click()
    expect(signup.locator(".form-error")).to_contain_text("the password needs at least 12")
    signup.get_by_label("New password").fill(PASSWORD)
    signup.get_by_role("button", name="Create account").click()
    confirm = page.locator("form[hx-post$='confirm']")
    expect(confirm).to_contain_text(f"We sent a code to {email}")

    sign_in_with_email(console, email)  # before confirming: refused, on its form
    expect(page.locator("form[hx-post$='sign-in'] .form-error").first).to_contain_text(
        "confirm your email first")
    expect(page.get_by_role("heading", name="Sign in", level=1)).to_be_visible()

    confirm.get_by_label("Code from the email").fill("123456")
    confirm.get_by_role("button", name="Confirm").click()
    expect(page.get_by_text("Your email is confirmed")).to_be_visible()
    sign_in_with_email(console, email, "Wrong-password-1")
    expect(page.locator("form[hx-post$='sign-in'] .form-error").first).to_contain_text(
        "wrong email or password")
    sign_in_with_email(console, email)
    console.heading("Pick a username")
    expect(page.locator("#whoami")).to_contain_text(email)
    assert console.axe_violations() == []
    console.shot("pick-a-username")
    # A reload asks again (axe leaves style="" on what it checked, which htmx would copy
    # onto the next form; the page's CSP refuses inline styles).
    page.reload()
    console.heading("Pick a username")

    page.get_by_label("Username").fill("local")  # the local stack's first user has it
    page.get_by_role("button", name="Save username").click()
    expect(page.locator("#main .form-error")).to_contain_text("username 'local' is taken")
    page.get_by_label("Username").fill(username)
    page.get_by_role("button", name="Save username").click()
    console.heading("Account")
    expect(page.locator(".facts")).to_contain_text(username)
    expect(page.locator("#whoami")).to_contain_text(f"Signed in as {username}")
    expect(page.locator("table.keys")).to_contain_text("No active keys.")

    page.get_by_role("button", name="Create a key").click()
    key = page.get_by_label(re.compile("Your new API key")).input_value()
    console.keys.add(key)
    used = fixie_user(fixie_python, stack, key, tmp_path)
    assert used.returncode == 0 and username in used.stdout, used.stderr[-500:]

    page.on("dialog", lambda dialog: dialog.accept())
    # An account signs in without keys, so its last key can go.
    page.get_by_role("button", name=re.compile("^Revoke")).click()
    expect(page.locator("#keys .notice")).to_contain_text("Revoked")
    expect(page.locator("table.keys")).to_contain_text("No active keys.")
    refused = fixie_user(fixie_python, stack, key, tmp_path)
    assert refused.returncode != 0 and "revoked" in refused.stdout + refused.stderr

    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in", level=1)).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('codeshot.credential')") is None
    console.open("/console/account")  # nothing private without signing in again
    expect(page.get_by_role("heading", name="Sign in", level=1)).to_be_visible()
    # 400: the short password; 401: unconfirmed, then the wrong password; 422: taken name.
    console.check_clean(expected_statuses=frozenset({400, 401, 422}))


def test_a_second_account_cannot_see_the_first_accounts_sessions(console, browser, stack,
                                                                   tmp_path):
    first, second = (new_email(), new_username()), (new_email(), new_username())
    for email, username in (first, second):
        make_account(stack, email, username)
    console.open("/")
    sign_in_with_email(console, first[0])
    console.heading("Chat")
    session = start_session(console)
    send(console, "Roll a d20")
    expect(console.page.locator(".turn .answer .msg-agent")).to_contain_text(
        re.compile(r"You rolled \d+\."), timeout=20_000)

    for other in open_console(browser, stack, tmp_path / "second", {"width": 1180,
                                                                    "height": 860}):
        other.open("/")
        sign_in_with_email(other, second[0])
        other.heading("Chat")
        expect(other.page.locator("#main")).not_to_contain_text(session)
        other.open(f"/console/sessions/{session}")
        other.heading("Not found")
        expect(other.page.locator("#main")).not_to_contain_text("You rolled")
        other.check_clean(expected_statuses=frozenset({404}))
    console.check_clean()


def test_an_operator_limits_and_disables_a_user_whose_keys_are_then_refused(
        console, stack, new_user, tmp_path):
    email, operator = new_email(), new_username()
    make_account(stack, email, operator, operator=True)
    victim, key = new_user("victim")
    graphql = f"{stack.api_url}/graphql"

    def whoami(api_key: str) -> dict:
        return httpx.post(graphql, json={"query": "{ user { username } }"},
                          headers={"Authorization": f"Bearer {api_key}"}, timeout=10).json()

    assert whoami(key)["data"]["user"]["username"] == victim.username

    console.open("/")
    sign_in_with_email(console, email)
    console.heading("Chat")
    console.page.get_by_role("link", name="Users").click()
    console.heading("Users")
    row = console.page.locator(f"tr[data-user='{victim.username}']")
    row.get_by_label(f"Daily queries of {victim.username}").fill("7")
    row.get_by_role("button", name=f"Save the limit of {victim.username}").click()
    expect(console.page.locator("#users .notice")).to_contain_text(
        f"{victim.username} may now send 7 queries a day")
    assert stack.services.users.get(victim.user_id).daily_query_limit == 7

    console.page.on("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name=f"Disable {victim.username}").click()
    expect(console.page.locator("#users .notice")).to_contain_text(
        f"{victim.username} is disabled")
    expect(row).to_contain_text("disabled")
    console.shot("users")
    refused = whoami(key)
    assert refused["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    assert "disabled" in refused["errors"][0]["message"]

    row.get_by_role("button", name=f"Enable {victim.username}").click()
    expect(console.page.locator("#users .notice")).to_contain_text("enabled again")
    assert whoami(key)["data"]["user"]["username"] == victim.username
    assert console.axe_violations() == []  # last: axe leaves style="" that htmx would copy
    console.check_clean()

"""Accounts in the console against the local stack's user pool (moto's Cognito): sign up
with email and password, confirm, sign in, pick a username, make an API key and use it
with the real fixieai client, revoke it, sign out; one account cannot see another's
sessions; an operator sets a user's limit and disables them, whose keys are then refused;
Google sign-in through the pool's hosted pages (a loopback stand-in: moto has none).

Locally no email is sent and moto's ConfirmSignUp checks no code: the confirm form is
the one AWS users fill in, and any code confirms here (README, Accounts)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import secrets
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

import httpx
import jwt
import pytest
from moto.utilities.utils import load_resource
from playwright.sync_api import expect

from codeshot import ids
from codeshot.local.stack import LocalStack
from codeshot.usecases import accounts
from tests.browser.conftest import DESKTOP, open_console
from tests.browser.test_console import send
from tests.conftest import free_port, unique_settings

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


def sign_in_with_email(console, email: str, password: str = PASSWORD, *,
                       refused: bool = False) -> None:
    """Sign in on the sign-in page; unless ``refused``, wait until the header says who is
    signed in (leaving a page mid-request aborts it, which htmx logs as an error)."""
    form = console.page.locator("#signin-page form[data-account][hx-post$='sign-in']")
    form.get_by_label("Email").fill(email)
    form.get_by_label("Password").fill(password)
    form.get_by_role("button", name="Sign in with email").click()
    if not refused:
        console.page.locator("#whoami").get_by_text("Signed in as").wait_for()


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
    # Locally no email is sent, and the form says so (it said one was sent).
    expect(confirm).to_contain_text(f"The local stack sends no email: any code confirms "
                                    f"{email}.")

    sign_in_with_email(console, email, refused=True)  # before confirming: on its form
    expect(page.locator("form[hx-post$='sign-in'] .form-error").first).to_contain_text(
        "confirm your email first")
    expect(page.get_by_role("heading", name="Sign in", level=1)).to_be_visible()

    confirm.get_by_label("Code from the email").fill("123456")
    confirm.get_by_role("button", name="Confirm").click()
    expect(page.get_by_text("Your email is confirmed")).to_be_visible()
    sign_in_with_email(console, email, "Wrong-password-1", refused=True)
    expect(page.locator("form[hx-post$='sign-in'] .form-error").first).to_contain_text(
        "wrong email or password")
    sign_in_with_email(console, email)
    console.heading("Pick a username")
    expect(page.locator("#whoami")).to_contain_text(email)
    assert console.axe_violations() == []
    console.shot("pick-a-username")
    # A reload asks again (axe and the screenshot left style="" on what they touched,
    # which htmx would copy onto the next form; the page's CSP refuses inline styles).
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
    expect(page.locator("#keys table.keys")).to_contain_text("No active keys.")

    page.get_by_role("button", name="Create a key").click()
    key = page.get_by_label(re.compile("Your new API key")).input_value()
    console.keys.add(key)
    used = fixie_user(fixie_python, stack, key, tmp_path)
    assert used.returncode == 0 and username in used.stdout, used.stderr[-500:]

    page.on("dialog", lambda dialog: dialog.accept())
    # An account signs in without keys, so its last key can go.
    page.get_by_role("button", name=re.compile("^Revoke")).click()
    expect(page.locator("#keys .notice")).to_contain_text("Revoked")
    expect(page.locator("#keys table.keys")).to_contain_text("No active keys.")
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
    console.heading("Chat")  # (start_session's own click on Chat could race the Start)
    console.page.get_by_role("button", name="Start", exact=True).click()
    console.page.get_by_label("Message").wait_for()
    session = console.page.url.rsplit("/", 1)[-1]
    send(console, "Roll a d20")
    expect(console.page.locator(".turn .answer .msg-agent")).to_contain_text(
        re.compile(r"You rolled \d+\."), timeout=20_000)
    # The run is over when the page stops asking for more (leaving mid-request aborts it).
    expect(console.page.locator("#poller[hx-get]")).to_have_count(0, timeout=20_000)
    console.nav("Chat")
    expect(console.page.locator(".sessions li")).to_have_count(1)  # the first's own

    for other in open_console(browser, stack, tmp_path / "second", DESKTOP):
        other.open(f"/console/sessions/{session}")  # the first's link, signed in as the second
        sign_in_with_email(other, second[0])
        other.heading("Not found")
        expect(other.page.locator("#main")).not_to_contain_text("You rolled")
        other.nav("Chat")
        other.heading("Chat")
        expect(other.page.locator("#main")).not_to_contain_text(session)
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
    refused = whoami(key)
    assert refused["errors"][0]["extensions"]["code"] == "UNAUTHENTICATED"
    assert "disabled" in refused["errors"][0]["message"]

    row.get_by_role("button", name=f"Enable {victim.username}").click()
    expect(console.page.locator("#users .notice")).to_contain_text("enabled again")
    assert whoami(key)["data"]["user"]["username"] == victim.username
    # Last: axe and screenshots leave style="" on elements, which htmx would copy onto
    # what it swaps in next (and the page's CSP refuses inline styles).
    assert console.axe_violations() == []
    console.shot("users")
    console.check_clean()


class HostedPages:
    """Cognito's hosted sign-in pages on loopback (moto has none), answering as Cognito does
    once a person has signed in with Google: /oauth2/authorize sends the browser back to
    the callback with a code, and /oauth2/token trades that code, checking the client, the
    redirect URI and the PKCE verifier, for an ID token signed with the pool's key (moto's
    one key, which its JWKS publishes, so the platform verifies it as any other)."""

    def __init__(self) -> None:
        self.codes: dict[str, dict[str, str]] = {}
        self.authorized: list[dict[str, str]] = []
        self.pool_id = self.client_id = ""
        self.sub = str(uuid.uuid4())
        self.email = new_email()
        pages = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = dict(parse_qsl(url.query))
                pages.authorized.append(query)
                code = secrets.token_urlsafe(16)
                pages.codes[code] = query
                back = f"{query['redirect_uri']}?{urlencode({'code': code, 'state': query['state']})}"
                self.send_response(302)
                self.send_header("Location", back)
                self.end_headers()

            def do_POST(self) -> None:
                form = dict(parse_qsl(self.rfile.read(int(self.headers["Content-Length"])).decode()))
                asked = pages.codes.pop(form.get("code", ""), None)
                challenge = base64.urlsafe_b64encode(hashlib.sha256(
                    form.get("code_verifier", "").encode()).digest()).decode().rstrip("=")
                if not asked or asked["client_id"] != form.get("client_id") or \
                        asked["redirect_uri"] != form.get("redirect_uri") or \
                        asked["code_challenge"] != challenge:
                    self.send_response(400)
                    self.end_headers()
                    return
                now = int(time.time())
                claims = {"iss": f"https://cognito-idp.us-east-1.amazonaws.com/{pages.pool_id}",
                          "aud": pages.client_id, "sub": pages.sub, "email": pages.email,
                          "token_use": "id", "iat": now, "exp": now + 3600}
                key = jwt.PyJWK(load_resource("cognitoidp/resources/jwks-private.json")).key
                body = json.dumps({"id_token": jwt.encode(claims, key, algorithm="RS256",
                                                          headers={"kid": "dummy"})}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def google_stack() -> Iterator[tuple[LocalStack, HostedPages]]:
    """A local stack whose pool offers Google sign-in through the hosted pages above."""
    pages = HostedPages()
    with tempfile.TemporaryDirectory() as directory:
        stack = LocalStack(port=free_port(), aws_port=free_port(), directory=Path(directory),
                           base=unique_settings(user_pool_domain=pages.url,
                                                user_pool_providers="Google"),
                           progress=lambda _line: None, examples=False)
        stack.start()
        pages.pool_id = stack.settings.user_pool_id or ""
        pages.client_id = stack.settings.user_pool_client_id or ""
        yield stack, pages
        stack.stop()
    pages.server.shutdown()


def test_sign_in_with_google_through_the_hosted_pages(browser, google_stack, tmp_path):
    stack, pages = google_stack
    for console in open_console(browser, stack, tmp_path, DESKTOP):
        page = console.page
        console.open(f"/console/auth/callback?code=stolen&state={secrets.token_urlsafe(8)}")
        expect(page.locator("#signin-page .form-error").first).to_contain_text(
            "did not start here")  # no state of this browser's: refused, nothing kept
        assert page.url.endswith("/console/")
        assert page.evaluate("sessionStorage.getItem('codeshot.credential')") is None

        page.get_by_role("link", name="Sign in with Google").click()
        console.heading("Pick a username")
        [asked] = pages.authorized
        assert (asked["identity_provider"], asked["code_challenge_method"]) == ("Google", "S256")
        assert asked["redirect_uri"] == f"{stack.api_url}/console/auth/callback"
        assert page.url == f"{stack.api_url}/console/"  # nothing of the sign-in left in it
        expect(page.locator("#whoami")).to_contain_text(pages.email)
        username = new_username()
        page.get_by_label("Username").fill(username)
        page.get_by_role("button", name="Save username").click()
        console.heading("Account")
        user = stack.services.users.get_by_username(username)
        assert (user.identity, user.email) == (pages.sub, pages.email)
        console.check_clean()

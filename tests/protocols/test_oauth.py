"""OAuth for agents, end to end on the local stack: an agent written with codeshot.sdk
whose Func reads a user's reading list at a third-party service, a real OAuth 2
authorization server on loopback (tests/oauth_provider.py), and a browser that follows
the link the paused query asks the user to open (the platform's, which binds the flow to
that browser with a cookie, then the provider's)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest

from codeshot.api.oauth import secure_cookie
from codeshot.auth.tokens import agent_token_claims
from codeshot.cli import main
from codeshot.models import MessageType
from codeshot.sdk import CodeShotAgent, Message, OAuthHandler, OAuthParams
from tests.oauth_provider import Provider, continue_from_page, origin
from tests.protocols.conftest import new_account, new_user, register_served

READER_FEW_SHOTS = """
Q: What is on my reading list?
Ask Func[reading_list]: all
Func[reading_list] says: Dune, Emma
A: Your reading list: Dune, Emma.
"""
QUESTION = "What is on my reading list?"
URL = re.compile(r"https?://\S+")


@pytest.fixture(scope="module")
def provider(stack):
    provider = Provider("reader-client", "reader-secret",
                        stack.settings.api_url.rstrip("/") + "/api/oauth/callback")
    provider.url = provider.start()
    yield provider
    provider.stop()


def reader_client(provider) -> OAuthParams:
    """The agents' OAuth client at the test's provider."""
    return OAuthParams("reader-client", "reader-secret", provider.url + "/authorize",
                       provider.url + "/token", ["books.read"])


def reader_agent(provider) -> CodeShotAgent:
    """Its Func reads the user's books with the user's own token."""
    agent = CodeShotAgent("I read your reading list at Books.", READER_FEW_SHOTS,
                          oauth_params=reader_client(provider))

    @agent.register_func
    def reading_list(query: Message, oauth_handler: OAuthHandler) -> str:
        token = oauth_handler.require_token()
        reply = httpx.get(provider.url + "/books", headers={"Authorization": f"Bearer {token}"})
        reply.raise_for_status()
        return ", ".join(reply.json()["books"])

    return agent


@pytest.fixture(scope="module")
def reader(stack, provider) -> str:
    """local/reader."""
    return register_served(stack, reader_agent(provider), "reader",
                           description="Reads your reading list at Books.")


@pytest.fixture(scope="module")
def shelf(stack, provider) -> str:
    """local/shelf: a standalone agent answering with the user's books."""
    from codeshot.sdk import StandaloneAgent

    def handle_message(query: Message, oauth_handler: OAuthHandler) -> str:
        token = oauth_handler.require_token()
        reply = httpx.get(provider.url + "/books", headers={"Authorization": f"Bearer {token}"})
        return "On your shelf: " + ", ".join(reply.json()["books"])

    agent = StandaloneAgent(handle_message, oauth_params=reader_client(provider))
    return register_served(stack, agent, "shelf", url_field="query_url",
                           description="Shows the books on your shelf.")


def ask(stack, key: str, text: str, session: str | None = None,
        agent: str = "local/reader") -> tuple[str, dict]:
    """(session, terminal reply) of a query to ``agent`` ("" for the planner)."""
    response = httpx.post(f"{stack.api_url}/api/agents/{agent}".rstrip("/"),
                          json={"message": {"text": text}, "session": session},
                          headers={"Authorization": f"Bearer {key}"}, timeout=60)
    assert response.status_code == 200, response.text
    lines = [json.loads(line) for line in response.text.splitlines() if line.strip()]
    return response.headers["X-Codeshot-Session"], lines[-1]


def open_link(browser: httpx.Client, url: str) -> str:
    """Open the link and continue: where the platform sends the browser (the provider)."""
    opened = continue_from_page(browser, url)
    assert opened.status_code == 303, opened.text
    return opened.headers["Location"]


def consent(provider, browser: httpx.Client, url: str, user: str) -> str:
    """Open the link in ``browser`` and consent at the provider (signed in there as
    ``user``); returns the callback URL the provider sends the browser back to."""
    browser.cookies.set("user", user)  # the provider's session
    at_provider = open_link(browser, url)
    assert at_provider.startswith(provider.url + "/authorize?")
    assert "code_challenge=" in at_provider and "code_challenge_method=S256" in at_provider
    consent = browser.get(at_provider)
    assert consent.status_code == 302, consent.text
    return consent.headers["Location"]


def a_browser() -> httpx.Client:
    return httpx.Client(follow_redirects=False, timeout=60)


def authorize(provider, url: str, user: str) -> httpx.Response:
    """What the user's browser does: open the link, consent at the provider, and follow
    its redirect back to the platform's callback."""
    with a_browser() as browser:
        return browser.get(consent(provider, browser, url, user))


def answer_after(stack, session: str, after: int, timeout: float = 60) -> object:
    """The session's first answer (response or error) after its first ``after`` messages."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        messages = stack.services.sessions.all_messages(session)[after:]
        done = [m for m in messages if m.type in (MessageType.RESPONSE, MessageType.ERROR,
                                                  MessageType.AWAITING_INPUT)]
        if done:
            return done[0]
        time.sleep(0.2)
    raise AssertionError("the session did not answer")


def first_authorization(stack, provider, key: str, user: str, agent: str = "local/reader",
                        question: str = QUESTION) -> tuple[str, str]:
    """Ask, follow the URL the paused query asks for, wait for the answer;
    returns (session, answer text)."""
    session, paused = ask(stack, key, question, agent=agent)
    assert paused["type"] == "awaiting_input", paused
    (url,) = URL.findall(paused["message"]["text"])
    seen = len(stack.services.sessions.all_messages(session))
    back = authorize(provider, url, user)
    assert back.status_code == 200, back.text
    assert "You authorized" in back.text
    answer = answer_after(stack, session, seen)
    assert answer.type is MessageType.RESPONSE, answer.text
    return session, answer.text


def gql(stack, key: str, query: str) -> dict:
    response = httpx.post(f"{stack.api_url}/graphql", json={"query": query},
                          headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def user_id(stack, key: str) -> str:
    return stack.services.auth.user_for_api_key(key).user_id


def test_a_query_pauses_for_authorization_and_resumes_with_the_users_token(
        stack, provider, reader, capsys):
    alice = new_user(stack, "alice")
    session, answer = first_authorization(stack, provider, alice, "alice")
    assert answer == "Your reading list: Middlemarch, Ulysses."
    assert provider.reads[-1][0] == "alice"
    assert provider.grants == ["authorization_code"]
    # The session's trace shows the pause and the Func called again after it.
    kinds = [m.type for m in stack.services.sessions.all_messages(session)]
    assert MessageType.AWAITING_INPUT in kinds and kinds[-1] is MessageType.RESPONSE
    # Held: the next query needs no authorization.
    _, again = ask(stack, alice, QUESTION)
    assert again["message"]["text"] == "Your reading list: Middlemarch, Ulysses."
    stored = stack.services.oauth.get_token(user_id(stack, alice), reader)
    assert stored["access_token"] == provider.reads[-1][1]

    # A second user gets their own token, and their own books.
    bob = new_user(stack, "bob")
    _, bobs = first_authorization(stack, provider, bob, "bob")
    assert bobs == "Your reading list: Beloved, Solaris."
    assert provider.reads[-1][0] == "bob"
    bobs_token = stack.services.oauth.get_token(user_id(stack, bob), reader)
    assert bobs_token["access_token"] != stored["access_token"]
    # The token is sealed at rest, bound to its user and agent.
    item = stack.services.oauth.db.get_item(
        TableName=stack.services.oauth.table_name,
        Key={"pk": {"S": "USER#" + user_id(stack, bob)}, "sk": {"S": "AGENT#" + reader}},
    )["Item"]
    assert bobs_token["access_token"].encode() not in item["sealed"]["B"]

    # An expired token is refreshed by the agent before it is used.
    alice_id = user_id(stack, alice)
    stale = stack.services.oauth.get_token(alice_id, reader)
    stack.services.oauth.put_token(alice_id, reader, {**stale, "expires_at": time.time() - 5})
    _, refreshed = ask(stack, alice, QUESTION)
    assert refreshed["message"]["text"] == "Your reading list: Middlemarch, Ulysses."
    assert provider.grants[-1] == "refresh_token"
    fresh = stack.services.oauth.get_token(alice_id, reader)
    assert fresh["access_token"] != stale["access_token"]
    assert fresh["expires_at"] > time.time()
    assert provider.reads[-1] == ("alice", fresh["access_token"])
    # A refresh the provider refuses (that refresh token was rotated away, as if the grant
    # had been revoked there) asks the user to authorize again.
    stack.services.oauth.put_token(alice_id, reader, {**stale, "expires_at": time.time() - 5})
    _, refused = ask(stack, alice, QUESTION)
    assert refused["type"] == "awaiting_input", refused
    assert URL.search(refused["message"]["text"])
    stack.services.oauth.put_token(alice_id, reader, fresh)

    # The user sees which agents hold a token for them, and revokes one.
    grants = gql(stack, alice, "{ oauthGrants { agentId created modified } }")
    assert [g["agentId"] for g in grants["data"]["oauthGrants"]] == [reader]
    revoked = gql(stack, alice, 'mutation { revokeOAuthGrant(agentId: "local/reader") }')
    assert revoked == {"data": {"revokeOAuthGrant": True}}
    assert stack.services.oauth.get_token(alice_id, reader) is None
    assert gql(stack, alice, "{ oauthGrants { agentId } }")["data"]["oauthGrants"] == []
    again_revoked = gql(stack, alice, 'mutation { revokeOAuthGrant(agentId: "local/reader") }')
    assert again_revoked["errors"][0]["extensions"]["code"] == "NOT_FOUND"
    _, paused = ask(stack, alice, QUESTION)  # it must ask again
    assert paused["type"] == "awaiting_input"
    assert stack.services.oauth.get_token(user_id(stack, bob), reader) is not None  # bob's stays

    # The CLI lists and revokes the same way.
    target = ["--api-url", stack.api_url, "--api-key", bob]
    capsys.readouterr()
    assert main(["oauth", "list", *target]) == 0
    assert capsys.readouterr().out.startswith(reader + "\tauthorized ")
    assert main(["oauth", "revoke", reader, *target]) == 0
    assert stack.services.oauth.get_token(user_id(stack, bob), reader) is None
    assert main(["oauth", "list", *target]) == 0
    assert capsys.readouterr().out == (f"Revoked {reader}'s token: it must ask you to "
                                       "authorize it again\nNo agent holds an OAuth token of "
                                       "yours.\n")



def refused_with(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


def test_a_replayed_or_foreign_state_is_refused_and_changes_nothing(stack, provider, reader):
    carol = new_user(stack, "carol")
    _, paused = ask(stack, carol, QUESTION)
    (url,) = URL.findall(paused["message"]["text"])
    with a_browser() as browser:
        callback = consent(provider, browser, url, "alice")  # alice's code, carol's flow
        forged = re.sub(r"state=[^&]+", "state=" + "x" * 43, callback)
        refused_with(browser.get(forged), 400, "OAUTH_STATE_INVALID")
        assert stack.services.oauth.get_token(user_id(stack, carol), reader) is None

        assert browser.get(callback).status_code == 200  # the real one, once
        stored = stack.services.oauth.get_token(user_id(stack, carol), reader)
        granted = stack.services.oauth.grants(user_id(stack, carol))
        exchanges = len(provider.tokens)
        refused_with(browser.get(callback), 400, "OAUTH_STATE_INVALID")
        in_a_browser = browser.get(callback, headers={"Accept": "text/html"})
        refused_with(browser.get(url), 400, "OAUTH_STATE_INVALID")  # the link is used up too
    assert in_a_browser.status_code == 400
    assert in_a_browser.headers["content-type"].startswith("text/html")
    assert "Not authorized" in in_a_browser.text and "(OAUTH_STATE_INVALID)" in in_a_browser.text
    assert stored is not None and len(provider.codes) == 0  # the code was used, once
    # The replays exchanged nothing and rewrote nothing.
    assert len(provider.tokens) == exchanges
    assert stack.services.oauth.grants(user_id(stack, carol)) == granted


def test_a_callback_in_another_browser_is_refused_and_writes_nothing(stack, provider, reader):
    """Login CSRF: the callback (the code and the state) opened in a browser that did not
    open the link, without the platform's cookie or with another one; the link opened
    in a second browser. Each is refused; the user's own browser then finishes."""
    judy = new_user(stack, "judy")
    session, paused = ask(stack, judy, QUESTION)
    (url,) = URL.findall(paused["message"]["text"])
    seen = len(stack.services.sessions.all_messages(session))
    exchanges = len(provider.tokens)
    with a_browser() as users, a_browser() as other:
        callback = consent(provider, users, url, "carol")
        assert users.cookies["codeshot_oauth"]
        refused_with(other.get(callback), 403, "OAUTH_BROWSER_MISMATCH")
        other.cookies.set("codeshot_oauth", "another browser's cookie")
        refused_with(other.get(callback), 403, "OAUTH_BROWSER_MISMATCH")
        page = other.get(callback, headers={"Accept": "text/html"})
        assert page.status_code == 403 and "(OAUTH_BROWSER_MISMATCH)" in page.text
        refused_with(other.get(url), 403, "OAUTH_BROWSER_MISMATCH")  # the user opened it
        # Nothing was exchanged, stored or resumed.
        assert len(provider.tokens) == exchanges
        assert stack.services.oauth.get_token(user_id(stack, judy), reader) is None
        assert len(stack.services.sessions.all_messages(session)) == seen

        back = users.get(callback)
    assert back.status_code == 200 and "You authorized" in back.text
    assert answer_after(stack, session, seen).text == "Your reading list: Emma."


def test_an_attackers_link_opened_in_a_victims_browser_binds_nothing(stack, provider, reader):
    """Account-linking CSRF: mallory gets a link for her own query and has victor's
    browser open it (victor is signed in at the provider, which may skip its consent
    screen). The page names mallory's account and binds nothing; a form posted from
    another site is refused; a link preview's fetch binds nothing either."""
    mallory = new_user(stack, "mallory")
    _, paused = ask(stack, mallory, QUESTION)
    (url,) = URL.findall(paused["message"]["text"])
    with a_browser() as victors:
        page = victors.get(url, headers={"Accept": "text/html"})
        assert page.status_code == 200
        assert "the codeshot account <b>mallory</b>" in page.text
        assert "local/reader" in page.text and "Continue to 127.0.0.1" in page.text
        assert page.headers["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert "set-cookie" not in page.headers
        state = re.findall(r'name="state" value="([^"]+)"', page.text)[0]
        for headers in ({"Origin": "https://evil.example"}, {}):  # another site; no Origin
            posted = victors.post(f"{origin(url)}/api/oauth/start", data={"state": state},
                                  headers=headers)
            refused_with(posted, 403, "OAUTH_BROWSER_MISMATCH")
        assert "codeshot_oauth" not in victors.cookies
    httpx.get(url, timeout=30)  # a link preview, or any other fetch of the page
    # Nothing is bound: the owner of the query can still open it and finish.
    back = authorize(provider, url, "bob")
    assert back.status_code == 200 and "You authorized" in back.text


def test_two_oauth_cookies_are_refused_not_guessed_between(stack, provider, reader):
    """Cookie tossing: another cookie of the same name (set by someone else for a wider
    path or a parent domain) comes with the user's."""
    nick = new_user(stack, "nick")
    _, paused = ask(stack, nick, QUESTION)
    (url,) = URL.findall(paused["message"]["text"])
    with a_browser() as browser:
        callback = consent(provider, browser, url, "bob")
        mine = browser.cookies["codeshot_oauth"]
        for cookies in (f"codeshot_oauth=attackers; codeshot_oauth={mine}",
                        f"codeshot_oauth={mine}; codeshot_oauth=attackers"):
            tossed = httpx.get(callback, timeout=30, headers={"Cookie": cookies})
            refused_with(tossed, 403, "OAUTH_BROWSER_MISMATCH")
        assert stack.services.oauth.get_token(user_id(stack, nick), reader) is None
        assert browser.get(callback).status_code == 200  # the user's own still finishes


def test_the_links_cookie_is_http_only_lax_and_lives_as_long_as_a_flow(stack, provider, reader):
    _, paused = ask(stack, new_user(stack, "kate"), QUESTION)
    (url,) = URL.findall(paused["message"]["text"])
    with a_browser() as browser:
        opened = continue_from_page(browser, url)
    assert opened.status_code == 303
    cookie = opened.headers["set-cookie"]
    assert cookie.startswith("codeshot_oauth=")
    attributes = {a.strip().lower() for a in cookie.split(";")[1:]}
    assert {"httponly", "samesite=lax", "path=/api/oauth/",
            f"max-age={stack.settings.oauth_state_seconds}"} <= attributes
    assert "secure" not in attributes  # plain http on loopback: the local stack


def test_a_denied_authorization_is_a_clear_error(stack, provider, reader):
    dave = new_user(stack, "dave")
    _, paused = ask(stack, dave, QUESTION)
    (url,) = URL.findall(paused["message"]["text"])
    state = re.search(r"state=([^&]+)", url).group(1)
    with a_browser() as browser:
        open_link(browser, url)
        denied = browser.get(f"{stack.api_url}/api/oauth/callback",
                             params={"state": state, "error": "access_denied"})
    assert denied.status_code == 502
    assert denied.json()["error"]["code"] == "OAUTH_FAILED"
    assert "access_denied" in denied.json()["error"]["message"]
    assert stack.services.oauth.get_token(user_id(stack, dave), reader) is None


def test_agents_need_a_users_session_token_for_oauth(stack, reader):
    anonymous = stack.services.auth.agent_token(reader, None, None)
    refused = httpx.post(f"{stack.api_url}/api/oauth/authorizations",
                         json={"authUri": "https://auth.example/o", "clientId": "c"},
                         headers={"Authorization": f"Bearer {anonymous}"}, timeout=30)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "FORBIDDEN"
    assert httpx.get(f"{stack.api_url}/api/oauth/token", timeout=30).status_code == 401
    user_id_ = user_id(stack, new_user(stack, "ivan"))
    token = stack.services.auth.agent_token(reader, user_id_, "s_1")
    for body in ({"authUri": "ftp://auth.example/o", "clientId": "c"},
                 {"authUri": "https://auth.example/o", "clientId": ""},
                 {"authUri": "https://auth.example/o", "clientId": "c", "scopes": ["a b"]},
                 {"authUri": "https://auth.example/o", "clientId": "c", "scopes": ["x" * 201]}):
        bad = httpx.post(f"{stack.api_url}/api/oauth/authorizations", json=body,
                         headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "INVALID_INPUT", body
    stored = httpx.put(f"{stack.api_url}/api/oauth/token", json={"token": {"scope": "x"}},
                       headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert stored.status_code == 400 and stored.json()["error"]["code"] == "INVALID_INPUT"
    assert stack.services.oauth.grants(user_id_) == []  # nothing written, not even
    assert stack.services.usage.used("oauth", f"{user_id_}#{reader}", "minute") == 0  # a count


def test_an_agent_the_planner_asks_pauses_and_resumes_the_same_way(stack, provider, reader):
    erin = new_user(stack, "erin")
    session, answer = first_authorization(stack, provider, erin, "erin", agent="")
    assert "Walden, Kindred" in answer
    assert stack.services.sessions.get(session).frontend_agent_id != reader  # the planner's


def test_a_standalone_agent_is_asked_its_query_again_once_authorized(stack, provider, shelf):
    frank = new_user(stack, "frank")
    _, answer = first_authorization(stack, provider, frank, "frank", agent=shelf,
                                    question="Which books are on my shelf?")
    assert answer == "On your shelf: Persuasion"


def test_the_console_account_page_lists_authorized_agents_and_revokes_them(
        stack, provider, reader):
    grace = new_user(stack, "grace")
    first_authorization(stack, provider, grace, "grace")
    console = {"Authorization": f"Bearer {grace}", "HX-Request": "true"}
    page = httpx.get(f"{stack.api_url}/console/account", headers=console, timeout=30)
    assert page.status_code == 200
    assert "Authorized agents" in page.text and "<code>local/reader</code>" in page.text
    revoked = httpx.delete(f"{stack.api_url}/console/account/grants/local/reader",
                           headers=console, timeout=30)
    assert revoked.status_code == 200
    assert "Revoked local/reader&#39;s token" in revoked.text
    assert "No agent holds a token of yours." in revoked.text
    assert stack.services.oauth.get_token(user_id(stack, grace), reader) is None


def authorized_with_resume_failing(stack, provider, monkeypatch, fail: Callable[[], None]
                                   ) -> tuple[str, str, httpx.Response]:
    """A new user's query paused for authorization, authorized at the provider while the
    post that resumes the session ("I authorized ...") fails by ``fail()``: (their key,
    the session, the callback's page)."""
    _, key = new_account(stack, "ivan")
    session, paused = ask(stack, key, QUESTION)
    (url,) = URL.findall(paused["message"]["text"])
    db = stack.services.sessions.db
    write = db.transact_write_items

    def failing(**request: Any) -> Any:
        if "I authorized" in str(request):
            fail()
        return write(**request)

    monkeypatch.setattr(db, "transact_write_items", failing)
    back = authorize(provider, url, "alice")  # at the provider
    monkeypatch.undo()
    return key, session, back


def test_an_authorization_whose_resuming_post_is_not_confirmed_says_authorized(
        stack, provider, reader, monkeypatch):
    """The token is stored, but the post that resumes the session timed out (botocore's
    last resend): the page says the agent is authorized and that the conversation should
    go on by itself (the post may have landed, its copy queued: asking again at once could
    run the query twice), else to ask again (it said "Not authorized" and to send the
    post again under an idempotency key the user never saw)."""
    from botocore.exceptions import ReadTimeoutError

    def timed_out() -> None:
        raise ReadTimeoutError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com")

    ivan, session, back = authorized_with_resume_failing(stack, provider, monkeypatch,
                                                         timed_out)
    assert back.status_code == 200, back.text
    assert "You authorized" in back.text
    assert "Your conversation should continue where it paused in a moment; if it does " \
        "not, ask again" in back.text
    assert stack.services.oauth.get_token(user_id(stack, ivan), reader) is not None
    _, again = ask(stack, ivan, QUESTION, session=session)
    assert again["message"]["text"] == "Your reading list: Middlemarch, Ulysses."


def test_an_authorization_whose_resuming_post_is_throttled_says_authorized(
        stack, provider, reader, monkeypatch):
    """The token is stored, but the post that resumes the session is throttled through
    every send (refused, none unconfirmed): the page says the agent is authorized and to
    ask again in a moment (it answered JSON 429, and the retry it asked for found the
    state used up: "Not authorized")."""
    from botocore.exceptions import ClientError

    def throttled() -> None:
        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "slow"},
                           "ResponseMetadata": {"HTTPStatusCode": 400}}, "TransactWriteItems")

    ivan, session, back = authorized_with_resume_failing(stack, provider, monkeypatch,
                                                         throttled)
    assert back.status_code == 200, back.text
    assert "You authorized" in back.text
    assert "Your conversation could not continue (the platform is busy right now; retry " \
        "in a moment); ask it again in your conversation in a moment" in back.text, back.text
    assert stack.services.oauth.get_token(user_id(stack, ivan), reader) is not None
    posted = stack.services.sessions.all_messages(session)
    assert [m.type for m in posted][-1] is MessageType.AWAITING_INPUT  # nothing posted
    _, again = ask(stack, ivan, QUESTION, session=session)
    assert again["message"]["text"] == "Your reading list: Middlemarch, Ulysses."


def test_an_authorization_whose_resuming_post_is_over_the_daily_quota_names_the_limit(
        stack, provider, reader):
    """The token is stored, but the post that resumes the session is over the user's
    daily query limit: the page names the limit and its reset, to ask again then (it
    said only to ask again, which the same limit refuses)."""
    user, ivan = new_account(stack, "ivan")
    session, paused = ask(stack, ivan, QUESTION)
    (url,) = URL.findall(paused["message"]["text"])
    stack.services.users.set_limits(user.user_id, 1, None)  # the question's query was it
    back = authorize(provider, url, "alice")
    assert back.status_code == 200, back.text
    assert "You authorized" in back.text
    assert re.search(r"Your conversation could not continue \(daily query limit of 1 per day "
                     r"reached; resets at [0-9T:.+-]+\); ask it again in your conversation "
                     r"once it resets", back.text), back.text
    assert stack.services.oauth.get_token(user.user_id, reader) is not None
    posted = stack.services.sessions.all_messages(session)
    assert [m.type for m in posted][-1] is MessageType.AWAITING_INPUT  # still paused


def test_a_fixie_style_func_answers_with_the_link_and_the_user_asks_again(stack, provider):
    """fixie-examples' pattern: `user_token()`, else the link as the Func's result; the
    session does not pause, so the callback stores the token and the user asks again."""

    agent = CodeShotAgent("I read your reading list at Books.", READER_FEW_SHOTS,
                          oauth_params=reader_client(provider))

    @agent.register_func
    def reading_list(query, oauth_handler) -> str:
        token = oauth_handler.user_token()
        if token is None:
            return oauth_handler.get_authorization_url()
        reply = httpx.get(provider.url + "/books", headers={"Authorization": f"Bearer {token}"})
        return ", ".join(reply.json()["books"])

    register_served(stack, agent, "fixiereader", description="Fixie style.")

    heidi = new_user(stack, "heidi")
    session, answered = ask(stack, heidi, QUESTION, agent="local/fixiereader")
    assert answered["type"] == "response", answered  # the link is the Func's result
    (url,) = URL.findall(answered["message"]["text"])
    back = authorize(provider, url.rstrip("."), "heidi")
    assert back.status_code == 200 and "Ask it again in your conversation" in back.text
    _, again = ask(stack, heidi, QUESTION, session=session, agent="local/fixiereader")
    assert again["message"]["text"] == "Your reading list: Orlando, Nostromo."


def test_deleting_an_agent_deletes_its_users_tokens_and_a_new_one_inherits_none(
        stack, provider):
    agent_id = register_served(stack, reader_agent(provider), "lender",
                               description="Lends your reading list to Books.")
    liam, mia = new_user(stack, "liam"), new_user(stack, "mia")
    first_authorization(stack, provider, liam, "dave", agent=agent_id)
    _, paused = ask(stack, mia, QUESTION, agent=agent_id)  # mia's flow, still open
    (mias_link,) = URL.findall(paused["message"]["text"])
    assert stack.services.oauth.get_token(user_id(stack, liam), agent_id) is not None

    owner = stack.state["api_key"]
    deleted = gql(stack, owner, 'mutation { deleteAgent(agentData: {handle: "lender"}) '
                                '{ agent { handle } } }')
    assert deleted == {"data": {"deleteAgent": {"agent": {"handle": "lender"}}}}
    assert stack.services.oauth.get_token(user_id(stack, liam), agent_id) is None
    assert gql(stack, liam, "{ oauthGrants { agentId } }")["data"]["oauthGrants"] == []
    refused_with(httpx.get(mias_link, timeout=60), 400, "OAUTH_STATE_INVALID")

    # A call of the deleted agent still in flight cannot store a token with its call
    # token, neither now nor once the same owner registers an agent of that handle again
    # (its token predates the new agent: it would hand liam's token to the new agent).
    claims = agent_token_claims(stack.services.auth.issuer, stack.settings.token_audiences(),
                                agent_id, user_id(stack, liam), "s_late", 300)
    late = stack.services.auth.sign({**claims, "iat": claims["iat"] - 2})
    for registered_again in (False, True):
        if registered_again:
            register_served(stack, reader_agent(provider), "lender", description="Lends again.")
        for stored in (httpx.put(f"{stack.api_url}/api/oauth/token",
                                 json={"token": {"access_token": "x"}},
                                 headers={"Authorization": f"Bearer {late}"}, timeout=30),
                       httpx.get(f"{stack.api_url}/api/oauth/token",
                                 headers={"Authorization": f"Bearer {late}"}, timeout=30)):
            refused_with(stored, 404, "NOT_FOUND")
    # The new agent inherits nothing and must ask liam anew.
    assert stack.services.oauth.get_token(user_id(stack, liam), agent_id) is None
    _, again = ask(stack, liam, QUESTION, agent=agent_id)
    assert again["type"] == "awaiting_input", again


def test_renaming_an_agent_deletes_its_users_tokens(stack, provider):
    """A token is sealed to its agent's id: the renamed agent asks anew, and none stays
    behind under the old id for an agent registered there later."""
    agent_id = register_served(stack, reader_agent(provider), "borrower",
                               description="Borrows your reading list from Books.")
    nina = user_id(stack, new_user(stack, "nina"))
    stack.services.oauth.put_token(nina, agent_id, {"access_token": "a"})  # as _oauth would
    renamed = gql(stack, stack.state["api_key"],
                  'mutation { updateAgent(agentData: {handle: "borrower", newHandle: '
                  '"borrowed"}) { agent { agentId } } }')
    assert renamed == {"data": {"updateAgent": {"agent": {"agentId": "local/borrowed"}}}}
    assert stack.services.oauth.get_token(nina, agent_id) is None
    assert stack.services.oauth.grants(nina) == []


def test_an_agent_renamed_onto_a_deleted_ones_id_is_new_to_its_calls_in_flight(stack,
                                                                               provider):
    """Renamed onto the id of an agent deleted a moment ago, an agent registered long ago
    is new at that id: the deleted agent's call still in flight cannot store or read its
    users' tokens."""
    registry = stack.services.registry
    gone = register_served(stack, reader_agent(provider), "ledger", description="Keeps ledgers.")
    old = registry.get(register_served(stack, reader_agent(provider), "archive",
                                       description="Archives."))
    registry.replace(old.replace(created=old.created - timedelta(hours=1)))
    pat = user_id(stack, new_user(stack, "pat"))
    claims = agent_token_claims(stack.services.auth.issuer, stack.settings.token_audiences(),
                                gone, pat, "s_late", 300)
    late = stack.services.auth.sign({**claims, "iat": claims["iat"] - 2})
    owner = stack.state["api_key"]
    gql(stack, owner, 'mutation { deleteAgent(agentData: {handle: "ledger"}) { agent { handle } } }')
    renamed = gql(stack, owner, 'mutation { updateAgent(agentData: {handle: "archive", '
                                'newHandle: "ledger"}) { agent { agentId } } }')
    assert renamed == {"data": {"updateAgent": {"agent": {"agentId": gone}}}}
    stored = httpx.put(f"{stack.api_url}/api/oauth/token", json={"token": {"access_token": "x"}},
                       headers={"Authorization": f"Bearer {late}"}, timeout=30)
    refused_with(stored, 404, "NOT_FOUND")
    assert stack.services.oauth.grants(pat) == []


def test_a_token_stored_before_the_agent_index_is_not_inherited_by_a_new_agent(stack, provider):
    """Tokens written before they carried ``agent_id`` are not in the deletion's index: a
    new agent of the same id still gets none of them, and the first read deletes it."""
    agent_id = register_served(stack, reader_agent(provider), "keeper",
                               description="Keeps your reading list from Books.")
    olga_key = new_user(stack, "olga")
    olga = user_id(stack, olga_key)
    oauth = stack.services.oauth
    key = {"pk": {"S": f"USER#{olga}"}, "sk": {"S": f"AGENT#{agent_id}"}}
    oauth.put_token(olga, agent_id, {"access_token": "old"})
    oauth.db.update_item(TableName=oauth.table_name, Key=key, UpdateExpression="REMOVE agent_id")
    owner = stack.state["api_key"]
    gql(stack, owner, 'mutation { deleteAgent(agentData: {handle: "keeper"}) { agent { handle } } }')
    assert oauth.get_token(olga, agent_id) == {"access_token": "old"}  # the index missed it
    register_served(stack, reader_agent(provider), "keeper", description="Keeps again.")

    call = stack.services.auth.agent_token(agent_id, olga, "s_new")
    read = httpx.get(f"{stack.api_url}/api/oauth/token",
                     headers={"Authorization": f"Bearer {call}"}, timeout=30)
    assert read.status_code == 404, read.text
    assert oauth.db.get_item(TableName=oauth.table_name, Key=key).get("Item") is None
    # A token the new agent stores is its own, and is read back.
    stored = httpx.put(f"{stack.api_url}/api/oauth/token", json={"token": {"access_token": "new"}},
                       headers={"Authorization": f"Bearer {call}"}, timeout=30)
    assert stored.json() == {"stored": True}
    read = httpx.get(f"{stack.api_url}/api/oauth/token",
                     headers={"Authorization": f"Bearer {call}"}, timeout=30)
    assert read.status_code == 200 and read.json()["access_token"] == "new"


@pytest.mark.parametrize(("api_url", "secure"), [
    ("https://abc.execute-api.us-east-1.amazonaws.com", True),
    ("http://127.0.0.1:8080", False), ("http://[::1]:8080", False),
    ("http://localhost:8080", False),
    ("http://10.0.0.5:8080", True),  # a browser drops it: refused, never sent in clear
])
def test_the_links_cookie_is_secure_but_on_plain_http_to_this_machine(api_url, secure):
    assert secure_cookie(api_url) is secure


def test_an_oauth_client_is_its_first_owners_alone(stack, provider, reader):
    """The callback is one for all agents: another owner's agent naming the reader's
    client would have a user authorize that app and receive the code. Refused, with
    nothing written; its owner's own client, and the reader's owner, still work."""
    def ask_for_link(agent_id: str, user: str, client_id: str) -> httpx.Response:
        token = stack.services.auth.agent_token(agent_id, user_id(stack, user), "s_1")
        return httpx.post(f"{stack.api_url}/api/oauth/authorizations",
                          json={"authUri": provider.url + "/authorize", "clientId": client_id,
                                "scopes": ["books.read"]},
                          headers={"Authorization": f"Bearer {token}"}, timeout=30)

    pia = new_user(stack, "pia")
    assert ask_for_link(reader, pia, "reader-client").status_code == 200
    new_user(stack, "nora")
    copycat = register_served(stack, reader_agent(provider), "copycat", owner="nora")
    refused_with(ask_for_link(copycat, pia, "reader-client"), 403, "FORBIDDEN")
    assert stack.services.usage.used("oauth", f"{user_id(stack, pia)}#{copycat}",
                                     "minute") == 0
    assert ask_for_link(copycat, pia, "nora-client").status_code == 200
    assert ask_for_link(reader, pia, "reader-client").status_code == 200
    # The claim is the host's: the same client id at another authorization server is not.
    other_host = provider.url.replace("127.0.0.1", "localhost")
    token = stack.services.auth.agent_token(copycat, user_id(stack, pia), "s_1")
    elsewhere = httpx.post(f"{stack.api_url}/api/oauth/authorizations",
                           json={"authUri": other_host + "/authorize",
                                 "clientId": "reader-client"},
                           headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert elsewhere.status_code == 200, elsewhere.text

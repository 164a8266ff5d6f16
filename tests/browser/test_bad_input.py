"""Bad input in the console: each a clear message in the page, nothing lost, nothing
run. A wrong key, a sign-in that expired mid-draft, a deleted session, a 10 MB message,
script tags in agent fields and messages, a deleted agent."""

from __future__ import annotations

from playwright.sync_api import expect

from codeshot.models import MessageType
from codeshot.usecases.registration import AgentFields, AgentRegistration, daily_agent_change
from codeshot.usecases.users import principal_of
from tests.browser.test_console import send, start_session

BOOKING = ["Q: Book a table\nAsk User: For how many people?\nUser says: 2\nA: Booked for 2."]


def test_a_wrong_key_is_refused_with_the_reason(console):
    console.open("/")
    page = console.page
    page.get_by_label("API key").first.fill("not-a-key")
    page.get_by_role("button", name="Sign in").first.click()
    error = page.locator("#signin-page form[data-signin] .form-error")
    expect(error).to_contain_text("UNAUTHENTICATED")
    # The reason alone, in words a person pasting a key can act on: not the error page
    # the sessions page would have been ("Something went wrong", its links), nor PyJWT's.
    expect(error).to_have_text("UNAUTHENTICATED that is not a key or token of this "
                               "platform: paste the whole API key as it was given")
    expect(error.get_by_role("link")).to_have_count(0)
    expect(page.get_by_role("navigation")).to_be_hidden()
    expect(page.get_by_label("API key").first).to_be_focused()
    assert page.evaluate("sessionStorage.getItem('codeshot.credential')") is None
    console.check_clean(expected_statuses=frozenset({401}))


def test_a_sign_in_that_expires_mid_draft_keeps_the_draft(console, new_user, stack):
    user, key = new_user()
    second_key = stack.services.auth.issue_api_key(user)
    console.sign_in(key)
    session = start_session(console)
    page = console.page
    page.get_by_label("Message").fill("Roll a d20, please")
    key_id = stack.services.auth.user_for_api_key(key).key_id
    stack.services.auth.revoke_api_key(user, key_id)  # as another tab or an admin would
    page.get_by_role("button", name="Send").click()

    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("API key has been revoked")
    expect(page.get_by_label("Message")).to_have_value("Roll a d20, please")  # kept
    assert stack.services.sessions.all_messages(session) == []  # nothing was posted
    dialog.get_by_label("API key").fill(second_key)
    dialog.get_by_role("button", name="Sign in", exact=True).click()
    expect(dialog).to_be_hidden()
    page.get_by_role("button", name="Send").click()
    expect(page.locator(".answer .msg-agent")).to_contain_text("You rolled", timeout=20_000)
    queries = [m for m in stack.services.sessions.all_messages(session)
               if m.type is MessageType.QUERY]
    assert [m.text for m in queries] == ["Roll a d20, please"]
    console.check_clean(expected_statuses=frozenset({401}))


def test_a_session_deleted_elsewhere(console, new_user, stack):
    _, key = new_user()
    console.sign_in(key)
    session = start_session(console)
    page = console.page
    page.get_by_label("Message").fill("Are you still there?")
    stack.services.sessions.delete(session, owner=stack.services.sessions.get(session).owner,
                                   purge_later=lambda: None)  # a small session: no purge
    page.get_by_role("button", name="Send").click()
    error = page.locator("#composer .form-error")
    expect(error).to_contain_text("NOT_FOUND")
    expect(error).to_contain_text(f"session {session} not found")
    expect(page.get_by_label("Message")).to_have_value("Are you still there?")
    console.check_clean(expected_statuses=frozenset({404}))


def test_a_10_mb_message_is_refused_before_it_is_sent(console, new_user, stack):
    user, key = new_user()
    console.sign_in(key)
    session = start_session(console)
    page = console.page
    page.get_by_label("Message").evaluate("(field) => { field.value = 'x'.repeat(10 * 1024 * 1024) }")
    page.get_by_role("button", name="Send").click()
    error = page.locator("#composer .form-error")
    expect(error).to_contain_text("This message is 10,485,760 characters long; the limit is 16,000")
    assert page.get_by_label("Message").evaluate("(field) => field.value.length") == 10 * 1024 * 1024

    # Past the page's own check, the platform refuses it too, and says why.
    page.get_by_label("Message").evaluate("(field) => { field.value = 'y'.repeat(16001) }")
    page.locator("#composer").evaluate("(form) => form.removeAttribute('data-max-length')")
    page.get_by_role("button", name="Send").click()
    expect(error).to_contain_text("INVALID_INPUT")
    expect(error).to_contain_text("message is 16001 characters; the limit is 16000")
    assert page.get_by_label("Message").evaluate("(field) => field.value.length") == 16001
    assert stack.services.sessions.all_messages(session) == []
    assert stack.services.usage.used("query", user.user_id) == 0  # nor charged
    console.check_clean(expected_statuses=frozenset({400}))


SCRIPT = "<script>window.pwned = 1</script><img src=x onerror=\"window.pwned = 2\">"


def test_script_tags_are_shown_as_text_and_never_run(console, new_user, stack):
    user, key = new_user()
    console.sign_in(key, "/console/agents/new")
    page = console.page
    page.get_by_label("Handle").fill("tricky")
    page.get_by_label("Name").fill("<b>Tricky</b>")
    page.get_by_label("Description").fill(SCRIPT)
    page.get_by_label("Base prompt").fill("I answer.")
    page.get_by_label("Few-shots").fill("Q: Hello\nA: Hi " + SCRIPT)
    page.get_by_role("button", name="Create agent").click()
    console.heading("<b>Tricky</b>")
    expect(page.locator(".description")).to_have_text(SCRIPT)
    expect(page.get_by_role("region", name="Few-shots")).to_contain_text("A: Hi " + SCRIPT)

    console.nav("Agents")
    console.heading("Agents")
    card = page.locator(".agent-card", has_text=f"{user.username}/tricky")
    expect(card.locator(".description")).to_have_text(SCRIPT)
    expect(card.get_by_role("link", name="<b>Tricky</b>")).to_be_visible()

    start_session(console)
    send(console, SCRIPT)
    expect(page.locator(".msg-user .text")).to_have_text(SCRIPT)
    page.locator(".answer .msg-agent, .answer .msg-error").wait_for(timeout=20_000)
    assert page.locator("#main img, #main b, #main script").count() == 0
    assert page.evaluate("window.pwned") is None
    console.check_clean()


def test_a_deleted_agent(console, new_user, stack):
    user, key = new_user()
    registration = AgentRegistration(stack.services, charge=daily_agent_change)
    owner = principal_of(user)
    registration.create(owner, "booking", AgentFields(
        name="Booking", base_prompt="I book tables.", few_shots=BOOKING, published=False))
    console.sign_in(key, f"/console/agents/{user.username}/booking")
    console.heading("Booking")
    page = console.page
    page.get_by_role("button", name="Chat with this agent").click()
    page.get_by_label("Message").wait_for()
    session_url = page.url

    registration.delete(owner, user.username, "booking")  # elsewhere, meanwhile
    send(console, "Book a table")
    error = page.locator(".answer .msg-error")
    expect(error).to_contain_text("NOT_FOUND", timeout=20_000)
    expect(error).to_contain_text(f"agent {user.username}/booking is no longer available")
    expect(page.locator(".msg-user .text")).to_have_text("Book a table")  # kept

    page.goto(console.url + f"/console/agents/{user.username}/booking")
    console.heading("Not found")
    expect(page.locator("#main .error")).to_contain_text(
        f"NOT_FOUND agent {user.username}/booking not found")
    page.goto(session_url)  # the session and its history are still there
    expect(page.locator(".msg-user .text")).to_have_text("Book a table")
    expect(page.locator(".answer .msg-error")).to_contain_text("NOT_FOUND")
    page.get_by_role("link", name=f"{user.username}/booking").click()
    console.heading("Not found")
    console.check_clean(expected_statuses=frozenset({404}))

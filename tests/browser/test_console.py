"""The web console in a real Chromium against the local stack, offline: sign in, the
gallery and the router, a planner session that rolls a real d20 with its trace, an agent
made from few-shots (a grammar error shown on its line first) whose question is answered
in place, API keys created once and revoked, GraphiQL, a phone-sized screen, keyboard use
and axe's accessibility rules."""

from __future__ import annotations

import re
import struct
import zlib
from base64 import b64encode
from pathlib import Path

import pytest
from playwright.sync_api import expect

from codeshot.errors import NotFound
from codeshot.local.http_server import HttpServer
from codeshot.local.stack import example_agent_dirs
from codeshot.models import MessageType
from codeshot.sdk.project import load_agent, read_config
from codeshot.usecases.messaging import EmbedUpload, Messaging
from codeshot.usecases.users import principal_of
from tests.browser.conftest import PHONE


def start_session(console, agent_label: str | None = None) -> str:
    """Start a session from the chat page; returns its handle (from the URL)."""
    console.nav("Chat")
    console.heading("Chat")
    if agent_label:
        console.page.get_by_label("Talk to").select_option(label=agent_label)
    console.page.get_by_role("button", name="Start", exact=True).click()
    console.page.get_by_label("Message").wait_for()
    return console.page.url.rsplit("/", 1)[-1]


def send(console, text: str) -> None:
    console.page.get_by_label("Message").fill(text)
    console.page.get_by_role("button", name="Send").click()


def test_sign_in_gallery_and_a_planner_session_rolling_a_real_d20(console, new_user, stack):
    _, key = new_user()
    console.open("/")
    expect(console.page.get_by_role("heading", name="Sign in")).to_be_visible()
    console.shot("sign-in")
    console.sign_in(key)
    console.heading("Chat")

    console.nav("Agents")
    console.heading("Agents")
    dice = console.page.locator(".agent-card", has_text="local/dice")
    expect(dice).to_contain_text("Rolls dice for games")
    expect(dice).to_contain_text("Roll a d20")  # a sample query
    console.page.get_by_label("A question").fill("Roll two dice for me")
    console.page.get_by_role("button", name="Ask the router").click()
    best = console.page.locator(".routes li").first
    expect(best).to_contain_text("local/dice")
    expect(best).to_contain_text("fits")
    expect(best).to_contain_text("matched “")
    console.page.get_by_label("A question").fill("What is the capital of Peru?")
    console.page.get_by_role("button", name="Ask the router").click()
    expect(console.page.locator("#route-results")).to_contain_text("none fits well enough")
    console.page.get_by_label("A question").fill("Roll two dice for me")
    console.page.get_by_role("button", name="Ask the router").click()
    expect(best).to_contain_text("fits")
    console.shot("agents")
    dice.get_by_role("link", name="Dice").click()
    console.heading("Dice")
    few_shots = console.page.get_by_role("region", name="Few-shots")
    expect(few_shots).to_contain_text("Ask Func[roll]: a d20")
    console.shot("agent")

    session = start_session(console)
    console.page.evaluate("window.stillTheSamePage = true")
    send(console, "Roll a d20")
    answer = console.page.locator(".turn .answer .msg-agent")
    expect(answer).to_contain_text(re.compile(r"You rolled \d+\."), timeout=20_000)
    rolled = int(re.search(r"You rolled (\d+)", answer.inner_text()).group(1))
    # The trace, folded under the answer, holds the Func's own result: the same number.
    trace = console.page.locator(".turn details.trace")
    expect(trace.locator("summary")).to_contain_text(re.compile(r"Trace: \d+ steps"))
    trace.locator("summary").click()
    expect(trace.locator(".step-func_call")).to_contain_text("Ask Func[roll]")
    expect(trace.locator(".step-result", has_text="Func[roll] says:")).to_contain_text(
        f"Func[roll] says: {rolled}")
    stored = stack.services.sessions.all_messages(session)
    func_says = [m.text for m in stored if m.type is MessageType.RESULT
                 and m.text.startswith("Func[roll] says:")]
    assert func_says == [f"Func[roll] says: {rolled}"] and 1 <= rolled <= 20
    assert console.page.evaluate("window.stillTheSamePage") is True  # no reload
    console.shot("session")

    console.nav("Chat")
    expect(console.page.locator(".sessions li")).to_have_count(1)
    console.shot("chat")
    console.check_clean()


FEW_SHOTS_WITH_AN_ERROR = """Q: Book a table for lunch
Ask User: For how many people?
User says: 2
A: Booked a table for 2 at lunch.

Q: Book a table for dinner
Ask User: For how many people?
A: Booked a table for 4."""


def test_an_agent_from_few_shots_with_its_grammar_error_then_its_question(console, new_user):
    user, key = new_user()
    console.sign_in(key, "/console/agents/new")
    console.heading("New agent")
    page = console.page
    # Private until published: a quick test agent was everyone's to see and use.
    expect(page.get_by_label("Published: every user can see and use it")).not_to_be_checked()
    page.get_by_label("Handle").fill("booking")
    page.get_by_label("Name").fill("Table booking")
    page.get_by_label("Description").fill("Books restaurant tables.")
    page.get_by_label("Base prompt").fill("I book restaurant tables.")
    page.get_by_label("Few-shots").fill(FEW_SHOTS_WITH_AN_ERROR)
    page.get_by_role("button", name="Create agent").click()

    # Few-shot 2, line 3 is line 8 of what was typed: shown there, the text kept.
    bad = page.locator(".lines li.bad")
    expect(bad).to_have_attribute("value", "8")
    expect(bad).to_contain_text("A: Booked a table for 4.")
    expect(page.locator("#agent-error")).to_contain_text("few-shot 2, line 3")
    expect(page.get_by_label("Few-shots")).to_have_value(FEW_SHOTS_WITH_AN_ERROR)
    expect(page.get_by_label("Few-shots")).to_be_focused()
    assert page.evaluate("document.activeElement.selectionStart") == \
        FEW_SHOTS_WITH_AN_ERROR.index("A: Booked a table for 4.")
    console.shot("agent-form-error")

    fixed = FEW_SHOTS_WITH_AN_ERROR.replace("people?\nA: Booked a table for 4.",
                                            "people?\nUser says: 4\nA: Booked a table for 4.")
    page.get_by_label("Few-shots").fill(fixed)
    page.get_by_role("button", name="Create agent").click()
    console.heading("Table booking")
    expect(page.get_by_role("status")).to_contain_text(f"Created {user.username}/booking.")
    expect(page.locator("main")).to_contain_text("private")

    page.get_by_role("button", name="Chat with this agent").click()
    page.get_by_label("Message").wait_for()
    send(console, "Book a table for dinner")
    question = page.locator(".msg-ask")
    expect(question).to_contain_text("For how many people?", timeout=20_000)
    page.get_by_label("Your answer").fill("3")
    page.get_by_role("button", name="Answer").click()
    expect(page.locator(".turn").nth(1).locator(".msg-agent")).to_contain_text(
        "Booked a table", timeout=20_000)
    expect(page.get_by_label("Your answer")).to_have_count(0)  # answered: the form is gone
    console.shot("ask-user")
    console.check_clean(expected_statuses=frozenset({422}))  # the refused few-shots


def test_keys_are_shown_once_and_a_revoked_key_is_refused(console, new_user):
    _, key = new_user()
    console.sign_in(key, "/console/account")
    console.heading("Account")
    page = console.page
    expect(page.locator("#quota-text")).to_contain_text(re.compile(r"0 of [\d,]+ used;\s+resets .+ \(in \d+"))
    expect(page.locator("#tokens-text")).to_contain_text(re.compile(r"^0 of [\d,]+ used"))
    expect(page.locator("#keys table.keys tbody tr")).to_have_count(1)
    expect(page.locator("#keys table.keys")).to_contain_text("this browser")

    page.get_by_role("button", name="Create a key").click()
    new_key = page.get_by_label(re.compile("Your new API key")).input_value()
    assert new_key.count(".") == 2 and new_key != key
    expect(page.locator("#keys table.keys tbody tr")).to_have_count(2)
    console.shot("account")

    page.on("dialog", lambda dialog: dialog.accept())
    current = page.locator("#keys table.keys tbody tr", has_text="this browser")
    current.get_by_role("button", name=re.compile("^Revoke")).click()
    expect(page.locator("#keys .notice")).to_contain_text("It was the key this browser")
    expect(page.locator("#keys table.keys tbody tr")).to_have_count(1)
    expect(page.get_by_label(re.compile("Your new API key"))).to_have_count(0)  # shown once
    expect(page.locator("#keys table.keys")).to_contain_text("your last key")  # it stays
    expect(page.get_by_role("button", name=re.compile("^Revoke"))).to_have_count(0)

    console.nav("Agents")  # the next request, with the revoked key
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("API key has been revoked")
    expect(dialog).to_contain_text("UNAUTHENTICATED")
    expect(page.get_by_role("heading", name="Account", level=1)).to_be_visible()  # page kept
    dialog.get_by_label("API key").fill(new_key)
    dialog.get_by_role("button", name="Sign in", exact=True).click()
    expect(dialog).to_be_hidden()
    console.nav("Agents")
    console.heading("Agents")
    console.check_clean(expected_statuses=frozenset({401}))


def test_graphiql_offline_with_the_key_prefilled(console, new_user):
    user, key = new_user()
    console.sign_in(key)
    console.page.get_by_role("link", name="GraphiQL").click()
    page = console.page
    page.locator(".graphiql-container").wait_for()
    expect(page.locator(".graphiql-editor-tool")).to_contain_text(f"Bearer {key[:20]}")
    page.locator(".graphiql-query-editor .CodeMirror").click()
    page.keyboard.press("Control+A")
    page.keyboard.type("{ user { username dailyQuotaResetsAt } ")
    page.locator(".graphiql-execute-button").click()
    expect(page.locator(".result-window")).to_contain_text(user.username)
    console.shot("graphiql", full_page=False)
    # GraphiQL keeps no copy of the key beyond the tab, and signing out forgets it.
    assert key not in page.evaluate("JSON.stringify(localStorage)")
    assert key in page.evaluate("JSON.stringify(sessionStorage)")
    page.go_back()
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    left = page.evaluate("JSON.stringify(sessionStorage)")
    assert key not in left and "graphiql" not in left
    console.check_clean()


def test_a_phone_sized_screen(phone, new_user):
    _, key = new_user()
    phone.sign_in(key)
    start_session(phone)
    send(phone, "Roll 3d8")
    expect(phone.page.locator(".answer .msg-agent")).to_contain_text("You rolled",
                                                                    timeout=20_000)
    for path, heading in (("/console/", "Chat"), ("/console/agents", "Agents"),
                          ("/console/account", "Account")):
        phone.page.goto(phone.url + path)
        phone.heading(heading)
        width = phone.page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], f"{path} scrolls sideways ({width}px)"
    for heading in ("Agents", "Chat"):  # back through the history, each page whole again
        phone.page.go_back()
        phone.heading(heading)
    phone.page.go_back()
    phone.page.locator(".answer .msg-agent").wait_for()
    assert phone.page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    phone.shot("phone-session")
    phone.check_clean()


def test_keyboard_only(console, new_user):
    _, key = new_user()
    console.open("/")
    page = console.page
    expect(page.get_by_label("API key").first).to_be_focused()
    page.keyboard.type(key)
    page.keyboard.press("Enter")
    console.heading("Chat")
    page.get_by_label("Talk to").focus()
    page.keyboard.press("Tab")  # the name
    page.keyboard.press("Tab")  # Start
    page.keyboard.press("Enter")
    # The new page's heading takes the focus once its swap settles, and a keyboard user
    # goes on from there.
    expect(page.locator("#chat-title")).to_be_focused()
    message = page.get_by_label("Message")
    message.focus()
    page.keyboard.type("Roll a d20")
    expect(message).to_have_value("Roll a d20")
    page.keyboard.press("Control+Enter")
    expect(page.locator(".answer .msg-agent")).to_contain_text("You rolled", timeout=20_000)
    expect(message).to_be_focused()
    expect(message).to_have_value("")
    summary = page.locator("details.trace summary")
    summary.focus()
    page.keyboard.press("Enter")
    expect(page.locator("details.trace")).to_have_attribute("open", "")
    console.check_clean()


def start_settling_slowly(console, new_user, settle_ms: int):
    """A new user's session started from the Chat page, its page's swap settling only
    after ``settle_ms`` (as on a busy machine); the Message field, there before then."""
    _, key = new_user()
    console.sign_in(key)
    console.nav("Chat")
    console.heading("Chat")
    console.page.evaluate(f"htmx.config.defaultSettleDelay = {settle_ms}")
    console.page.get_by_role("button", name="Start", exact=True).click()
    return console.page.get_by_label("Message")


def test_ctrl_enter_before_the_session_page_settles_still_sends_through_htmx(
        console, new_user):
    """htmx wires a swapped-in form only once the swap settles (20 ms later; later on a
    busy machine, simulated here with a 3 s settle). Ctrl+Enter in between used to submit
    the form natively: a GET of the page with the message in its URL, and no message."""
    page = console.page
    message = start_settling_slowly(console, new_user, 3000)
    message.fill("Roll a d20")
    page.keyboard.press("Control+Enter")
    page.evaluate("htmx.config.defaultSettleDelay = 20")
    expect(page.locator(".answer .msg-agent")).to_contain_text("You rolled", timeout=20_000)
    assert not [url for url in console.urls if "d20" in url]
    console.check_clean()


def test_a_field_taken_before_the_page_settles_keeps_the_focus(console, new_user):
    """The heading takes the focus when a page settles, but not from a field the user is
    already typing in (on a busy machine, simulated with a 10 s settle, a CI run's typed
    text went to the heading)."""
    page = console.page
    message = start_settling_slowly(console, new_user, 10_000)
    message.focus()
    page.keyboard.type("Roll")
    main = page.locator("#main")
    expect(main).to_have_class(re.compile(r"\bhtmx-settling\b"))
    expect(main).not_to_have_class(re.compile(r"\bhtmx-settling\b"), timeout=20_000)
    page.keyboard.type(" a d20")
    expect(message).to_have_value("Roll a d20")
    expect(message).to_be_focused()
    page.evaluate("htmx.config.defaultSettleDelay = 20")
    console.check_clean()


def test_axe_finds_no_accessibility_violations(console, new_user):
    _, key = new_user()
    console.open("/")
    page = console.page
    violations = console.axe_violations
    assert violations() == []  # the sign-in page
    console.sign_in(key)
    session = start_session(console)
    send(console, "Roll a d20")
    page.locator(".answer .msg-agent").wait_for(timeout=20_000)
    page.locator("details.trace summary").click()
    pages = {f"/console/sessions/{session}": "session", "/console/": "Chat",
             "/console/agents": "Agents", "/console/agents/local/dice": "Dice",
             "/console/agents/new": "New agent", "/console/account": "Account"}
    for path, heading in pages.items():
        if heading != "session":
            page.goto(console.url + path)
            console.heading(heading)
        assert violations() == [], path
    console.check_clean()


def test_an_agent_from_a_url_edited_refreshed_chatted_with_and_deleted(console, new_user, stack):
    user, key = new_user()
    # The example dice agent, served for this user's agent id (it checks the platform's
    # tokens name it).
    dice = next(d for d in example_agent_dirs() if d.name == "dice")
    app = load_agent(dice, read_config(dice)).app(
        stack.settings.replace(agent_id=f"{user.username}/mydice"))
    server = HttpServer(app, "127.0.0.1", 0)
    dice_url = server.start()
    try:
        _agent_from_a_url(console, stack, user, key, dice_url)
    finally:
        server.stop()


def _agent_from_a_url(console, stack, user, key: str, dice_url: str) -> None:
    console.sign_in(key, "/console/agents/new")
    console.heading("New agent")
    page = console.page
    page.get_by_label("Handle").fill("mydice")
    page.get_by_label("Query URL", exact=True).fill(dice_url)
    page.get_by_role("button", name="Create agent").click()
    console.heading("mydice")  # no name given: the handle
    expect(page.get_by_role("status")).to_contain_text(f"Created {user.username}/mydice.")
    expect(page.locator(".facts")).to_contain_text("Code Shot")  # its handshake was read

    page.get_by_role("link", name="Edit").click()
    console.heading("mydice")
    page.get_by_label("Name").fill("My dice")
    page.get_by_role("button", name="Save").click()
    console.heading("My dice")
    expect(page.get_by_role("status")).to_contain_text(f"Saved {user.username}/mydice.")
    page.get_by_role("button", name="Refresh handshake").click()
    expect(page.get_by_role("status")).to_contain_text("Read the agent's handshake again.")
    console.heading("My dice")

    page.get_by_role("button", name="Chat with this agent").click()
    page.get_by_label("Message").wait_for()
    expect(page.locator(".chat-head .meta")).to_contain_text(f"{user.username}/mydice")
    send(console, "Roll 2d6")
    expect(page.locator(".answer .msg-agent")).to_contain_text("You rolled", timeout=20_000)
    session = page.url.rsplit("/", 1)[-1]

    page.on("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete session").click()
    console.heading("Chat")
    expect(page.get_by_role("status")).to_contain_text(f"Deleted session {session}.")
    expect(page.locator(".sessions li")).to_have_count(0)
    with pytest.raises(NotFound):
        stack.services.sessions.get(session)
    assert stack.services.sessions.all_messages(session) == []  # its messages went with it

    page.goto(console.url + f"/console/agents/{user.username}/mydice")
    console.heading("My dice")
    page.get_by_role("button", name="Delete agent").click()
    console.heading("Agents")
    expect(page.get_by_role("status")).to_contain_text(f"Deleted {user.username}/mydice.")
    expect(page.locator(".agent-card", has_text=f"{user.username}/mydice")).to_have_count(0)
    console.check_clean()


def gradient_png(width: int, height: int) -> bytes:
    """A small RGB PNG, made here (zlib and the format's chunks): a real image to show."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    rows = b"".join(b"\x00" + b"".join(bytes((x * 255 // width, y * 255 // height, 160))
                                        for x in range(width)) for y in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
            + chunk(b"IEND", b""))


def test_embeds_inline_or_as_downloads(console, new_user, stack):
    user, key = new_user()
    console.sign_in(key)
    session = start_session(console)
    text = "Shopping list:\n<script>window.pwned = 1</script>\n- milk"
    picture = b64encode(gradient_png(96, 48)).decode()
    uploads = [EmbedUpload("photo", "image/png", content_base64=picture),
               EmbedUpload("list", "text/plain", content_base64=b64encode(text.encode()).decode()),
               EmbedUpload("data", "application/octet-stream",
                           content_base64=b64encode(bytes(range(256))).decode())]
    Messaging(stack.services).post(principal_of(user), session, "Here are my files",
                                   embeds=uploads)  # as the API or the SDK would send them
    page = console.page
    page.reload()
    attachments = page.get_by_role("list", name="Attachments")
    image = attachments.get_by_role("img", name="Image photo")
    expect(image).to_be_visible()
    page.wait_for_function("(img) => img.complete && img.naturalWidth === 96",
                           arg=image.element_handle())  # its bytes, from the platform's S3
    expect(attachments.locator("pre.embed-text")).to_have_text(text)  # shown as text
    download = attachments.get_by_role("link", name="Download #data")
    expect(attachments).to_contain_text("application/octet-stream, 256 bytes")
    with page.expect_download() as got:
        download.click()
    assert Path(got.value.path()).read_bytes() == bytes(range(256))
    assert page.evaluate("window.pwned") is None
    page.locator(".answer .msg-agent, .answer .msg-error").wait_for(timeout=20_000)
    console.shot("embeds")
    console.check_clean()


def test_the_gallery_and_the_sessions_list_page_past_fifty(console, new_user, stack):
    """Both lists stopped at 50 with no way on: the 51st published agent, the caller's
    own agent past them, and the caller's older sessions were out of reach."""
    from codeshot.usecases.registration import AgentFields, AgentRegistration
    from codeshot.usecases.sessions import create_session

    publisher, _ = new_user()
    user, key = new_user()
    registration = AgentRegistration(stack.services, charge=None)
    few_shots = ["Q: Hello\nA: Hi."]
    for n in range(55):
        registration.create(principal_of(publisher), f"a{n:02d}", AgentFields(
            published=True, base_prompt="I greet.", few_shots=few_shots))
    registration.create(principal_of(user), "zz-mine", AgentFields(
        published=False, base_prompt="I greet.", few_shots=few_shots))
    for n in range(55):
        create_session(stack.services, principal_of(user), name=f"trip {n:02d}")

    page = console.page
    console.sign_in(key, "/console/agents")
    console.heading("Agents")
    expect(page.locator(".agent-card", has_text=f"{user.username}/zz-mine")).to_be_visible()
    seen = set()
    while True:  # every one of the publisher's agents, each on one page only
        cards = page.locator(".agent-card", has_text=f"{publisher.username}/")
        found = {re.search(r"/(a\d\d)", t)[1] for t in cards.all_inner_texts()}
        assert not found & seen
        seen |= found
        more = page.get_by_role("link", name="More agents")
        if not more.count():
            break
        more.click()
        expect(page.locator(".agent-card", has_text=f"{publisher.username}/{min(found)}")
               ).to_have_count(0)
    assert seen == {f"a{n:02d}" for n in range(55)}

    console.nav("Chat")
    console.heading("Chat")
    first = page.locator(".sessions li").all_inner_texts()
    assert len(first) == 50 and "trip 54" in first[0]
    page.get_by_role("link", name="Older sessions").click()
    expect(page.get_by_role("link", name="trip 54")).to_have_count(0)
    rest = page.locator(".sessions li").all_inner_texts()
    assert [t.split("\n")[0] for t in rest] == [f"trip {n:02d}" for n in range(4, -1, -1)]
    assert page.get_by_role("link", name="Older sessions").count() == 0
    console.check_clean()

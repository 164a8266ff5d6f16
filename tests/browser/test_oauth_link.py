"""An agent's OAuth link in a real browser (Debian's chromium): its page names the
account, a form posted from elsewhere is refused by chromium's own Origin header, and
Continue binds the flow with a cookie that chromium sends back when the provider
redirects it to the callback; the paused query then resumes with the user's books."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.protocols.conftest import new_user, register_served
from tests.protocols.test_oauth import (  # noqa: F401 (provider: a fixture)
    QUESTION,
    URL,
    answer_after,
    ask,
    provider,
    reader_agent,
)


def test_a_browser_authorizes_an_agent_from_its_link(browser, stack, provider):  # noqa: F811
    agent_id = register_served(stack, reader_agent(provider), "reader",
                               description="Reads your reading list at Books.")
    key = new_user(stack, "ines")
    session, paused = ask(stack, key, QUESTION, agent=agent_id)
    (url,) = URL.findall(paused["message"]["text"])
    seen = len(stack.services.sessions.all_messages(session))

    context = browser.new_context()
    context.add_cookies([{"name": "user", "value": "alice", "url": provider.url}])
    page = context.new_page()
    try:
        page.goto(url)
        expect(page.get_by_role("heading", name="Authorize an agent")).to_be_visible()
        expect(page.locator("body")).to_contain_text("the codeshot account ines")
        state = page.locator('input[name="state"]').get_attribute("value")

        # The same form, submitted by a page that is not the platform's (Origin: null).
        elsewhere = context.new_page()
        elsewhere.set_content(
            f'<form method="post" action="{stack.api_url}/api/oauth/start">'
            f'<input type="hidden" name="state" value="{state}"><button>Go</button></form>')
        elsewhere.get_by_role("button", name="Go").click()
        expect(elsewhere.locator("body")).to_contain_text("(OAUTH_BROWSER_MISMATCH)")
        assert not [c for c in context.cookies() if c["name"] == "codeshot_oauth"]

        page.get_by_role("button", name=re.compile(r"^Continue to 127\.0\.0\.1")).click()
        expect(page.locator("body")).to_contain_text(f"You authorized {agent_id}")
        (cookie,) = [c for c in context.cookies() if c["name"] == "codeshot_oauth"]
        assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"
        assert cookie["path"] == "/api/oauth/"
    finally:
        context.close()
    assert answer_after(stack, session, seen).text == "Your reading list: Middlemarch, Ulysses."

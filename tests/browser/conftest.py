"""Browser tests: Debian's chromium driven by Playwright (through its executable path;
Playwright's own browser builds are never downloaded) against the local stack.

Every page runs with the network cut to everything but the platform: a route blocks any
request to another host, and each test ends by checking that nothing was blocked and
that the page logged no errors. Screenshots go to the test's directory; with
``UPDATE_SCREENSHOTS=1`` they are also written to docs/screenshots/ (the README shows
them), so a normal run never changes the tree.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from codeshot.usecases.users import create_user

CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]
REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "docs" / "screenshots"
AXE = REPO / "web" / "node_modules" / "axe-core" / "axe.min.js"
DESKTOP = {"width": 1180, "height": 860}
PHONE = {"width": 390, "height": 844}
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
# What Chromium logs when a request is answered with an error status: expected when a test
# sends bad input on purpose (it lists the statuses), an error everywhere else.
FAILED_LOAD = re.compile(r"Failed to load resource: the server responded with a status of (\d+)")


MISSING: list[Path] = []  # set when the browser is missing: the run's summary says so


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if MISSING:
        terminalreporter.section("BROWSER TESTS SKIPPED", sep="!", red=True, bold=True)
        terminalreporter.write_line(f"{MISSING[0]} is missing: the web console was not "
                                    "tested in a browser (apt-get install -y chromium)",
                                    red=True, bold=True)


# Per module: Playwright's sync API keeps an event loop running in this thread while it
# is open, which would break later tests that run their own (asyncio.run, Mangum).
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        MISSING.append(CHROMIUM)
        pytest.skip(f"!! BROWSER TESTS NOT RUN: {CHROMIUM} is missing (`make test` installs "
                    "Debian's chromium when it can: apt-get install -y chromium; or set "
                    "CHROMIUM to a Chromium binary)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                             args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@dataclass
class Console:
    """A browser tab on the console, with what it did that a test must know."""

    page: Any
    url: str
    shots: Path
    blocked: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)  # every request the page made
    keys: set[str] = field(default_factory=set)  # API keys typed in: never in a URL

    def open(self, path: str = "/") -> None:
        self.page.goto(self.url + path)

    def sign_in(self, key: str, path: str = "/") -> None:
        self.keys.add(key)
        self.open(path)
        self.page.get_by_label("API key").first.fill(key)
        self.page.get_by_role("button", name="Sign in").first.click()
        self.page.get_by_text("Signed in as").wait_for()
        self.page.locator("#main h1").wait_for()  # the page's content, loaded with the key

    def heading(self, text: str) -> None:
        """Wait for the page with this heading, and for its other requests (who is signed
        in): leaving a page mid-request aborts it, which htmx logs as an error."""
        self.page.get_by_role("heading", name=text, level=1).wait_for()
        self.settled()

    def settled(self) -> None:
        """Wait until htmx has no request in flight and no swap settling. A link to the
        page already shown finds its heading at once; Playwright's networkidle did not
        wait for its request either when it had not yet heard of it (a loaded machine)."""
        self.page.wait_for_function(
            "() => !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling')")

    def nav(self, name: str) -> None:
        self.page.get_by_role("navigation").get_by_role("link", name=name).click()

    def shot(self, name: str, full_page: bool = True) -> None:
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=full_page, animations="disabled")
        if os.environ.get("UPDATE_SCREENSHOTS") == "1":
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, SCREENSHOTS / path.name)

    def axe_violations(self) -> list[str]:
        """axe's WCAG 2.1 A and AA violations on the page as it is now."""
        self.page.evaluate(AXE.read_text())  # through the debugger: the CSP allows no injection
        found: list[str] = self.page.evaluate("""async () => (await axe.run(document, {
            runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}
        })).violations.map(v => v.id + ': ' + v.nodes.map(n => n.target.join(' ')).join(', '))""")
        return found

    def failed_statuses(self) -> list[int]:
        return [int(m.group(1)) for e in self.errors if (m := FAILED_LOAD.search(e))]

    def check_clean(self, expected_statuses: frozenset[int] = frozenset()) -> None:
        """Nothing left loopback, no key was ever in a URL, and the page logged no errors
        but the refusals the test provoked on purpose."""
        assert self.blocked == [], f"requests to other hosts: {self.blocked}"
        assert not [u for u in self.urls for k in self.keys if k in u], "a key in a URL"
        unexpected = [e for e in self.errors
                      if not ((m := FAILED_LOAD.search(e)) and int(m.group(1)) in expected_statuses)]
        assert unexpected == [], f"console errors: {unexpected}"


@pytest.fixture(scope="module")
def stack(live_stack_object: Any) -> Any:
    return live_stack_object


@pytest.fixture
def new_user(stack: Any) -> Any:
    """Makes a user of the local stack: returns (user, API key)."""
    def make(prefix: str = "web") -> tuple[Any, str]:
        from codeshot import ids

        name = f"{prefix}{ids.ulid().lower()[-8:]}"
        return create_user(stack.services, name)
    return make


def open_console(browser: Any, stack: Any, tmp_path: Path, viewport: dict[str, int]
                 ) -> Iterator[Console]:
    context = browser.new_context(viewport=viewport, locale="en-US", timezone_id="UTC",
                                  color_scheme="light")
    console = Console(context.new_page(), stack.api_url, tmp_path)

    def only_the_platform(route: Any) -> None:
        url = route.request.url
        console.urls.append(url)
        if url.startswith(("data:", "blob:")) or urlsplit(url).hostname in LOOPBACK:
            route.continue_()
        else:
            console.blocked.append(url)
            route.abort("blockedbyclient")

    context.route("**/*", only_the_platform)
    console.page.on("console", lambda m: console.errors.append(m.text) if m.type == "error"
                    else None)
    console.page.on("pageerror", lambda e: console.errors.append(f"uncaught: {e}"))
    yield console
    console.page.screenshot(path=str(tmp_path / "last.png"))  # to see where a failure left it
    context.close()


@pytest.fixture
def console(browser: Any, stack: Any, tmp_path: Path) -> Iterator[Console]:
    yield from open_console(browser, stack, tmp_path, DESKTOP)


@pytest.fixture
def phone(browser: Any, stack: Any, tmp_path: Path) -> Iterator[Console]:
    yield from open_console(browser, stack, tmp_path, PHONE)

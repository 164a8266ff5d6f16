"""The shared Funcs fixie_calc and fixie_http_get: asked by an agent that defines neither,
through real sessions (offline fewshot provider, agents and pages on loopback)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

import codeshot.sdk as fixieai
from codeshot.errors import InvalidInput, Timeout
from codeshot.runner.platform_funcs import LIBRARY, FuncContext
from tests.conftest import HANGING_DOMAIN
from tests.fixie.conftest import serving_pages
from tests.fixie.test_platform_funcs import ask
from tests.raw_server import raw_server

CALC_FEW_SHOTS = """
Q: Calculate 1.1 + 2.2 exactly
Ask Func[fixie_calc]: 1.1 + 2.2
Func[fixie_calc] says: 3.3
A: 1.1 + 2.2 is 3.3.
"""

READER_FEW_SHOTS = """
Q: What does http://example.com/tides say?
Ask Func[fixie_http_get]: http://example.com/tides
Func[fixie_http_get] says: High tide at 10:42.
A: The page says: High tide at 10:42.
"""

PAGE = b"""<!doctype html><html><head><title>Harbour tides</title>
<style>p { color: red }</style><script>document.write('no')</script></head>
<body><h1>Today</h1><p>High tide at <b>10:42</b>, low tide at 16:55.</p></body></html>"""


@pytest.fixture(scope="module")
def page_url() -> Iterator[str]:
    def page(path: str) -> tuple[str, bytes]:
        return "text/html; charset=utf-8", PAGE if path == "/tides" else b"x" * 3_000_000

    with serving_pages(page) as url:
        yield url


def test_calc_answers_an_agent_that_does_not_define_it(live, user, deploy):
    agent_id = deploy(fixieai.CodeShotAgent("I do sums.", CALC_FEW_SHOTS), "sums")
    reply, trace = ask(live, user, agent_id, "Calculate 0.1 + 2.2 exactly")
    said = [m["text"] for m in trace if m["text"].startswith("Func[fixie_calc] says:")]
    assert said == ["Func[fixie_calc] says: 2.3"], trace  # not 2.3000000000000003
    assert reply["text"] == "0.1 + 2.2 is 2.3."


def test_calc_answers_a_number_of_a_million_digits_in_scientific_notation(live, user, deploy):
    # Written out, 3e-999999 is a million characters: a reply nobody could store.
    agent_id = deploy(fixieai.CodeShotAgent("I do sums.", CALC_FEW_SHOTS), "tiny")
    reply, trace = ask(live, user, agent_id, "Calculate 1e-999999 + 2e-999999 exactly")
    said = [m["text"] for m in trace if m["text"].startswith("Func[fixie_calc] says:")]
    assert said == ["Func[fixie_calc] says: 3E-999999"], trace
    assert (reply["type"], reply["text"]) == ("response", "1e-999999 + 2e-999999 is 3E-999999.")


def test_http_get_reads_a_loopback_page_in_local_mode(live, user, deploy, page_url):
    agent_id = deploy(fixieai.CodeShotAgent("I read web pages.", READER_FEW_SHOTS), "reader")
    reply, trace = ask(live, user, agent_id, f"What does {page_url}/tides say?")
    said = next(m["text"] for m in trace if m["text"].startswith("Func[fixie_http_get] says:"))
    assert "Harbour tides" in said and "High tide at 10:42, low tide at 16:55." in said
    assert "color" not in said and "document.write" not in said  # no styles or scripts
    assert reply["type"] == "response"


def context(allow_loopback: bool) -> FuncContext:
    return FuncContext(time_zone=lambda: "UTC", embeds=None, llm=None,  # type: ignore[arg-type]
                       allow_loopback=allow_loopback)


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/", "http://10.0.0.8/", "http://[::1]/",
                                 "http://169.254.169.254/latest/meta-data/",
                                 "http://192.168.1.1/"])
def test_http_get_refuses_private_addresses_outside_local_mode(url):
    with pytest.raises(InvalidInput) as err:
        LIBRARY["fixie_http_get"](url, context(allow_loopback=False))
    assert err.value.message.endswith("address; refused"), err.value.message
    assert "loopback" in err.value.message or "not a public" in err.value.message


def test_http_get_of_a_name_that_does_not_resolve_is_input_the_model_can_correct():
    """Models make up domains: the model is told (INVALID_INPUT, it may ask again), not
    the query ended as an unreachable agent after three tries."""
    with pytest.raises(InvalidInput, match="does not resolve"):
        LIBRARY["fixie_http_get"]("http://tides.invalid/today", context(allow_loopback=False))


def test_http_get_of_a_name_whose_lookup_hangs_ends_with_the_querys_time(hanging_dns):
    """As a name that does not resolve (what the system resolver says when it gives up),
    by the query's deadline: the lookup held the runner for as long as it hung."""
    began = time.monotonic()
    with pytest.raises(InvalidInput, match="does not resolve") as err:
        LIBRARY["fixie_http_get"](f"http://tides.{HANGING_DOMAIN}/today", replace(
            context(allow_loopback=True), deadline=began + 1))
    took = time.monotonic() - began
    assert err.value.code == "INVALID_INPUT"
    assert took < 3, f"ended after {took:.1f}s (the lookup hangs for 30 s)"


def test_http_get_limits(page_url):
    http_get = LIBRARY["fixie_http_get"]
    local = context(allow_loopback=True)
    with pytest.raises(InvalidInput, match="larger than"):
        http_get(f"{page_url}/huge", local)
    for bad in ("file:///etc/passwd", "ftp://example.com/", "two http://a http://b", ""):
        with pytest.raises(InvalidInput, match="one http:// or https:// URL"):
            http_get(bad, local)
    assert http_get(f"{page_url}/tides", replace(local)).startswith("Harbour tides")


def test_http_get_stops_at_the_querys_deadline():
    # A page sent a byte at a time, each within the read timeout: the fetch went on (in a
    # call the query had given up on) for as long as the server kept sending.
    with raw_server("drip", interval=0.25) as drip:
        began = time.monotonic()
        with pytest.raises(Timeout, match="time ran out"):
            LIBRARY["fixie_http_get"](drip.url, replace(context(allow_loopback=True),
                                                        deadline=began + 1))
        assert time.monotonic() - began < 2 and drip.hangs_up(within=2)


def test_registration_knows_every_platform_func_by_name():
    """Registration and the SDK read the names without the Funcs' code: a Func added to one
    list and not the other would be refused in few-shots, or asked and not found."""
    from codeshot.models import PLATFORM_FUNC_NAMES

    assert set(LIBRARY) == PLATFORM_FUNC_NAMES

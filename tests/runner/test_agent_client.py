"""The runner's HTTP client for agents, against a real agent on loopback: nothing one call
learns (cookies) reaches the next, a reply of the wrong shape is the agent's error, and a
call is made again only when it surely did not run."""

import socket
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from email.utils import formatdate
from ipaddress import ip_address

import pytest
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from codeshot.errors import (
    AgentCallDropped,
    AgentFailed,
    AgentUnavailable,
    CallTimeout,
    InvalidInput,
)
from codeshot.local.http_server import HttpServer
from codeshot.runner.agent_client import AgentClient
from tests.conftest import HANGING_DOMAIN, free_port
from tests.raw_server import gzip_bomb, raw_server

CALLS: Counter[str] = Counter()  # the busy agent's calls, by path


@pytest.fixture(autouse=True)
def _calls_counted_afresh() -> None:
    CALLS.clear()  # a rerun's first call is busy again


@pytest.fixture(scope="module")
def agent():
    app, seen = FastAPI(), []

    @app.post("/status/{status}/after/{wait}/{func}")
    async def busy_once(status: int, wait: str, request: Request) -> Response:
        """``status`` with Retry-After ``wait`` ("none": without; "date+2": an HTTP-date 2 s
        ahead) to the first call of this path, an answer to the next."""
        CALLS[request.url.path] += 1
        if CALLS[request.url.path] > 1:
            return JSONResponse({"message": {"text": "done"}})
        after = {"none": None, "date+2": formatdate(time.time() + 2, usegmt=True)}.get(wait, wait)
        return Response(status_code=status, headers={"Retry-After": after} if after else {})

    @app.post("/remember")
    async def remember(request: Request, response: Response) -> dict:
        seen.append(request.headers.get("cookie"))
        response.set_cookie("session", "secret-of-" + request.headers["authorization"][-5:])
        return {"message": {"text": "noted"}}

    @app.post("/roll")
    async def roll() -> Response:  # what an SDK Func raising InvalidInput answers
        return Response('{"error": {"code": "INVALID_INPUT", "message": "give two whole '
                        'numbers, such as 1 6"}}', status_code=400,
                        media_type="application/json")

    @app.api_route("/bomb", methods=["GET", "POST"])
    async def bomb(request: Request) -> Response:  # compressed, whatever was asked
        seen.append(request.headers.get("accept-encoding"))
        return Response(gzip_bomb(), media_type="application/json",
                        headers={"Content-Encoding": "gzip"})

    @app.post("/charset")
    async def charset() -> Response:  # a misconfigured server's charset given as a coding
        return Response('{"message": {"text": "read"}}', media_type="application/json",
                        headers={"Content-Encoding": "UTF-8"})

    @app.post("/ask")
    async def ask() -> dict:
        return {"message": {"text": ""}, "needs_input": True, "question": {"not": "text"}}

    @app.post("/ask_at_length")
    async def ask_at_length() -> dict:
        return {"message": {"text": ""}, "needs_input": True, "question": "why? " * 40_000}

    @app.post("/crash")
    async def crash() -> Response:  # what an SDK Func raising answers
        return JSONResponse({"error": {"code": "ERR_AGENT_UNHANDLED_EXCEPTION",
                                       "message": "Sorry, something went wrong."}}, 500)

    @app.post("/page")
    async def page() -> Response:
        return Response("<html>hello</html>", media_type="text/html")

    server = HttpServer(app)
    server.start()
    yield server.url, seen
    server.stop()


def client(user: str) -> AgentClient:
    return AgentClient(lambda *_: f"token-{user}", timeout=5, allow_loopback=True)


def test_no_cookie_set_by_an_agent_is_ever_sent_back(agent):
    url, seen = agent
    alice = client("alice")
    assert alice.call_func("me/notes", url, "remember", "hi").text == "noted"
    alice.call_func("me/notes", url, "remember", "again")
    client("bob").call_func("me/notes", url, "remember", "hi")
    assert seen == [None, None, None]


def test_a_question_that_is_not_text_is_the_agents_error(agent):
    url, _ = agent
    with pytest.raises(AgentFailed, match="question that is not text"):
        client("alice").call_func("me/notes", url, "ask", "book it")


def test_a_question_too_long_to_store_is_refused_like_a_reply_text(agent):
    """200 kB of question could not be stored (400 KB items with the rest): the query
    ended INTERRUPTED instead of with the agent's error."""
    url, _ = agent
    with pytest.raises(AgentFailed, match="question over 100000 bytes"):
        client("alice").call_func("me/notes", url, "ask_at_length", "book it")


def test_a_func_refusing_its_input_is_input_to_correct_not_the_agents_failure(agent):
    # The engine gives INVALID_INPUT back to the model once (it may ask again) and never
    # retries it; AGENT_ERROR would end the query.
    url, _ = agent
    with pytest.raises(InvalidInput, match=r"^give two whole numbers, such as 1 6$"):
        client("alice").call_func("me/dice", url, "roll", "1, many")


@pytest.mark.parametrize(("func", "says"), [
    ("crash", "agent me/dice's Func[crash] answered HTTP 500: ERR_AGENT_UNHANDLED_EXCEPTION "
              "Sorry, something went wrong."),
    ("page", "agent me/dice's Func[page] sent invalid JSON"),
    ("ask", "agent me/dice's Func[ask] sent a question that is not text"),
])
def test_a_funcs_failure_names_the_agent_and_func_and_logs_the_url(agent, caplog, func, says):
    """The chat read "agent at http://127.0.0.1:PORT/crash answered HTTP 500 ...": the
    platform's own address for the agent, which says nothing to a user."""
    url, _ = agent
    with caplog.at_level("INFO", "codeshot.runner"), pytest.raises(AgentFailed) as err:
        client("alice").call_func("me/dice", url, func, "roll")
    assert err.value.message == says and "127.0.0.1" not in err.value.message
    logged = f"agent call to {url}/{func} failed (AGENT_ERROR): {says}"  # and its cause
    assert any(line.startswith(logged) for line in caplog.messages), caplog.messages


def test_an_unreachable_or_standalone_agent_is_named_by_its_id_not_its_url():
    down = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(AgentUnavailable) as err:
        AgentClient(lambda *_: "t", timeout=5, allow_loopback=True, retries=0).call_func(
            "me/dice", down, "roll", "1d6")
    assert err.value.message.startswith("agent me/dice's Func[roll] is unreachable: ")
    with pytest.raises(AgentUnavailable) as err:
        AgentClient(lambda *_: "t", timeout=5, allow_loopback=True, retries=0
                    ).query_standalone("me/chat", down, "hi")
    assert err.value.message.startswith("agent me/chat is unreachable: ")
    assert "127.0.0.1" not in err.value.message


def test_a_call_dropped_after_it_was_sent_is_not_sent_again():
    """The agent read the call and closed the connection without answering: it may have
    run it, so the client does not call again (a Func's side effects would repeat)."""
    listener = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def drop_each_call() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                received.append(conn.recv(65536))

    threading.Thread(target=drop_each_call, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    try:
        with pytest.raises(AgentCallDropped, match="dropped the call before answering") as err:
            client("alice").call_func("me/pay", url, "pay", "Alice 7")
    finally:
        listener.close()
    assert err.value.code == "AGENT_UNAVAILABLE" and err.value.permanent
    assert len(received) == 1 and received[0].startswith(b"POST /pay ")


def test_a_reply_dripping_a_byte_at_a_time_ends_with_the_calls_time():
    """httpx's timeout is per read: a reply trickling in (status line and headers too)
    held a Func call, and a runner, until the whole 2 MB cap arrived. Now the call's time
    covers all of it."""
    with raw_server("drip", interval=0.1) as server:
        slow = AgentClient(lambda *_: "t", timeout=1, allow_loopback=True)
        with pytest.raises(CallTimeout) as err:
            slow.call_func("me/drip", server.url, "f", "hi")
        assert server.hangs_up(within=2)
    assert err.value.code == "TIMEOUT" and err.value.permanent  # not called again
    assert server.requests == 1 and server.sent < 30  # ~10 bytes in its second


def test_a_standalone_reply_streams_until_the_querys_time_is_up():
    """A standalone agent may stream longer than one Func call's time (each read is
    bounded by it), but not past the query's deadline."""
    with raw_server("drip", interval=0.1) as server:
        streaming = AgentClient(lambda *_: "t", timeout=0.5, allow_loopback=True,
                                deadline=time.monotonic() + 2.5)
        with pytest.raises(CallTimeout):
            streaming.query_standalone("me/drip", server.url, "hi")
        assert server.hangs_up(within=2)
    assert 10 <= server.sent < 38  # past one call's half second, ended with the query


@pytest.mark.parametrize("status", [429, 503])
def test_a_429_or_503_without_retry_after_is_reported_once_not_retried(agent, status):
    """Without Retry-After nothing says the call was not run (a gateway may answer 503
    after forwarding it): calling again could repeat what the agent did."""
    url, _ = agent
    with pytest.raises(AgentUnavailable, match=f"answered HTTP {status}$") as err:
        client("alice").call_func("me/pay", f"{url}/status/{status}/after/none", "pay", "Al 7")
    assert CALLS[f"/status/{status}/after/none/pay"] == 1
    assert err.value.code == "AGENT_UNAVAILABLE" and err.value.permanent  # nor the engine


@pytest.mark.parametrize(("status", "wait"), [(429, "1"), (503, "date+2")])
def test_a_short_retry_after_is_waited_for_then_the_call_is_made_again(agent, status, wait):
    url, _ = agent
    started = time.monotonic()
    reply = client("alice").call_func("me/pay", f"{url}/status/{status}/after/{wait}", "pay",
                                      "Al 7")
    waited = time.monotonic() - started
    assert reply.text == "done" and CALLS[f"/status/{status}/after/{wait}/pay"] == 2
    assert 0.9 < waited < 4  # "1", or a date 1-2 s ahead in whole seconds; not 0.2 s backoff


def test_a_retry_after_beyond_the_cap_is_not_waited_for(agent):
    url, _ = agent
    started = time.monotonic()
    with pytest.raises(AgentUnavailable, match=r"HTTP 429 \(Retry-After: 120\)$") as err:
        client("alice").call_func("me/pay", f"{url}/status/429/after/120", "pay", "Al 7")
    assert CALLS["/status/429/after/120/pay"] == 1 and time.monotonic() - started < 1
    assert err.value.permanent


def test_a_host_that_does_not_resolve_is_unreachable_and_tried_again(monkeypatch, caplog):
    """RFC 6761: .invalid never resolves. That is an agent out of reach (tried again, as
    a refused connection), not input the model should change; a name that resolves to a
    refused address is still refused, once."""
    looked_up: list[str] = []
    resolve = socket.getaddrinfo

    def counting(host, *args, **kwargs):
        looked_up.append(host)
        return resolve(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", counting)
    with caplog.at_level("INFO", "codeshot.runner"), pytest.raises(AgentUnavailable) as err:
        client("alice").call_func("me/dice", "http://dice.invalid", "roll", "1d6")
    assert not err.value.permanent and looked_up.count("dice.invalid") == 3
    # The platform's name for the agent's host is not the user's business (it said
    # "host 'dice.invalid' does not resolve").
    assert err.value.message.startswith("agent me/dice's Func[roll] is unreachable: its "
                                        "host name does not resolve ("), err.value.message
    assert "dice.invalid" not in err.value.message
    assert "host 'dice.invalid' does not resolve" in caplog.text  # the log has it

    strict = AgentClient(lambda *_: "token", timeout=5, allow_loopback=False)
    with pytest.raises(InvalidInput, match=r"^agent me/dice's Func\[roll\]: its host "
                                           r"resolves to .*a loopback address"):
        strict.call_func("me/dice", "http://localhost:9", "roll", "1d6")
    assert looked_up.count("localhost") == 1


def test_a_resolver_that_hangs_ends_with_the_calls_time(hanging_dns):
    """getaddrinfo has no timeout: a lookup that hung held the runner past the call's and
    the query's time (30 s here). It ends with the call's deadline now, as a host that
    does not resolve: the agent is unreachable."""
    for deadline, timeout in ((1.0, 5.0), (None, 1.0)):  # the query's time; the call's
        began = time.monotonic()
        hung = AgentClient(lambda *_: "token", timeout=timeout, allow_loopback=True,
                           deadline=None if deadline is None else began + deadline)
        with pytest.raises(AgentUnavailable, match=r"is unreachable: its host name does not "
                           r"resolve \(no answer within") as err:
            hung.call_func("me/dice", f"http://dice.{HANGING_DOMAIN}:9", "roll", "1d6")
        took = time.monotonic() - began
        assert err.value.code == "AGENT_UNAVAILABLE" and not err.value.permanent
        assert took < 3, f"ended after {took:.1f}s (the lookup hangs for 30 s)"


def test_lookups_hold_a_bounded_number_of_threads():
    """Hung lookups keep their threads (getaddrinfo cannot be interrupted), at most
    LOOKUP_THREADS of them; past that a lookup waits for a thread only as long as its own
    time, and its host does not resolve. Threads come back when the resolver answers."""
    from codeshot.net import addresses

    released = threading.Event()

    def hangs(host, port, **_):
        released.wait(30)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("8.8.8.8", port))]

    def look_up(_: int) -> str:
        try:
            addresses.resolve_public("hung.example", 80, allow_loopback=False,
                                     resolver=hangs, timeout=0.5)
        except addresses.Unresolved as exc:
            return str(exc)
        return "resolved"

    began = time.monotonic()
    with ThreadPoolExecutor(max_workers=addresses.LOOKUP_THREADS + 8) as pool:
        results = list(pool.map(look_up, range(addresses.LOOKUP_THREADS + 8)))
    took = time.monotonic() - began
    dns_threads = [t for t in threading.enumerate() if t.name == "codeshot-dns"]
    released.set()
    assert all("no answer within 0.5s" in r for r in results), results
    assert len(dns_threads) == addresses.LOOKUP_THREADS
    assert took < 3, took  # each waited its own half second, the last ones for a thread
    assert addresses.resolve_public("8.8.4.4.example", 80, allow_loopback=False, timeout=5,
                                    resolver=lambda host, port, **_: [
                                        (socket.AF_INET, socket.SOCK_STREAM, 6, "",
                                         ("8.8.4.4", port))]) == [ip_address("8.8.4.4")]


def test_a_compressed_reply_is_refused_unread_not_inflated_past_the_cap(agent):
    """2 MB is the cap on what is read of an agent's or MCP server's reply; 50 MB of
    JSON in 50 KB of gzip went past it (decoded after the cap had counted). (A page or
    an embed is inflated within its cap instead: tests/runner/test_fetch.py.)"""
    from codeshot.runner.mcp_servers import McpServer

    url, seen = agent
    assert len(gzip_bomb()) < 100_000
    with pytest.raises(AgentFailed) as err:
        client("alice").call_func("me/bomb", url, "bomb", "hi")
    assert seen[-1] == "identity"
    # Named by the agent, as every other error of a call to it (it named the URL).
    assert err.value.message.startswith("agent me/bomb's Func[bomb] answered with "
                                        "Content-Encoding 'gzip' though asked for none")
    server = McpServer(url + "/bomb", None, timeout=5, allow_loopback=True)
    with pytest.raises(AgentFailed) as err:
        server.call("stock_level", '{"sku": "SKU-1"}', "agent me/shop's Func[stock_level]")
    assert seen[-1] == "identity"
    assert err.value.message.startswith("agent me/shop's Func[stock_level] answered with "
                                        "Content-Encoding 'gzip' though asked for none")


def test_a_reply_in_a_coding_nothing_decodes_is_read_as_sent(agent):
    url, _ = agent
    assert client("alice").call_func("me/charset", url, "charset", "hi").text == "read"


def test_an_mcp_server_whose_host_does_not_resolve_is_unreachable():
    from codeshot.runner.mcp_servers import McpServer

    server = McpServer("http://tools.invalid/mcp", None, timeout=5, allow_loopback=True)
    with pytest.raises(AgentUnavailable) as err:
        server.call("stock_level", '{"sku": "SKU-1"}', "agent me/shop's Func[stock_level]")
    assert not err.value.permanent
    assert err.value.message.startswith("agent me/shop's Func[stock_level] is unreachable: "
                                        "its host name does not resolve")
    assert "tools.invalid" not in err.value.message


def test_an_mcp_agents_errors_name_its_func_not_the_url_which_may_hold_a_token(caplog):
    """They read "MCP server at http://.../mcp/tok_s3cr3t is unreachable: ...": users of
    a published MCP agent saw its URL. Its owner, registering it, still does; operators
    find it in the log."""
    from codeshot.runner.mcp_servers import McpServer

    url = f"http://127.0.0.1:{free_port()}/mcp/tok_s3cr3t"
    server = McpServer(url, None, timeout=5, allow_loopback=True)
    with caplog.at_level("INFO", "codeshot.runner"), pytest.raises(AgentUnavailable) as err:
        server.call("stock_level", "{}", "agent me/shop's Func[stock_level]")
    assert err.value.message.startswith("agent me/shop's Func[stock_level] is unreachable: ")
    assert "tok_s3cr3t" not in err.value.message and "127.0.0.1" not in err.value.message
    assert any(url in line for line in caplog.messages), caplog.messages
    with pytest.raises(AgentUnavailable, match=f"^MCP server at {url} is unreachable: "):
        server.describe()
    strict = McpServer("http://localhost:9/mcp/tok_s3cr3t", None, timeout=5,
                       allow_loopback=False)
    with pytest.raises(InvalidInput) as err:
        strict.call("stock_level", "{}", "agent me/shop's Func[stock_level]")
    assert err.value.message.startswith("agent me/shop's Func[stock_level]: its host resolves "
                                        "to "), err.value.message
    assert "localhost" not in err.value.message


def test_an_mcp_servers_hung_lookup_ends_with_the_calls_time(hanging_dns):
    from codeshot.runner.mcp_servers import McpServer

    began = time.monotonic()
    server = McpServer(f"http://tools.{HANGING_DOMAIN}/mcp", None, timeout=1,
                       allow_loopback=True)
    with pytest.raises(AgentUnavailable, match=r"its host name does not resolve \(no answer"):
        server.call("stock_level", '{"sku": "SKU-1"}', "agent me/shop's Func[stock_level]")
    took = time.monotonic() - began
    assert took < 3, f"ended after {took:.1f}s (the lookup hangs for 30 s)"


def test_retry_after_is_read_in_seconds_and_in_each_http_date_form():
    from datetime import UTC, datetime

    from codeshot.net.http import retry_after

    now = datetime(1994, 11, 6, 8, 49, 30, tzinfo=UTC)
    read = {value: retry_after(value, now) for value in (
        "3", "Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994", "Sun, 06 Nov 1994 08:49:00 GMT", "-1", "1.5", "soon", "",
        "Sun, 06 Nov 1994 08:49:37 +999999999999999")}
    assert read == {"3": 3.0, "Sun, 06 Nov 1994 08:49:37 GMT": 7.0,
                    "Sunday, 06-Nov-94 08:49:37 GMT": 7.0, "Sun Nov  6 08:49:37 1994": 7.0,
                    "Sun, 06 Nov 1994 08:49:00 GMT": 0.0,  # past: at once
                    "-1": None, "1.5": None, "soon": None, "": None,  # not valid: no retry
                    "Sun, 06 Nov 1994 08:49:37 +999999999999999": None}  # overflows


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_name_answering_many_silent_addresses_is_given_up_within_one_connect_time(
        monkeypatch, kind):
    """Each address got the whole connect timeout: a name answering twenty addresses
    that drop connection attempts held a call (or a handshake in the API) twenty times as
    long. Now a connection tries three at most, within one timeout, for agents (sync)
    and MCP servers (async) alike."""
    import anyio
    import httpcore
    import httpcore2

    from codeshot.net.async_http import PinnedAsyncBackend
    from codeshot.net.http import PinnedBackend

    tried: list[float] = []

    def dropped(self, host, port, timeout=None, *args, **kwargs):
        tried.append(timeout)
        time.sleep(min(timeout, 0.1))
        raise httpcore.ConnectTimeout("dropped")

    async def dropped_async(self, host, port, timeout=None, *args, **kwargs):
        tried.append(timeout)
        await anyio.sleep(min(timeout, 0.1))
        raise httpcore2.ConnectTimeout("dropped")

    answers = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (f"8.8.8.{i}", 80))
               for i in range(20)]
    if kind == "sync":
        monkeypatch.setattr(httpcore.SyncBackend, "connect_tcp", dropped)
        with pytest.raises(httpcore.ConnectTimeout):
            PinnedBackend(False, resolver=lambda *_, **__: answers).connect_tcp(
                "many.example", 80, timeout=5.0)
    else:
        monkeypatch.setattr(httpcore2.AnyIOBackend, "connect_tcp", dropped_async)
        backend = PinnedAsyncBackend(False, resolver=lambda *_, **__: answers)
        with pytest.raises(httpcore2.ConnectTimeout):
            anyio.run(lambda: backend.connect_tcp("many.example", 80, timeout=5.0))
    assert len(tried) == 3 and tried[0] == pytest.approx(5.0, abs=0.05)
    assert tried[1] < tried[0] and tried[2] < tried[1]  # what is left of the one timeout

"""The openai provider against an OpenAI-compatible server on 127.0.0.1: both endpoints,
client-side stops, what servers refuse, per-agent settings, failures."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from codeshot.errors import LLMError, Timeout
from codeshot.llm import get_llm
from codeshot.llm.base import ChatMessage, LlmSettings, calls_ending_by, configured
from codeshot.llm.openai import OpenAILLM
from codeshot.settings import Settings
from tests.conftest import free_port
from tests.openai_server import OpenAICompatibleServer, completion_payload, serving

STOP = ["] says:", "\nUser says:", "\nQ:", "Continue this transcript", "<|im_end|>", "\n\n"]
MESSAGES = [ChatMessage("system", "I quote stocks."), ChatMessage("user", "Examples: ..."),
            ChatMessage("user", "Q: GOOG?\n")]


class Replies:
    """What the server answers next: (status, payload) per request, the text reply last."""

    def __init__(self) -> None:
        self.queue: list[tuple[int, object]] = []

    def __call__(self, path: str, body: dict[str, Any]) -> tuple[int, object]:
        status, payload = self.queue.pop(0) if self.queue else (200, "Ask Func[quote]: GOOG")
        if isinstance(payload, str):
            payload = completion_payload(path, payload, 31, 6)
        return status, payload


@pytest.fixture
def replies() -> Replies:
    return Replies()


@pytest.fixture
def server(replies: Replies) -> Iterator[OpenAICompatibleServer]:
    with serving(replies) as chat:
        yield chat


def test_chat_request_carries_four_stops_and_max_tokens_and_usage_is_read(
    server: OpenAICompatibleServer,
) -> None:
    completion = OpenAILLM("llama3.1", server.url + "/", api_key="sk-test").complete(
        MESSAGES, STOP, 321
    )
    assert (completion.text, completion.input_tokens, completion.output_tokens) == (
        "Ask Func[quote]: GOOG", 31, 6)
    [(path, headers, body)] = server.requests
    assert path == "/v1/chat/completions"
    assert headers["Authorization"] == "Bearer sk-test"
    assert body == {
        "model": "llama3.1",
        "messages": [{"role": m.role, "content": m.content} for m in MESSAGES],
        "stop": STOP[:4],  # servers take four; the rest are cut here
        "max_tokens": 321,
        "temperature": 0,
        "stream": True,  # so a reply is dropped where it is cut, not at the token cap
        "stream_options": {"include_usage": True},
    }


def test_a_looping_reply_is_cut_before_its_repeated_line_and_the_stream_dropped(
    server: OpenAICompatibleServer, replies: Replies
) -> None:
    # qwen2.5-coder-1.5b wrote one Thought line until the 256-token cap: 47 s on this CPU.
    replies.queue.append((200, "Thought: I need the time.\nThought: Let me think.\n" * 40))
    server.event_delay = 0.005
    completion = OpenAILLM("m", server.url).complete(MESSAGES, STOP, 256)
    assert completion.text == "Thought: I need the time.\nThought: Let me think."
    time.sleep(0.1)  # the server notices the client left on its next write
    [sent] = server.events_sent
    assert sent < 40  # of 681 events: dropped after the first repeat
    # no usage arrived: estimated from the prompt (ASCII: 4 a token) and the pieces read
    assert completion.input_tokens == sum(len(m.content) for m in MESSAGES) // 4
    assert 17 <= completion.output_tokens <= sent


@pytest.mark.parametrize(("text", "tokens"), [
    ("hello world " * 50, 150),  # 4 characters a token
    ("Привет мир " * 50, 250),  # 2 a token for other alphabets (the spaces 4)
    ("天気" * 300, 600),  # CJK: one a character (it counted 150, a quarter)
    ("नमस्ते" * 50, 300),  # Indic scripts and Thai too
    ("😀" * 100, 200),  # emoji: two each
])
def test_a_prompts_tokens_are_estimated_by_its_script_when_no_usage_comes(
    server: OpenAICompatibleServer, replies: Replies, text: str, tokens: int
) -> None:
    replies.queue.append((200, "Thought: a.\nThought: b.\n" * 40))  # dropped: no usage
    completion = OpenAILLM("m", server.url).complete([ChatMessage("user", text)], STOP, 256)
    assert completion.input_tokens == tokens


def test_stream_options_are_dropped_for_a_server_that_refuses_them(
    server: OpenAICompatibleServer, replies: Replies
) -> None:
    replies.queue += [(400, {"error": {"message": "Unrecognized request argument supplied: "
                                       "stream_options", "param": "stream_options"}}),
                      (200, "A: 7")]
    completion = OpenAILLM("m", server.url).complete(MESSAGES, STOP, 20)
    assert (completion.text, completion.input_tokens, completion.output_tokens) == ("A: 7", 31, 6)
    assert "stream_options" in server.bodies[0] and "stream_options" not in server.bodies[1]


def test_completions_endpoint_sends_one_prompt_ending_on_the_transcript(
    server: OpenAICompatibleServer,
) -> None:
    llm = get_llm(Settings(llm="openai", openai_base_url=server.url, llm_model="base",
                           openai_endpoint="completions"))
    assert llm.complete(MESSAGES, STOP, 50).text == "Ask Func[quote]: GOOG"
    [(path, _, body)] = server.requests
    assert path == "/v1/completions"
    assert body["prompt"] == "I quote stocks.\n\nExamples: ...\n\nQ: GOOG?\n"
    assert "messages" not in body


@pytest.mark.parametrize(("text", "cut"), [
    # stops past the fourth, which the server never saw
    ("A: 4<|im_end|>\nuser", "A: 4"),
    ("A: You rolled 4.\n\nQ: another", "A: You rolled 4."),
    # a reply that starts with blank lines is not empty
    ("\n\nA: You rolled 4.", "\n\nA: You rolled 4."),
    # a server that ignores stops is cut here too
    ("Ask Func[roll]: 6 1\nFunc[roll] says: 3", "Ask Func[roll]: 6 1\nFunc[roll"),
])
def test_every_stop_is_applied_to_the_text(
    server: OpenAICompatibleServer, replies: Replies, text: str, cut: str
) -> None:
    replies.queue.append((200, text))
    assert OpenAILLM("m", server.url).complete(MESSAGES, STOP, 10).text == cut


def test_max_completion_tokens_where_the_server_wants_it_learned_once(
    server: OpenAICompatibleServer, replies: Replies
) -> None:
    refusal = {"error": {"message": "Unsupported parameter: 'max_tokens' is not supported with "
                         "this model. Use 'max_completion_tokens' instead.",
                         "type": "invalid_request_error", "param": "max_tokens",
                         "code": "unsupported_parameter"}}
    replies.queue += [(400, refusal), (200, "A: one"), (200, "A: two")]
    llm = OpenAILLM("o-mini", server.url)
    assert llm.complete(MESSAGES, STOP, 99).text == "A: one"
    assert configured(llm, LlmSettings(temperature=0.5)).complete(MESSAGES, STOP, 99).text == (
        "A: two")
    first, second, third = server.bodies
    assert first["max_tokens"] == 99 and "max_completion_tokens" not in first
    assert second["max_completion_tokens"] == 99 and "max_tokens" not in second
    assert third["max_completion_tokens"] == 99 and third["temperature"] == 0.5


def test_fields_a_server_refuses_are_dropped_and_stops_still_apply(
    server: OpenAICompatibleServer, replies: Replies
) -> None:
    def refuse(param: str) -> tuple[int, object]:
        return 400, {"error": {"message": f"Unsupported parameter: '{param}'", "param": param}}

    replies.queue += [refuse("stop"), refuse("temperature"), (200, "A: 7\n\nQ: more")]
    assert OpenAILLM("reasoner", server.url).complete(MESSAGES, STOP, 20).text == "A: 7"
    assert "stop" not in server.bodies[-1] and "temperature" not in server.bodies[-1]
    replies.queue.append(refuse("stop"))  # refused again although dropped: a real error
    replies.queue.append(refuse("stop"))
    server.requests.clear()
    with pytest.raises(LLMError, match="returned HTTP 400"):
        OpenAILLM("other", server.url).complete(MESSAGES, STOP, 20)
    assert len(server.requests) == 2


def test_an_agents_llm_settings_reach_the_request(server: OpenAICompatibleServer) -> None:
    llm = configured(OpenAILLM("platform-model", server.url),
                     LlmSettings.from_dict({"model": "gpt-4o-mini", "temperature": 1.0,
                                            "maximum_tokens": 50}))
    llm.complete(MESSAGES, STOP, 300)  # the agent's limit is lower: it wins
    llm.complete(MESSAGES, STOP, 20)  # the engine's limit is lower: it wins
    first, second = server.bodies
    assert (first["model"], first["temperature"], first["max_tokens"]) == ("gpt-4o-mini", 1.0, 50)
    assert second["max_tokens"] == 20
    assert LlmSettings.from_dict({"model": None, "temperature": None}) is None


def test_no_api_key_sends_no_authorization(server: OpenAICompatibleServer) -> None:
    OpenAILLM("m", server.url).complete(MESSAGES, STOP, 10)
    assert "Authorization" not in server.requests[0][1]


@pytest.mark.parametrize(
    ("status", "payload", "message"),
    [
        (500, {"error": {"message": "model crashed"}}, r"returned HTTP 500: .*model crashed"),
        (401, {"error": "bad key"}, "returned HTTP 401"),
        (200, b"<html>not json</html>", r"malformed response \(JSONDecodeError"),
        (200, {"choices": []}, r"malformed response \(IndexError"),
        (200, completion_payload("/v1/chat/completions", None), r"malformed response \(TypeError"),
        (200, {"choices": [{"text": "x"}]}, r"malformed response \(KeyError\('message"),
        # Usage that is not counts: an AttributeError and an OverflowError ended the query
        # INTERRUPTED (the planner's small talk) or the proxy's call INTERNAL.
        (200, {"choices": [{"message": {"content": "x"}}], "usage": [1]},
         r"malformed response \(TypeError"),
        (200, b'{"choices": [{"message": {"content": "x"}}], "usage": '
              b'{"prompt_tokens": Infinity}}', r"malformed response \(TypeError"),
        (200, b'{"choices": [{"message": {"content": "x"}}], "usage": '
              b'{"completion_tokens": 1e999}}', r"malformed response \(TypeError"),
    ],
)
def test_bad_replies_are_llm_errors(  # from a server that does not stream
    server: OpenAICompatibleServer, replies: Replies, status: int, payload: object, message: str
) -> None:
    replies.queue.append((status, payload))
    server.streams = False
    with pytest.raises(LLMError, match=message) as info:
        OpenAILLM("m", server.url).complete(MESSAGES, STOP, 10)
    assert info.value.code == "LLM_ERROR"


def test_a_broken_stream_is_an_llm_error(
    server: OpenAICompatibleServer, replies: Replies
) -> None:
    replies.queue += [(200, [b'data: {"choices": [{"delta": {"content": "A: "}}]}\n\n',
                             b"data: {not json\n\n"]),
                      (200, [b'data: {"choices": [{"delta": {"content": 7}}]}\n\n'])]
    with pytest.raises(LLMError, match=r"malformed stream \(JSONDecodeError"):
        OpenAILLM("m", server.url).complete(MESSAGES, STOP, 10)
    with pytest.raises(LLMError, match=r"malformed stream \(TypeError"):
        OpenAILLM("m", server.url).complete(MESSAGES, STOP, 10)
    replies.queue.append((200, [b'data: {"choices": [{"delta": {"content": "A: hi"}}], '
                                b'"usage": {"prompt_tokens": 1e999}}\n\n']))
    with pytest.raises(LLMError, match=r"malformed stream \(TypeError"):
        OpenAILLM("m", server.url).complete(MESSAGES, STOP, 10)


def test_a_malformed_proxy_setting_is_an_llm_error(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, "http://proxy:notaport")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(LLMError):
        OpenAILLM("m", "http://llm.corp.invalid/v1").complete(MESSAGES, STOP, 10)


def test_a_reply_without_usage_counts_no_tokens(
    server: OpenAICompatibleServer, replies: Replies
) -> None:
    replies.queue.append((200, {"choices": [{"message": {"content": "A: hi"}}]}))
    server.streams = False
    completion = OpenAILLM("m", server.url).complete(MESSAGES, STOP, 10)
    assert (completion.text, completion.input_tokens, completion.output_tokens) == ("A: hi", 0, 0)


def test_a_slow_server_times_out(server: OpenAICompatibleServer) -> None:
    server.delay = 1.0
    started = time.monotonic()
    with pytest.raises(LLMError, match=r"timed out after 0\.2s"):
        OpenAILLM("m", server.url, timeout=0.2).complete(MESSAGES, STOP, 10)
    assert time.monotonic() - started < 1.0


def test_a_slow_stream_ends_at_the_querys_deadline_as_a_timeout(
        replies: Replies, server: OpenAICompatibleServer) -> None:
    # One event a second, each read well within the 60 s timeout: only the deadline,
    # held over the whole call, ends it (before: 20 s, the whole reply).
    replies.queue.append((200, "A: " + " ".join(f"w{i}" for i in range(60))))
    server.event_delay = 1.0
    started = time.monotonic()
    with calls_ending_by(started + 2), pytest.raises(Timeout) as info:
        OpenAILLM("m", server.url).complete(MESSAGES, STOP, 100)
    took = time.monotonic() - started
    assert info.value.code == "TIMEOUT" and 2 <= took < 8, took  # not 60 s (slack: load)
    time.sleep(2)
    assert server.events_sent[-1] <= 5  # the client left: the server stopped sending


def test_a_call_after_the_deadline_is_not_made(server: OpenAICompatibleServer) -> None:
    with calls_ending_by(time.monotonic() - 1), pytest.raises(Timeout):
        OpenAILLM("m", server.url).complete(MESSAGES, STOP, 10)
    assert server.requests == []


def test_connection_refused_is_an_llm_error() -> None:
    port = free_port()  # nothing listens on it
    with pytest.raises(LLMError, match="unreachable"):
        OpenAILLM("m", f"http://127.0.0.1:{port}/v1").complete(MESSAGES, STOP, 10)


def test_the_endpoint_is_reached_through_the_environments_proxy(
    server: OpenAICompatibleServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Behind a corporate proxy (HTTPS_PROXY / HTTP_PROXY), an internal name the proxy
    alone resolves; NO_PROXY exempts a host, and loopback is never proxied."""
    from tests.forward_proxy import proxying

    port = server.url.split(":")[2].split("/")[0]
    internal = OpenAILLM("llama3.1", f"http://llm.corp.invalid:{port}/v1")
    with proxying(hosts=("llm.corp.invalid",)) as proxy:
        for name in ("HTTP_PROXY", "http_proxy"):
            monkeypatch.setenv(name, proxy.url)
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        assert internal.complete(MESSAGES, STOP, 50).text == "Ask Func[quote]: GOOG"
        assert proxy.targets == [f"POST http://llm.corp.invalid:{port}/v1/chat/completions"]
        assert OpenAILLM("llama3.1", server.url).complete(MESSAGES, STOP, 50).text
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.setenv(name, "llm.corp.invalid")
        with pytest.raises(LLMError, match="unreachable"):  # direct: the name is unknown
            internal.complete(MESSAGES, STOP, 50)
    assert len(proxy.targets) == 1 and len(server.requests) == 2


def test_a_proxy_named_without_a_scheme_and_with_credentials_is_used_as_curl_would(
    server: OpenAICompatibleServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``HTTP_PROXY=user:pw@host:port`` (a KeyError deep in httpcore, and no
    Proxy-Authorization: a corporate proxy answered 407); a SOCKS proxy is refused by name."""
    from tests.forward_proxy import proxying

    port = server.url.split(":")[2].split("/")[0]
    internal = OpenAILLM("llama3.1", f"http://llm.corp.invalid:{port}/v1")
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    with proxying(hosts=("llm.corp.invalid",)) as proxy:
        for name in ("HTTP_PROXY", "http_proxy"):
            monkeypatch.setenv(name, "ann:s3cret@" + proxy.url.removeprefix("http://"))
        assert internal.complete(MESSAGES, STOP, 50).text == "Ask Func[quote]: GOOG"
    assert proxy.authorizations == ["Basic YW5uOnMzY3JldA=="]  # ann:s3cret
    for name in ("HTTP_PROXY", "http_proxy"):
        monkeypatch.setenv(name, "socks5://127.0.0.1:1080")
    with pytest.raises(LLMError, match="only http:// and https:// proxies are supported"):
        internal.complete(MESSAGES, STOP, 50)


def test_all_proxy_and_networks_in_no_proxy_are_read_as_curl_reads_them(
    server: OpenAICompatibleServer, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only ``HTTPS_PROXY`` / ``HTTP_PROXY`` were read: behind a proxy named by
    ``ALL_PROXY`` the endpoint was unreachable, and ``NO_PROXY=10.0.0.0/8`` sent an
    internal address to the proxy."""
    from codeshot.net.http import environment_proxy
    from tests.forward_proxy import proxying

    port = server.url.split(":")[2].split("/")[0]
    internal = OpenAILLM("llama3.1", f"http://llm.corp.invalid:{port}/v1")
    for name in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy", "HTTPS_PROXY",
                 "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    with proxying(hosts=("llm.corp.invalid",)) as proxy:
        for name in ("ALL_PROXY", "all_proxy"):
            monkeypatch.setenv(name, proxy.url)
        assert internal.complete(MESSAGES, STOP, 50).text == "Ask Func[quote]: GOOG"
    assert proxy.targets == [f"POST http://llm.corp.invalid:{port}/v1/chat/completions"]
    for name in ("ALL_PROXY", "all_proxy"):  # curl's SOCKS proxy: not ours to take
        monkeypatch.setenv(name, "socks5://127.0.0.1:1080")
    assert environment_proxy("http://192.0.2.7:8000/v1") is None
    for name in ("ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, proxy.url)
    for name in ("NO_PROXY", "no_proxy"):
        monkeypatch.setenv(name, "example.com, 10.0.0.0/8,fd00::/8")
    assert environment_proxy("http://10.1.2.3:8000/v1") is None
    assert environment_proxy("http://[fd00::5]:8000/v1") is None
    assert environment_proxy("http://192.0.2.7:8000/v1") == proxy.url
    assert environment_proxy("https://api.example.com/v1") is None

"""The OpenAI proxy as fixieai 1.0.4 agents used it: an unmodified agent served by
fixieai's own loader calls ``openai`` 0.27 in a Func; the loader points it at
``/api/openai-proxy/v1`` with the agent-call token as its key. The platform answers with
its own provider (here an OpenAI-compatible server on loopback holding the only key)
and counts every call against the user's and the agent's budgets."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from codeshot import ids
from tests.conftest import free_port, serving
from tests.fixie.test_cli import running
from tests.openai_server import completion_payload
from tests.openai_server import serving as upstream_serving

PLATFORM_KEY = "sk-platform-only"
MAIN = '''
import fixieai
import openai

agent = fixieai.CodeShotAgent("I ask the model.", """
Q: Ask the model hello
Ask Func[ask]: hello
Func[ask] says: hi
A: hi
""")


def attempt(call):
    try:
        return call()
    except openai.error.OpenAIError as exc:
        return f"{type(exc).__name__} {exc.http_status}"


@agent.register_func
def ask(query: fixieai.Message) -> str:
    messages = [{"role": "user", "content": query.text}]
    plain = attempt(lambda: openai.ChatCompletion.create(
        model="gpt-3.5-turbo", messages=messages)["choices"][0]["message"]["content"])
    streamed = attempt(lambda: "".join(
        chunk["choices"][0]["delta"].get("content", "") for chunk in
        openai.ChatCompletion.create(model="gpt-3.5-turbo", messages=messages, stream=True)))
    return f"{plain} | {streamed}"
'''


def echo(path: str, body: dict[str, Any]) -> tuple[int, object]:
    prompt = body["messages"][-1]["content"] if "messages" in body else body["prompt"]
    return 200, completion_payload(path, f"model says: {prompt}", 40, 7)


@pytest.fixture
def proxy(server_aws, tmp_path):
    """The platform with the openai provider at a loopback server, and an unmodified
    fixieai agent ``<alice>/asker`` served by fixieai's loader, pointed at the platform."""
    with upstream_serving(echo) as upstream, serving(
            server_aws, llm="openai", openai_base_url=upstream.url, openai_api_key=PLATFORM_KEY,
            openai_proxy_rate_limit=3) as platform:
        directory = tmp_path / "asker"
        directory.mkdir()
        (directory / "main.py").write_text(MAIN)
        (directory / "agent.yaml").write_text("handle: asker\nentry_point: main:agent\n")
        user_id, _ = platform.user("alice")
        port = free_port()
        yield platform, upstream, user_id, port, directory


def call_func(platform, port: int, user_id: str, text: str) -> str:
    token = platform.services.auth.agent_token("alice/asker", user_id, ids.handle())
    r = httpx.post(f"http://127.0.0.1:{port}/ask", headers={"Authorization": f"Bearer {token}"},
                   json={"message": {"text": text, "embeds": {}}, "access_token": token},
                   timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["message"]["text"]


def tokens_used(platform, *charges: tuple[str, str]) -> list[int]:
    now = platform.services.usage.clock()
    return [u.used for u in platform.services.usage.token_usage(list(charges), "day", now)]


def test_an_unmodified_fixie_agent_calls_the_platforms_llm(proxy, fixie_python):
    platform, upstream, user_id, port, directory = proxy
    # The calls fall inside one one-minute window of the proxy's limit, whenever this runs.
    platform.clock.now = datetime.now(UTC).replace(second=1, microsecond=0)
    argv = [str(fixie_python), "-m", "uvicorn", "fixieai.cli.agent.loader:uvicorn_app_factory",
            "--factory", "--host", "127.0.0.1", "--port", str(port)]
    env = {"PATH": os.environ["PATH"], "FIXIE_API_URL": platform.url,
           "FIXIE_ALLOWED_AGENT_ID": "alice/asker"}
    with running(argv, directory, env, until="Uvicorn running"):
        assert call_func(platform, port, user_id, "hello") == \
            "model says: hello | model says: hello"
        # Only the platform holds the provider's key; the agent sent its call's token.
        assert [h["Authorization"] for _, h, _ in upstream.requests] == \
            [f"Bearer {PLATFORM_KEY}"] * 2
        assert [b["messages"] for b in upstream.bodies] == \
            [[{"role": "user", "content": "hello"}]] * 2
        assert tokens_used(platform, ("tokens", user_id), ("agent_tokens", "alice/asker")) \
            == [94, 94]  # 2 calls x (40 in + 7 out), on the user and on the agent

        # Three calls a minute per user and agent: the fourth is RATE_LIMITED (429).
        assert call_func(platform, port, user_id, "again") == \
            "model says: again | RateLimitError 429"
        assert len(upstream.requests) == 3

        # A user whose daily LLM tokens are spent gets 429 too, and the model is not called
        # (a call must leave room for its completion: 1,024 tokens when not given).
        bob, _ = platform.user("bob", daily_token_limit=1050)
        assert call_func(platform, port, bob, "hi") == "model says: hi | RateLimitError 429"
        assert len(upstream.requests) == 4


def test_the_proxy_takes_only_agent_tokens_and_caps_completions(proxy):
    platform, upstream, user_id, _, _ = proxy
    url = f"{platform.url}/api/openai-proxy/v1/completions"
    body = {"model": "text-davinci-003", "prompt": "hello", "max_tokens": 100_000}
    _, api_key = platform.user("carol")
    for bearer in ("garbage", api_key):
        r = httpx.post(url, json=body, headers={"Authorization": f"Bearer {bearer}"})
        assert r.status_code == 401 and r.json()["error"]["code"] == "UNAUTHENTICATED", r.text
    anonymous = platform.services.auth.agent_token("alice/asker", None, ids.handle())
    r = httpx.post(url, json=body, headers={"Authorization": f"Bearer {anonymous}"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "FORBIDDEN"
    assert upstream.requests == []  # nothing reached the model

    token = platform.services.auth.agent_token("alice/asker", user_id, ids.handle())
    r = httpx.post(url, json=body, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    reply = r.json()
    assert reply["object"] == "text_completion"
    assert reply["choices"][0]["text"] == "model says: hello"
    assert reply["usage"] == {"prompt_tokens": 40, "completion_tokens": 7, "total_tokens": 47}
    assert upstream.bodies[-1]["max_tokens"] == 1024  # CODESHOT_OPENAI_PROXY_MAX_TOKENS

    bad = {"model": "x", "messages": [{"role": "tool", "content": "hi"}]}
    r = httpx.post(f"{platform.url}/api/openai-proxy/v1/chat/completions", json=bad,
                   headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_INPUT"
    assert len(upstream.requests) == 1

    # An agent writes the prompt: one that, with the completion it asks for, does not fit
    # in what is left of the user's tokens is refused before the model sees it, and
    # spends none of the minute's 3 calls (CODESHOT_OPENAI_PROXY_RATE_LIMIT here).
    dave, _ = platform.user("dave", daily_token_limit=1000)
    dave_token = platform.services.auth.agent_token("alice/asker", dave, ids.handle())
    for prompt, max_tokens, status in (("x" * 8000, 10, 429),  # ~2,000 tokens
                                       ("天" * 1200, 10, 429),  # ~1,200: one a character
                                       ("x" * 2000, 600, 429),  # ~500 + 600
                                       ("x" * 2000, None, 429),  # ~500 + 1,024 (the cap)
                                       ("x" * 2000, 600, 429),
                                       ("x" * 2000, 400, 200)):
        ask = body | {"prompt": prompt, "max_tokens": max_tokens}
        r = httpx.post(url, json={k: v for k, v in ask.items() if v is not None},
                       headers={"Authorization": f"Bearer {dave_token}"})
        assert r.status_code == status, r.text
        if status == 429:
            assert "daily LLM token limit" in r.json()["error"]["message"], r.text
    assert len(upstream.requests) == 2
    assert upstream.bodies[-1]["max_tokens"] == 400


def test_calls_made_at_once_cannot_spend_more_than_the_budget(server_aws):
    """Each call was checked against what was left, and counted once answered: calls an
    agent made at once all passed the same check (12 of 1,000 tokens each spent six times
    a 2,000-token day). Each is now counted at its most before it is made, then settled
    to what the model used."""
    import threading

    from codeshot.runner.budgets import USER_TOKENS

    with upstream_serving(echo) as upstream, serving(
            server_aws, llm="openai", openai_base_url=upstream.url,
            openai_proxy_rate_limit=60) as platform:
        upstream.delay = 2.0  # a model that takes a while: every call is made meanwhile
        user_id, _ = platform.user("erin", daily_token_limit=2000)
        token = platform.services.auth.agent_token("erin/asker", user_id, ids.handle())
        statuses: list[int] = []
        start = threading.Barrier(8)

        def call() -> None:
            start.wait()
            statuses.append(httpx.post(
                f"{platform.url}/api/openai-proxy/v1/completions", timeout=60,
                headers={"Authorization": f"Bearer {token}"},
                json={"model": "x", "prompt": "hi", "max_tokens": 600}).status_code)

        threads = [threading.Thread(target=call) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        # ~601 tokens each at most: three fit in 2,000; each used 47 (the model's usage).
        assert sorted(statuses) == [200] * 3 + [429] * 5, statuses
        assert len(upstream.requests) == 3
        assert tokens_used(platform, (USER_TOKENS, user_id)) == [3 * 47]


def test_a_proxied_call_ends_in_time_however_slowly_the_model_streams(server_aws,
                                                                      monkeypatch):
    """The proxy made its calls with no deadline: a model streaming a token now and then
    held the call past API Gateway's 29 s, to the host's own timeout."""
    from codeshot.usecases import openai_proxy

    monkeypatch.setattr(openai_proxy, "CALL_SECONDS", 1.0)
    with upstream_serving(echo) as upstream, serving(
            server_aws, llm="openai", openai_base_url=upstream.url) as platform:
        upstream.event_delay = 0.5  # "model says: hi" streams for seconds
        user_id, _ = platform.user("fay")
        token = platform.services.auth.agent_token("fay/asker", user_id, ids.handle())
        r = httpx.post(f"{platform.url}/api/openai-proxy/v1/chat/completions", timeout=60,
                       headers={"Authorization": f"Bearer {token}"},
                       json={"model": "x", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 504 and r.json()["error"]["code"] == "TIMEOUT", r.text

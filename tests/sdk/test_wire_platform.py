"""The platform's way of calling an SDK agent: the runner's handshake client, and
``POST /{func}`` with a token from the platform's own Auth."""

from __future__ import annotations

import json

import httpx
import pytest
import yaml

from codeshot.runner.handshake import fetch_handshake
from codeshot.settings import get_settings
from codeshot.store.user_storage import Holder
from tests.sdk.demo import demo_agent


def call(platform, served, func: str, text: str, user: str | None = "default", **token_kw):
    user_id = platform.user()[0] if user == "default" else user
    token = platform.services.auth.agent_token(served.agent_id, user_id, "s_1", **token_kw)
    return httpx.post(f"{served.url}/{func}", headers={"Authorization": f"Bearer {token}"},
                      json={"message": {"text": text, "embeds": {}}, "access_token": token})


def test_runner_reads_the_handshake(platform, sdk_agent):
    token = platform.services.auth.agent_token(sdk_agent.agent_id, None, None)
    handshake = fetch_handshake(sdk_agent.url, token, allow_loopback=True)
    assert handshake.type == "code_shot"
    assert handshake.base_prompt == "I am a demo agent for SDK tests."
    assert handshake.few_shots[1].startswith("Q: Add 2 and 3\nAsk Func[add]: 2, 3")


def test_handshake_is_json_unless_yaml_is_asked_for(platform, sdk_agent):
    headers = {"Authorization": "Bearer " + platform.services.auth.agent_token(
        sdk_agent.agent_id, None, None)}
    plain = httpx.get(sdk_agent.url + "/", headers=headers)
    assert plain.headers["content-type"] == "application/json"
    funcs = {f["name"]: f for f in plain.json()["funcs"]}
    assert funcs["add"]["parameters"]["properties"] == {"a": {"type": "integer"},
                                                         "b": {"type": "integer"}}
    assert funcs["add"]["description"] == "Adds two integers."
    as_yaml = httpx.get(sdk_agent.url + "/", headers={**headers, "Accept": "application/yaml"})
    assert as_yaml.headers["content-type"].startswith("application/yaml")
    assert yaml.safe_load(as_yaml.text) == plain.json()


def test_func_call_uses_the_platforms_user_storage(platform, sdk_agent):
    user_id, _ = platform.user()
    reply = call(platform, sdk_agent, "remember", "green", user=user_id)
    assert reply.status_code == 200, reply.text
    assert reply.json() == {"message": {"text": "remembered green (5 bytes, keys ['colour'])",
                                        "embeds": {}}, "error": None}
    stored = platform.services.storage.get(Holder(user_id, sdk_agent.agent_id, 0), "colour")
    assert json.loads(stored) == {"name": "green",
                                  "raw": {"type": "_bytes_ascii", "data": "Z3JlZW4="}}


def test_anonymous_callers_get_no_user_storage(platform, sdk_agent):
    reply = call(platform, sdk_agent, "remember", "green", user=None)
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "ERR_USERSTORAGE_REQUIRES_USER"


def test_typed_arguments_are_parsed_and_checked(platform, sdk_agent):
    assert call(platform, sdk_agent, "add", "2, 40").json()["message"]["text"] == "42"
    assert call(platform, sdk_agent, "add", '{"a": 1, "b": 2}').json()["message"]["text"] == "3"
    bad = call(platform, sdk_agent, "add", "two, 3")
    assert bad.status_code == 400
    assert bad.json()["error"] == {"code": "INVALID_INPUT", "details": None,
                                   "message": "argument a must be integer, got 'two'"}


def test_a_func_can_ask_the_user(platform, sdk_agent):
    asked = call(platform, sdk_agent, "book", "a table for two").json()
    assert asked == {"message": {"text": "For what time?", "embeds": {}}, "error": None,
                     "needs_input": True, "question": "For what time?"}
    booked = call(platform, sdk_agent, "book", "a table at 8").json()
    assert "needs_input" not in booked
    assert booked["message"]["embeds"]["ticket"] == {
        "content_type": "text/plain", "uri": "data:text/plain;base64,dGlja2V0"}


def test_unknown_func_is_404_err_func_not_defined(platform, sdk_agent):
    reply = call(platform, sdk_agent, "nope", "x")
    assert reply.status_code == 404
    error = reply.json()["error"]
    assert error["code"] == "ERR_FUNC_NOT_DEFINED"
    assert error["details"] == {"func_name": "nope",
                                "available_funcs": ["add", "book", "explode", "forget",
                                                    "remember", "shout"]}


def test_an_async_func_answers_its_result_not_a_coroutine(platform, sdk_agent):
    reply = call(platform, sdk_agent, "shout", "hello")
    assert reply.status_code == 200, reply.text
    assert reply.json()["message"]["text"] == "HELLO"


def test_a_crashing_func_leaks_no_internals(platform, sdk_agent):
    reply = call(platform, sdk_agent, "explode", "x")
    assert reply.status_code == 500
    assert reply.json()["error"]["code"] == "ERR_AGENT_UNHANDLED_EXCEPTION"
    assert "secret" not in reply.text


def test_a_func_returning_none_answers_err_no_response_not_null(platform, sdk_agent):
    reply = call(platform, sdk_agent, "forget", "x")
    assert reply.status_code == 500 and reply.json()["message"]["text"] != "null"
    assert reply.json()["error"]["code"] == "ERR_NO_RESPONSE"


@pytest.mark.settings(fixie_audiences=False)
def test_tokens_without_fixie_audiences_are_accepted(platform, sdk_agent):
    token = platform.services.auth.agent_token(sdk_agent.agent_id, None, None)
    assert fetch_handshake(sdk_agent.url, token, allow_loopback=True).type == "code_shot"


def test_standalone_agent_streams_ndjson(platform, standalone_agent):
    user_id, _ = platform.user()
    token = platform.services.auth.agent_token(standalone_agent.agent_id, user_id, None)
    headers = {"Authorization": f"Bearer {token}"}
    assert fetch_handshake(standalone_agent.url, token, allow_loopback=True).sample_queries == ["say hi"]
    with httpx.stream("POST", standalone_agent.url + "/", headers=headers,
                      json={"message": {"text": "hello"}, "access_token": token}) as reply:
        assert reply.headers["content-type"] == "application/x-ndjson"
        lines = [json.loads(line) for line in reply.iter_lines() if line]
    assert [line["message"]["text"] for line in lines] == ["thinking", "you said hello"]
    assert platform.services.storage.get(Holder(user_id, standalone_agent.agent_id, 0),
                                         "last") == '"hello"'


@pytest.fixture
def lambda_environment(platform, monkeypatch):
    """The settings a Lambda reads from its environment, as CDK would set them."""
    monkeypatch.setenv("CODESHOT_API_URL", platform.url)
    monkeypatch.setenv("CODESHOT_AGENT_ID", "acme/sdkdemo")
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


def test_lambda_handler_answers_an_http_api_event(platform, lambda_environment):
    agent = demo_agent()
    token = platform.services.auth.agent_token("acme/sdkdemo", None, None)
    event = {
        "version": "2.0", "routeKey": "$default", "rawPath": "/add", "rawQueryString": "",
        "headers": {"authorization": f"Bearer {token}", "content-type": "application/json"},
        "requestContext": {"http": {"method": "POST", "path": "/add", "sourceIp": "127.0.0.1",
                                    "protocol": "HTTP/1.1"}, "stage": "$default"},
        "body": json.dumps({"message": {"text": "20, 22"}}), "isBase64Encoded": False,
    }
    reply = agent.handler(event, None)
    assert reply["statusCode"] == 200, reply
    assert json.loads(reply["body"])["message"]["text"] == "42"

"""The bedrock provider against botocore's Stubber: real Converse request and response
shapes, validated by botocore against the service model."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber

from codeshot.errors import LLMError, Timeout
from codeshot.llm import get_llm
from codeshot.llm.base import ChatMessage, LlmSettings, calls_ending_by, configured
from codeshot.llm.bedrock import BedrockLLM
from codeshot.settings import Settings
from tests.conftest import free_port

MODEL = "us.anthropic.claude-haiku-4-5-20251001-v1:0"
STOP = ["\nFunc[", "\nAgent[", "\nUser says:", "\nQ:"]
MESSAGES = [
    ChatMessage("system", "I quote stocks."),
    ChatMessage("user", "Examples: ..."),
    ChatMessage("user", "Q: What is GOOG at?\n"),
]


def bedrock_client(**kwargs: object):  # type: ignore[no-untyped-def]
    return boto3.client(
        "bedrock-runtime", region_name="us-east-1",
        aws_access_key_id="testing", aws_secret_access_key="testing", **kwargs,
    )  # fmt: skip


@pytest.fixture
def stubbed() -> Iterator[tuple[BedrockLLM, Stubber]]:
    client = bedrock_client()
    with Stubber(client) as stubber:
        yield BedrockLLM(MODEL, client=client), stubber
        stubber.assert_no_pending_responses()


def converse_response(text: str, input_tokens: int = 42, output_tokens: int = 7) -> dict:
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": "stop_sequence",
        "usage": {
            "inputTokens": input_tokens,
            "outputTokens": output_tokens,
            "totalTokens": input_tokens + output_tokens,
        },
        "metrics": {"latencyMs": 321},
    }


def test_converse_request_and_usage(stubbed: tuple[BedrockLLM, Stubber]) -> None:
    llm, stubber = stubbed
    stubber.add_response(
        "converse",
        converse_response("Thought: look it up\nAsk Func[quote]: GOOG", 42, 7),
        {
            "modelId": MODEL,
            "system": [{"text": "I quote stocks."}],
            # Converse wants alternating roles: consecutive user messages become one.
            "messages": [
                {"role": "user", "content": [{"text": "Examples: ...\n\nQ: What is GOOG at?\n"}]}
            ],
            "inferenceConfig": {"maxTokens": 256, "stopSequences": STOP, "temperature": 0.0},
        },
    )
    completion = llm.complete(MESSAGES, STOP, 256)
    assert completion.text == "Thought: look it up\nAsk Func[quote]: GOOG"
    assert (completion.input_tokens, completion.output_tokens) == (42, 7)


def test_stops_past_four_are_cut_here_and_agent_settings_apply(
    stubbed: tuple[BedrockLLM, Stubber]
) -> None:
    llm, stubber = stubbed
    stops = [*STOP, "<|im_end|>"]
    agent = configured(llm, LlmSettings(model="gpt-4", temperature=0.7, maximum_tokens=64))
    other = configured(llm, LlmSettings(model="us.anthropic.claude-3-haiku-20240307-v1:0"))
    for model, temperature, max_tokens in [(MODEL, 0.7, 64),
                                           ("us.anthropic.claude-3-haiku-20240307-v1:0", 0.0, 256)]:
        stubber.add_response("converse", converse_response("A: 4<|im_end|>junk"), {
            "modelId": model,  # an agent's "gpt-4" is no Bedrock model: the platform's stays
            "system": [{"text": "I quote stocks."}],
            "messages": [
                {"role": "user", "content": [{"text": "Examples: ...\n\nQ: What is GOOG at?\n"}]}
            ],
            "inferenceConfig": {"maxTokens": max_tokens, "stopSequences": STOP,
                                "temperature": temperature},
        })
    assert agent.complete(MESSAGES, stops, 256).text == "A: 4"
    assert other.complete(MESSAGES, stops, 256).text == "A: 4"


def test_service_errors_become_llm_errors(stubbed: tuple[BedrockLLM, Stubber]) -> None:
    llm, stubber = stubbed
    stubber.add_client_error(
        "converse", "ThrottlingException", "Too many requests", http_status_code=429
    )
    stubber.add_client_error(
        "converse", "ValidationException", "The model returned an error", http_status_code=400
    )
    with pytest.raises(LLMError, match=r"^Bedrock ThrottlingException: Too many requests$") as info:
        llm.complete(MESSAGES, STOP, 100)
    assert info.value.code == "LLM_ERROR"
    with pytest.raises(LLMError, match="ValidationException"):
        llm.complete(MESSAGES, STOP, 100)


def test_a_response_without_a_message_is_malformed() -> None:
    """botocore's Stubber refuses such a response, so a bare client object returns it."""

    class OffSpecClient:
        def converse(self, **request: object) -> dict:
            response = converse_response("x")
            response["output"] = {}
            return response

    with pytest.raises(LLMError, match=r"malformed response \(KeyError\('message'"):
        BedrockLLM(MODEL, client=OffSpecClient()).complete(MESSAGES, STOP, 100)


def test_an_unreachable_endpoint_is_an_llm_error() -> None:
    port = free_port()  # nothing listens on it
    client = bedrock_client(
        endpoint_url=f"http://127.0.0.1:{port}",
        config=Config(retries={"max_attempts": 1}, connect_timeout=1),
    )
    with pytest.raises(LLMError, match=r"^Bedrock unreachable: Could not connect"):
        BedrockLLM(MODEL, client=client).complete(MESSAGES, STOP, 100)


class BedrockEndpoint:
    """Bedrock Runtime on 127.0.0.1: each Converse is answered after ``delay`` seconds,
    with ``failures`` first (HTTP 503, ServiceUnavailableException) then the reply."""

    def __init__(self, delay: float = 0.0, failures: int = 0) -> None:
        self.delay, self.failures, self.requests = delay, failures, 0
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                endpoint.requests += 1
                time.sleep(endpoint.delay)
                failed = endpoint.requests <= endpoint.failures
                body = json.dumps({"message": "Bedrock is unavailable"} if failed
                                  else converse_response("A: 4")).encode()
                try:
                    self.send_response(503 if failed else 200)
                    if failed:
                        self.send_header("x-amzn-ErrorType", "ServiceUnavailableException")
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up first

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.llm = BedrockLLM(MODEL, Settings(
            llm="bedrock", aws_endpoint_url=f"http://127.0.0.1:{self.httpd.server_address[1]}"))


@pytest.fixture
def endpoint() -> Iterator[BedrockEndpoint]:
    served = BedrockEndpoint()
    thread = threading.Thread(target=served.httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield served
    served.httpd.shutdown()
    served.httpd.server_close()


def test_a_slow_model_ends_at_the_querys_deadline_as_a_timeout(
        endpoint: BedrockEndpoint) -> None:
    endpoint.delay = 10  # before: read for 20 s, 4 times
    started = time.monotonic()
    with calls_ending_by(started + 2), pytest.raises(Timeout) as info:
        endpoint.llm.complete(MESSAGES, STOP, 100)
    took = time.monotonic() - started
    assert info.value.code == "TIMEOUT" and 2 <= took < 6, took  # not 10 s (slack: load)
    assert endpoint.requests == 1  # not tried again past the deadline


def test_a_completion_may_take_as_long_as_the_llm_timeout_setting_and_no_longer(
        endpoint: BedrockEndpoint) -> None:
    """Converse answers when the whole completion is made: a long one outlasted the 20 s
    every AWS read was given, whatever CODESHOT_LLM_TIMEOUT_SECONDS said."""
    url = endpoint.llm._settings.aws_endpoint_url  # type: ignore[union-attr]
    endpoint.delay = 2.5
    patient = BedrockLLM(MODEL, Settings(llm="bedrock", aws_endpoint_url=url,
                                         llm_timeout_seconds=5))
    assert patient.complete(MESSAGES, STOP, 100).text == "A: 4"
    hasty = BedrockLLM(MODEL, Settings(llm="bedrock", aws_endpoint_url=url,
                                       llm_timeout_seconds=1))
    with pytest.raises(LLMError, match="Bedrock unreachable: Read timeout"):
        hasty.complete(MESSAGES, STOP, 100)
    assert endpoint.requests == 2  # a read that had its time is not tried again


def test_a_failed_try_is_tried_again_only_while_time_is_left(
        endpoint: BedrockEndpoint) -> None:
    endpoint.failures = 1
    assert endpoint.llm.complete(MESSAGES, STOP, 100).text == "A: 4"  # after 0.5 s
    assert endpoint.requests == 2
    endpoint.failures = 100
    tried = endpoint.requests
    # Tries at 0 s and 0.5 s; the third would come at 1.5 s, past the deadline (botocore's
    # own retries made 4). On a machine too loaded to try again in time: one try, or a
    # second that ends with the deadline (TIMEOUT).
    with calls_ending_by(time.monotonic() + 1.2), pytest.raises((LLMError, Timeout)) as info:
        endpoint.llm.complete(MESSAGES, STOP, 100)
    assert 1 <= endpoint.requests - tried <= 2
    assert isinstance(info.value, Timeout) or info.value.message.startswith(
        "Bedrock ServiceUnavailableException"), info.value


def test_get_llm_picks_the_provider_from_settings() -> None:
    from codeshot.llm.fewshot import FewShotLLM
    from codeshot.llm.openai import OpenAILLM

    bedrock = get_llm(Settings(llm="bedrock", llm_model="amazon.nova-lite-v1:0"))
    assert isinstance(bedrock, BedrockLLM) and bedrock.model_id == "amazon.nova-lite-v1:0"
    openai = get_llm(
        Settings(
            llm="openai",
            llm_model="gpt-4o-mini",
            openai_base_url="http://h:1/v1/",
            openai_api_key="k",
        )
    )
    assert isinstance(openai, OpenAILLM)
    assert (openai.model, openai.url, openai.api_key) == (
        "gpt-4o-mini",
        "http://h:1/v1/chat/completions",
        "k",
    )
    assert isinstance(get_llm(Settings(llm="fewshot")), FewShotLLM)


@pytest.mark.parametrize("prefix", ["us.", "us-gov.", "eu.", "apac.", "jp.", "au.", "ca.",
                                    "global."])
def test_an_agent_may_name_any_geographys_inference_profile(prefix: str) -> None:
    """(jp., au. and ca. profiles fell back to the platform's model.)"""
    model = f"{prefix}anthropic.claude-haiku-4-5-20251001-v1:0"
    assert configured(BedrockLLM(MODEL), LlmSettings(model=model)).model_id == model

"""The bedrock provider against botocore's Stubber: real Converse request and response
shapes, validated by botocore against the service model."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber

from codeshot.errors import LLMError
from codeshot.llm import get_llm
from codeshot.llm.base import ChatMessage
from codeshot.llm.bedrock import BedrockLLM
from codeshot.settings import Settings

MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"
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
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = bedrock_client(
        endpoint_url=f"http://127.0.0.1:{port}",
        config=Config(retries={"max_attempts": 1}, connect_timeout=1),
    )
    with pytest.raises(LLMError, match=r"^Bedrock unreachable: Could not connect"):
        BedrockLLM(MODEL, client=client).complete(MESSAGES, STOP, 100)


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

"""The ``bedrock`` provider: Amazon Bedrock's Converse API, the AWS default.

boto3 is imported only when the first request is made, so importing the engine stays
cheap on a Lambda cold start.
"""

from __future__ import annotations

from typing import Any

from codeshot.errors import LLMError
from codeshot.llm.base import ChatMessage, Completion
from codeshot.settings import Settings


def converse_messages(
    messages: list[ChatMessage],
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Converse ``messages`` and ``system``: system text apart, consecutive turns of one
    role merged (Converse requires user and assistant to alternate)."""
    system = [{"text": m.content} for m in messages if m.role == "system" and m.content]
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system" or not message.content:
            continue
        if turns and turns[-1]["role"] == message.role:
            turns[-1]["content"][0]["text"] += "\n\n" + message.content
        else:
            turns.append({"role": message.role, "content": [{"text": message.content}]})
    return turns, system


class BedrockLLM:
    def __init__(self, model_id: str, settings: Settings | None = None, client: Any = None) -> None:
        self.model_id = model_id
        self._settings = settings
        self._client = client

    def _bedrock(self) -> Any:
        if self._client is None:
            from codeshot.aws import client
            from codeshot.settings import get_settings

            self._client = client("bedrock-runtime", self._settings or get_settings())
        return self._client

    def complete(self, messages: list[ChatMessage], stop: list[str], max_tokens: int) -> Completion:
        from botocore.exceptions import BotoCoreError, ClientError

        turns, system = converse_messages(messages)
        request: dict[str, Any] = {
            "modelId": self.model_id,
            "messages": turns,
            "inferenceConfig": {"maxTokens": max_tokens, "stopSequences": stop, "temperature": 0.0},
        }
        if system:
            request["system"] = system
        try:
            response = self._bedrock().converse(**request)
        except ClientError as exc:
            error = exc.response.get("Error", {})
            raise LLMError(
                f"Bedrock {error.get('Code', 'error')}: {error.get('Message', exc)}"
            ) from exc
        except BotoCoreError as exc:
            raise LLMError(f"Bedrock unreachable: {exc}") from exc
        try:
            blocks = response["output"]["message"]["content"]
            text = "".join(block["text"] for block in blocks if "text" in block)
            usage = response["usage"]
            return Completion(text, int(usage["inputTokens"]), int(usage["outputTokens"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise LLMError(f"Bedrock returned a malformed response ({exc!r})") from exc

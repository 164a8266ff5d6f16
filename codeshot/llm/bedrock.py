"""The ``bedrock`` provider: Amazon Bedrock's Converse API, the AWS default.

boto3 is imported only when the first request is made, so importing the engine stays
cheap on a Lambda cold start.
"""

from __future__ import annotations

import re
from typing import Any

from codeshot.errors import LLMError
from codeshot.llm.base import SERVER_STOPS, ChatMessage, Completion, LlmSettings, cut_at_stops
from codeshot.settings import Settings

# A Bedrock model id or inference profile (an agent's "gpt-4" means nothing here).
BEDROCK_MODEL = re.compile(
    r"arn:aws[\w-]*:bedrock:.+|(?:(?:us|eu|apac|global|us-gov)\.)?"
    r"(?:amazon|anthropic|ai21|cohere|meta|mistral|deepseek|writer|openai|qwen|stability)"
    r"\.[\w.:-]+"
)


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
    def __init__(self, model_id: str, settings: Settings | None = None, client: Any = None,
                 llm_settings: LlmSettings | None = None) -> None:
        self.model_id = model_id
        self._settings = settings
        self._client = client
        self.llm_settings = llm_settings or LlmSettings()

    def with_settings(self, settings: LlmSettings) -> BedrockLLM:
        """An agent's temperature and token limit; its model only when Bedrock has it."""
        model = settings.model if settings.model and BEDROCK_MODEL.fullmatch(settings.model) \
            else self.model_id
        return BedrockLLM(model, self._settings, self._bedrock(),
                          self.llm_settings.merged(settings))

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
            "inferenceConfig": {
                "maxTokens": self.llm_settings.max_tokens(max_tokens),
                "stopSequences": stop[:SERVER_STOPS],
                "temperature": 0.0 if self.llm_settings.temperature is None
                else self.llm_settings.temperature,
            },
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
            return Completion(cut_at_stops(text, stop), int(usage["inputTokens"]),
                              int(usage["outputTokens"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise LLMError(f"Bedrock returned a malformed response ({exc!r})") from exc

"""The ``bedrock`` provider: Amazon Bedrock's Converse API, the AWS default.

A call ends at the query's deadline (:func:`codeshot.llm.base.calls_ending_by`): each
try reads for at most the time left (rounded up to a second; never more than 20 s), and
a throttled, failed or unconnected try is tried again (up to 4 tries, as botocore would)
only while time is left; past the deadline the call raises TIMEOUT.

boto3 is imported only when the first request is made, so importing the engine stays
cheap on a Lambda cold start.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any

from codeshot.errors import LLMError
from codeshot.llm.base import (
    SERVER_STOPS,
    ChatMessage,
    Completion,
    LlmSettings,
    call_ends,
    cut_at_stops,
    out_of_time,
)
from codeshot.settings import Settings

# What starts a cross-Region inference profile's id: its geography, or global.
INFERENCE_PROFILE_PREFIXES = ("us.", "us-gov.", "eu.", "apac.", "jp.", "au.", "ca.", "global.")
# A Bedrock model id or inference profile (an agent's "gpt-4" means nothing here).
BEDROCK_MODEL = re.compile(
    r"arn:aws[\w-]*:bedrock:.+|(?:"
    + "|".join(re.escape(p) for p in INFERENCE_PROFILE_PREFIXES) + r")?"
    r"(?:amazon|anthropic|ai21|cohere|meta|mistral|deepseek|writer|openai|qwen|stability)"
    r"\.[\w.:-]+"
)
MAX_TRIES = 4  # botocore's standard mode: 1 try + 3 retries
BACKOFF = 0.5  # seconds before the second try, doubling
# Bedrock's answers that say the request was not served: worth trying again.
RETRYABLE = frozenset({"ThrottlingException", "ServiceUnavailableException",
                       "InternalServerException", "ModelNotReadyException"})


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
        return BedrockLLM(model, self._settings, self._client,
                          self.llm_settings.merged(settings))

    def _bedrock(self, left: float) -> Any:
        """The client of a try with ``left`` seconds: one reading that long, at most
        ``CODESHOT_LLM_TIMEOUT_SECONDS`` (Converse answers once the whole completion is
        made: a long one takes tens of seconds), rounded up to a whole second (a client
        per second of timeout, 3 ms and 0.14 MB each), and trying once; or the one given,
        as it is (its own timeouts and retries)."""
        if self._client is not None:
            return self._client
        from codeshot.aws import bedrock_client
        from codeshot.settings import get_settings

        settings = self._settings or get_settings()
        return bedrock_client(settings,
                              max(1, math.ceil(min(left, settings.llm_timeout_seconds))))

    def _converse(self, request: dict[str, Any]) -> Any:
        from botocore.exceptions import BotoCoreError, ClientError
        from botocore.exceptions import ConnectionError as NotConnected

        ends = call_ends()
        tries = 0
        cause: Exception
        while True:
            tries += 1
            left = math.inf if ends is None else ends - time.monotonic()
            if left <= 0:
                raise out_of_time()
            try:
                return self._bedrock(left).converse(**request)
            except ClientError as exc:
                error = exc.response.get("Error", {})
                failure = LLMError(f"Bedrock {error.get('Code', 'error')}: "
                                   f"{error.get('Message', exc)}")
                again, cause = error.get("Code") in RETRYABLE, exc
            except BotoCoreError as exc:  # again only if not connected: a read had its time
                failure = LLMError(f"Bedrock unreachable: {exc}")
                again, cause = isinstance(exc, NotConnected), exc
            if ends is not None and time.monotonic() >= ends:
                raise out_of_time() from cause
            wait = BACKOFF * 2 ** (tries - 1)
            if self._client is not None or not again or tries >= MAX_TRIES or \
                    (ends is not None and time.monotonic() + wait >= ends):
                raise failure from cause
            time.sleep(wait)

    def complete(self, messages: list[ChatMessage], stop: list[str], max_tokens: int) -> Completion:
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
        response = self._converse(request)
        try:
            blocks = response["output"]["message"]["content"]
            text = "".join(block["text"] for block in blocks if "text" in block)
            usage = response["usage"]
            return Completion(cut_at_stops(text, stop), int(usage["inputTokens"]),
                              int(usage["outputTokens"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise LLMError(f"Bedrock returned a malformed response ({exc!r})") from exc

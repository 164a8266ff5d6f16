"""The ``openai`` provider: any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM,
Ollama, llama.cpp server). httpx is imported on first use."""

from __future__ import annotations

from typing import Any

from codeshot.errors import LLMError
from codeshot.llm.base import ChatMessage, Completion


class OpenAILLM:
    def __init__(
        self, model: str, base_url: str, api_key: str | None = None, timeout: float = 60.0
    ) -> None:
        self.model = model
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.api_key = api_key
        self.timeout = timeout

    def complete(self, messages: list[ChatMessage], stop: list[str], max_tokens: int) -> Completion:
        import httpx

        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "stop": stop,
            "max_tokens": max_tokens,
            "temperature": 0,
        }
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            response = httpx.post(self.url, json=body, headers=headers, timeout=self.timeout)
        except httpx.TimeoutException as exc:
            raise LLMError(f"{self.url} timed out after {self.timeout:g}s") from exc
        except httpx.HTTPError as exc:
            raise LLMError(f"{self.url} unreachable: {exc}") from exc
        if response.status_code != 200:
            raise LLMError(
                f"{self.url} returned HTTP {response.status_code}: {response.text[:200]}"
            )
        try:
            data = response.json()
            text = data["choices"][0]["message"]["content"]
            usage = data["usage"]
            if not isinstance(text, str):
                raise TypeError("content is not text")
            return Completion(text, int(usage["prompt_tokens"]), int(usage["completion_tokens"]))
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise LLMError(f"{self.url} returned a malformed response ({exc!r})") from exc

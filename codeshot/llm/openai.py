"""The ``openai`` provider: any OpenAI-compatible server (OpenAI, vLLM, Ollama, llama.cpp).

Two endpoints (``CODESHOT_OPENAI_ENDPOINT``): ``chat`` (``/chat/completions``, the
messages as they are) and ``completions`` (``/completions``, for base models: the messages
joined into one prompt that ends where the transcript continues).

Servers differ in what they take; the provider learns it from their refusals, once per
server: a 400 naming ``max_tokens`` (OpenAI's newer models) switches to
``max_completion_tokens``; one naming ``stop`` or ``temperature`` drops that field. Only
four stop sequences go to the server; the text is cut at all of them here. Replies are
streamed, so a reply is dropped as soon as it reaches one of the other stops or repeats a
line (a small model looping) rather than when the token cap ends it; the usage the
server sends last is then estimated (the prompt's characters: 4 ASCII, 2 of other
alphabets or 1 of CJK, Indic or Thai a token; one a piece). A call ends at the query's
deadline, whatever the server sends (TIMEOUT). httpx is imported on first use.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from codeshot.errors import LLMError
from codeshot.llm.base import (
    SERVER_STOPS,
    ChatMessage,
    Completion,
    LlmSettings,
    call_ends,
    cut_at_stops,
    estimated_prompt_tokens,
    out_of_time,
)

ENDPOINTS = ("chat", "completions")
_ADAPTABLE = ("max_tokens", "stop", "temperature", "stream_options")


@dataclass
class _ServerQuirks:
    """What one server refused, shared by every copy of a provider that talks to it."""

    tokens_field: str = "max_tokens"
    dropped: set[str] = field(default_factory=set)

    def adapt(self, status: int, body: Any) -> bool:
        """Learn from a refusal; True when the request is worth sending again."""
        error = body.get("error") if isinstance(body, dict) else None
        if status != 400 or not isinstance(error, dict):
            return False
        message = str(error.get("message", ""))
        param = error.get("param")
        if "max_completion_tokens" in message or param == "max_tokens":
            if self.tokens_field == "max_completion_tokens":
                return False
            self.tokens_field = "max_completion_tokens"
            return True
        if param in _ADAPTABLE and param not in self.dropped:
            self.dropped.add(param)
            return True
        return False


def flatten(messages: list[ChatMessage]) -> str:
    """The messages as one prompt for a completions endpoint; it ends as the transcript
    does, on a new line, so the model writes the next line."""
    return "\n\n".join(m.content.strip("\n") for m in messages if m.content) + "\n"


class OpenAILLM:
    def __init__(
        self,
        model: str,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        endpoint: str = "chat",
        settings: LlmSettings | None = None,
        quirks: _ServerQuirks | None = None,
    ) -> None:
        if endpoint not in ENDPOINTS:
            raise LLMError(f"unknown OpenAI endpoint {endpoint!r}: use chat or completions")
        self.settings = LlmSettings(model=model).merged(settings)
        self.base_url = base_url.rstrip("/")
        self.endpoint = endpoint
        self.url = f"{self.base_url}/{'chat/completions' if endpoint == 'chat' else 'completions'}"
        self.api_key = api_key
        self.timeout = timeout
        self._quirks = quirks or _ServerQuirks()

    @property
    def model(self) -> str | None:
        return self.settings.model

    def with_settings(self, settings: LlmSettings) -> OpenAILLM:
        return OpenAILLM(self.model or "", self.base_url, self.api_key, self.timeout,
                         self.endpoint, self.settings.merged(settings), self._quirks)

    def _body(self, messages: list[ChatMessage], stop: list[str], max_tokens: int
              ) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model}
        if self.endpoint == "chat":
            body["messages"] = [{"role": m.role, "content": m.content} for m in messages]
        else:
            body["prompt"] = flatten(messages)
        optional = {
            "stop": stop[:SERVER_STOPS] or None,
            "temperature": 0 if self.settings.temperature is None else self.settings.temperature,
        }
        body.update({k: v for k, v in optional.items()
                     if v is not None and k not in self._quirks.dropped})
        body[self._quirks.tokens_field] = self.settings.max_tokens(max_tokens)
        body["stream"] = True
        if "stream_options" not in self._quirks.dropped:
            body["stream_options"] = {"include_usage": True}
        return body

    def complete(self, messages: list[ChatMessage], stop: list[str], max_tokens: int) -> Completion:
        import httpx

        from codeshot.net.http import DeadlineTransport, environment_proxy

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        ends = call_ends()
        # httpx's timeout is per read: a model streaming a token a second would go on for
        # as long as it writes. The transport holds every read to the deadline too, through
        # the environment's proxy if it names one.
        try:
            transport = DeadlineTransport(ends, proxy=environment_proxy(self.url))
        except (ValueError, httpx.InvalidURL) as exc:  # a proxy not supported, or malformed
            raise LLMError(f"{self.url}: {exc}") from exc
        client = httpx.Client(transport=transport, timeout=self.timeout)
        try:
            for _ in range(len(_ADAPTABLE) + 1):
                body = self._body(messages, stop, max_tokens)
                with client.stream("POST", self.url, json=body, headers=headers) as response:
                    if response.status_code == 200 and response.headers.get(
                            "content-type", "").startswith("text/event-stream"):
                        return self._read(response.iter_lines(), messages, stop)
                    response.read()
                    if response.status_code == 200:  # a server that does not stream
                        return self._parse(response, stop)
                    try:
                        refusal = response.json()
                    except ValueError:
                        refusal = None
                    if not self._quirks.adapt(response.status_code, refusal):
                        raise LLMError(f"{self.url} returned HTTP {response.status_code}: "
                                       f"{response.text[:200]}")
        except httpx.TimeoutException as exc:
            if ends is not None and time.monotonic() >= ends:
                raise out_of_time() from exc
            raise LLMError(f"{self.url} timed out after {self.timeout:g}s") from exc
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise LLMError(f"{self.url} unreachable: {exc}") from exc
        finally:
            client.close()
        raise LLMError(f"{self.url} refused every form of the request")

    def _parse(self, response: Any, stop: list[str]) -> Completion:
        try:
            data = response.json()
            choice = data["choices"][0]
            text = choice["message"]["content"] if self.endpoint == "chat" else choice["text"]
            if not isinstance(text, str):
                raise TypeError("the reply has no text")
            return Completion(cut_at_stops(text, stop), *_tokens(data.get("usage")))
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise LLMError(f"{self.url} returned a malformed response ({exc!r})") from exc

    def _read(self, lines: Iterator[str], messages: list[ChatMessage], stop: list[str]
              ) -> Completion:
        """The streamed reply, read until it ends, reaches a stop or repeats a line
        (leaving the ``with`` closes the stream, and the server stops generating)."""
        text, chunks, usage = "", 0, None
        try:
            for line in lines:
                data = line.removeprefix("data:").strip()
                if not line.startswith("data:") or not data:
                    continue
                if data == "[DONE]":
                    break
                event = json.loads(data)
                usage = event.get("usage") or usage
                for choice in event.get("choices") or []:
                    piece = (choice.get("delta") or {}).get("content") \
                        if self.endpoint == "chat" else choice.get("text")
                    if not isinstance(piece, str | None):
                        raise TypeError("a streamed piece is not text")
                    text += piece or ""
                    chunks += 1
                if cut_at_stops(text, stop) != text:
                    break  # what follows is cut anyway: stop paying for it
            if usage is None:  # stopped early, or a server that sends no usage: estimated
                usage = {"prompt_tokens": estimated_prompt_tokens(messages),
                         "completion_tokens": chunks}
            return Completion(cut_at_stops(text, stop), *_tokens(usage))
        except (ValueError, AttributeError, TypeError) as exc:
            raise LLMError(f"{self.url} returned a malformed stream ({exc!r})") from exc


def _tokens(usage: object) -> tuple[int, int]:
    """(prompt, completion) tokens of a reply's ``usage``; TypeError for anything but
    counts (a list, ``Infinity`` or ``1e999`` ended the query INTERRUPTED, its tokens
    uncounted)."""
    if usage is None:
        return 0, 0
    if not isinstance(usage, dict):
        raise TypeError("usage is not an object")
    counts = []
    for name in ("prompt_tokens", "completion_tokens"):
        value = usage.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value) or not 0 <= value < 2**31:
            raise TypeError(f"usage.{name} is not a count")
        counts.append(int(value))
    return counts[0], counts[1]

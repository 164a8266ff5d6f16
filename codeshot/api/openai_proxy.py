"""``/api/openai-proxy/v1``: the OpenAI API shapes (chat and legacy completions, plain or
streamed) over :mod:`codeshot.usecases.openai_proxy`, for agents that call the LLM
through the platform as fixieai 1.0.4 set them up (``openai`` 0.27 with the agent-call
token as its key). Errors keep the platform's ``{"error": {"code", "message"}}``, which
the openai client reads as it reads OpenAI's (429 is its RateLimitError)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any, Literal

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from codeshot import ids
from codeshot.api.rest import agent_caller, get_services
from codeshot.errors import InvalidInput
from codeshot.models import Principal
from codeshot.services import Services
from codeshot.usecases.openai_proxy import ChatMessage, Completion, ProxyRequest, complete

router = APIRouter(prefix="/api/openai-proxy/v1")


class ContentPart(BaseModel):
    type: str
    text: str = ""


class ChatTurn(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: str
    content: str | list[ContentPart] | None = None

    def to_chat(self) -> ChatMessage:
        if self.role not in ("system", "user", "assistant"):
            raise InvalidInput(f"messages: role {self.role!r} is not system, user or assistant")
        content = self.content if isinstance(self.content, str) else "".join(
            p.text for p in self.content or [] if p.type == "text")
        return ChatMessage(self.role, content)  # type: ignore[arg-type]  # checked above


class Options(BaseModel):
    model_config = ConfigDict(extra="ignore")  # n, top_p, user...: the platform's model decides
    model: str = ""
    stop: str | list[str] | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    stream: bool = False

    def request(self, messages: list[ChatMessage]) -> ProxyRequest:
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return ProxyRequest(messages, stop, self.max_tokens, self.temperature)


class ChatRequest(Options):
    messages: list[ChatTurn] = Field(min_length=1)


class CompletionRequest(Options):
    prompt: str | list[str]


@router.post("/chat/completions")
def chat_completions(body: ChatRequest, caller: Principal = Depends(agent_caller),
                     services: Services = Depends(get_services)) -> Response:
    completion = complete(services, caller, body.request([m.to_chat() for m in body.messages]))
    return _reply("chat.completion", body, completion, services)


@router.post("/completions")
def completions(body: CompletionRequest, caller: Principal = Depends(agent_caller),
                services: Services = Depends(get_services)) -> Response:
    prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
    if len(prompts) != 1:
        raise InvalidInput("prompt: exactly one prompt per request")
    completion = complete(services, caller, body.request([ChatMessage("user", prompts[0])]))
    return _reply("text_completion", body, completion, services)


Kind = Literal["chat.completion", "text_completion"]


def _reply(kind: Kind, body: Options, completion: Completion, services: Services) -> Response:
    settings = services.settings
    model = settings.llm_model if settings.llm != "fewshot" else "fewshot"
    head = {"id": f"cmpl-{ids.ulid()}", "created": int(time.time()), "model": model}
    chat = kind == "chat.completion"
    if body.stream:
        return StreamingResponse(_events(kind, head, completion.text),
                                 media_type="text/event-stream")
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop"} | (
        {"message": {"role": "assistant", "content": completion.text}} if chat
        else {"text": completion.text, "logprobs": None})
    usage = {"prompt_tokens": completion.input_tokens,
             "completion_tokens": completion.output_tokens,
             "total_tokens": completion.input_tokens + completion.output_tokens}
    return JSONResponse({**head, "object": kind, "choices": [choice], "usage": usage})


def _events(kind: Kind, head: dict[str, Any], text: str) -> Iterator[bytes]:
    """Server-sent events as OpenAI streams them: the text (in one piece: the provider
    answered whole), a finishing chunk, then ``[DONE]``."""
    chat = kind == "chat.completion"
    kind_of_chunk = "chat.completion.chunk" if chat else "text_completion"
    for piece, finish in ((text, None), ("", "stop")):
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish} | (
            {"delta": {"role": "assistant", "content": piece} if piece else {}} if chat
            else {"text": piece, "logprobs": None})
        chunk = {**head, "object": kind_of_chunk, "choices": [choice]}
        yield f"data: {json.dumps(chunk)}\n\n".encode()
    yield b"data: [DONE]\n\n"

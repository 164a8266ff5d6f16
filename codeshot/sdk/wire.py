"""What travels between the platform and an agent: the Fixie 1.0 wire types.

Same names, fields and positional order as ``fixieai.agents.api`` so a ported agent's
``Message("hi")`` or ``AgentResponse(Message("hi"))`` keeps working. One addition: a Func
reply may ask the user something (``needs_input`` + ``question``); the platform pauses
the program and resumes it with the user's answer, or, with ``repeat_on_answer``, calls
the Func again as it was first asked (the user did something outside the conversation,
such as authorizing the agent).
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any
from urllib.parse import unquote_to_bytes

import httpx
from pydantic.dataclasses import dataclass

EMBED_FETCH_TIMEOUT = 30.0
UNHANDLED_TEXT = "I'm sorry, an error occurred while processing your request."


@dataclass
class Embed:
    """A binary object attached to a message: a signed URL or a ``data:`` URI."""

    content_type: str
    uri: str

    @property
    def content(self) -> bytes:
        if self.uri.startswith("data:"):
            header, _, data = self.uri.partition(",")
            # "data:<type>;base64," or Fixie 1.0's own "data:base64," (no media type)
            if header.endswith((";base64", ":base64")):
                return base64.b64decode(data)
            return unquote_to_bytes(data)
        response = httpx.get(self.uri, timeout=EMBED_FETCH_TIMEOUT)
        response.raise_for_status()
        return response.content

    @content.setter
    def content(self, content: bytes) -> None:
        self.uri = f"data:{self.content_type};base64,{base64.b64encode(content).decode()}"

    @property
    def text(self) -> str:
        return self.content.decode("utf-8")

    @text.setter
    def text(self, text: str) -> None:
        self.content = text.encode("utf-8")


@dataclass
class Message:
    text: str
    embeds: dict[str, Embed] = dataclasses.field(default_factory=dict)


@dataclass
class AgentQuery:
    """The body of every call: the message and the caller's token (also sent as Bearer)."""

    message: Message
    access_token: str | None = None


@dataclass
class AgentError:
    code: str
    message: str
    details: dict[str, Any] | None = None


@dataclass
class AgentResponse:
    """A reply. ``needs_input=True`` means: ask the user ``question`` (or the text);
    ``repeat_on_answer``: then call this Func again with the same input."""

    message: Message
    error: AgentError | None = None
    needs_input: bool = False
    question: str | None = None
    repeat_on_answer: bool = False

    def to_wire(self) -> dict[str, Any]:
        """The JSON body; the input fields only when set, so plain replies stay Fixie's shape."""
        body = dataclasses.asdict(self)
        if not self.needs_input:
            del body["needs_input"], body["question"]
        if not self.repeat_on_answer:
            del body["repeat_on_answer"]
        return body


def ask_user(question: str) -> AgentResponse:
    """A Func's reply that pauses the program until the user answers ``question``."""
    return AgentResponse(Message(question), needs_input=True, question=question)


class AgentException(Exception):
    """A failure the platform should see as an error reply (``fixieai`` has the same).

    ``response_message`` is what the user reads; ``error_code`` and ``error_message``
    are for the platform and logs; the HTTP status is the reply's.
    """

    def __init__(
        self,
        response_message: str,
        error_code: str,
        error_message: str,
        http_status_code: int = 500,
        **details: Any,
    ) -> None:
        super().__init__(error_message)
        self.response_message = response_message
        self.error_code = error_code
        self.error_message = error_message
        self.http_status_code = http_status_code
        self.details = details

    def to_response(self) -> AgentResponse:
        error = AgentError(self.error_code, self.error_message, self.details or None)
        return AgentResponse(Message(self.response_message), error=error)

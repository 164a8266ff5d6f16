"""Errors with the stable codes of DESIGN.md.

Every layer raises these; the API turns them into GraphQL ``extensions.code`` or REST
``{"error": {"code", "message"}}`` without knowing where they came from.
"""

from __future__ import annotations

from typing import Any, ClassVar


class CodeshotError(Exception):
    code: ClassVar[str] = "INTERNAL"
    http_status: ClassVar[int] = 500

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            body["details"] = self.details
        return body


class Unauthenticated(CodeshotError):
    code = "UNAUTHENTICATED"
    http_status = 401


class Forbidden(CodeshotError):
    code = "FORBIDDEN"
    http_status = 403


class NotFound(CodeshotError):
    code = "NOT_FOUND"
    http_status = 404


class InvalidInput(CodeshotError):
    code = "INVALID_INPUT"
    http_status = 400


class Conflict(InvalidInput):
    """Input that collides with what exists (a taken handle); still INVALID_INPUT."""


class RateLimited(CodeshotError):
    code = "RATE_LIMITED"
    http_status = 429


class AgentUnavailable(CodeshotError):
    code = "AGENT_UNAVAILABLE"
    http_status = 502


class AgentError(CodeshotError):
    code = "AGENT_ERROR"
    http_status = 502


class LLMError(CodeshotError):
    code = "LLM_ERROR"
    http_status = 502


class Timeout(CodeshotError):
    code = "TIMEOUT"
    http_status = 504

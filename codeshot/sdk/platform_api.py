"""What an agent's Funcs call on the platform (user storage, OAuth): one pooled HTTP
client, and the platform's refusals as the Func's error."""

from __future__ import annotations

import functools

import httpx

from codeshot.sdk.wire import AgentException

TIMEOUT = 10.0


@functools.cache
def http() -> httpx.Client:
    """One pooled client per process (thread-safe); funcs run on worker threads."""
    return httpx.Client(timeout=TIMEOUT, follow_redirects=False)


def refusal(response: httpx.Response, *, service: str, fallback_code: str,
            apology: str) -> AgentException:
    """The platform's refusal ({"error": {"code", "message"}}) as this Func's error;
    ``fallback_code`` when it answered without that body."""
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        code, message = fallback_code, response.text[:200]
    return AgentException(
        response_message=apology,
        error_code=code,
        error_message=f"{service} answered HTTP {response.status_code}: {message}",
        http_status_code=502,
    )

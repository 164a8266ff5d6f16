"""What an agent's Funcs call on the platform (user storage, OAuth): one pooled HTTP
client, and the platform's refusals as the Func's error."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import httpx

from codeshot.sdk.wire import AgentException

TIMEOUT = 10.0


@functools.cache
def http() -> httpx.Client:
    """One pooled client per process (thread-safe); funcs run on worker threads."""
    return httpx.Client(timeout=TIMEOUT, follow_redirects=False)


@dataclass(frozen=True)
class PlatformApi:
    """One of the platform's APIs: its name in errors, the error code of a refusal without
    the platform's error body, and what the user reads when it refuses."""

    service: str
    fallback_code: str
    apology: str

    def call(self, method: str, url: str, token: str, *, absent_ok: bool = False,
             **kwargs: Any) -> httpx.Response:
        """The platform's 2xx answer, called with the request's own ``token``. Any other
        status is raised as its refusal, a redirect too (none is followed: nothing was
        read or written); but 404 is an answer when ``absent_ok`` (reading, testing or
        deleting one thing: to a write or a list it means the call went nowhere, e.g. a
        deleted registration's token or a wrong URL)."""
        response = http().request(method, url, headers={"Authorization": f"Bearer {token}"},
                                  **kwargs)
        if not (response.is_success or (absent_ok and response.status_code == 404)):
            raise self.refusal(response)
        return response

    def refusal(self, response: httpx.Response) -> AgentException:
        """The platform's refusal ({"error": {"code", "message"}}) as this Func's error;
        ``fallback_code`` when it answered without that body."""
        try:
            error = response.json()["error"]
            code, message = str(error["code"]), str(error["message"])
        except (ValueError, KeyError, TypeError):
            code, message = self.fallback_code, response.text[:200]
            if response.is_redirect:
                message = (f"a redirect to {response.headers['location'][:200]}, not "
                           "followed (is CODESHOT_API_URL the platform's API URL?)")
        return AgentException(
            response_message=self.apology,
            error_code=code,
            error_message=f"{self.service} answered HTTP {response.status_code}: {message}",
            http_status_code=502,
        )

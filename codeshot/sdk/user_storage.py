"""``UserStorage``: a dict-like view of one user's storage for this agent on the platform.

Each operation is one call to ``{api_url}/api/userstorage/{agent_id}/{key}`` carrying the
request's own token, so the platform decides whose storage it is from the signed claims.
Values are JSON; bytes anywhere inside are encoded as Fixie does (``_bytes_ascii``).
"""

from __future__ import annotations

import base64
import functools
import json
from collections.abc import Iterator, MutableMapping
from typing import Any
from urllib.parse import quote

import httpx

from codeshot.errors import ERR_USERSTORAGE, ERR_USERSTORAGE_REQUIRES_USER
from codeshot.sdk.auth import Claims
from codeshot.sdk.wire import AgentException

TIMEOUT = 10.0


@functools.cache
def _http() -> httpx.Client:
    """One pooled client per process (thread-safe); funcs run on worker threads."""
    return httpx.Client(timeout=TIMEOUT, follow_redirects=False)


def to_json_type(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"type": "_bytes_ascii", "data": base64.b64encode(value).decode("ascii")}
    if isinstance(value, (list, tuple)):
        return [to_json_type(item) for item in value]
    if isinstance(value, dict):
        return {key: to_json_type(item) for key, item in value.items()}
    return value


def from_json_type(value: Any) -> Any:
    if isinstance(value, dict):
        if value.keys() == {"type", "data"} and value["type"] == "_bytes_ascii":
            return base64.b64decode(value["data"])
        return {key: from_json_type(item) for key, item in value.items()}
    if isinstance(value, list):
        return [from_json_type(item) for item in value]
    return value


class UserStorage(MutableMapping[str, Any]):
    """Fixie 1.0's arguments: the verified token, and the platform's user storage URL
    (default: ``{CODESHOT_API_URL}/api/userstorage``)."""

    def __init__(self, token_claims: Claims, userstorage_url: str | None = None) -> None:
        claims = token_claims
        if userstorage_url is None:
            from codeshot.settings import get_settings

            userstorage_url = get_settings().api_url.rstrip("/") + "/api/userstorage"
        if claims.is_anonymous:
            raise AgentException(
                response_message="I'm sorry, you must log in to use this agent.",
                error_code=ERR_USERSTORAGE_REQUIRES_USER,
                error_message="user storage needs a token issued for a user",
                http_status_code=400,
            )
        self._base = f"{userstorage_url.rstrip('/')}/{claims.agent_id}"
        self._headers = {"Authorization": f"Bearer {claims.token}"}

    def _call(self, method: str, key: str | None = None, **kwargs: Any) -> httpx.Response:
        url = self._base if key is None else f"{self._base}/{quote(str(key), safe='')}"
        response = _http().request(method, url, headers=self._headers, **kwargs)
        if response.status_code >= 400 and response.status_code != 404:
            raise _storage_error(response)
        return response

    def __setitem__(self, key: str, value: Any) -> None:
        self._call("POST", key, json={"data": json.dumps(to_json_type(value))})

    def __getitem__(self, key: str) -> Any:
        response = self._call("GET", key)
        if response.status_code == 404:
            raise KeyError(key)
        return from_json_type(json.loads(response.json()["data"]))

    def __contains__(self, key: object) -> bool:
        return self._call("HEAD", str(key)).status_code == 200

    def __delitem__(self, key: str) -> None:
        if self._call("DELETE", key).status_code == 404:
            raise KeyError(key)

    def _keys(self) -> list[str]:
        return [item["key"] for item in self._call("GET").json()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())


def _storage_error(response: httpx.Response) -> AgentException:
    """The platform's refusal ({"error": {"code", "message"}}) as this Func's error."""
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        code, message = ERR_USERSTORAGE, response.text[:200]
    return AgentException(
        response_message="I'm sorry, I could not use your storage.",
        error_code=code,
        error_message=f"user storage answered HTTP {response.status_code}: {message}",
        http_status_code=502,
    )

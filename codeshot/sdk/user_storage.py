"""``UserStorage``: a dict-like view of one user's storage for this agent on the platform.

Each operation is one call to ``{api_url}/api/userstorage/{agent_id}/{key}`` carrying the
request's own token, so the platform decides whose storage it is from the signed claims.
Values are JSON; bytes anywhere inside are encoded as Fixie does (``_bytes_ascii``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, MutableMapping
from typing import Any
from urllib.parse import quote

import httpx

from codeshot.errors import ERR_USERSTORAGE, ERR_USERSTORAGE_REQUIRES_USER
from codeshot.sdk.auth import Claims
from codeshot.sdk.platform_api import PlatformApi
from codeshot.sdk.wire import AgentException

# Keys that name no key in a URL: HTTP clients resolve "." and ".." as the path's own
# segments (RFC 3986), and "" is the list of keys, so each would be sent elsewhere.
NOT_KEYS = frozenset({"", ".", ".."})
USER_STORAGE_API = PlatformApi("user storage", ERR_USERSTORAGE,
                               "I'm sorry, I could not use your storage.")


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
        self._token = claims.token

    def _call(self, method: str, key: str | None = None, *, absent_ok: bool = False,
              **kwargs: Any) -> httpx.Response:
        """The platform's answer for ``key`` (None: the list of keys); see
        :meth:`PlatformApi.call`."""
        if key is None:
            url = self._base
        elif str(key) in NOT_KEYS:
            raise ValueError(f"{key!r} cannot be a user storage key")
        else:
            url = f"{self._base}/{quote(str(key), safe='')}"
        return USER_STORAGE_API.call(method, url, self._token, absent_ok=absent_ok, **kwargs)

    def __setitem__(self, key: str, value: Any) -> None:
        self._call("POST", key, json={"data": json.dumps(to_json_type(value))})

    def __getitem__(self, key: str) -> Any:
        if key in NOT_KEYS:  # no such key can be stored
            raise KeyError(key)
        response = self._call("GET", key, absent_ok=True)
        if response.status_code == 404:
            raise KeyError(key)
        return from_json_type(json.loads(response.json()["data"]))

    def __contains__(self, key: object) -> bool:
        return str(key) not in NOT_KEYS and \
            self._call("HEAD", str(key), absent_ok=True).status_code != 404

    def __delitem__(self, key: str) -> None:
        if key in NOT_KEYS or self._call("DELETE", key, absent_ok=True).status_code == 404:
            raise KeyError(key)

    def _keys(self) -> list[str]:
        return [item["key"] for item in self._call("GET").json()]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

"""Time-ordered identifiers.

Message ids are ULIDs made monotonic within a process: two messages written in the same
millisecond still sort in the order they were made, which keeps a session's log in order
(one session is processed by one runner at a time, so per-process monotonicity suffices).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import threading
import time

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
ULID_LENGTH = 26
_lock = threading.Lock()
_last_ms = -1
_last_rand = 0


def _encode(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        value, rem = divmod(value, 32)
        chars.append(_CROCKFORD[rem])
    return "".join(reversed(chars))


def ulid(now_ms: int | None = None) -> str:
    """A 26-character ULID, strictly increasing across calls in this process."""
    global _last_ms, _last_rand
    with _lock:
        ms = int(time.time() * 1000) if now_ms is None else now_ms
        if ms <= _last_ms:
            ms, rand = _last_ms, _last_rand + 1
        else:
            rand = int.from_bytes(os.urandom(10), "big") >> 1  # room to increment
        _last_ms, _last_rand = ms, rand
    return _encode(ms, 10) + _encode(rand, 16)


def derived_ulid(ms: int, seed: str) -> str:
    """A ULID of time ``ms`` whose random part is derived from ``seed``: the same id each
    time it is asked for (something that has an id before it is stored)."""
    rand = int.from_bytes(hashlib.sha256(seed.encode()).digest()[:10], "big") >> 1
    return _encode(ms, 10) + _encode(rand, 16)


def is_ulid(value: str) -> bool:
    return len(value) == ULID_LENGTH and all(ch in _CROCKFORD for ch in value)


def ulid_time_ms(value: str) -> int:
    ms = 0
    for ch in value[:10]:
        ms = ms * 32 + _CROCKFORD.index(ch)
    return ms


def handle(nbytes: int = 9) -> str:
    """A short, URL-safe, unguessable handle (sessions, API key ids), never starting with
    '-': a command line would read it as an option (`fixie session open -Gx...`)."""
    while (made := secrets.token_urlsafe(nbytes)).startswith("-"):
        pass
    return made


def task_id(session_id: str, query_id: str) -> str:
    """An A2A task's id: its context (the session) and the user message that began it
    (session handles never hold a '.')."""
    return f"{session_id}.{query_id}"


def split_task_id(value: str) -> tuple[str, str] | None:
    """(session id, query id) of a task id; None if ``value`` is not one."""
    session_id, dot, query_id = value.rpartition(".")
    if not dot or not session_id or not is_ulid(query_id):
        return None
    return session_id, query_id

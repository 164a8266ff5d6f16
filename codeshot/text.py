"""Checks for text that people and agents send the platform, before any of it is stored.

Every stored string has a size cap; names and descriptions are one line, because they
are shown to an LLM (the planner lists agents in its prompt) where a line break would
let the text pose as a line of the prompt's own.
"""

from __future__ import annotations

import re

from codeshot.errors import InvalidInput

# A reply's text is stored in the message and trace items (DynamoDB: 400 KB an item) and
# read by the next LLM call: an agent's larger text is refused, once, instead of failing
# to store; any other step's (a platform Func's result, an answer) is cut to it.
MAX_REPLY_TEXT_BYTES = 100_000

# Every character that ends a line somewhere (str.splitlines, Unicode, terminals), and
# the other C0/C1 controls, which have no place in a one-line name either.
_CONTROLS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def check_text(value: str, what: str, max_chars: int, *, one_line: bool = False) -> str:
    """``value`` if it is valid Unicode (no lone surrogates), has no NUL, is at most
    ``max_chars`` long and, with ``one_line``, has no line break or control character."""
    if len(value) > max_chars:
        raise InvalidInput(f"{what} is {len(value)} characters; the limit is {max_chars}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{what} must be valid Unicode (it has a lone surrogate)") from None
    if "\x00" in value:
        raise InvalidInput(f"{what} must not contain NUL characters")
    if one_line and not is_one_line(value):
        raise InvalidInput(f"{what} must be one line, without line breaks or control "
                           "characters")
    return value


def is_one_line(value: str) -> bool:
    """Whether ``value`` has no line break or control character (as a name must not)."""
    return not _CONTROLS.search(value)


MAX_IDEMPOTENCY_KEY = 128


def check_idempotency_key(key: str) -> str:
    """A client's ``idempotencyKey`` (GraphQL): 1-128 characters, no NUL."""
    if not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY:
        raise InvalidInput(f"idempotencyKey must be 1-{MAX_IDEMPOTENCY_KEY} characters")
    return check_text(key, "idempotencyKey", MAX_IDEMPOTENCY_KEY)


def as_one_line(value: str, max_chars: int) -> str:
    """``value`` on one line (every line break and control character a space), at most
    ``max_chars`` long: for text stored before these checks existed."""
    line = " ".join(_CONTROLS.sub(" ", value).split())
    return line if len(line) <= max_chars else line[: max_chars - 1] + "…"


def cap_bytes(text: str, max_bytes: int = MAX_REPLY_TEXT_BYTES) -> str:
    """``text``, or as much of it as fits ``max_bytes`` of UTF-8 with a note of the cut."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= max_bytes:
        return text
    note = f" … [cut: {len(data):,} bytes in all]"
    kept = data[: max_bytes - len(note.encode())].decode("utf-8", "ignore")
    return kept + note

"""Session callbacks: the platform POSTs each terminal event (response, error,
awaiting_input) to the session's callback URL, signed so the receiver can trust it.

The body is the event as JSON; ``Authorization: Bearer <JWT>`` carries a platform-signed
token (EdDSA, verifiable with the JWKS) whose ``aud`` is the callback URL, ``sid`` the
session and ``body_sha256`` the hash of the exact body sent. Delivery is best effort with
a short timeout and one retry: a slow receiver never holds up a session. The URL is
checked again as it is connected to (:func:`codeshot.net.http.public_client`): DNS may
have changed since the session was made.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from typing import Any

import httpx

from codeshot.errors import CodeshotError
from codeshot.models import Message
from codeshot.net.http import public_client

log = logging.getLogger("codeshot.runner")
EVENT_TYPE = "event"


def event_body(message: Message) -> bytes:
    event = {
        "type": message.type.value,
        "session": message.session_id,
        "message": {"id": message.message_id, "text": message.text,
                    "inReplyTo": message.in_reply_to, "errorCode": message.error_code,
                    "timestamp": message.timestamp.isoformat()},
    }
    return json.dumps(event, separators=(",", ":")).encode()


def event_claims(issuer: str, url: str, session_id: str, body: bytes) -> dict[str, Any]:
    now = int(time.time())
    return {"iss": issuer, "aud": url, "sid": session_id, "iat": now, "exp": now + 300,
            "jti": uuid.uuid4().hex, "typ": EVENT_TYPE,
            "body_sha256": hashlib.sha256(body).hexdigest()}


def deliver(url: str, body: bytes, token: str, *, allow_loopback: bool, timeout: float = 5.0,
            attempts: int = 2) -> bool:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    with public_client(allow_loopback=allow_loopback, timeout=timeout) as client:
        for attempt in range(attempts):
            try:
                response = client.post(url, content=body, headers=headers)
                if response.status_code < 500:
                    return response.is_success
            except CodeshotError as exc:  # the address is refused: retrying cannot help
                log.warning("callback %s refused: %s", url, exc.message)
                return False
            except httpx.HTTPError as exc:
                log.info("callback to %s failed (attempt %d): %s", url, attempt + 1, exc)
    return False


def sign_event(sign: Any, issuer: str, url: str, message: Message) -> tuple[bytes, str]:
    """(body, token) for ``message``; ``sign(claims)`` signs with the platform's key."""
    body = event_body(message)
    return body, sign(event_claims(issuer, url, message.session_id, body))


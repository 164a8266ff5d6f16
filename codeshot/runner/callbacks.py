"""Session callbacks: the platform POSTs each terminal event (response, error,
awaiting_input) to the session's callback URL, signed so the receiver can trust it.

The body is the event as JSON: codeshot's own, or for sessions whose callback is an A2A
push-notification config an A2A ``StreamResponse`` with the task's new status (and the
client's token in ``X-A2A-Notification-Token``). ``Authorization: Bearer <JWT>`` carries
a platform-signed token (EdDSA, verifiable with the JWKS) whose ``aud`` is the callback
URL, ``sid`` the session and ``body_sha256`` the hash of the exact body sent. The URL is
checked again as it is connected to (:func:`codeshot.net.http.public_client`): DNS may
have changed since the session was made.

Delivery is best effort with one retry, and a slow receiver never holds up a session:
only the reply's status is read (never its body), and the delivery ends ``timeout``
seconds after it began, whatever the receiver sends (a byte every few seconds included).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from datetime import UTC
from typing import Any

import httpx

from codeshot import ids
from codeshot.errors import CodeshotError
from codeshot.models import Message, TaskState
from codeshot.net.http import public_client

log = logging.getLogger("codeshot.runner")
EVENT_TYPE = "event"
A2A_FORMAT = "a2a"  # Session.callback_format of an A2A push-notification config
A2A_TOKEN_HEADER = "X-A2A-Notification-Token"  # noqa: S105 - a header's name
# Session.callback_format of an Agent Protocol task's callback_url: only the agent's
# questions go there, as prompts (codeshot.usecases.prompts), nothing is pushed.
PROMPT_FORMAT = "agent-protocol-prompt"


def a2a_status_update(message: Message, task_query: str) -> dict[str, Any]:
    """A2A 1.0's push body (a StreamResponse, protobuf JSON): the task that
    ``task_query`` began in the session (its context) is now in the state this terminal
    message puts it in, with the message."""
    task, context = ids.task_id(message.session_id, task_query), message.session_id
    when = message.timestamp.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"statusUpdate": {"taskId": task, "contextId": context, "status": {
        "state": "TASK_STATE_" + TaskState.of_reply(message).name, "timestamp": when,
        "message": {"messageId": message.message_id, "taskId": task, "contextId": context,
                    "role": "ROLE_AGENT", "parts": [{"text": message.text}]}}}}


def event_body(message: Message, form: str | None = None, task_query: str | None = None
               ) -> bytes:
    if form == A2A_FORMAT:
        update = a2a_status_update(message, task_query or message.in_reply_to or "")
        return json.dumps(update, separators=(",", ":")).encode()
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
            attempts: int = 2, extra_headers: dict[str, str] | None = None) -> bool:
    """POST ``body`` to ``url``: whether it was taken (2xx). All attempts end within
    ``timeout`` seconds; only the status is read."""
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
               **(extra_headers or {})}
    with public_client(allow_loopback=allow_loopback, timeout=timeout,
                       deadline=time.monotonic() + timeout) as client:
        for attempt in range(attempts):
            try:
                with client.stream("POST", url, content=body, headers=headers) as response:
                    if response.status_code < 500:
                        return response.is_success
            except CodeshotError as exc:  # the address is refused: retrying cannot help
                log.warning("callback %s refused: %s", url, exc.message)
                return False
            except httpx.HTTPError as exc:
                log.info("callback to %s failed (attempt %d): %s", url, attempt + 1, exc)
            except UnicodeEncodeError:  # a token stored before tokens were checked
                log.warning("callback %s refused: a header is not ASCII", url)
                return False
    return False


def sign_event(sign: Any, issuer: str, url: str, message: Message,
               form: str | None = None, task_query: str | None = None) -> tuple[bytes, str]:
    """(body, token) for ``message`` (of the A2A task ``task_query`` began, for an A2A
    config; default: the turn's own); ``sign(claims)`` signs with the platform's key."""
    body = event_body(message, form, task_query)
    return body, sign(event_claims(issuer, url, message.session_id, body))


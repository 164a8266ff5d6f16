"""What an agent reads of a request before it knows who sent it: nothing. The token is
checked before the body is read, and a body is read only up to the agent's cap; requests
written byte for byte on a socket, as a hostile caller would send them."""

from __future__ import annotations

import http.client
import json
import socket
from urllib.parse import urlsplit

from codeshot.sdk.app import MAX_BODY_BYTES


def send(url: str, head: str, body: bytes = b"") -> tuple[int, dict]:
    """The reply to a request of ``head`` (its lines, without the blank line) and
    ``body`` as far as it is given; a server waiting for more times out here."""
    address = urlsplit(url)
    with socket.create_connection((address.hostname, address.port), timeout=20) as sock:
        sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n\r\n" + body)
        reply = http.client.HTTPResponse(sock)
        reply.begin()
        return reply.status, json.loads(reply.read())


def test_a_request_without_a_token_is_refused_before_its_body_is_read(sdk_agent):
    status, reply = send(sdk_agent.url, "POST /add HTTP/1.1\nHost: agent\n"
                         "Content-Type: application/json\nContent-Length: 300000000")
    assert status == 401
    assert reply["error"]["code"] == "UNAUTHENTICATED"  # no byte of the 300 MB was sent


def test_a_body_over_the_cap_is_refused_unread(platform, sdk_agent):
    token = platform.services.auth.agent_token(sdk_agent.agent_id, None, None)
    status, reply = send(sdk_agent.url, f"POST /add HTTP/1.1\nHost: agent\n"
                         f"Authorization: Bearer {token}\nContent-Type: application/json\n"
                         f"Content-Length: {MAX_BODY_BYTES + 1}")
    assert status == 413
    assert reply["error"]["code"] == "INVALID_INPUT"
    assert f"over {MAX_BODY_BYTES} bytes" in reply["error"]["message"]


def test_a_body_sent_without_a_length_is_read_only_up_to_the_cap(platform, sdk_agent):
    token = platform.services.auth.agent_token(sdk_agent.agent_id, None, None)
    chunk = b"x" * (MAX_BODY_BYTES + 1)
    status, reply = send(sdk_agent.url, f"POST /add HTTP/1.1\nHost: agent\n"
                         f"Authorization: Bearer {token}\nContent-Type: application/json\n"
                         "Transfer-Encoding: chunked",
                         f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n0\r\n\r\n")
    assert status == 413
    assert reply["error"]["code"] == "INVALID_INPUT"


def test_a_body_too_deep_to_parse_answers_in_the_wire_shape(platform, sdk_agent):
    token = platform.services.auth.agent_token(sdk_agent.agent_id, None, None)
    body = b"[" * 5_000_000
    status, reply = send(sdk_agent.url, f"POST /add HTTP/1.1\nHost: agent\n"
                         f"Authorization: Bearer {token}\nContent-Type: application/json\n"
                         f"Content-Length: {len(body)}", body)
    assert status == 400
    assert reply["error"]["code"] == "INVALID_INPUT"
    assert reply["message"]["text"]  # what the platform shows the user

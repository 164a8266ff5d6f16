"""An HTTP API (API Gateway v2) on loopback: each request becomes a payload format 2.0
event for the function its route integrates, and the function's answer becomes the
response, with API Gateway's rules: a 30 s integration timeout (503), a failed function
is a 500 ``{"message": "Internal Server Error"}``, a non-dict answer is JSON, binary
bodies travel base64-encoded, responses are buffered (no streaming), 10 MB request and
6 MB response limits.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from infra.rehearsal.assembly import ACCOUNT
from infra.rehearsal.lambdas import FunctionError
from infra.rehearsal.loopback import LoopbackServer, reply

INTEGRATION_TIMEOUT_S = 30.0
MAX_REQUEST_BYTES = 10 * 1024 * 1024
MAX_RESPONSE_BYTES = 6 * 1024 * 1024  # Lambda's synchronous response limit
TEXT_TYPES = ("text/", "application/json", "application/xml", "application/graphql",
              "application/x-www-form-urlencoded", "application/javascript")


@dataclass
class Route:
    key: str  # "$default" or "GET /path"
    invoke: Callable[[dict[str, Any]], Any]
    payload_version: str


def v2_event(api_id: str, route_key: str, method: str, target: str, headers: Any,
             body: bytes, source_ip: str, domain: str) -> dict[str, Any]:
    """What API Gateway sends a Lambda integration (payload format 2.0)."""
    parts = urlsplit(target)
    lowered: dict[str, str] = {}
    cookies: list[str] = []
    for key, value in headers.items():
        if key.lower() == "cookie":
            cookies += [c.strip() for c in value.split(";") if c.strip()]
            continue
        name = key.lower()
        lowered[name] = f"{lowered[name]},{value}" if name in lowered else value
    params: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        params[key] = f"{params[key]},{value}" if key in params else value
    content_type = lowered.get("content-type", "")
    is_text = not body or content_type.startswith(TEXT_TYPES)
    now = datetime.now(UTC)
    event: dict[str, Any] = {
        "version": "2.0", "routeKey": route_key, "rawPath": parts.path,
        "rawQueryString": parts.query, "headers": lowered,
        "requestContext": {
            "accountId": ACCOUNT, "apiId": api_id, "domainName": domain,
            "domainPrefix": domain.split(".")[0],
            "http": {"method": method, "path": parts.path, "protocol": "HTTP/1.1",
                     "sourceIp": source_ip, "userAgent": lowered.get("user-agent", "")},
            "requestId": uuid.uuid4().hex[:16], "routeKey": route_key, "stage": "$default",
            "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now.timestamp() * 1000),
        },
        "isBase64Encoded": not is_text,
    }
    if cookies:
        event["cookies"] = cookies
    if params:
        event["queryStringParameters"] = params
    if body:
        event["body"] = body.decode() if is_text else base64.b64encode(body).decode()
    return event


def http_response(answer: Any) -> tuple[int, list[tuple[str, str]], bytes]:
    """A payload 2.0 answer as status, headers and body."""
    if not isinstance(answer, dict) or "statusCode" not in answer:
        return 200, [("Content-Type", "application/json")], json.dumps(answer).encode()
    body = answer.get("body") or ""
    data = base64.b64decode(body) if answer.get("isBase64Encoded") else str(body).encode()
    headers = [(k, str(v)) for k, v in (answer.get("headers") or {}).items()]
    headers += [("Set-Cookie", c) for c in answer.get("cookies") or []]
    return int(answer["statusCode"]), headers, data


class FrontDoor:
    """One HTTP API: routes to functions, served on 127.0.0.1 until stopped."""

    def __init__(self, api_id: str) -> None:
        self.api_id = api_id
        self.routes: dict[str, Route] = {}
        self.requests = 0
        self.loopback = LoopbackServer(self.handle)
        self.url = self.loopback.url

    def add_route(self, route: Route) -> None:
        self.routes[route.key] = route

    def _route(self, method: str, path: str) -> Route | None:
        return self.routes.get(f"{method} {path}") or self.routes.get("$default")

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        self.requests += 1
        length = int(request.headers.get("Content-Length") or 0)
        if length > MAX_REQUEST_BYTES:
            return reply(request, 413, b'{"message":"Request Entity Too Large"}')
        body = request.rfile.read(length) if length else b""
        route = self._route(request.command, urlsplit(request.path).path)
        if route is None:
            return reply(request, 404, b'{"message":"Not Found"}')
        event = v2_event(self.api_id, route.key, request.command, request.path,
                         request.headers, body, request.client_address[0],
                         request.headers.get("Host", "127.0.0.1"))
        started = time.monotonic()
        try:
            status, headers, data = http_response(route.invoke(event))
        except FunctionError:
            if time.monotonic() - started >= INTEGRATION_TIMEOUT_S:
                return reply(request, 503, b'{"message":"Service Unavailable"}')
            return reply(request, 500, b'{"message":"Internal Server Error"}')
        if time.monotonic() - started > INTEGRATION_TIMEOUT_S:
            return reply(request, 503, b'{"message":"Service Unavailable"}')
        if len(data) > MAX_RESPONSE_BYTES:
            return reply(request, 500, b'{"message":"Internal Server Error"}')
        reply(request, status, data, headers)

    def stop(self) -> None:
        self.loopback.stop()

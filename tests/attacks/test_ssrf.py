"""SSRF (#13 items 5-7): addresses that are not global, DNS rebinding between the check
and the connection, and handshake errors that would repeat what a target answered."""

from __future__ import annotations

import json

import httpx
import pytest
from fastapi import FastAPI, Response

from codeshot.local.http_server import HttpServer
from tests.conftest import code
from tests.runner.conftest import send, session

CREATE = """mutation ($h: String!, $u: String!) { createAgent(agentData:
  {handle: $h, queryUrl: $u, funcUrl: $u}) { agent { agentId } } }"""
CREATE_INLINE = """mutation ($h: String!, $u: String!) { createAgent(agentData: {handle: $h,
  funcUrl: $u, basePrompt: "I roll dice.", fewShots: ["Q: Roll 1d20\\nAsk Func[roll]: 1d20\\n\
Func[roll] says: 7\\nA: You rolled 7."]}) { agent { agentId } } }"""
CALLBACK = """mutation ($u: String) { createSession(sessionData: {callbackUrl: $u}) {
  session { handle } } }"""

# Each reaches a host inside some network: CGNAT (some clouds' metadata services), and
# IPv6 forms that carry a private IPv4 address to a gateway that forwards to it.
NOT_GLOBAL = {
    "carrier-grade NAT": "http://100.64.0.1/",
    "CGNAT, top of range": "http://100.127.255.254:8080/",
    "6to4 of loopback": "http://[2002:7f00:1::]/",
    "6to4 of 10.0.0.1": "http://[2002:a00:1::1]/",
    "NAT64 of the metadata service": "http://[64:ff9b::a9fe:a9fe]/",
    "local-use NAT64": "http://[64:ff9b:1::a00:1]/",
    "IPv4-compatible loopback": "http://[::127.0.0.1]/",
    "IPv4-translated 10.0.0.1": "http://[::ffff:0:a00:1]/",
    "IPv4-mapped CGNAT": "http://[::ffff:100.64.0.1]/",
    "Teredo": "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
    "ULA": "http://[fd00:ec2::254]/",
    "IETF protocol assignments": "http://192.0.0.8/",
    "benchmarking": "http://198.18.0.1/",
    "multicast": "http://224.0.0.1/",
}


@pytest.mark.settings(local_mode=False)
def test_every_address_that_is_not_global_is_refused(platform, dns):
    _, key = platform.user("mallory")
    hidden = dns.answer("metadata.attacker.example", ["100.100.100.200"])  # Alibaba's
    for what, url in {**NOT_GLOBAL, "a name for CGNAT": f"http://{hidden}/"}.items():
        out = platform.gql(key, CREATE, {"h": "probe", "u": url})
        assert code(out) == "INVALID_INPUT", what
        assert code(platform.gql(key, CALLBACK, {"u": url})) == "INVALID_INPUT", what
    assert platform.services.registry.scan_all() == []
    assert platform.gql(key, "{ allSessions { handle } }")["data"]["allSessions"] == []


@pytest.mark.settings(local_mode=False)
def test_a_name_answering_public_and_private_at_once_is_refused(platform, dns):
    _, key = platform.user("mallory")
    name = dns.answer("mixed.attacker.example", ["8.8.8.8", "127.0.0.1"])
    assert code(platform.gql(key, CREATE, {"h": "mixed", "u": f"http://{name}/"})) \
        == "INVALID_INPUT"


@pytest.mark.settings(local_mode=False)
def test_dns_rebinding_never_reaches_the_loopback_service(live, dns, internal):
    """The name answers a public address to the check, then loopback: the platform
    connects only to addresses it checked, for Func calls, handshakes and callbacks."""
    _, key = live.user("mallory")
    funcs = dns.answer("funcs.attacker.example", ["8.8.8.8"], ["127.0.0.1"])
    url = f"http://{funcs}:{internal.port}/"
    out = live.gql(key, CREATE_INLINE, {"h": "rebound", "u": url})
    assert "errors" not in out, out  # the check saw 8.8.8.8
    h = session(live, key, frontend="mallory/rebound")
    reply = send(live, key, h, "Roll 1d20")["reply"]
    assert reply["type"] == "error" and "127.0.0.1" in reply["text"], reply

    handshake = dns.answer("hs.attacker.example", ["8.8.8.8"], ["127.0.0.1"])
    out = live.gql(key, CREATE, {"h": "rebound2", "u": f"http://{handshake}:{internal.port}/"})
    assert code(out) == "INVALID_INPUT" and "127.0.0.1" in out["errors"][0]["message"]

    hook = dns.answer("hook.attacker.example", ["8.8.8.8"], ["127.0.0.1"])
    out = live.gql(key, CALLBACK, {"u": f"http://{hook}:{internal.port}/events"})
    hooked = out["data"]["createSession"]["session"]["handle"]
    live.gql(key, """mutation ($s: String!) { sendSessionMessage(messageData: {session: $s,
        text: "hello"}) { reply { id } } }""", {"s": hooked})
    assert internal.hits == []

    # The attack is real: a client that resolves again on its own reaches the service.
    naive = dns.answer("naive.attacker.example", ["8.8.8.8"], ["127.0.0.1"])
    import socket
    assert socket.getaddrinfo(naive, 80)[0][4][0] == "8.8.8.8"  # what a check would see
    assert httpx.get(f"http://{naive}:{internal.port}/latest").status_code == 200
    assert internal.hits == ["GET /latest"]


SECRET = "AKIA-INTERNAL-SECRET-7731"
TARGETS = {
    "html": (200, "text/html", f"<html><title>Router admin</title><p>{SECRET}</p></html>"),
    "json keys": (200, "application/json",
                  json.dumps({"aws_secret_access_key": SECRET, "type": 12})),
    "yaml": (200, "application/yaml", f"type: code_shot\nfew_shots: {SECRET}\n"),
    "error page": (500, "application/json",
                   json.dumps({"detail": SECRET, "stack": ["at internal.py"]})),
    "teapot": (418, "text/plain", SECRET),
}


@pytest.fixture(scope="module")
def target():
    """Public services that are not agents, answering the handshake with what they have."""
    app = FastAPI()

    @app.get("/{name}/")
    def page(name: str) -> Response:
        status, media_type, body = TARGETS[name.replace("-", " ")]
        return Response(body, status_code=status, media_type=media_type)

    server = HttpServer(app, "127.0.0.1", 0)
    yield server.start()
    server.stop()


def test_handshake_errors_never_repeat_what_the_target_answered(platform, target):
    _, key = platform.user("mallory")
    for name in TARGETS:
        out = platform.gql(key, CREATE, {"h": "probe", "u": f"{target}/{name.replace(' ', '-')}"})
        message = out["errors"][0]["message"]
        assert code(out) == "AGENT_ERROR", (name, out)
        for leaked in (SECRET, "aws_secret_access_key", "Router admin", "stack", "detail"):
            assert leaked not in json.dumps(out), (name, message)
    assert platform.services.registry.scan_all() == []

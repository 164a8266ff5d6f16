"""Refused credentials and one user never seeing another's data."""

import base64
import hashlib
import json
from datetime import UTC, datetime, timedelta

import httpx
import jwt
import pytest
from nacl.signing import SigningKey

from codeshot.auth import tokens
from codeshot.auth.keys import SIGNING_DELAY_SECONDS
from codeshot.errors import NotFound
from codeshot.models import utcnow
from tests.conftest import code, signing_time

USER_QUERY = "{ user { username } }"


def forge(claims: dict, kid: str) -> str:
    return tokens.sign(claims, kid, SigningKey.generate())


def tamper(token: str, **changes) -> str:
    head, body, sig = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    claims.update(changes)
    new = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{head}.{new}.{sig}"


def test_bad_api_keys_are_refused(platform):
    user_id, key = platform.user("alice")
    kid = jwt.get_unverified_header(key)["kid"]
    issuer = platform.services.settings.api_url
    claims = jwt.decode(key, options={"verify_signature": False})
    agent_token = platform.services.auth.agent_token("alice/x", user_id, None)
    cases = {
        "missing": None,
        "malformed": "not-a-jwt",
        "tampered": tamper(key, sub="u_someone_else"),
        "forged": forge(claims, kid),
        "wrong audience": platform.services.auth.sign({**claims, "aud": "https://elsewhere"}),
        "wrong issuer": platform.services.auth.sign({**claims, "iss": "https://evil"}),
        "agent token as API key": agent_token,
        "HS256": jwt.encode(claims, "s" * 32, algorithm="HS256", headers={"kid": kid}),
    }
    for name, bad in cases.items():
        result = platform.gql(bad, USER_QUERY)
        assert code(result) == "UNAUTHENTICATED", name
        assert result["data"] is None, name
    assert platform.gql(key, USER_QUERY)["data"]["user"]["username"] == "alice"
    assert issuer in claims["iss"]


def test_revoked_key_is_refused_and_others_keep_working(platform):
    user_id, key1 = platform.user("bob")
    user = platform.services.users.get(user_id)
    key2 = platform.services.auth.issue_api_key(user)
    platform.services.auth.revoke_api_key(
        user, jwt.decode(key1, options={"verify_signature": False})["jti"]
    )
    result = platform.gql(key1, USER_QUERY)
    assert code(result) == "UNAUTHENTICATED" and "revoked" in result["errors"][0]["message"]
    assert platform.gql(key2, USER_QUERY)["data"]["user"]["username"] == "bob"


def test_keys_signed_before_a_rotation_still_verify(platform):
    _, key = platform.user()
    platform.services.keyring.rotate()
    platform.clock.now = utcnow() + timedelta(seconds=SIGNING_DELAY_SECONDS)  # it signs now
    _, newer = platform.user()
    assert jwt.get_unverified_header(key)["kid"] != jwt.get_unverified_header(newer)["kid"]
    for k in (key, newer):
        assert "errors" not in platform.gql(k, USER_QUERY)
    kids = {k["kid"] for k in httpx.get(f"{platform.url}/.well-known/jwks.json").json()["keys"]}
    assert len(kids) == 2


SESSION = "query ($h: String!) { sessionByHandle(handle: $h) { handle messages { text } } }"


def test_user_b_cannot_touch_user_a_sessions(platform, echo_runner):
    _, a = platform.user("anna")
    _, b = platform.user("bert")
    h = platform.gql(a, "mutation { createSession { session { handle } } }")["data"][
        "createSession"
    ]["session"]["handle"]
    platform.gql(
        a,
        "mutation ($s: String!) { sendSessionMessage(messageData: "
        '{session: $s, text: "secret"}) { message { id } } }',
        {"s": h},
    )
    assert code(platform.gql(b, SESSION, {"h": h})) == "NOT_FOUND"
    assert (
        code(
            platform.gql(
                b,
                "mutation ($h: String!) { deleteSession(handle: $h) { session { handle } } }",
                {"h": h},
            )
        )
        == "NOT_FOUND"
    )
    assert (
        code(
            platform.gql(
                b,
                "mutation ($s: String!) { sendSessionMessage(messageData: "
                '{session: $s, text: "hi", wait: false}) { message { id } } }',
                {"s": h},
            )
        )
        == "NOT_FOUND"
    )
    # Guessing handles does not help either: a missing and a foreign session look the same.
    missing = platform.gql(b, SESSION, {"h": "no-such-session"})
    foreign = platform.gql(b, SESSION, {"h": h})
    assert (
        missing["errors"][0]["message"].replace("no-such-session", h)
        == foreign["errors"][0]["message"]
    )
    assert platform.gql(b, "{ allSessions { handle } }")["data"]["allSessions"] == []
    texts = [
        m["text"] for m in platform.gql(a, SESSION, {"h": h})["data"]["sessionByHandle"]["messages"]
    ]
    assert texts == ["secret", "echo: secret"]


SEND_EMBED = """mutation ($s: String!, $e: [EmbedInput!]) {
  sendSessionMessage(messageData: {session: $s, text: "see #1", embeds: $e, wait: false}) {
    message { id embeds { key contentHash url } } } }"""


def new_session(platform, key):
    return platform.gql(key, "mutation { createSession { session { handle } } }")["data"][
        "createSession"
    ]["session"]["handle"]


def test_embeds_private_immutable_and_expiring(platform):
    _, a = platform.user("embedder")
    _, b = platform.user("snoop")
    h = new_session(platform, a)
    data = b"attachment bytes"
    sent = platform.gql(
        a,
        SEND_EMBED,
        {
            "s": h,
            "e": [
                {
                    "key": "1",
                    "contentType": "text/plain",
                    "content": base64.b64encode(data).decode(),
                }
            ],
        },
    )
    embed = sent["data"]["sendSessionMessage"]["message"]["embeds"][0]
    assert embed["contentHash"] == hashlib.sha256(data).hexdigest()
    assert httpx.get(embed["url"]).content == data

    # B sees nothing of A's embeds.
    q = "query ($h: String!) { sessionByHandle(handle: $h) { embeds { key } } }"
    assert code(platform.gql(b, q, {"h": h})) == "NOT_FOUND"

    # The key is bound: other bytes under "1" are refused, and S3 keeps the original.
    again = platform.gql(
        a,
        SEND_EMBED,
        {
            "s": h,
            "e": [
                {
                    "key": "1",
                    "contentType": "text/plain",
                    "content": base64.b64encode(b"evil").decode(),
                }
            ],
        },
    )
    assert code(again) == "INVALID_INPUT"
    # An upload URL for that hash lets B (or A) put bytes only in their own upload place,
    # and only the bytes hashing to it: S3 keeps the original.
    upload = platform.services.embeds.put_url("u_snoop", embed["contentHash"], "text/plain", 4)
    assert httpx.put(upload["url"], content=b"evil", headers=upload["headers"]).status_code in (
        400,
        403,
    )
    assert platform.services.embeds.read(embed["contentHash"]) == data

    # Signed URLs expire.
    with signing_time(datetime.now(UTC) - timedelta(minutes=10)):
        short = platform.services.embeds.get_url(embed["contentHash"], expires_in=60)
    assert httpx.get(short).status_code == 403


def test_large_embeds_go_through_a_presigned_upload(platform):
    _, a = platform.user()
    h = new_session(platform, a)
    data = bytes(range(256)) * 2048  # 512 KiB: over the inline limit
    digest = hashlib.sha256(data).hexdigest()
    inline = platform.gql(
        a,
        SEND_EMBED,
        {
            "s": h,
            "e": [
                {
                    "key": "big",
                    "contentType": "application/octet-stream",
                    "content": base64.b64encode(data).decode(),
                }
            ],
        },
    )
    assert code(inline) in ("INVALID_INPUT",)
    up = platform.gql(
        a,
        """mutation ($t: String!, $n: Int!, $h: String!) {
        createEmbedUpload(contentType: $t, size: $n, contentHash: $h) { url headers { name value } }
        }""",
        {"t": "application/octet-stream", "n": len(data), "h": digest},
    )
    target = up["data"]["createEmbedUpload"]
    headers = {x["name"]: x["value"] for x in target["headers"]}
    assert httpx.put(target["url"], content=data, headers=headers).status_code == 200
    sent = platform.gql(
        a,
        SEND_EMBED,
        {
            "s": h,
            "e": [{"key": "big", "contentType": "application/octet-stream", "contentHash": digest}],
        },
    )
    assert sent["data"]["sendSessionMessage"]["message"]["embeds"][0]["contentHash"] == digest
    # A hash nobody uploaded is refused, and nothing is stored.
    before = len(platform.services.sessions.all_messages(h))
    missing = platform.gql(
        a,
        SEND_EMBED,
        {"s": h, "e": [{"key": "2", "contentType": "text/plain", "contentHash": "0" * 64}]},
    )
    assert code(missing) == "NOT_FOUND"
    assert len(platform.services.sessions.all_messages(h)) == before


@pytest.mark.parametrize(
    ("text", "expected"), [("", "must not be empty"), ("x" * 16_001, "limit"), ("nul\x00byte", "NUL")]
)
def test_bad_messages_store_nothing(platform, text, expected):
    _, a = platform.user()
    h = new_session(platform, a)
    result = platform.gql(
        a,
        "mutation ($s: String!, $t: String!) { sendSessionMessage("
        "messageData: {session: $s, text: $t, wait: false}) "
        "{ message { id } } }",
        {"s": h, "t": text},
    )
    assert code(result) == "INVALID_INPUT" and expected in result["errors"][0]["message"]
    assert platform.services.sessions.all_messages(h) == []
    assert platform.gql(a, "{ user { dailyUsedQueries } }")["data"]["user"]["dailyUsedQueries"] == 0


def test_request_limits(platform):
    _, a = platform.user()
    r = httpx.post(
        f"{platform.url}/graphql",
        content=b"x" * (5 * 1024 * 1024),
        headers={"Authorization": f"Bearer {a}", "Content-Type": "application/json"},
    )
    assert r.status_code == 413 and r.json()["error"]["code"] == "INVALID_INPUT"
    assert "errors" not in platform.gql(a, "{ allSessions { messages { inReplyTo { id } } } }")
    aliases = "{ " + " ".join(f"a{i}: allSessions {{ handle }}" for i in range(50)) + " }"
    result = platform.gql(a, aliases)
    assert code(result) == "INVALID_INPUT" and result.get("data") is None
    tokens_flood = "{ user { " + "username " * 3000 + "} }"
    assert code(platform.gql(a, tokens_flood)) == "INVALID_INPUT"


def streamed(body: bytes, size: int = 65536):
    """A body sent without a Content-Length (chunked), as a generator makes httpx send it."""
    for start in range(0, len(body), size):
        yield body[start:start + size]


# One route of each family: GraphQL, REST, the console (signed in, and its forms that need
# no credentials), MCP.
ROUTES = ["/graphql", "/api/agents/alice/x", "/api/refresh/alice/x", "/console/sessions",
          "/console/auth/sign-in", "/console/auth/sign-up", "/console/auth/confirm", "/mcp"]


@pytest.mark.parametrize("path", ROUTES)
def test_a_streamed_body_over_the_limit_is_413_everywhere(platform, path, caplog):
    """Before, the body was refused mid-read inside the route: 500 INTERNAL with a logged
    traceback on the console (even its sign-in forms, to anyone) and MCP, 400 on REST, and
    a route that did not read its body answered as if there were none."""
    _, key = platform.user()
    form = path.startswith("/console")
    r = httpx.post(platform.url + path, content=streamed(b"a" * (5 * 1024 * 1024)), timeout=30,
                   headers={"Authorization": f"Bearer {key}", "Content-Type":
                            "application/x-www-form-urlencoded" if form else "application/json"})
    assert r.status_code == 413, (r.status_code, r.text[:200])
    assert r.json() == {"error": {"code": "INVALID_INPUT",
                                  "message": "request body exceeds 4194304 bytes"}}
    assert not [rec for rec in caplog.records if rec.levelname == "ERROR"]


def test_a_streamed_body_within_the_limit_is_read_whole(platform):
    """The body read ahead of the app is given to it whole: a query padded to just under
    the limit, sent in chunks, is answered."""
    _, key = platform.user("streamer")
    head = b'{"query": "{ user { username } }", "variables": {"pad": "'
    tail = b'"}}'
    body = head + b"a" * (4 * 1024 * 1024 - len(head) - len(tail)) + tail
    r = httpx.post(platform.url + "/graphql", content=streamed(body), timeout=30,
                   headers={"Authorization": f"Bearer {key}",
                            "Content-Type": "application/json"})
    assert r.status_code == 200 and r.json() == {"data": {"user": {"username": "streamer"}}}


def test_internal_errors_do_not_leak(platform, monkeypatch):
    _, a = platform.user()

    def boom(*args, **kwargs):
        raise RuntimeError("secret internals at /var/task/codeshot")

    monkeypatch.setattr(platform.services.usage, "used", boom)
    result = platform.gql(a, "{ user { dailyUsedQueries } }")
    assert code(result) == "INTERNAL"
    assert "secret" not in json.dumps(result) and "Traceback" not in json.dumps(result)


def test_a_bad_embed_key_is_refused_and_nothing_is_stored_or_charged(platform):
    user_id, a = platform.user("badkey")
    h = new_session(platform, a)
    bad = platform.gql(a, SEND_EMBED, {"s": h, "e": [
        {"key": "no spaces!", "contentType": "text/plain",
         "content": base64.b64encode(b"x").decode()}]})
    assert code(bad) == "INVALID_INPUT" and "embed key" in bad["errors"][0]["message"]
    assert platform.services.sessions.all_messages(h) == []
    assert platform.services.usage.used("query", user_id) == 0
    with pytest.raises(NotFound):  # nor did its bytes reach S3
        platform.services.embeds.read(hashlib.sha256(b"x").hexdigest())

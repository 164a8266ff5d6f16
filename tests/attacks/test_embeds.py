"""Embeds (#13 items 1, 2, 14): another user's bytes cannot be bound by their hash (nor
their existence learnt), an upload URL cannot replace or poison content, and active
content is never served as itself."""

from __future__ import annotations

import base64
import hashlib

import httpx
import pytest
from fastapi import FastAPI

from codeshot import aws
from codeshot.errors import NotFound
from codeshot.local.http_server import HttpServer
from tests.conftest import code
from tests.runner.conftest import send, session

SEND = """mutation ($s: String!, $e: [EmbedInput!]) { sendSessionMessage(messageData:
  {session: $s, text: "see #doc", embeds: $e, wait: false}) {
  message { id embeds { key contentHash contentType url } } } }"""
UPLOAD = """mutation ($t: String!, $n: Int!, $h: String!) { createEmbedUpload(contentType: $t,
  size: $n, contentHash: $h) { url headers { name value } } }"""


def inline(data: bytes, content_type: str = "text/plain", key: str = "doc") -> dict:
    return {"key": key, "contentType": content_type, "content": base64.b64encode(data).decode()}


def by_hash(digest: str, content_type: str = "text/plain") -> dict:
    return {"key": "doc", "contentType": content_type, "contentHash": digest}


def upload(platform, key: str, data: bytes, content_type: str = "text/plain",
           body: bytes | None = None, headers: bool = True) -> int:
    """createEmbedUpload for ``data``, then PUT ``body`` (default: ``data``) to it."""
    out = platform.gql(key, UPLOAD, {"t": content_type, "n": len(data),
                                     "h": hashlib.sha256(data).hexdigest()})
    target = out["data"]["createEmbedUpload"]
    sent = {h["name"]: h["value"] for h in target["headers"]} if headers else {}
    return httpx.put(target["url"], content=data if body is None else body,
                     headers=sent).status_code


def test_another_users_embed_cannot_be_bound_by_its_hash(platform):
    victim_id, victim = platform.user("vera")
    attacker_id, attacker = platform.user("mallory")
    secret, large = b"vera's medical record", b"vera's scan " * 40_000
    platform.gql(victim, SEND, {"s": session(platform, victim), "e": [inline(secret)]})
    assert upload(platform, victim, large, "application/octet-stream") == 200
    platform.gql(victim, SEND, {"s": session(platform, victim),
                                "e": [by_hash(hashlib.sha256(large).hexdigest(),
                                              "application/octet-stream")]})

    h = session(platform, attacker)
    used = platform.services.usage.used("query", attacker_id)
    answers = {}
    for what, digest in (("right guess", hashlib.sha256(secret).hexdigest()),
                         ("right guess of an upload", hashlib.sha256(large).hexdigest()),
                         ("wrong guess", hashlib.sha256(b"nothing like it").hexdigest())):
        out = platform.gql(attacker, SEND, {"s": h, "e": [by_hash(digest)]})
        assert code(out) == "NOT_FOUND", (what, out)
        answers[what] = out["errors"][0]["message"].replace(digest, "<hash>")
    assert len(set(answers.values())) == 1, answers  # no oracle: each says the same
    # Asking for an upload URL of that hash does not make the victim's bytes one's own.
    platform.gql(attacker, UPLOAD, {"t": "text/plain", "n": len(secret),
                                    "h": hashlib.sha256(secret).hexdigest()})
    assert code(platform.gql(attacker, SEND, {"s": h, "e": [
        by_hash(hashlib.sha256(secret).hexdigest())]})) == "NOT_FOUND"
    assert platform.services.sessions.all_messages(h) == []
    assert platform.services.sessions.list_embeds(h) == []
    assert platform.services.usage.used("query", attacker_id) == used
    assert victim_id != attacker_id


def test_an_upload_url_cannot_replace_or_poison_content(platform):
    _, victim = platform.user("vera")
    _, attacker = platform.user("mallory")
    content = b"the contract, as signed"
    digest = hashlib.sha256(content).hexdigest()
    poison = b"the contract, as forged"  # same length
    # Claimed in advance: the attacker's URL for that hash takes neither other bytes, nor
    # the same request without its signed checksum and length headers.
    assert upload(platform, attacker, content, body=poison) == 400
    assert upload(platform, attacker, content, body=poison, headers=False) == 403
    # The victim's own upload and post of the content are theirs, unaffected.
    assert upload(platform, victim, content) == 200
    out = platform.gql(victim, SEND, {"s": session(platform, victim), "e": [by_hash(digest)]})
    assert httpx.get(out["data"]["sendSessionMessage"]["message"]["embeds"][0]["url"]).content \
        == content
    # A content name already holding other bytes (written before uploads had their own
    # place) is not trusted on its 412: the platform checks and replaces them.
    other = b"an invoice, to be paid"
    s3 = aws.client("s3", platform.services.settings)
    s3.put_object(Bucket=platform.services.embeds.bucket,
                  Key=platform.services.embeds.object_key(hashlib.sha256(other).hexdigest()),
                  Body=b"an invoice, pay mallory", ContentType="text/plain")
    out = platform.gql(victim, SEND, {"s": session(platform, victim), "e": [inline(other)]})
    url = out["data"]["sendSessionMessage"]["message"]["embeds"][0]["url"]
    assert httpx.get(url).content == other


def test_a_post_refused_for_its_quota_stores_no_embed_bytes(platform):
    user_id, key = platform.user("spent", daily_query_limit=1)
    h = session(platform, key)
    assert "errors" not in platform.gql(key, SEND, {"s": h, "e": []})
    large = b"uploaded, never sent " * 1000
    assert upload(platform, key, large) == 200
    for data, embed in ((b"new bytes, stored for free?", inline(b"new bytes, stored for free?")),
                        (large, by_hash(hashlib.sha256(large).hexdigest()))):
        assert code(platform.gql(key, SEND, {"s": h, "e": [embed]})) == "RATE_LIMITED"
        with pytest.raises(NotFound):  # not copied to the platform's content either
            platform.services.embeds.read(hashlib.sha256(data).hexdigest())
    assert len(platform.services.sessions.all_messages(h)) == 1
    assert platform.services.usage.used("upload_bytes", user_id) == len(large)


def _stored(platform, data: bytes) -> bool:
    try:
        platform.services.embeds.read(hashlib.sha256(data).hexdigest())
    except NotFound:
        return False
    return True


@pytest.mark.parametrize("refused", ["no such upload", "an upload of other bytes",
                                     "a key bound to other bytes"])
def test_a_refused_post_stores_and_charges_nothing(platform, refused):
    """Whatever refuses a post, its other embeds' bytes never reach S3: a refused post
    stores nothing that its sender is not charged for (before, each refused post of 12
    inline embeds and a missing upload left 3 MB, uncharged, post after post)."""
    user_id, key = platform.user()
    h = session(platform, key)
    assert "errors" not in platform.gql(key, SEND, {"s": h, "e": [inline(b"first", key="a")]})
    used = (platform.services.usage.used("query", user_id),
            platform.services.usage.used("upload_bytes", user_id))
    sent = [b"%d free bytes?" % n for n in range(5)]
    embeds = [inline(data, key=f"k{n}") for n, data in enumerate(sent)]
    if refused == "a key bound to other bytes":
        embeds.append(inline(b"other bytes", key="a"))
        want = "INVALID_INPUT"
    else:
        other = b"uploaded by hand, not through its URL"
        digest = hashlib.sha256(b"what it claims to be").hexdigest()
        if refused == "an upload of other bytes":
            aws.client("s3", platform.services.settings).put_object(
                Bucket=platform.services.embeds.bucket, Body=other,
                Key=platform.services.embeds.upload_key(user_id, digest))
        embeds.append(by_hash(digest) | {"key": "last"})
        want = "NOT_FOUND" if refused == "no such upload" else "INVALID_INPUT"
    assert code(platform.gql(key, SEND, {"s": h, "e": embeds})) == want
    assert not any(_stored(platform, data) for data in [*sent, b"other bytes"])
    assert (platform.services.usage.used("query", user_id),
            platform.services.usage.used("upload_bytes", user_id)) == used
    assert [e.key for e in platform.services.sessions.list_embeds(h)] == ["a"]


@pytest.mark.settings(daily_upload_bytes=1000)
def test_an_upload_url_asked_for_again_is_charged_once(platform):
    user_id, key = platform.user()

    def ask(data: bytes, size: int) -> dict:
        return platform.gql(key, UPLOAD, {"t": "text/plain", "n": size,
                                          "h": hashlib.sha256(data).hexdigest()})

    for _ in range(3):  # a retry, or a URL that expired, asks for the same bytes again
        assert "errors" not in ask(b"a", 600)
    assert platform.services.usage.used("upload_bytes", user_id) == 600
    # Another size is another request (only one size can hash to it): charged, refused.
    assert code(ask(b"a", 700)) == "RATE_LIMITED"
    assert "errors" not in ask(b"b", 400)  # other bytes fill the day's allowance
    assert code(ask(b"c", 1)) == "RATE_LIMITED"
    assert "errors" not in ask(b"a", 600)  # still free: charged already today
    assert platform.services.usage.used("upload_bytes", user_id) == 1000


@pytest.fixture
def page_agent():
    """A standalone agent whose answer carries an HTML page as a data: URI embed."""
    app = FastAPI()
    page = base64.b64encode(b"<script>steal(document.cookie)</script>").decode()

    @app.get("/")
    def handshake() -> dict:
        return {"type": "standalone", "sample_queries": ["Show the page"]}

    @app.post("/")
    def answer() -> dict:
        return {"message": {"text": "Here it is: #page", "embeds": {
            "page": {"content_type": "text/html", "uri": f"data:text/html;base64,{page}"}}}}

    server = HttpServer(app, "127.0.0.1", 0)
    yield server.start()
    server.stop()


ACTIVE = {"text/html": b"<script>steal(document.cookie)</script>",
          "image/svg+xml": b'<svg xmlns="http://www.w3.org/2000/svg" onload="steal()"/>',
          "application/xhtml+xml": b"<html xmlns='http://www.w3.org/1999/xhtml'/>",
          "text/javascript": b"steal()"}


def test_active_embeds_are_served_as_downloads(live, page_agent):
    _, key = live.user("mallory")
    h = session(live, key)
    for i, (content_type, data) in enumerate(ACTIVE.items()):
        out = live.gql(key, SEND, {"s": h, "e": [inline(data, content_type, f"x{i}")]})
        got = httpx.get(out["data"]["sendSessionMessage"]["message"]["embeds"][0]["url"])
        assert got.content == data
        assert got.headers["content-disposition"] == "attachment", content_type
        assert got.headers["content-type"].split(";")[0] in (
            "text/plain", "application/octet-stream"), content_type
    png = live.gql(key, SEND, {"s": h, "e": [inline(b"\x89PNG\r\n", "image/png", "pic")]})
    got = httpx.get(png["data"]["sendSessionMessage"]["message"]["embeds"][0]["url"])
    assert got.headers["content-type"] == "image/png"  # passive types stay viewable

    out = live.gql(key, """mutation ($u: String!) { createAgent(agentData: {handle: "pages",
        queryUrl: $u}) { agent { agentId } } }""", {"u": page_agent})
    assert "errors" not in out, out
    h = session(live, key, frontend="mallory/pages")
    send(live, key, h, "Show the page")
    reply = live.gql(key, """query ($h: String!) { sessionByHandle(handle: $h) {
        messages { type embeds { key url } } } }""", {"h": h})
    [page] = [e for m in reply["data"]["sessionByHandle"]["messages"]
              if m["type"] == "response" for e in m["embeds"]]
    got = httpx.get(page["url"])
    assert got.content.startswith(b"<script>")
    assert got.headers["content-disposition"] == "attachment"
    assert got.headers["content-type"].startswith("text/plain")

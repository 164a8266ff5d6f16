import hashlib
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from codeshot.errors import InvalidInput, NotFound
from codeshot.store.embeds import EmbedStore
from tests.conftest import signing_time


def test_same_bytes_same_name_and_never_overwritten(aws):
    store = EmbedStore(aws)
    digest = store.put(b"hello", "text/plain")
    assert digest == hashlib.sha256(b"hello").hexdigest()
    assert store.put(b"hello", "text/plain") == digest
    assert store.read(digest) == b"hello"


def test_bad_input_is_refused(aws):
    store = EmbedStore(aws)
    with pytest.raises(InvalidInput, match="content type"):
        store.put(b"x", "not a type")
    with pytest.raises(InvalidInput, match="exceeds"):
        store.put(b"x" * (aws.max_embed_bytes + 1), "application/octet-stream")
    with pytest.raises(InvalidInput, match="SHA-256"):
        store.get_url("../../etc/passwd")
    with pytest.raises(NotFound):
        store.read("0" * 64)


def test_presigned_put_then_get_over_http(server_aws):
    store = EmbedStore(server_aws)
    data = b"\x89PNG fake image bytes"
    digest = hashlib.sha256(data).hexdigest()
    upload = store.put_url("u_alice", digest, "image/png", len(data))
    r = httpx.put(upload["url"], content=data, headers=upload["headers"])
    assert r.status_code == 200, r.text
    assert store.claim_upload("u_alice", digest, "image/png") == len(data)
    got = httpx.get(store.get_url(digest, "image/png"))
    assert got.status_code == 200 and got.content == data
    assert got.headers["content-type"] == "image/png"


def test_an_upload_url_delivers_only_its_own_bytes(server_aws):
    store = EmbedStore(server_aws)
    claimed = hashlib.sha256(b"what I said").hexdigest()
    upload = store.put_url("u_bob", claimed, "text/plain", 9)
    other = httpx.put(upload["url"], content=b"something", headers=upload["headers"])
    assert other.status_code == 400 and b"BadDigest" in other.content
    bare = httpx.put(upload["url"], content=b"something")  # the signed headers left out
    assert bare.status_code == 403 and b"SignatureDoesNotMatch" in bare.content
    with pytest.raises(NotFound, match="no upload"):
        store.claim_upload("u_bob", claimed, "text/plain")


def test_an_upload_url_never_overwrites(server_aws):
    store = EmbedStore(server_aws)
    data = b"uploaded once"
    digest = hashlib.sha256(data).hexdigest()
    upload = store.put_url("u_cleo", digest, "text/plain", len(data))
    assert "if-none-match" in parse_qs(urlsplit(upload["url"]).query)["X-Amz-SignedHeaders"][0]
    assert httpx.put(upload["url"], content=data, headers=upload["headers"]).status_code == 200
    again = httpx.put(upload["url"], content=data, headers=upload["headers"])
    assert again.status_code == 412  # already there: the uploader can bind it
    headers = {k: v for k, v in upload["headers"].items() if k != "If-None-Match"}
    assert httpx.put(upload["url"], content=data, headers=headers).status_code == 403


def test_other_bytes_under_a_content_name_are_replaced_without_an_unconditional_put(
        server_aws):
    """The bucket policy refuses PutObject without If-None-Match in AWS (moto does not
    evaluate bucket policies): every put the store makes carries it, and the bytes that
    were replaced stay as a noncurrent version."""
    store = EmbedStore(server_aws)
    good, bad = b"the real bytes", b"something else"
    key = store.object_key(hashlib.sha256(good).hexdigest())
    store.s3.put_object(Bucket=store.bucket, Key=key, Body=bad)  # by hand, before the rule
    puts: list[dict] = []
    store.s3.meta.events.register("provide-client-params.s3.PutObject",
                                  lambda params, **_: puts.append(params))
    assert store.read(store.put(good, "text/plain")) == good
    assert store.put(good, "text/plain") == hashlib.sha256(good).hexdigest()
    assert len(puts) == 3 and all(p["IfNoneMatch"] == "*" for p in puts)
    versions = store.s3.list_object_versions(Bucket=store.bucket, Prefix=key)["Versions"]
    kept = [v for v in versions if not v["IsLatest"]]
    old = store.s3.get_object(Bucket=store.bucket, Key=key, VersionId=kept[0]["VersionId"])
    assert old["Body"].read() == bad


def test_presigned_get_expires(server_aws):
    store = EmbedStore(server_aws)
    digest = store.put(b"short-lived", "text/plain")
    assert httpx.get(store.get_url(digest, expires_in=60)).status_code == 200
    with signing_time(datetime.now(UTC) - timedelta(minutes=10)):
        expired = store.get_url(digest, expires_in=60)  # valid from 10 to 9 minutes ago
    assert httpx.get(expired).status_code == 403

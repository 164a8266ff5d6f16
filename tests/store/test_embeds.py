import hashlib
from datetime import UTC, datetime, timedelta

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
    assert store.head(digest) == {"size": 5, "content_type": "text/plain"}


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
    upload = store.put_url(digest, "image/png", len(data))
    r = httpx.put(upload["url"], content=data, headers=upload["headers"])
    assert r.status_code == 200, r.text
    assert store.verify(digest) == len(data)
    got = httpx.get(store.get_url(digest))
    assert got.status_code == 200 and got.content == data


def test_presigned_put_cannot_overwrite(server_aws):
    store = EmbedStore(server_aws)
    digest = store.put(b"original", "text/plain")
    upload = store.put_url(digest, "text/plain", len(b"evil!!!!"))
    r = httpx.put(upload["url"], content=b"evil!!!!", headers=upload["headers"])
    assert r.status_code in (400, 403, 412)
    assert store.read(digest) == b"original"


def test_wrong_bytes_under_a_hash_are_detected(server_aws):
    store = EmbedStore(server_aws)
    claimed = hashlib.sha256(b"what I said").hexdigest()
    upload = store.put_url(claimed, "text/plain", 9)
    r = httpx.put(upload["url"], content=b"something", headers=upload["headers"])
    if r.status_code == 200:  # S3 checks x-amz-checksum-sha256; if not, verify() must
        with pytest.raises(InvalidInput, match="do not match"):
            store.verify(claimed)
    else:
        assert r.status_code in (400, 403)


def test_presigned_get_expires(server_aws):
    store = EmbedStore(server_aws)
    digest = store.put(b"short-lived", "text/plain")
    assert httpx.get(store.get_url(digest, expires_in=60)).status_code == 200
    with signing_time(datetime.now(UTC) - timedelta(minutes=10)):
        expired = store.get_url(digest, expires_in=60)  # valid from 10 to 9 minutes ago
    assert httpx.get(expired).status_code == 403

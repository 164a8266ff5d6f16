"""User storage over REST exactly as the Fixie 1.0 SDK calls it, scoped by the JWT."""

import json
import time
from datetime import UTC, datetime

import httpx
import jwt
import pytest

from codeshot.auth import tokens


def storage(platform, token, method, path, **kw):
    return httpx.request(method, f"{platform.url}/api/userstorage/{path}",
                         headers={"Authorization": f"Bearer {token}"}, **kw)


def test_round_trip_with_fixie_shapes(platform):
    user_id, _ = platform.user("alice")
    token = platform.services.auth.agent_token("alice/notes", user_id, "s1")
    value = {"n": 1, "b": {"type": "_bytes_ascii", "data": "AAEC"}}
    r = storage(platform, token, "POST", "alice/notes/my key", json={"data": json.dumps(value)})
    assert r.status_code == 200
    got = storage(platform, token, "GET", "alice/notes/my key")
    assert got.status_code == 200 and json.loads(got.json()["data"]) == value
    assert storage(platform, token, "HEAD", "alice/notes/my key").status_code == 200
    assert storage(platform, token, "HEAD", "alice/notes/other").status_code == 404
    assert storage(platform, token, "GET", "alice/notes").json() == [{"key": "my key"}]
    assert storage(platform, token, "DELETE", "alice/notes/my key").status_code == 200
    assert storage(platform, token, "DELETE", "alice/notes/my key").status_code == 404
    missing = storage(platform, token, "GET", "alice/notes/my key")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "NOT_FOUND"


def test_scope_comes_from_the_token_not_the_url(platform):
    alice, _ = platform.user("alice2")
    bob, _ = platform.user("bob2")
    a_token = platform.services.auth.agent_token("x/notes", alice, None)
    b_token = platform.services.auth.agent_token("x/notes", bob, None)
    storage(platform, a_token, "POST", "x/notes/secret", json={"data": "\"alice's\""})
    assert storage(platform, b_token, "GET", "x/notes/secret").status_code == 404
    assert storage(platform, b_token, "GET", "x/notes").json() == []
    # A token for one agent cannot reach another agent's storage.
    other = storage(platform, a_token, "GET", "x/other/secret")
    assert other.status_code == 403 and other.json()["error"]["code"] == "FORBIDDEN"
    anon = platform.services.auth.agent_token("x/notes", None, None)
    assert storage(platform, anon, "GET", "x/notes/secret").status_code == 403


def test_bad_tokens_are_refused(platform):
    user_id, api_key = platform.user("carl")
    auth = platform.services.auth
    good = auth.agent_token("carl/a", user_id, None)
    claims = jwt.decode(good, options={"verify_signature": False})
    key = platform.services.keyring.signing_key()
    expired = tokens.sign({**claims, "iat": int(time.time()) - 900,
                           "exp": int(time.time()) - 600}, key.kid, key.private_key())
    wrong_aud = tokens.sign({**claims, "aud": "https://app.fixie.ai/api"}, key.kid,
                            key.private_key())
    for bad in (None, "junk", expired, wrong_aud, api_key, good[:-4] + "AAAA"):
        headers = {"Authorization": f"Bearer {bad}"} if bad else {}
        r = httpx.get(f"{platform.url}/api/userstorage/carl/a", headers=headers)
        assert r.status_code == 401, bad
        assert r.json()["error"]["code"] == "UNAUTHENTICATED"
    assert storage(platform, good, "GET", "carl/a").status_code == 200


def test_bad_values_write_nothing(platform):
    user_id, _ = platform.user("dora")
    token = platform.services.auth.agent_token("dora/a", user_id, None)
    big = json.dumps("x" * 100_001)
    r = storage(platform, token, "POST", "dora/a/k", json={"data": big})
    assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_INPUT"
    r = storage(platform, token, "POST", "dora/a/k", json={"nodata": 1})
    assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_INPUT"
    assert storage(platform, token, "GET", "dora/a").json() == []


@pytest.mark.settings(storage_rate_limit=5)
def test_rate_limit_per_user_and_agent(platform):
    user_id, _ = platform.user("eve")
    token = platform.services.auth.agent_token("eve/a", user_id, None)
    # The whole burst falls inside one one-minute window, whenever the test runs.
    platform.clock.now = datetime.now(UTC).replace(second=1, microsecond=0)
    codes = [storage(platform, token, "GET", "eve/a").status_code for _ in range(7)]
    assert codes == [200] * 5 + [429] * 2
    r = storage(platform, token, "GET", "eve/a")
    assert r.json()["error"]["code"] == "RATE_LIMITED"
    assert "resets_at" in r.json()["error"]["details"]
    other = platform.services.auth.agent_token("eve/b", user_id, None)
    assert storage(platform, other, "GET", "eve/b").status_code == 200


@pytest.mark.settings(storage_rate_limit=2)
def test_refused_input_does_not_spend_the_rate_limit(platform):
    user_id, _ = platform.user("fay")
    token = platform.services.auth.agent_token("fay/a", user_id, None)
    platform.clock.now = datetime.now(UTC).replace(second=1, microsecond=0)
    refused = [storage(platform, token, "POST", "fay/a/k", json={"data": "not json"}),
               storage(platform, token, "POST", "fay/a/k", json={"data": json.dumps("x" * 200_000)}),
               storage(platform, token, "POST", "fay/a/" + "k" * 600, json={"data": "1"}),
               storage(platform, token, "GET", "fay/a/" + "k" * 600),
               storage(platform, token, "DELETE", "fay/a/%20")]
    assert [r.json()["error"]["code"] for r in refused] == ["INVALID_INPUT"] * 5
    # The two calls of the minute are all still there.
    assert storage(platform, token, "POST", "fay/a/k", json={"data": "1"}).status_code == 200
    assert storage(platform, token, "GET", "fay/a/k").json() == {"data": "1"}
    assert storage(platform, token, "GET", "fay/a").status_code == 429


@pytest.mark.settings(max_storage_keys=2)
def test_an_agent_keeps_at_most_so_many_keys_per_user(platform):
    """600 writes a minute of 100 KB values had no total: CODESHOT_MAX_STORAGE_KEYS is."""
    user_id, _ = platform.user("hoarder")
    token = platform.services.auth.agent_token("h/notes", user_id, None)

    def put(key):
        return storage(platform, token, "POST", f"h/notes/{key}", json={"data": "1"})

    assert [put(k).status_code for k in ("a", "b", "a")] == [200, 200, 200]  # a replaced
    full = put("c")
    assert full.status_code == 400 and full.json()["error"]["code"] == "INVALID_INPUT"
    assert "delete some" in full.json()["error"]["message"]
    assert storage(platform, token, "GET", "h/notes/c").status_code == 404  # nothing written
    assert storage(platform, token, "DELETE", "h/notes/a").status_code == 200
    assert storage(platform, token, "DELETE", "h/notes/a").status_code == 404  # counted once
    assert put("c").status_code == 200 and put("d").status_code == 400
    assert storage(platform, token, "GET", "h/notes").json() == [{"key": "b"}, {"key": "c"}]
    other, _ = platform.user("tidy")  # per user
    other_token = platform.services.auth.agent_token("h/notes", other, None)
    assert storage(platform, other_token, "POST", "h/notes/a",
                   json={"data": "1"}).status_code == 200

"""User storage over REST exactly as the Fixie 1.0 SDK calls it, scoped by the JWT."""

import json
import time
from datetime import UTC, datetime

import httpx
import jwt
import pytest

from codeshot.auth import tokens
from codeshot.store.user_storage import Holder
from codeshot.usecases import accounts


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


def refused(r, message):
    """UNAUTHENTICATED with ``message`` (HEAD: the status, as it has no body)."""
    return r.status_code == 401 and (r.request.method == "HEAD" or r.json()["error"] == {
        "code": "UNAUTHENTICATED", "message": message})


def every_call(platform, token, path):
    """Each storage call of the Fixie SDK, on ``path`` (owner/handle): a read, the list,
    a test, a write, a delete."""
    return [storage(platform, token, "GET", f"{path}/k"),
            storage(platform, token, "GET", path),
            storage(platform, token, "HEAD", f"{path}/k"),
            storage(platform, token, "POST", f"{path}/k", json={"data": "2"}),
            storage(platform, token, "DELETE", f"{path}/k")]


def test_a_deleted_users_call_tokens_neither_read_nor_write_and_recreate_nothing(platform):
    """Minted before the deletion (a call in flight) or after it (a query of theirs still
    queued): every storage call is refused as their API keys are, and a write lands
    nothing where the erasure has deleted their items."""
    user_id, _ = platform.user("gil")
    before = platform.services.auth.agent_token("gil/notes", user_id, "s1")
    assert storage(platform, before, "POST", "gil/notes/k", json={"data": "1"}).status_code == 200
    accounts.delete_user(platform.services, "gil")
    platform.services.storage.drop_scope(user_id, "gil/notes", 100)  # as the erasure does
    after = platform.services.auth.agent_token("gil/notes", user_id, "s1")
    for token in (before, after):
        assert all(refused(r, "this user has been deleted")
                   for r in every_call(platform, token, "gil/notes"))
    holder = Holder(user_id, "gil/notes", 0)
    assert platform.services.storage.list_keys(holder).items == []


def test_a_disabled_users_call_tokens_are_refused_until_they_are_enabled_again(platform):
    user_id, _ = platform.user("hal")
    token = platform.services.auth.agent_token("hal/notes", user_id, "s1")
    assert storage(platform, token, "POST", "hal/notes/k", json={"data": "1"}).status_code == 200
    accounts.set_disabled(platform.services, "hal", True)
    assert all(refused(r, "this user has been disabled by an operator")
               for r in every_call(platform, token, "hal/notes"))
    holder = Holder(user_id, "hal/notes", 0)
    assert platform.services.storage.get(holder, "k") == "1"  # the refused write wrote nothing
    accounts.set_disabled(platform.services, "hal", False)
    assert [r.status_code for r in every_call(platform, token, "hal/notes")] == [200] * 5


def test_a_call_token_for_no_stored_user_is_refused(platform):
    token = platform.services.auth.agent_token("ivy/notes", "u_never_made", "s1")
    assert refused(storage(platform, token, "GET", "ivy/notes"), "this user does not exist")


def test_every_route_taking_call_tokens_refuses_a_disabled_users(platform):
    """The OpenAI proxy and OAuth take call tokens as storage does: a disabled user's
    agents spend no LLM tokens and reach no OAuth token of theirs."""
    user_id, _ = platform.user("jon")
    token = platform.services.auth.agent_token("jon/asker", user_id, "s1")
    accounts.set_disabled(platform.services, "jon", True)
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    calls = [("POST", "/api/openai-proxy/v1/chat/completions", chat),
             ("POST", "/api/openai-proxy/v1/completions", {"prompt": "hi"}),
             ("POST", "/api/oauth/authorizations",
              {"authUri": "https://provider.example/authorize", "clientId": "c"}),
             ("GET", "/api/oauth/token", None),
             ("PUT", "/api/oauth/token", {"token": {"access_token": "t"}})]
    for method, path, body in calls:
        r = httpx.request(method, platform.url + path, json=body,
                          headers={"Authorization": f"Bearer {token}"})
        assert refused(r, "this user has been disabled by an operator"), path
    assert platform.services.oauth.get_token(user_id, "jon/asker") is None

"""One's own API keys over GraphQL: listed by id and creation time, created (the key
shown once), revoked (refused at once); another user's keys look absent."""

from datetime import UTC, datetime, timedelta

import pytest

from codeshot.usecases.users import MAX_API_KEYS
from tests.conftest import code

KEYS = "{ apiKeys { id created current } }"
CREATE = "mutation { createApiKey { id created key } }"
REVOKE = "mutation ($id: String!) { revokeApiKey(id: $id) { id current } }"


def test_create_list_revoke(platform):
    user_id, key = platform.user()
    before = datetime.now(UTC) - timedelta(seconds=5)
    first = platform.gql(key, KEYS)["data"]["apiKeys"]
    assert len(first) == 1 and first[0]["current"] is True

    made = platform.gql(key, CREATE)["data"]["createApiKey"]
    new_id, new_key = made["id"], made["key"]
    created = datetime.fromisoformat(made["created"])
    assert before <= created <= datetime.now(UTC) + timedelta(seconds=5)
    # The new key works, and only its id is stored: never the key.
    assert platform.gql(new_key, "{ user { username } }")["data"]["user"]["username"]
    stored = platform.services.users.get(user_id)
    assert new_id in stored.api_key_ids and new_key not in str(stored.to_dict())

    listed = platform.gql(new_key, KEYS)["data"]["apiKeys"]
    assert [k["id"] for k in listed] == [first[0]["id"], new_id]  # oldest first
    assert [k["current"] for k in listed] == [False, True]

    revoked = platform.gql(new_key, REVOKE, {"id": first[0]["id"]})["data"]["revokeApiKey"]
    assert revoked == {"id": first[0]["id"], "current": False}
    assert code(platform.gql(key, KEYS)) == "UNAUTHENTICATED"  # the next request is refused
    assert [k["id"] for k in platform.gql(new_key, KEYS)["data"]["apiKeys"]] == [new_id]


def test_revoking_the_key_in_use_refuses_the_next_request(platform):
    _, key = platform.user()
    spare = platform.gql(key, CREATE)["data"]["createApiKey"]["key"]
    [in_use] = [k for k in platform.gql(key, KEYS)["data"]["apiKeys"] if k["current"]]
    assert platform.gql(key, REVOKE, {"id": in_use["id"]})["data"]["revokeApiKey"]["current"]
    refused = platform.gql(key, KEYS)
    assert code(refused) == "UNAUTHENTICATED" and "revoked" in refused["errors"][0]["message"]
    assert len(platform.gql(spare, KEYS)["data"]["apiKeys"]) == 1


def test_the_last_key_stays(platform):
    _, key = platform.user()
    [last] = platform.gql(key, KEYS)["data"]["apiKeys"]
    refused = platform.gql(key, REVOKE, {"id": last["id"]})
    assert code(refused) == "INVALID_INPUT" and "create another" in refused["errors"][0]["message"]
    assert platform.gql(key, KEYS)["data"]["apiKeys"] == [last]  # still works


def test_another_users_key_looks_absent_and_stays_active(platform):
    _, alice = platform.user()
    bob_id, bob = platform.user()
    bob_key = platform.gql(bob, KEYS)["data"]["apiKeys"][0]["id"]
    assert code(platform.gql(alice, REVOKE, {"id": bob_key})) == "NOT_FOUND"
    assert code(platform.gql(alice, REVOKE, {"id": "key_nonsense"})) == "NOT_FOUND"
    assert bob_key in platform.services.users.get(bob_id).api_key_ids
    assert platform.gql(bob, KEYS)["data"]["apiKeys"][0]["id"] == bob_key


@pytest.mark.slow
def test_active_keys_are_bounded(platform):
    user_id, key = platform.user()
    for _ in range(MAX_API_KEYS - 1):
        assert "errors" not in platform.gql(key, CREATE)
    refused = platform.gql(key, CREATE)
    assert code(refused) == "INVALID_INPUT" and "revoke one" in refused["errors"][0]["message"]
    assert len(platform.services.users.get(user_id).api_key_ids) == MAX_API_KEYS


def test_keys_need_a_user(platform):
    assert code(platform.gql(None, KEYS)) == "UNAUTHENTICATED"
    assert code(platform.gql("not-a-key", CREATE)) == "UNAUTHENTICATED"


def test_quota_tells_when_it_resets(platform):
    platform.clock.now = datetime(2026, 3, 4, 22, 15, tzinfo=UTC)
    _, key = platform.user()
    user = platform.gql(key, "{ user { dailyUsedQueries dailyQuotaResetsAt } }")["data"]["user"]
    assert user == {"dailyUsedQueries": 0, "dailyQuotaResetsAt": "2026-03-05T00:00:00+00:00"}


CREATE_ONCE = "mutation ($k: String) { createApiKey(idempotencyKey: $k) { id key } }"


def test_a_retried_create_api_key_returns_the_key_it_made_and_creates_none(platform):
    """A client whose answer was lost sent createApiKey again: a second key was made, and
    the first, which nobody ever saw, stayed active and counted toward the most."""
    import httpx

    _, key = platform.user()
    body = {"query": CREATE_ONCE, "variables": {"k": "laptop-2026-11-26"}}
    with pytest.raises(httpx.ReadTimeout):  # the answer is lost; the request still runs
        httpx.post(f"{platform.url}/graphql", json=body, timeout=httpx.Timeout(5, read=1e-4),
                   headers={"Authorization": f"Bearer {key}"})
    retried = platform.gql(key, CREATE_ONCE, {"k": "laptop-2026-11-26"})["data"]["createApiKey"]
    again = platform.gql(key, CREATE_ONCE, {"k": "laptop-2026-11-26"})["data"]["createApiKey"]
    assert again == retried  # the very same key, signed again from its id and time
    listed = [k["id"] for k in platform.gql(key, KEYS)["data"]["apiKeys"]]
    assert len(listed) == 2 and listed[1] == retried["id"]
    assert platform.gql(retried["key"], "{ user { username } }")["data"]["user"]["username"]
    # Another key is another key; another user's same idempotency key is theirs.
    other = platform.gql(key, CREATE_ONCE, {"k": "phone"})["data"]["createApiKey"]
    _, bob = platform.user()
    bobs = platform.gql(bob, CREATE_ONCE, {"k": "laptop-2026-11-26"})["data"]["createApiKey"]
    assert len({retried["id"], other["id"], bobs["id"]}) == 3
    assert len(platform.gql(key, KEYS)["data"]["apiKeys"]) == 3


def test_a_retried_key_counts_once_toward_the_most(platform):
    user_id, key = platform.user()
    for n in range(MAX_API_KEYS - 2):  # one below the most
        platform.services.users.add_key(user_id, f"key_filler{n}")
    last = platform.gql(key, CREATE_ONCE, {"k": "last"})["data"]["createApiKey"]
    # Its retry is that key, not "revoke one first"; a new request is refused.
    assert platform.gql(key, CREATE_ONCE, {"k": "last"})["data"]["createApiKey"] == last
    refused = platform.gql(key, CREATE_ONCE, {"k": "one more"})
    assert code(refused) == "INVALID_INPUT" and "revoke one" in refused["errors"][0]["message"]
    assert len(platform.services.users.get(user_id).api_key_ids) == MAX_API_KEYS


def test_a_retry_of_a_revoked_key_is_refused_and_makes_none(platform):
    user_id, key = platform.user()
    made = platform.gql(key, CREATE_ONCE, {"k": "ci"})["data"]["createApiKey"]
    platform.gql(key, REVOKE, {"id": made["id"]})
    refused = platform.gql(key, CREATE_ONCE, {"k": "ci"})
    assert code(refused) == "INVALID_INPUT" and "revoked" in refused["errors"][0]["message"]
    assert len(platform.services.users.get(user_id).api_key_ids) == 1
    assert code(platform.gql(made["key"], KEYS)) == "UNAUTHENTICATED"


@pytest.mark.parametrize(("bad", "why"), [("", "1-128 characters"), ("k" * 129, "1-128 characters"),
                                          ("a\x00b", "NUL")])
def test_a_bad_idempotency_key_is_refused_and_makes_none(platform, bad, why):
    user_id, key = platform.user()
    refused = platform.gql(key, CREATE_ONCE, {"k": bad})
    assert code(refused) == "INVALID_INPUT", refused
    assert "idempotencyKey" in refused["errors"][0]["message"] and \
        why in refused["errors"][0]["message"]
    assert len(platform.services.users.get(user_id).api_key_ids) == 1


def test_the_consoles_create_a_key_sent_twice_makes_one_key(platform):
    """The console's button posted no idempotency key: a double click, or htmx resending
    after a lost answer, made a second key nobody saw. The button carries its page's own."""
    import re

    import httpx

    _, key = platform.user()
    page = {"Authorization": f"Bearer {key}", "HX-Request": "true", "HX-Target": "main"}
    account = httpx.get(f"{platform.url}/console/account", headers=page)
    (post,) = re.findall(r'hx-post="(/console/account/keys\?once=[^"]+)"', account.text)
    made = [httpx.post(f"{platform.url}{post}", headers=page) for _ in range(2)]
    shown = [re.findall(r"value=\"(ey[^\"]+)\"", m.text) for m in made]
    assert all(m.status_code == 200 for m in made) and shown[0] == shown[1] and shown[0]
    assert len(platform.gql(key, KEYS)["data"]["apiKeys"]) == 2  # the first key, one more
    # the answer's button is a new form: its key makes another
    again = re.findall(r'hx-post="(/console/account/keys\?once=[^"]+)"', made[1].text)
    assert again and again != [post]

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

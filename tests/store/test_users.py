import threading
import time

import pytest

from codeshot.errors import Conflict, InvalidInput, NotFound
from codeshot.models import MAX_DAILY_LIMIT
from codeshot.store.users import UserStore


def test_create_get_and_lookup_by_username(aws):
    users = UserStore(aws)
    u = users.create("alice", email="a@example.com")
    assert users.get(u.user_id) == u
    assert users.get_by_username("alice") == u
    with pytest.raises(NotFound):
        users.get_by_username("nobody")
    with pytest.raises(NotFound):
        users.get("@alice")  # the guard item is not a user


def test_usernames_are_unique_even_when_racing(aws):
    users = UserStore(aws)
    made, taken = [], []
    barrier = threading.Barrier(10)

    def worker() -> None:
        barrier.wait()
        try:
            made.append(users.create("bob"))
        except Conflict:
            taken.append(1)

    threads = [threading.Thread(target=worker) for _ in range(10)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(made) == 1 and len(taken) == 9
    assert users.get_by_username("bob") == made[0]


def test_bad_username_is_refused(aws):
    with pytest.raises(InvalidInput, match="username"):
        UserStore(aws).create("Not Valid!")


def test_api_key_ids_added_and_revoked(aws):
    users = UserStore(aws)
    u = users.create("carol")
    users.add_key(u.user_id, "k1")
    users.add_key(u.user_id, "k2")
    assert users.get(u.user_id).api_key_ids == {"k1", "k2"}
    users.revoke_key(u.user_id, "k1")
    assert users.get(u.user_id).api_key_ids == {"k2"}
    with pytest.raises(NotFound):
        users.add_key("u_missing", "k")


def race(*calls) -> list[object]:
    """Run the calls at once; each one's result or the error it raised."""
    barrier, out = threading.Barrier(len(calls)), [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        try:
            out[i] = calls[i]()
        except Exception as exc:  # what the caller would see
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    [t.start() for t in threads]
    [t.join() for t in threads]
    return out


def test_two_revokes_at_once_never_take_a_users_last_key(aws):
    """Each revoke checked "not the last key" on a record it had read: two at once both
    passed, and a user with no account was locked out for good (2 of 5 tries)."""
    users = UserStore(aws)
    for attempt in range(5):
        user = users.create(f"dora{attempt}")
        users.add_key(user.user_id, "k1")
        users.add_key(user.user_id, "k2")
        outcomes = race(lambda u=user: users.revoke_key(u.user_id, "k1"),
                        lambda u=user: users.revoke_key(u.user_id, "k2"))
        assert sorted(type(o).__name__ for o in outcomes) == ["LastApiKey", "NoneType"]
        assert len(users.get(user.user_id).api_key_ids) == 1
    with pytest.raises(NotFound):  # a key the user does not have (another's) looks absent
        users.revoke_key(user.user_id, "k-other")


def test_a_user_with_an_account_may_revoke_the_last_key(aws):
    users = UserStore(aws)
    user = users.create("erin", identity="sub-erin")
    users.add_key(user.user_id, "k1")
    users.revoke_key(user.user_id, "k1")
    assert users.get(user.user_id).api_key_ids == set()


def test_keys_added_at_once_stop_at_the_most(aws):
    users = UserStore(aws)
    user = users.create("fay")
    outcomes = race(*[lambda n=n: users.add_key(user.user_id, f"k{n}", most=3)
                      for n in range(8)])
    assert sum(isinstance(o, InvalidInput) for o in outcomes) == 5
    assert len(users.get(user.user_id).api_key_ids) == 3


def test_a_limit_out_of_range_is_refused_and_writes_nothing(aws):
    """10**40 was written, then every read of the user (and the user list) crashed."""
    users = UserStore(aws)
    user = users.create("erin")
    users.set_limits(user.user_id, 5, None)
    for too_big in (10**40, MAX_DAILY_LIMIT + 1, -1):
        with pytest.raises(InvalidInput, match="from 0 to 2,147,483,647"):
            users.set_limits(user.user_id, too_big, 7)
    assert users.get(user.user_id).daily_query_limit == 5
    assert users.get(user.user_id).daily_token_limit is None
    assert users.set_limits(user.user_id, MAX_DAILY_LIMIT, 0).daily_query_limit == MAX_DAILY_LIMIT


def test_a_stored_limit_out_of_range_still_reads(aws):
    """A value an older platform wrote (DynamoDB holds 10**40; boto3 cannot read it): the
    user, the list and the operator's repair all work."""
    users = UserStore(aws)
    user = users.create("frank")
    users.add_key(user.user_id, "k1")
    users.db.update_item(
        TableName=users.table_name, Key={"user_id": {"S": user.user_id}},
        UpdateExpression="SET daily_query_limit = :q, daily_token_limit = :t",
        ExpressionAttributeValues={":q": {"N": str(10**40)}, ":t": {"N": "-5"}})
    read = users.get_by_username("frank")
    assert (read.daily_query_limit, read.daily_token_limit) == (MAX_DAILY_LIMIT, 0)
    assert [u.username for u in users.list()[0]] == ["frank"]
    assert users.set_limits(user.user_id, 5, None).daily_query_limit == 5
    assert users.get(user.user_id).daily_token_limit == 0


def test_a_key_made_once_is_remembered_a_day_by_its_claims_never_the_key(aws):
    from codeshot.store.tables import EXPIRES_AT
    from codeshot.store.users import ONCE_SECONDS, IssuedKey

    users = UserStore(aws)
    user = users.create("gus")
    first = IssuedKey("key_1", 1_700_000_000, "k_signing")
    # The same idempotency key at once, many times: one key, which each of them gets.
    outcomes = race(*[lambda n=n: users.add_key_once(
        user.user_id, IssuedKey(f"key_{n}", 1_700_000_000, "k_signing") if n else first,
        20, "laptop") for n in range(6)])
    assert len(set(outcomes)) == 1 and len(users.get(user.user_id).api_key_ids) == 1
    [stored] = [i for i in aws_items(users) if i["user_id"]["S"] != user.user_id and
                i["user_id"]["S"].startswith("%")]
    assert set(stored) == {"user_id", "key_id", "issued_at", "kid", EXPIRES_AT}
    assert 0 < int(stored[EXPIRES_AT]["N"]) - time.time() <= ONCE_SECONDS
    assert [u.user_id for u in users.list()[0]] == [user.user_id]  # not a user
    # Once it has expired (DynamoDB's TTL deletes it later), the key makes a new one.
    users.db.update_item(TableName=users.table_name, Key={"user_id": stored["user_id"]},
                         UpdateExpression="SET expires_at = :past",
                         ExpressionAttributeValues={":past": {"N": str(int(time.time()) - 1)}})
    later = IssuedKey("key_later", 1_700_086_400, "k_signing")
    assert users.add_key_once(user.user_id, later, 20, "laptop") == later
    assert len(users.get(user.user_id).api_key_ids) == 2


def aws_items(users: UserStore) -> list[dict]:
    return users.db.scan(TableName=users.table_name)["Items"]

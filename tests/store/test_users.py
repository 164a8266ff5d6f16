import threading

import pytest

from codeshot.errors import Conflict, InvalidInput, NotFound
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

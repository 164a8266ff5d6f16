import json

import pytest

from codeshot.errors import InvalidInput, NotFound
from codeshot.store.user_storage import UserStorageStore


def test_round_trip_scoped_to_user_and_agent(aws):
    st = UserStorageStore(aws)
    value = json.dumps({"count": 3, "blob": {"type": "_bytes_ascii", "data": "AAE="}})
    st.put("u1", "alice/notes", "k", value)
    assert json.loads(st.get("u1", "alice/notes", "k")) == json.loads(value)
    for user, agent in (("u2", "alice/notes"), ("u1", "alice/other")):
        with pytest.raises(NotFound):
            st.get(user, agent, "k")
    st.put("u1", "alice/notes", "k", "7")
    assert st.get("u1", "alice/notes", "k") == "7"


def test_bad_input_is_refused_and_writes_nothing(aws):
    st = UserStorageStore(aws)
    too_big = json.dumps("x" * (aws.max_storage_value_bytes + 1))
    with pytest.raises(InvalidInput, match="limit is 100000"):
        st.put("u1", "a/b", "big", too_big)
    with pytest.raises(InvalidInput, match="must not be empty"):
        st.put("u1", "a/b", "", "1")
    with pytest.raises(InvalidInput, match="must not be empty"):
        st.put("u1", "a/b", "   ", "1")
    with pytest.raises(InvalidInput, match="JSON"):
        st.put("u1", "a/b", "k", "{not json")
    with pytest.raises(InvalidInput, match="exceeds 512 bytes"):
        st.put("u1", "a/b", "k" * 513, "1")
    assert st.list_keys("u1", "a/b").items == []


def test_delete_and_list_keys_in_pages(aws):
    st = UserStorageStore(aws)
    for i in range(5):
        st.put("u1", "a/b", f"k{i}", str(i))
    st.put("u2", "a/b", "other-user", "1")
    page = st.list_keys("u1", "a/b", limit=2)
    keys = list(page.items)
    while page.next_token:
        page = st.list_keys("u1", "a/b", limit=2, token=page.next_token)
        keys += page.items
    assert keys == [f"k{i}" for i in range(5)]
    st.delete("u1", "a/b", "k0")
    with pytest.raises(NotFound):
        st.delete("u1", "a/b", "k0")
    assert "k0" not in st.list_keys("u1", "a/b").items


def test_a_write_meeting_another_on_the_count_is_tried_again_not_reported_missing(aws,
                                                                              monkeypatch):
    """A delete whose transaction met a concurrent put on the user's count of keys used
    to answer NOT_FOUND, the key kept; both writes go through once the other is done."""
    store = UserStorageStore(aws)
    store.put("u", "a/notes", "k", '"v"')
    transact = store.db.transact_write_items
    conflicts = [2]

    def busy_count(**kwargs):
        if conflicts[0]:
            conflicts[0] -= 1
            raise store.db.exceptions.TransactionCanceledException(
                {"Error": {"Code": "TransactionCanceledException"},
                               "CancellationReasons": [{"Code": "None"},
                                         {"Code": "TransactionConflict"}]},
                "TransactWriteItems")
        return transact(**kwargs)

    monkeypatch.setattr(store.db, "transact_write_items", busy_count)
    store.delete("u", "a/notes", "k")
    with pytest.raises(NotFound):
        store.get("u", "a/notes", "k")
    conflicts[0] = 2
    store.put("u", "a/notes", "new", '"v"')
    assert store.list_keys("u", "a/notes").items == ["new"]

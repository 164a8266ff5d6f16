import json

import pytest

from codeshot.errors import InvalidInput, NotFound
from codeshot.store.user_storage import Holder, UserStorageStore

NOTES = Holder("u1", "alice/notes", 1_700_000_000_000_000)


def test_round_trip_scoped_to_user_and_agent(aws):
    st = UserStorageStore(aws)
    value = json.dumps({"count": 3, "blob": {"type": "_bytes_ascii", "data": "AAE="}})
    st.put(NOTES, "k", value)
    assert json.loads(st.get(NOTES, "k")) == json.loads(value)
    for user, agent in (("u2", "alice/notes"), ("u1", "alice/other")):
        with pytest.raises(NotFound):
            st.get(Holder(user, agent, NOTES.registration), "k")
    st.put(NOTES, "k", "7")
    assert st.get(NOTES, "k") == "7"


def test_bad_input_is_refused_and_writes_nothing(aws):
    st = UserStorageStore(aws)
    h = Holder("u1", "a/b", 1)
    too_big = json.dumps("x" * (aws.max_storage_value_bytes + 1))
    with pytest.raises(InvalidInput, match="limit is 100000"):
        st.put(h, "big", too_big)
    with pytest.raises(InvalidInput, match="must not be empty"):
        st.put(h, "", "1")
    with pytest.raises(InvalidInput, match="must not be empty"):
        st.put(h, "   ", "1")
    with pytest.raises(InvalidInput, match="JSON"):
        st.put(h, "k", "{not json")
    with pytest.raises(InvalidInput, match="exceeds 512 bytes"):
        st.put(h, "k" * 513, "1")
    for dots in (".", ".."):  # the SDK could never read them back through a URL
        with pytest.raises(InvalidInput, match="must not be"):
            st.put(h, dots, "1")
    assert st.list_keys(h).items == []


def test_delete_and_list_keys_in_pages(aws):
    st = UserStorageStore(aws)
    h = Holder("u1", "a/b", 1)
    for i in range(5):
        st.put(h, f"k{i}", str(i))
    st.put(Holder("u2", "a/b", 1), "other-user", "1")
    page = st.list_keys(h, limit=2)
    keys = list(page.items)
    while page.next_token:
        page = st.list_keys(h, limit=2, token=page.next_token)
        keys += page.items
    assert keys == [f"k{i}" for i in range(5)]
    st.delete(h, "k0")
    with pytest.raises(NotFound):
        st.delete(h, "k0")
    assert "k0" not in st.list_keys(h).items


def test_a_write_meeting_another_on_the_count_is_tried_again_not_reported_missing(aws,
                                                                              monkeypatch):
    """A delete whose transaction met a concurrent put on the user's count of keys used
    to answer NOT_FOUND, the key kept; both writes go through once the other is done."""
    store = UserStorageStore(aws)
    h = Holder("u", "a/notes", 1)
    store.put(h, "k", '"v"')
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
    store.delete(h, "k")
    with pytest.raises(NotFound):
        store.get(h, "k")
    conflicts[0] = 2
    store.put(h, "new", '"v"')
    assert store.list_keys(h).items == ["new"]


def stored(aws, agent_id: str) -> dict[str, str]:
    """Every item of the agent in the table, whatever its registration: key -> stamp."""
    items = UserStorageStore(aws).db.scan(TableName=aws.user_storage_table)["Items"]
    return {f"{i['scope']['S']}/{i['key']['S']}": i.get("registration", {}).get("S", "")
            for i in items if i["scope"]["S"].endswith("#" + agent_id)}


def test_an_agent_registered_again_at_the_id_starts_empty_before_any_sweep(aws):
    """The deleted registration's items are still in the table: the new one neither reads,
    lists, deletes nor counts them, and writes over them as new keys."""
    st = UserStorageStore(aws.replace(max_storage_keys=2))
    old, new = NOTES, Holder("u1", "alice/notes", NOTES.registration + 5_000_000)
    st.put(old, "a", '"old a"')
    st.put(old, "b", '"old b"')
    with pytest.raises(NotFound):
        st.get(new, "a")
    with pytest.raises(NotFound):
        st.delete(new, "b")
    assert st.list_keys(new).items == []
    st.put(new, "a", '"new a"')  # over the old item: a new key, counted from 0
    st.put(new, "c", '"new c"')
    with pytest.raises(InvalidInput, match="keeps 2 keys"):
        st.put(new, "d", "1")
    assert (st.list_keys(new).items, st.get(new, "a")) == (["a", "c"], '"new a"')
    assert stored(aws, "alice/notes")["u1#alice/notes/b"] == "alice/notes#1700000000000000"
    # Nor does the old registration (a call of it still in flight) reach the new one's.
    with pytest.raises(NotFound):
        st.get(old, "c")
    assert st.list_keys(old).items == ["b"]


def test_a_sweep_deletes_one_registrations_items_for_every_user_and_nothing_else(aws):
    st = UserStorageStore(aws)
    new = Holder("u1", "alice/notes", NOTES.registration + 1)
    for user in ("u1", "u2", "u3"):
        for key in ("a", "b"):
            st.put(Holder(user, "alice/notes", NOTES.registration), key, '"old"')
    other = Holder("u1", "alice/other", NOTES.registration)  # another agent, same time
    st.put(other, "a", '"other"')
    st.put(new, "a", '"new"')  # written over the old registration's item
    st.put(new, "z", '"new"')
    assert st.sweep_registration("alice/notes", NOTES.registration, pages=5) is False
    assert stored(aws, "alice/notes") == {
        "u1#alice/notes/a": "alice/notes#1700000000000001",
        "u1#alice/notes/z": "alice/notes#1700000000000001",
        "u1#alice/notes/ ": "alice/notes#1700000000000001"}
    assert (st.list_keys(new).items, st.get(new, "a")) == (["a", "z"], '"new"')
    assert (st.list_keys(other).items, st.get(other, "a")) == (["a"], '"other"')
    assert st.sweep_registration("alice/notes", NOTES.registration, pages=5) is False  # again: nothing


def test_a_sweep_goes_a_bounded_number_of_pages_and_the_next_one_resumes(aws, monkeypatch):
    from codeshot.store import user_storage

    monkeypatch.setattr(user_storage, "SWEEP_PAGE", 4)
    st = UserStorageStore(aws)
    for user in range(5):  # 5 users x (2 keys + their count): 15 items
        for key in ("a", "b"):
            st.put(Holder(f"u{user}", "alice/notes", 1), key, "1")
    queries = []
    query = st.db.query
    monkeypatch.setattr(st.db, "query", lambda **kw: queries.append(kw) or query(**kw))
    assert st.sweep_registration("alice/notes", 1, pages=2) is True  # 8 items: more may be left
    assert len(stored(aws, "alice/notes")) == 7 and len(queries) == 2
    assert st.sweep_registration("alice/notes", 1, pages=2) is False  # 4 + 3: the last page is short
    assert stored(aws, "alice/notes") == {}


def legacy_put(st: UserStorageStore, user: str, agent: str, key: str, modified: str) -> None:
    """A value as the platform wrote it before items carried their registration (and
    its count of keys, in the same transaction)."""
    scope = {"S": f"{user}#{agent}"}
    st.db.transact_write_items(TransactItems=[
        {"Put": {"TableName": st.table_name, "Item": {
            "scope": scope, "key": {"S": key}, "data": {"S": f'"{key}"'},
            "modified": {"S": modified}}}},
        {"Update": {"TableName": st.table_name, "Key": {"scope": scope, "key": {"S": " "}},
                    "UpdateExpression": "ADD #n :one", "ExpressionAttributeNames": {"#n": "count"},
                    "ExpressionAttributeValues": {":one": {"N": "1"}}}},
    ])


def test_values_written_before_the_upgrade_stay_their_agents_and_no_later_ones(aws):
    """Unstamped items (the index cannot find them) are the registration's registered when
    they were written: a live agent keeps reading, listing, replacing, deleting and
    counting them; a deleted one's, written before the agent now at its id, are absent."""
    st = UserStorageStore(aws.replace(max_storage_keys=3))
    live = Holder("u1", "alice/notes", NOTES.registration)  # 2023-11-14T22:13:20Z
    legacy_put(st, "u1", "alice/notes", "before", "2023-11-14T22:13:19.999999+00:00")
    legacy_put(st, "u1", "alice/notes", "same second", "2023-11-14T22:13:20+00:00")
    legacy_put(st, "u1", "alice/notes", "later", "2024-01-02T03:04:05.678901+00:00")
    assert st.list_keys(live).items == ["later", "same second"]
    assert st.get(live, "later") == '"later"'
    with pytest.raises(NotFound):
        st.get(live, "before")
    st.put(live, "later", '"replaced"')  # its own: replaced, stamped, counted once
    assert stored(aws, "alice/notes")["u1#alice/notes/later"] == "alice/notes#1700000000000000"
    st.put(live, "new", "1")  # the old count (3, "before" in it) is recounted: 2 + 1
    with pytest.raises(InvalidInput, match="keeps 3 keys"):
        st.put(live, "one too many", "1")
    st.delete(live, "same second")
    st.put(live, "one more", "1")
    assert st.list_keys(live).items == ["later", "new", "one more"]
    assert st.get(live, "later") == '"replaced"'
    with pytest.raises(NotFound):
        st.delete(live, "before")

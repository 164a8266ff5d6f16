import time
from datetime import UTC, datetime, timedelta

import pytest

from codeshot import ids
from codeshot.errors import Conflict, InvalidInput, NotFound, RateLimited
from codeshot.models import Embed, EmbedRef, Message, MessageType, Session, SessionStatus
from codeshot.store.sessions import DELETED_ITEM, DELETED_KEPT_SECONDS, SCAN_READS, SessionStore
from tests.dynamo_faults import refuse
from tests.dynamo_reads import PartitionReads
from tests.store_helpers import (
    add_message,
    delete_state,
    get_state,
    put_embed,
    put_state,
    set_status,
)


def new_session(store: SessionStore, owner: str = "u1", sid: str | None = None,
                **fields) -> Session:
    return store.create(Session(session_id=sid or ids.handle(), owner=owner, **fields))


def msg(session_id: str, text: str, **kw) -> Message:
    return Message(session_id=session_id, message_id=ids.ulid(), text=text, **kw)


def test_session_round_trip_and_owner_isolation(aws):
    store = SessionStore(aws)
    s = new_session(store, "alice")
    assert store.get(s.session_id) == s
    assert store.get(s.session_id, owner="alice") == s
    with pytest.raises(NotFound):
        store.get(s.session_id, owner="bob")
    with pytest.raises(NotFound, match="session nope not found"):
        store.get("nope")
    assert store.create(s) == s  # botocore's retry of our own write
    with pytest.raises(Conflict):
        store.create(Session(session_id=s.session_id, owner="bob"))
    assert store.get(s.session_id).owner == "alice"


def test_messages_keep_the_order_they_were_written(aws):
    store = SessionStore(aws)
    s = new_session(store)
    # Many ids in the same millisecond still sort in creation order.
    texts = [f"m{i}" for i in range(30)]
    for text in texts:
        add_message(store, msg(s.session_id, text))
    assert [m.text for m in store.all_messages(s.session_id)] == texts
    newest = store.list_messages(s.session_id, limit=2, newest_first=True).items
    assert [m.text for m in newest] == ["m29", "m28"]


def test_message_fields_and_embeds_round_trip(aws):
    store = SessionStore(aws)
    s = new_session(store)
    q = add_message(store, msg(s.session_id, "look at #1",
                               embeds={"1": EmbedRef(content_type="image/png",
                                                     content_hash="a" * 64, size=3)}))
    r = add_message(store, msg(s.session_id, "done", type=MessageType.RESPONSE,
                               sent_by="alice/dice", in_reply_to=q.message_id))
    got = store.all_messages(s.session_id)
    assert got == [q, r]
    assert got[0].embeds["1"].content_hash == "a" * 64
    assert store.get_message(s.session_id, r.message_id).in_reply_to == q.message_id


def test_message_write_is_not_duplicated(aws):
    store = SessionStore(aws)
    s = new_session(store)
    m = add_message(store, msg(s.session_id, "once"))
    assert add_message(store, m) == m  # a retried write of the same message is harmless
    with pytest.raises(Conflict):
        add_message(store, m.replace(text="twice"))
    assert [x.text for x in store.all_messages(s.session_id)] == ["once"]


def test_messages_page_through(aws):
    store = SessionStore(aws)
    s = new_session(store)
    for i in range(10):
        add_message(store, msg(s.session_id, str(i)))
    texts, token = [], None
    while True:
        page = store.list_messages(s.session_id, limit=4, token=token)
        texts += [m.text for m in page.items]
        if not (token := page.next_token):
            break
    assert texts == [str(i) for i in range(10)]
    other = new_session(store)
    first = store.list_messages(s.session_id, limit=4)
    with pytest.raises(InvalidInput):
        store.list_messages(other.session_id, token=first.next_token)


def test_sessions_listed_newest_first_with_paging(aws):
    store = SessionStore(aws)
    start = datetime(2026, 3, 2, 10, 4, tzinfo=UTC)
    made = [new_session(store, "alice", created=start + timedelta(seconds=i)).session_id
            for i in range(5)]
    new_session(store, "bob")
    page1 = store.list_by_owner("alice", limit=3)
    page2 = store.list_by_owner("alice", limit=3, token=page1.next_token)
    listed = [x.session_id for x in page1.items + page2.items]
    assert listed == list(reversed(made))


def test_a_page_token_with_other_attributes_is_invalid_input(aws):
    """DynamoDB refuses a start key with more or fewer attributes than the index's key
    (a ValidationException, INTERNAL to the user); moto does not, so this reads what
    the store sends."""
    import base64
    import json

    def token(plain: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(plain).encode()).decode()

    store = SessionStore(aws)
    for i in range(3):
        new_session(store, "alice", created=datetime(2026, 3, 2, tzinfo=UTC) + timedelta(i))
    good = store.list_by_frontend("alice", None, 1).next_token
    assert good and len(store.list_by_frontend("alice", None, 5, good).items) == 2
    plain = json.loads(base64.urlsafe_b64decode(good))
    for crafted in ({"owner": "alice"}, {**plain, "extra": "1"},
                    {k: v for k, v in plain.items() if k != "created"}):
        with pytest.raises(InvalidInput, match="invalid page token"):
            store.list_by_frontend("alice", None, 5, token(crafted))
        with pytest.raises(InvalidInput, match="invalid page token"):
            store.list_by_owner("alice", 5, token(crafted))


def test_status_changes_are_conditional(aws):
    store = SessionStore(aws)
    s = new_session(store)
    set_status(store, s.session_id, SessionStatus.RUNNING, expected=SessionStatus.IDLE)
    with pytest.raises(Conflict):
        set_status(store, s.session_id, SessionStatus.RUNNING, expected=SessionStatus.IDLE)
    assert store.get(s.session_id).status is SessionStatus.RUNNING
    with pytest.raises(Conflict):
        set_status(store, "missing", SessionStatus.IDLE)


def no_purge() -> None:
    """A small session's deletion queues no purge: it is deleted in the request."""
    raise AssertionError("a purge was queued")


def test_delete_removes_the_whole_partition(aws):
    store = SessionStore(aws)
    s = new_session(store, "alice")
    for i in range(30):
        add_message(store, msg(s.session_id, str(i)))
    put_state(store, s.session_id, {"step": 3})
    put_embed(store, Embed(key="1", session_id=s.session_id, owner="alice",
                           content_type="text/plain", content_hash="b" * 64, size=1))
    with pytest.raises(NotFound):
        store.delete(s.session_id, owner="bob", purge_later=no_purge)
    store.delete(s.session_id, owner="alice", purge_later=no_purge)
    with pytest.raises(NotFound):
        store.get(s.session_id)
    assert store.all_messages(s.session_id) == []
    assert get_state(store, s.session_id) is None
    assert store.list_embeds(s.session_id) == []


def test_a_deleted_session_keeps_its_place_in_its_owners_list_a_week(aws):
    """Only where it was (its created time, no owner attribute: never listed), so a page
    after it goes on from there; another user's is as missing as ever."""
    store = SessionStore(aws)
    start = datetime(2026, 3, 2, 10, 4, tzinfo=UTC)
    made = [new_session(store, "alice", created=start + timedelta(seconds=i)).session_id
            for i in range(4)]
    gone = made[2]
    before = store.place(gone, "alice")
    store.delete(gone, owner="alice", purge_later=no_purge)
    place = store.place(gone, "alice")
    assert place == before and place.created.startswith("2026-03-02T10:04:02")
    assert [x.session_id for x in store.list_by_owner("alice", after=place).items] \
        == [made[1], made[0]]
    assert [x.session_id for x in store.list_by_owner("alice").items] == [made[3], made[1],
                                                                          made[0]]
    with pytest.raises(NotFound):
        store.place(gone, "bob")
    with pytest.raises(NotFound):
        store.delete(gone, "alice", purge_later=no_purge)
    [kept] = store.db.query(TableName=store.table_name, KeyConditionExpression="session_id = :s",
                            ExpressionAttributeValues={":s": {"S": gone}})["Items"]
    assert kept["item"]["S"] == DELETED_ITEM and "owner" not in kept
    assert int(kept["expires_at"]["N"]) - time.time() == pytest.approx(DELETED_KEPT_SECONDS,
                                                                         abs=60)


def test_embed_keys_bind_once(aws):
    store = SessionStore(aws)
    s = new_session(store, "alice")
    e = Embed(key="1", session_id=s.session_id, owner="alice", content_type="text/plain",
              content_hash="c" * 64, size=5)
    put_embed(store, e)
    assert put_embed(store, e) == e  # a retry is fine
    with pytest.raises(Conflict):
        put_embed(store, e.replace(content_hash="d" * 64))
    assert store.get_embed(s.session_id, "1").content_hash == "c" * 64
    # The embed item must not appear as a session of its owner.
    assert [x.session_id for x in store.list_by_owner("alice").items] == [s.session_id]


def test_paused_state_round_trip(aws):
    store = SessionStore(aws)
    s = new_session(store)
    assert get_state(store, s.session_id) is None
    put_state(store, s.session_id, {"transcript": ["Q: hi"], "step": 2})
    assert get_state(store, s.session_id) == {"transcript": ["Q: hi"], "step": 2}
    with pytest.raises(InvalidInput):
        put_state(store, s.session_id, {"blob": "x" * 400_000})
    delete_state(store, s.session_id)
    assert get_state(store, s.session_id) is None


def test_invalid_embed_key_is_refused():
    with pytest.raises(InvalidInput, match="embed key"):
        Message(session_id="s", message_id="m",
                embeds={"bad key!": EmbedRef(content_type="a/b", content_hash="e" * 64)})


def test_a_session_made_once_per_key_is_charged_once(aws):
    from codeshot.store.usage import UsageCounters

    store, usage = SessionStore(aws), UsageCounters(aws)
    first = Session(session_id=ids.handle(), owner="alice")
    assert store.create_once(first, "k1", usage.charge_request("session", "alice", 2)) \
        == first.session_id
    again = Session(session_id=ids.handle(), owner="alice")  # the retry's own new id
    assert store.create_once(again, "k1", usage.charge_request("session", "alice", 2)) \
        == first.session_id
    with pytest.raises(NotFound):
        store.get(again.session_id)
    assert usage.used("session", "alice") == 1
    assert store.list_by_owner("alice").items == [first]  # the key is no session
    # Another user's same key is theirs; a refused charge writes nothing.
    bobs = Session(session_id=ids.handle(), owner="bob")
    assert store.create_once(bobs, "k1", usage.charge_request("session", "bob", 1)) \
        == bobs.session_id
    refused = Session(session_id=ids.handle(), owner="bob")
    assert store.create_once(refused, "k2", usage.charge_request("session", "bob", 1)) is None
    assert store.guarded("bob", "k2") is None and store.count_by_owner("bob") == 1
    # A retry of the day's last session is that session, though the day's charge is full.
    assert store.create_once(Session(session_id=ids.handle(), owner="bob"), "k1",
                             usage.charge_request("session", "bob", 1)) == bobs.session_id


def test_a_page_of_messages_reads_past_1_mb_but_stays_under_lambdas_6_mb(aws):
    """DynamoDB ends a query at 1 MB (about 65 of these messages): a page reads on to
    ``limit`` messages, or to PAGE_READS reads, as a response over Lambda's 6 MB fails."""
    store = SessionStore(aws)
    s = new_session(store)
    logged = [msg(s.session_id, f"{n} " + "y" * 15_000) for n in range(300)]  # 4.5 MB
    store.put_messages(logged)
    assert [m.text for m in store.list_messages(s.session_id, limit=150).items] == [
        m.text for m in logged[:150]]
    first = store.list_messages(s.session_id, limit=1000)
    assert 200 < len(first.items) < 300 and first.next_token
    rest = store.list_messages(s.session_id, limit=1000, token=first.next_token)
    assert [m.message_id for m in first.items + rest.items] == [m.message_id for m in logged]
    assert rest.next_token is None


def test_a_filtered_read_of_a_log_stops_at_so_many_messages_or_megabytes(aws):
    """A filtered Query reads (and is billed for) every item it passes over: the messages
    of a type among a log's first ``items`` are found in that many reads, whatever the
    log's length, and a log of large messages stops after SCAN_READS reads of 1 MB."""
    store = SessionStore(aws)
    s = new_session(store)
    log = [msg(s.session_id, f"{n}", type=MessageType.QUERY if n % 3 == 0
               else MessageType.THOUGHT) for n in range(3000)]
    store.put_messages(log)
    queries = [m.message_id for m in log if m.type is MessageType.QUERY]
    with PartitionReads(store.db, s.session_id) as reads:
        assert store.message_ids(s.session_id, [MessageType.QUERY], 1000) == (
            queries[:334], False)
    assert reads.read() == 1001  # and one past them, to tell whether the log goes on
    # A read that stops just at the log's end is the whole log (DynamoDB's answer at a
    # Query's Limit says it may go on); one message short of it is not, and the message
    # past it (a query) is not among what it found.
    assert store.message_ids(s.session_id, [MessageType.QUERY], 3000) == (queries, True)
    assert store.message_ids(s.session_id, [MessageType.QUERY], 2998) == (queries, False)
    assert store.message_ids(s.session_id, [MessageType.QUERY], 2997) == (queries[:-1], False)
    found, whole = store.messages_of(s.session_id, [MessageType.QUERY], 100,
                                     first=queries[10], before=queries[20])
    assert [m.message_id for m in found] == queries[10:20] and whole
    found, whole = store.messages_of(s.session_id, [MessageType.QUERY], 10, queries[10])
    assert [m.message_id for m in found] == queries[10:14] and not whole
    big = new_session(store)
    store.put_messages([msg(big.session_id, "y" * 15_000) for _ in range(600)])  # 9 MB
    with PartitionReads(store.db, big.session_id) as reads:
        found, whole = store.messages_of(big.session_id, [MessageType.QUERY], 1000)
    assert len(reads.calls) == SCAN_READS and not whole and 400 < len(found) < 600


def test_ending_a_question_another_write_held_for_a_moment_is_tried_again(aws, monkeypatch):
    """A TransactionConflict is not "the session is not waiting for input": the question
    still ends (once); a session that is not waiting is refused CONFLICT."""
    store = SessionStore(aws)
    s = new_session(store)
    set_status(store, s.session_id, SessionStatus.AWAITING_INPUT, expected=SessionStatus.IDLE)
    refused = refuse(monkeypatch, store.db, "transact_write_items", "declined", times=2)
    store.end_pause(msg(s.session_id, "declined", type=MessageType.ERROR), owner="u1")
    assert refused == [1, 1]
    assert store.get(s.session_id).status is SessionStatus.IDLE
    with pytest.raises(Conflict):
        store.end_pause(msg(s.session_id, "declined again", type=MessageType.ERROR))
    assert [m.text for m in store.all_messages(s.session_id)] == ["declined"]


def test_a_question_busy_through_every_try_is_rate_limited_and_left_waiting(aws, monkeypatch):
    """Not a raw AWS error (callers that end a question on failure catch codeshot's), and
    not CONFLICT, which says it was answered: RATE_LIMITED, retry in a moment."""
    store = SessionStore(aws)
    s = new_session(store)
    set_status(store, s.session_id, SessionStatus.AWAITING_INPUT, expected=SessionStatus.IDLE)
    refuse(monkeypatch, store.db, "transact_write_items", "declined", times=None)
    with pytest.raises(RateLimited):
        store.end_pause(msg(s.session_id, "declined", type=MessageType.ERROR))
    assert store.get(s.session_id).status is SessionStatus.AWAITING_INPUT
    assert store.all_messages(s.session_id) == []


def test_a_limited_listing_of_embeds_goes_past_a_page_of_one_mb(aws):
    """DynamoDB answers a query 1 MB at a time: a listing with a limit stopped at its
    first page, so the Agent Protocol's later artifact pages came back empty."""
    store = SessionStore(aws)
    s = new_session(store, "alice")
    keys = [f"{n:04d}-{'k' * 400}" for n in range(3000)]  # about 1.5 MB of items
    for chunk in range(0, len(keys), 25):
        store.db.batch_write_item(RequestItems={store.table_name: [
            {"PutRequest": {"Item": store.embed_item(Embed(
                key=key, session_id=s.session_id, owner="alice", content_type="text/plain",
                content_hash="0" * 64, size=1))}} for key in keys[chunk:chunk + 25]]})
    assert [e.key for e in store.list_embeds(s.session_id, limit=2900)] == keys[:2900]
    assert [e.key for e in store.list_embeds(s.session_id, after=keys[9], limit=5)] == \
        keys[10:15]


def test_writes_dynamodb_leaves_unprocessed_are_sent_again_until_they_fail_for_good(
        aws, monkeypatch):
    """Throttled batch writes (a deletion's) came back as UnprocessedItems and were sent
    again at once, for ever (a hot loop against a throttled table)."""
    from codeshot.errors import Unavailable
    from codeshot.store import dynamo

    store = SessionStore(aws)
    s = new_session(store, "alice")
    write, calls, throttled = store.db.batch_write_item, [], [2]

    def throttling(RequestItems):
        calls.append(sum(len(r) for r in RequestItems.values()))
        if throttled[0] > 0:
            throttled[0] -= 1
            return {"UnprocessedItems": RequestItems}
        return write(RequestItems=RequestItems)

    for n in range(30):
        add_message(store, msg(s.session_id, f"m{n}"))
    monkeypatch.setattr(store.db, "batch_write_item", throttling)
    store.delete(s.session_id, "alice", no_purge)  # 30 messages and the session
    assert calls == [25, 25, 25, 6]
    with pytest.raises(NotFound):
        store.get(s.session_id)
    assert store.all_messages(s.session_id) == []
    other = new_session(store, "alice")
    throttled[0], calls[:] = 10**6, []
    with pytest.raises(Unavailable):
        store.delete(other.session_id, "alice", no_purge)
    assert len(calls) == dynamo.BATCH_ATTEMPTS

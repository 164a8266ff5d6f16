import threading
from datetime import UTC, datetime, timedelta

import pytest

from codeshot.errors import Interrupted, RateLimited
from codeshot.store.usage import UsageCounters


def charge_concurrently(counters: UsageCounters, subject: str, limit: int, n: int):
    ok, refused, lock = [], [], threading.Lock()
    barrier = threading.Barrier(n)

    def worker() -> None:
        barrier.wait()
        try:
            count = counters.charge("query", subject, limit)
            with lock:
                ok.append(count)
        except RateLimited:
            with lock:
                refused.append(1)

    threads = [threading.Thread(target=worker) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return ok, refused


def test_counter_stops_exactly_at_limit_under_50_threads(aws):
    counters = UsageCounters(aws)
    ok, refused = charge_concurrently(counters, "alice", limit=20, n=50)
    assert sorted(ok) == list(range(1, 21))  # each count handed out once
    assert len(refused) == 30
    assert counters.used("query", "alice") == 20


def test_counter_exact_over_http_against_moto_server(server_aws):
    counters = UsageCounters(server_aws)
    ok, refused = charge_concurrently(counters, "bob", limit=20, n=50)
    assert (len(ok), len(refused), counters.used("query", "bob")) == (20, 30, 20)


def test_refusal_says_when_it_resets_and_ttl_is_set(aws):
    counters = UsageCounters(aws)
    now = datetime(2026, 11, 21, 15, 30, tzinfo=UTC)
    assert counters.charge("query", "u", 1, now=now) == 1
    with pytest.raises(RateLimited) as err:
        counters.charge("query", "u", 1, now=now)
    assert err.value.details["resets_at"] == "2026-11-22T00:00:00+00:00"
    assert "resets at 2026-11-22T00:00:00+00:00" in err.value.message
    item = counters.db.scan(TableName=counters.table_name)["Items"][0]
    expires = int(item["expires_at"]["N"])
    assert expires == int(datetime(2026, 11, 23, tzinfo=UTC).timestamp())
    ttl = counters.db.describe_time_to_live(TableName=counters.table_name)
    assert ttl["TimeToLiveDescription"]["AttributeName"] == "expires_at"
    assert ttl["TimeToLiveDescription"]["TimeToLiveStatus"] == "ENABLED"


def test_a_new_window_starts_from_zero(aws):
    counters = UsageCounters(aws)
    t1 = datetime(2026, 11, 21, 12, 0, 59, tzinfo=UTC)
    t2 = datetime(2026, 11, 21, 12, 1, 0, tzinfo=UTC)
    counters.charge("storage", "u#a/b", 1, window="minute", now=t1)
    with pytest.raises(RateLimited):
        counters.charge("storage", "u#a/b", 1, window="minute", now=t1)
    assert counters.charge("storage", "u#a/b", 1, window="minute", now=t2) == 1


def test_running_leases_count_per_user_across_any_clock_boundary_and_lapse_one_by_one(aws):
    """A user's running slots are one count whatever the time: two taken at 10:14:30 still
    fill a cap of 2 at 10:15:30 (no fresh slots at a quarter hour). A lease never given
    back (a crashed run) lapses on its own time and frees its slot; its holder is still
    told it was interrupted."""
    now = [datetime(2026, 11, 21, 10, 14, 30, tzinfo=UTC)]
    counters = UsageCounters(aws, clock=lambda: now[0])
    lasts = timedelta(minutes=15)
    counters.take_lease("running", "u1", 2, "q1", lasts)
    now[0] += timedelta(seconds=20)
    counters.take_lease("running", "u1", 2, "q2", lasts)
    now[0] = datetime(2026, 11, 21, 10, 15, 30, tzinfo=UTC)
    with pytest.raises(RateLimited):
        counters.take_lease("running", "u1", 2, "q3", lasts)
    counters.take_lease("running", "u2", 2, "q4", lasts)  # another user's own slots
    counters.release("running", "u1", "q2")
    counters.take_lease("running", "u1", 2, "q3", lasts)  # a slot given back is free
    with pytest.raises(RateLimited):
        counters.take_lease("running", "u1", 2, "q5", lasts)
    # q1 crashed: 15 minutes after it was taken its slot lapses, q3's not yet.
    now[0] = datetime(2026, 11, 21, 10, 29, 31, tzinfo=UTC)
    counters.take_lease("running", "u1", 2, "q5", lasts)
    with pytest.raises(RateLimited):
        counters.take_lease("running", "u1", 2, "q6", lasts)
    with pytest.raises(Interrupted):  # q1 redelivered: not run again
        counters.take_lease("running", "u1", 2, "q1", lasts)
    counters.release("running", "u1", "q1")  # answered INTERRUPTED: forgotten
    with pytest.raises(RateLimited):  # ... and it held no slot any more
        counters.take_lease("running", "u1", 2, "q6", lasts)


def test_has_room_tells_what_a_take_would_find_without_taking_a_slot(aws):
    """What an answer refused at the running cap waits on (codeshot.usecases.prompts):
    free once a slot is given back or its lease lapsed, without taking one."""
    now = [datetime(2026, 11, 21, 10, 0, 0, tzinfo=UTC)]
    counters = UsageCounters(aws, clock=lambda: now[0])
    lasts = timedelta(minutes=15)
    assert counters.has_room("running", "u1", 2)  # no item yet
    counters.take_lease("running", "u1", 2, "q1", lasts)
    assert counters.has_room("running", "u1", 2)
    now[0] += timedelta(minutes=1)
    counters.take_lease("running", "u1", 2, "q2", lasts)
    assert not counters.has_room("running", "u1", 2)
    assert counters.has_room("running", "u2", 2)  # another user's own slots
    counters.release("running", "u1", "q2")
    assert counters.has_room("running", "u1", 2)
    assert counters.has_room("running", "u1", 2)  # a look takes nothing
    counters.take_lease("running", "u1", 2, "q3", lasts)
    assert not counters.has_room("running", "u1", 2)
    now[0] = datetime(2026, 11, 21, 10, 15, 0, tzinfo=UTC)  # q1's lease lapses
    assert counters.has_room("running", "u1", 2)
    counters.take_lease("running", "u1", 2, "q4", lasts)  # as the look said


def test_running_leases_stop_exactly_at_the_cap_under_20_threads(aws):
    counters = UsageCounters(aws)
    taken, refused, lock = [], [], threading.Lock()
    barrier = threading.Barrier(20)

    def worker(i: int) -> None:
        barrier.wait()
        try:
            counters.take_lease("running", "u1", 4, f"q{i}", timedelta(minutes=15))
            with lock:
                taken.append(i)
        except RateLimited:
            with lock:
                refused.append(i)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (len(taken), len(refused)) == (4, 16)

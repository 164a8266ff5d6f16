"""What must hold under concurrent load (benchmarks/load.py measures it at scale): no lost
or duplicated message, replies in each session's order, quotas exact."""

import pytest

from benchmarks.load import run_load
from benchmarks.local import Client

pytestmark = pytest.mark.slow


def test_concurrent_users_and_sessions(live_stack_object):
    stack = live_stack_object
    url = stack.state["graphql_url"]
    result, _ = run_load(stack, lambda key: Client(url, key), users=3, sessions=4, messages=2,
                         over=1, workers=12, timeout=120)
    assert result.failures == []
    assert result.refused == 3  # one post over the quota, per user
    assert len(result.latencies) == 3 * (4 * 2 - 1)

"""Reading many sessions' messages in one GraphQL request: ``allSessions { messages }``.

Each session's page is one storage query; the request reads ``READS_AT_ONCE`` of them at a
time (1 is how it was: one after another). Measured on the local stack (moto's server
over HTTP on loopback, the API in this process): moto answers a query in about 8 ms of
this machine's CPU, which two cores share with the API, so overlapping reads gains little.
DynamoDB's round trip is mostly waiting: ``--wait-ms`` holds each query that long before
it is sent (a DynamoDB query from Lambda takes a few ms to tens), which is what
overlapping saves.

    python -m benchmarks.messages [--sessions 100] [--messages 5] [--runs 10] [--wait-ms 0,10]
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import partial

from benchmarks.local import local_stack
from codeshot import aws, ids
from codeshot.api.graphql import budget
from codeshot.models import Message

AT_ONCE = (1, 4, 8, 16)


def hold_queries(seconds: float, _service: str, operation: str) -> None:
    if operation == "Query":
        time.sleep(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--messages", type=int, default=5, help="per session")
    parser.add_argument("--runs", type=int, default=10, help="requests per setting")
    parser.add_argument("--wait-ms", default="0,10",
                        help="comma-separated: each query held this long before it is sent")
    args = parser.parse_args()
    query = f"{{ allSessions(limit: {args.sessions}) {{ messages {{ text }} }} }}"
    with local_stack(examples=False) as (stack, client):
        for _ in range(args.sessions):
            handle = client.session()
            stack.services.sessions.put_messages([
                Message(session_id=handle, message_id=ids.ulid(), text=f"message {n}")
                for n in range(args.messages)])
        client.gql(query)  # warm: clients, connections, imports
        print(f"{args.sessions} sessions of {args.messages} messages, "
              f"{args.runs} requests each (ms)\n")
        print("| wait per query | pages read at once | p50 | min | max | vs one at a time |")
        print("|---|---|---|---|---|---|")
        for wait_ms in (float(w) for w in args.wait_ms.split(",")):
            stop = aws.on_call(partial(hold_queries, wait_ms / 1000))
            first = 0.0
            for at_once in AT_ONCE:
                budget.READS_AT_ONCE = at_once  # read when a request makes its semaphore
                times = []
                for _ in range(args.runs):
                    started = time.perf_counter()
                    found = client.gql(query)["allSessions"]
                    times.append((time.perf_counter() - started) * 1000)
                    assert sum(len(s["messages"]) for s in found) == \
                        args.sessions * args.messages
                p50 = statistics.median(times)
                first = first or p50
                print(f"| {wait_ms:g} ms | {at_once}{' (shipped)' if at_once == 8 else ''} | "
                      f"{p50:.0f} | {min(times):.0f} | {max(times):.0f} | {first / p50:.1f}x |")
            stop()


if __name__ == "__main__":
    main()

"""Load on the local stack: many users posting into many sessions at once.

Checks what must hold under load (no lost or duplicated message, each session's replies
in the order of its queries, quotas exact) and measures throughput and platform latency
(query stored -> reply stored, server timestamps; the LLM is the offline `fewshot`
provider, so this is the platform's own cost).

    python -m benchmarks.load [--users 20] [--sessions 25] [--messages 2] [--over 2]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime

from benchmarks.local import Client, local_stack
from codeshot.local.stack import LocalStack
from codeshot.models import Message, MessageType, User

TERMINAL = {MessageType.RESPONSE, MessageType.ERROR, MessageType.AWAITING_INPUT}
QUERIES = ["Roll 2d6", "Roll a d20", "What time is it?"]


@dataclass
class Result:
    refused: int = 0
    failures: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)


def run_load(stack: LocalStack, client_for: Callable[[str], Client], users: int,
             sessions: int, messages: int, over: int,
             workers: int = 32, timeout: float = 300.0) -> tuple[Result, float]:
    """Each user may post ``sessions * messages - over`` queries today and tries
    ``sessions * messages``; returns what was observed and the wall time."""
    limit = sessions * messages - over
    accounts: list[tuple[User, Client]] = []
    for i in range(users):
        user = stack.services.users.create(f"load{i}-{time.monotonic_ns() % 10**8}",
                                           daily_query_limit=limit)
        accounts.append((user, client_for(stack.services.auth.issue_api_key(user))))
    result = Result()
    handles: list[tuple[str, str]] = []  # (user_id, session)

    def one_session(account: tuple[User, Client]) -> None:
        user, client = account
        handle = client.session()
        handles.append((user.user_id, handle))
        for n in range(messages):
            try:
                client.ask(handle, QUERIES[n % len(QUERIES)], wait=False)
            except RuntimeError as exc:
                if "RATE_LIMITED" not in str(exc):
                    result.failures.append(f"post failed: {exc}")
                result.refused += 1

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one_session, [a for a in accounts for _ in range(sessions)]))
    # Wait for the runner to drain the queue (it deletes a message once handled), asking
    # SQS once a second: reading sessions meanwhile would compete with the platform.
    deadline = time.monotonic() + timeout
    while queued(stack) and time.monotonic() < deadline:
        time.sleep(1)
    logs = {handle: stack.services.sessions.all_messages(handle) for _, handle in handles}
    for user, _ in accounts:
        stored = sum(m.type is MessageType.QUERY for uid, h in handles
                     if uid == user.user_id for m in logs[h])
        if stored != limit:
            result.failures.append(f"{user.username}: {stored} queries stored, limit {limit}")
    first: list[datetime] = []
    last: list[datetime] = []
    for handle, log in logs.items():
        check_session(handle, log, result, first, last)
    # Busy time as the platform saw it: first query stored -> last reply stored.
    wall = (max(last) - min(first)).total_seconds() if first and last else 0.0
    return result, wall


def queued(stack: LocalStack) -> int:
    """Messages in the session queue: waiting, in flight or delayed."""
    queue = stack.services.queue
    counts = queue.sqs.get_queue_attributes(QueueUrl=queue.url, AttributeNames=[
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed"])["Attributes"]
    return sum(int(n) for n in counts.values())


def check_session(handle: str, log: list[Message], result: Result, first: list[datetime],
                  last: list[datetime]) -> None:
    queries = [m for m in log if m.type is MessageType.QUERY]
    replies = [m for m in log if m.type in TERMINAL]
    if [r.in_reply_to for r in replies] != [q.message_id for q in queries]:
        result.failures.append(f"{handle}: replies {len(replies)} for {len(queries)} queries, "
                               "or out of order")
        return
    for query, reply in zip(queries, replies):
        first.append(query.timestamp)
        last.append(reply.timestamp)
        result.latencies.append((reply.timestamp - query.timestamp).total_seconds())
        if reply.type is not MessageType.RESPONSE:
            result.failures.append(f"{handle}: {reply.type.value} {reply.text}")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--sessions", type=int, default=25)
    parser.add_argument("--messages", type=int, default=2)
    parser.add_argument("--over", type=int, default=2, help="posts over each user's quota")
    args = parser.parse_args()
    with local_stack() as (stack, first):
        result, wall = run_load(stack, lambda key: Client(first.url, key), args.users,
                                args.sessions, args.messages, args.over)
    answered_count = len(result.latencies)
    print(f"## Load: {args.users} users x {args.sessions} sessions x {args.messages} messages "
          "(local stack, fewshot LLM)\n")
    print("| answered | refused (quota) | failures | busy (s) | throughput (q/s) | "
          "p50 (ms) | p99 (ms) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    lat = result.latencies or [0.0]
    print(f"| {answered_count} | {result.refused} | {len(result.failures)} | {wall:.1f} | "
          f"{answered_count / wall:.1f} | {statistics.median(lat) * 1000:.0f} | "
          f"{percentile(lat, 99) * 1000:.0f} |")
    for failure in result.failures[:20]:
        print(f"- {failure}")


if __name__ == "__main__":
    main()

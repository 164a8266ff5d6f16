"""AWS round-trips per query, counted through botocore's event hooks, end to end on the
local stack (API + runner + agents in this process): DynamoDB reads and writes, SQS,
S3 and Secrets Manager calls for a plain query, a Func-calling query and a two-agent
query (the planner in `plan` mode).

    python -m benchmarks.cost_per_query
"""

from __future__ import annotations

from collections import Counter

from benchmarks.local import Client, local_stack
from codeshot import aws

READS = {"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems", "DescribeTable"}
WRITES = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}


Calls = Counter[tuple[str, str]]  # (service, operation) -> count


def classify(calls: Calls) -> dict[str, int]:
    row: Counter[str] = Counter()
    for (service, op), n in calls.items():
        if service == "dynamodb":
            row["DynamoDB reads" if op in READS else "DynamoDB writes" if op in WRITES
                else f"DynamoDB {op}"] += n
        elif service == "sqs":
            row["SQS send" if op == "SendMessage" else "SQS receive/delete"] += n
        else:
            row[{"s3": "S3", "secretsmanager": "Secrets Manager"}.get(service, service)] += n
    return dict(row)


def measure(client: Client, frontend: str | None, text: str, repeats: int = 5
            ) -> tuple[dict[str, float], Calls]:
    """Calls per query, averaged over warm repeats (the first one warms caches)."""
    session = client.session(frontend)
    client.ask(session, text)  # warm-up: keys, registry index, clients
    calls: Calls = Counter()
    unsubscribe = aws.on_call(lambda service, op: calls.update([(service, op)]))
    try:
        for _ in range(repeats):
            reply = client.ask(session, text)["reply"]
            assert reply and reply["type"] == "response", reply
    finally:
        unsubscribe()
    per_query = {k: round(v / repeats, 1) for k, v in classify(calls).items()}
    return per_query, calls


def main() -> None:
    columns = ["DynamoDB reads", "DynamoDB writes", "SQS send", "SQS receive/delete", "S3",
               "Secrets Manager"]
    cases = [
        ("route", "plain (planner -> standalone clock)", None, "What time is it?"),
        ("route", "Func-calling (planner -> dice -> roll)", None, "Roll 2d6"),
        ("route", "Func-calling, direct frontend agent", "local/dice", "Roll 2d6"),
        ("plan", "two agents (planner -> dice + clock)", None, "Roll 3d8 and tell me the time"),
    ]
    rows, details = [], {}
    for mode in ("route", "plan"):
        with local_stack(planner_mode=mode) as (_stack, client):
            for case_mode, name, frontend, text in cases:
                if case_mode == mode:
                    per_query, calls = measure(client, frontend, text)
                    rows.append((name, per_query))
                    details[name] = calls
    print("## AWS calls per query (local stack, warm, mean of 5; SQS receive/delete are the "
          "local poller's, which Lambda's event source does for free)\n")
    print("| query | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for name, per_query in rows:
        print(f"| {name} | " + " | ".join(str(per_query.get(c, 0)) for c in columns) + " |")
    print("\n## By operation (totals over 5 queries)\n")
    for name, calls in details.items():
        ops = ", ".join(f"{s}.{o} x{n}" for (s, o), n in sorted(calls.items()))
        print(f"- {name}: {ops}")


if __name__ == "__main__":
    main()

"""Cost per million queries (LLM and embedding tokens excluded), from what one query
measurably does: its AWS calls and the capacity they consume, its Lambda invocations, how
long each runs and at what memory size, priced at the list prices below.

Measured end to end on the local stack (API + runner + agents in this process, moto in a
child; the offline fewshot LLM and hashing embedder): every AWS call through botocore,
with the request and response sizes DynamoDB bills by, the runner's time per query, the
API's time per query, the LLM, embedding and agent calls a query makes. In AWS a model
call takes longer than the offline stand-ins: each is counted and given the latency
stated below (Bedrock, short prompts), which the function making it is billed for.

    python -m benchmarks.cost

Prints the AWS calls per query, then the cost per million queries of each way a reply
can reach its client (DESIGNS). Measured 2026-11-27 on a shared 2-core machine (USD per
million, plain / Func / two agents; the local times vary by some tens of ms a run):

- before, the API waits for every reply (polling DynamoDB): 30.7 / 103.7 / 217.6 (1.88 of
  it the user's waiting slot, taken in the post's transaction and given back: 3 write
  units; taken apart from the post it was 2, but two AWS calls more, a read of the
  session among them). The API function is billed for the whole run: 5.9 / 39.7 / 93.0
  of it.
- a function URL streaming the reply: 29.7 / 102.7 / 216.6. It saves API Gateway's
  request, not the wait: the function still runs until the reply is stored (and
  Python's managed runtime cannot stream a response anyway).
- an API Gateway WebSocket, the runner pushing the reply: 24.8 / 63.9 / 123.7.
- after, the post returns at once and the client polls each second: 24.8 / 66.9 / 132.9.

DynamoDB is then the largest share of a plain query (16.0: 25 write units, transactions
bill each item twice; a reply no longer deletes a paused program that was never there,
which saved 2; the post's and the reply's check that the session is not being deleted,
so that nothing outlives its deletion, cost 4).

Decision: "client polls". WebSockets would save another 3-9 per million, but need a second
API, a connection store, the runner's ManageConnections right, and a WebSocket client;
polling needs nothing new (`wait: false`, then `messages(after: <query id>)`), works from
any HTTP client, and costs one cheap request a second while a reply is due. `codeshot chat`
and the web console poll this way. The Fixie 1.0 paths cannot: `Session.query` is one
request that must carry the reply, and older clients read the newest message right after
`sendSessionMessage`; they keep the bounded wait (the "before" column), paid only by
those clients. The plain query is under the $40 goal either way; past DynamoDB, what is
left is the runner waiting on the LLM (its memory size: 1024 MB buys cold-start CPU).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import botocore.client

from benchmarks.local import Client, local_stack
from codeshot.usecases.messaging import (
    FIRST_POLL_SECONDS,
    MAX_POLL_INTERVAL_SECONDS,
    Messaging,
)

# -- list prices, us-east-1, on demand, November 2026 (USD) -------------------------------
PRICE = {
    "api_gateway_http_request": 1.00e-6,  # HTTP API, first 300 M requests a month
    "lambda_request": 0.20e-6,
    "lambda_gb_second_arm64": 0.0000133334,
    "dynamodb_wru": 0.625e-6,  # on demand: per write request unit (1 KB; x2 transactional)
    "dynamodb_rru": 0.125e-6,  # per read request unit (4 KB strongly consistent, x2 in a
    #                            transaction; an eventually consistent read is half)
    "sqs_fifo_request": 0.50e-6,  # per 64 KB chunk of a request
    "s3_put": 0.005e-3,
    "s3_get": 0.0004e-3,
    "secrets_manager_call": 0.05e-4,
    "cloudwatch_logs_gb": 0.50,  # ingestion
    "xray_trace": 5.00e-6,  # recorded; active tracing samples ~5% past 1 request/s
    "api_gateway_websocket_message": 1.00e-6,  # per 32 KB, first billion a month
    "api_gateway_websocket_minute": 0.25e-6,  # connection minutes
}
XRAY_SAMPLED = 0.05
# Log bytes per invocation: Lambda's START/END/REPORT lines (JSON format) plus the
# functions' own lines at INFO (about one per stored step).
LOG_BYTES_PER_INVOCATION = 700
# -- latencies the local stand-ins do not have (seconds) -----------------------------------
LLM_CALL_SECONDS = 1.2  # Claude Haiku 4.5 on Bedrock: a planner or few-shot step
EMBED_CALL_SECONDS = 0.08  # Titan text embeddings v2, one short query
AGENT_HOP_SECONDS = 0.03  # runner -> agent's HTTP API -> agent Lambda, warm, one way
SQS_TO_LAMBDA_SECONDS = 0.1  # a FIFO message reaching the runner's event source
# -- memory sizes (MB), as infra/platform_stack.py and infra/components/agent_function.py
API_MEMORY_MB = 1024
RUNNER_MEMORY_MB = 1024
AGENT_MEMORY_MB = 512
# The runner's event source receives and deletes in batches: requests per query.
SQS_EVENT_SOURCE_REQUESTS = 2
GOAL_PLAIN = 40.0

READS = {"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"}
WRITES = {"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"}


def _size(value: Any) -> int:
    """An item's size as DynamoDB counts it, near enough: names plus values."""
    return len(json.dumps(value, default=str, separators=(",", ":")))


def capacity(op: str, params: dict[str, Any], response: dict[str, Any]) -> tuple[float, float]:
    """(read units, write units) one DynamoDB call consumes."""
    if op in ("PutItem", "DeleteItem", "UpdateItem"):
        return 0.0, max(1.0, math.ceil(_size(params.get("Item") or params.get("Key")) / 1024))
    if op == "BatchWriteItem":
        return 0.0, float(sum(max(1, math.ceil(_size(r) / 1024))
                              for reqs in params["RequestItems"].values() for r in reqs))
    if op == "TransactWriteItems":
        return 0.0, float(sum(2 * max(1, math.ceil(_size(next(iter(i.values()))) / 1024))
                              for i in params["TransactItems"]))
    consistent = 1.0 if params.get("ConsistentRead") else 0.5
    if op == "GetItem":
        return consistent * max(1, math.ceil(_size(response.get("Item", {})) / 4096)), 0.0
    if op in ("Query", "Scan"):
        return consistent * max(1, math.ceil(_size(response.get("Items", [])) / 4096)), 0.0
    if op == "BatchGetItem":
        items = [i for found in response.get("Responses", {}).values() for i in found]
        return float(sum(max(1, math.ceil(_size(i) / 4096)) for i in items) or 1), 0.0
    return 0.0, 0.0


@dataclass
class Tally:
    calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    rru: float = 0.0
    wru: float = 0.0
    llm_calls: int = 0
    embed_calls: int = 0
    agent_calls: int = 0
    runner_seconds: float = 0.0
    api_seconds: float = 0.0


@contextmanager
def recording() -> Iterator[Tally]:
    """Count AWS calls (with their DynamoDB capacity), model and agent calls, and the
    runner's time, made in this process while the block runs."""
    from codeshot.llm.fewshot import FewShotLLM
    from codeshot.local import poller
    from codeshot.routing.embedders import HashingEmbedder
    from codeshot.runner.agent_client import AgentClient

    tally = Tally()
    originals: list[tuple[Any, str, Any]] = []

    def wrap(owner: Any, name: str, after: Callable[..., None]) -> None:
        original = getattr(owner, name)
        originals.append((owner, name, original))

        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            result = original(self, *args, **kwargs)
            after(args, kwargs, result, time.perf_counter() - started)
            return result

        setattr(owner, name, wrapper)

    client_class, call = botocore.client.BaseClient, "_make_api_call"  # each AWS call
    original_call = getattr(client_class, call)
    counting = threading.get_ident()  # not this thread: it only watches for the reply

    def make_api_call(self: Any, op: str, params: dict[str, Any]) -> Any:
        result = original_call(self, op, params)
        service = self.meta.service_model.service_name
        # The local poller's receives and deletes are the runner's event source in AWS,
        # priced apart (SQS_EVENT_SOURCE_REQUESTS).
        if threading.get_ident() == counting or (service == "sqs" and op != "SendMessage"):
            return result
        tally.calls[(service, op)] += 1
        if service == "dynamodb":
            rru, wru = capacity(op, params, result)
            tally.rru, tally.wru = tally.rru + rru, tally.wru + wru
        return result

    setattr(client_class, call, make_api_call)
    wrap(FewShotLLM, "complete", lambda *_: setattr(tally, "llm_calls", tally.llm_calls + 1))
    wrap(HashingEmbedder, "embed",
         lambda *_: setattr(tally, "embed_calls", tally.embed_calls + 1))
    for name in ("call_func", "query_standalone"):
        wrap(AgentClient, name, lambda *_: setattr(tally, "agent_calls", tally.agent_calls + 1))
    batches = vars(poller)  # the poller calls process_batch once per runner invocation
    process_batch = batches["process_batch"]

    def timed_batch(*args: Any, **kwargs: Any) -> Any:  # one runner invocation
        started = time.perf_counter()
        try:
            return process_batch(*args, **kwargs)
        finally:
            tally.runner_seconds += time.perf_counter() - started

    batches["process_batch"] = timed_batch
    try:
        yield tally
    finally:
        setattr(client_class, call, original_call)
        batches["process_batch"] = process_batch
        for owner, name, original in reversed(originals):
            setattr(owner, name, original)


@dataclass(frozen=True)
class PerQuery:
    """One query's measured work, averaged over the repeats."""

    name: str
    calls: dict[tuple[str, str], float]
    rru: float
    wru: float
    llm_calls: float
    embed_calls: float
    agent_calls: float
    runner_local_seconds: float
    post_seconds: float  # the API's own work for a post that does not wait

    def count(self, service: str, ops: set[str] | None = None) -> float:
        return sum(n for (s, op), n in self.calls.items()
                   if s == service and (ops is None or op in ops))

    @property
    def runner_seconds(self) -> float:
        """The runner's billed time in AWS: its local time plus the model calls' and the
        agent hops' latency."""
        return (self.runner_local_seconds + self.llm_calls * LLM_CALL_SECONDS
                + self.embed_calls * EMBED_CALL_SECONDS + self.agent_calls * 2 * AGENT_HOP_SECONDS)


def measure(stack: Any, client: Client, frontend: str | None, text: str, name: str,
            repeats: int = 5) -> PerQuery:
    """One query ``repeats`` times: posted without waiting (the API's own work, timed),
    its reply then awaited by this thread reading the table, which is not counted."""
    session = client.session(frontend)
    client.ask(session, text)  # warm-up: keys, registry index, clients
    messaging = Messaging(stack.services)
    with recording() as tally:
        for _ in range(repeats):
            started = time.perf_counter()
            sent = client.ask(session, text, wait=False)
            tally.api_seconds += time.perf_counter() - started
            reply = None
            while reply is None:
                time.sleep(0.02)
                reply = messaging.reply_to(session, sent["message"]["id"])
            assert reply.type.value == "response", reply
        time.sleep(0.3)  # the runner's last write may land after the reply is seen
    return PerQuery(
        name, {k: v / repeats for k, v in tally.calls.items()}, tally.rru / repeats,
        tally.wru / repeats, tally.llm_calls / repeats, tally.embed_calls / repeats,
        tally.agent_calls / repeats, tally.runner_seconds / repeats, tally.api_seconds / repeats)


# -- the designs priced --------------------------------------------------------------------
# How the API waits for a reply (codeshot/usecases/messaging.py): a DynamoDB Query at
# FIRST_POLL_SECONDS, then at intervals growing x1.5 up to MAX_POLL_INTERVAL_SECONDS.
POLL_GROWTH = 1.5
CLIENT_POLL_SECONDS = 1.0  # design "client polls": one short request a second
POLL_REQUEST_SECONDS = 0.015  # the API answering one such poll, warm
AGENT_INVOCATION_SECONDS = 0.02  # an agent Lambda answering a call, warm
# A waiting request takes one of its user's waiting slots and gives it back
# (codeshot/usecases/waits.py): taken in the post's transaction (one small item, two write
# units there: transactional), given back by an UpdateItem of its own (one).
WAIT_SLOT_WRITES = 3


def poll_times(ready: float) -> list[float]:
    """When the waiting API polled, until the poll that finds a reply stored at ``ready``."""
    times, at, interval = [], FIRST_POLL_SECONDS, FIRST_POLL_SECONDS
    while True:
        times.append(at)
        if at >= ready:
            return times
        interval = min(interval * POLL_GROWTH, MAX_POLL_INTERVAL_SECONDS)
        at += interval


def lambda_cost(seconds: float, memory_mb: int, invocations: float = 1.0) -> float:
    return (invocations * PRICE["lambda_request"]
            + seconds * memory_mb / 1024 * PRICE["lambda_gb_second_arm64"])


def common_cost(q: PerQuery) -> dict[str, float]:
    """What every design pays: the runner, the agents, storage, queue, logs, traces."""
    agent = q.agent_calls * (PRICE["api_gateway_http_request"]
                             + lambda_cost(AGENT_INVOCATION_SECONDS, AGENT_MEMORY_MB))
    s3 = q.count("s3", {"PutObject"}) * PRICE["s3_put"] + \
        q.count("s3", {"GetObject", "HeadObject"}) * PRICE["s3_get"]
    return {
        "runner Lambda": lambda_cost(q.runner_seconds, RUNNER_MEMORY_MB),
        "agent APIs + Lambdas": agent,
        "DynamoDB": q.rru * PRICE["dynamodb_rru"] + q.wru * PRICE["dynamodb_wru"],
        "SQS": (q.count("sqs") + SQS_EVENT_SOURCE_REQUESTS) * PRICE["sqs_fifo_request"],
        "S3 + Secrets Manager": s3 + q.count("secretsmanager") * PRICE["secrets_manager_call"],
        "logs + traces": (2 + q.agent_calls) * LOG_BYTES_PER_INVOCATION / 1e9
        * PRICE["cloudwatch_logs_gb"] + XRAY_SAMPLED * PRICE["xray_trace"],
    }


def ready_after(q: PerQuery) -> float:
    """Seconds from the post returning to the reply being stored, in AWS."""
    return SQS_TO_LAMBDA_SECONDS + q.runner_seconds


def design_before(q: PerQuery) -> dict[str, float]:
    """The API holds the request until the reply is stored, polling DynamoDB."""
    polls = poll_times(ready_after(q))
    waited = polls[-1] + 0.005 * len(polls)
    return {"API Gateway": PRICE["api_gateway_http_request"],
            "API Lambda": lambda_cost(q.post_seconds + waited, API_MEMORY_MB),
            "reply polls": len(polls) * PRICE["dynamodb_rru"],
            "waiting slot": WAIT_SLOT_WRITES * PRICE["dynamodb_wru"]} | common_cost(q)


def design_client_polls(q: PerQuery) -> dict[str, float]:
    """The post returns at once; the client asks for the reply once a second."""
    polls = math.ceil(ready_after(q) / CLIENT_POLL_SECONDS)
    return {"API Gateway": (1 + polls) * PRICE["api_gateway_http_request"],
            "API Lambda": lambda_cost(q.post_seconds, API_MEMORY_MB)
            + polls * lambda_cost(POLL_REQUEST_SECONDS, API_MEMORY_MB),
            "reply polls": polls * PRICE["dynamodb_rru"]} | common_cost(q)


def design_function_url(q: PerQuery) -> dict[str, float]:
    """A Lambda function URL streams the reply: no API Gateway request, but the function
    still runs (and is billed) until the reply is stored."""
    return design_before(q) | {"API Gateway": 0.0}


def design_websocket(q: PerQuery) -> dict[str, float]:
    """An API Gateway WebSocket: the query goes up as a message, the runner pushes the
    reply (PostToConnection, ~20 ms of its time); a connection lives about a minute."""
    return {"API Gateway": 2 * PRICE["api_gateway_websocket_message"]
            + PRICE["api_gateway_websocket_minute"],
            "API Lambda": lambda_cost(q.post_seconds, API_MEMORY_MB),
            "reply polls": 0.0} | common_cost(q) | {
            "runner Lambda": lambda_cost(q.runner_seconds + 0.02, RUNNER_MEMORY_MB)}


DESIGNS: dict[str, Callable[[PerQuery], dict[str, float]]] = {
    "before: the API waits for every reply (polls DynamoDB)": design_before,
    "function URL streaming the reply (the function still waits)": design_function_url,
    "API Gateway WebSocket, the runner pushes the reply": design_websocket,
    "after: the post returns at once, the client polls each second": design_client_polls,
}


def per_million(parts: dict[str, float]) -> dict[str, float]:
    return {k: v * 1e6 for k, v in parts.items()}


def main() -> None:
    cases = [
        ("route", "plain", None, "What time is it?"),
        ("route", "Func", None, "Roll 2d6"),
        ("plan", "two agents", None, "Roll 3d8 and tell me the time"),
    ]
    rows: list[PerQuery] = []
    for mode in ("route", "plan"):
        with local_stack(planner_mode=mode) as (stack, client):
            rows += [measure(stack, client, frontend, text, name)
                     for case_mode, name, frontend, text in cases if case_mode == mode]
    print("## Measured per query (local stack, warm, mean of 5)\n")
    print("| query | DynamoDB reads | writes | RRU | WRU | SQS | S3 | LLM calls | embed calls "
          "| agent calls | runner local ms | runner in AWS ms | API post ms |")
    print("|---|" + "---:|" * 12)
    for q in rows:
        print(f"| {q.name} | {q.count('dynamodb', READS):.1f} | "
              f"{q.count('dynamodb', WRITES):.1f} | {q.rru:.1f} | {q.wru:.1f} | "
              f"{q.count('sqs'):.1f} | {q.count('s3'):.1f} | {q.llm_calls:.1f} | "
              f"{q.embed_calls:.1f} | {q.agent_calls:.1f} | {q.runner_local_seconds * 1000:.0f} "
              f"| {q.runner_seconds * 1000:.0f} | {q.post_seconds * 1000:.0f} |")
    print("\n## By operation (per query)\n")
    for q in rows:
        print(f"- {q.name}: " + ", ".join(f"{s}.{o} x{n:g}" for (s, o), n in sorted(q.calls.items())))
    print(f"\n## USD per million queries, LLM and embedding tokens excluded (goal for plain: "
          f"<= {GOAL_PLAIN:.0f})\n")
    for design, price in DESIGNS.items():
        costs = {q.name: per_million(price(q)) for q in rows}
        parts = list(next(iter(costs.values())))
        print(f"### {design}\n")
        print("| query | total | " + " | ".join(parts) + " |")
        print("|---|---:|" + "---:|" * len(parts))
        for name, c in costs.items():
            print(f"| {name} | {sum(c.values()):.2f} | "
                  + " | ".join(f"{c[p]:.2f}" for p in parts) + " |")
        print()


if __name__ == "__main__":
    main()

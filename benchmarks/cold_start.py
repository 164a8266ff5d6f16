"""Cold start of each Lambda handler, in fresh processes: importing the handler and
building what it serves, against importing only the dependencies it cannot avoid.

Two baselines per handler: the bare imports (the strict one), and the same frameworks
doing a minimal version of the job (a FastAPI app with one pydantic-bodied route and a
one-field Strawberry schema behind Mangum; for the runner, an HTTP client), which is what
any app on these frameworks pays. Ratios compare medians within one run.

The runner defers what only a query needs (numpy for routing, PyJWT and PyNaCl for
agent tokens); the "first query" row adds those on both sides, so the cold query's
overhead of our own code is visible too, not only the init's.

The processes run as in Lambda (``AWS_LAMBDA_FUNCTION_NAME`` set: the API's init sits out
the garbage collector, ``codeshot.observability.lambda_init``) but read the bytecode the
checkout and the virtualenv have; one more API row compiles every module instead, which
is what each cold start of a bundle without ``.pyc`` files pays (Lambda's /var/task is
read-only, so nothing compiled is kept): every bundle ships its bytecode for that.

Where the API's cold start went (2026-11, the 2-core dev machine, busy: the built bundle
run as the rehearsal runs it, Python 3.12 with -B; process start to its first GraphQL
answer, medians of 7 to 9 fresh processes, each step an interleaved A/B run):

| API bundle | import and app (ms) | first request (ms) | total (ms) |
|---|---:|---:|---:|
| without bytecode (before) | 2252 | 552 | 2911 |
| with bytecode, one boto3 session for every client | 929 | 271 | 1253 |
| and its init without the garbage collector (lambda_init) | 822 | 183 | 1041 |

One boto3 session saved about 20 ms of that first request, the frozen init a full
collection (65 to 85 ms) in it and 65 to 75 ms of collections during the init. What is
left is mostly the frameworks' own imports (FastAPI, Starlette and pydantic about 230 ms,
Strawberry and graphql-core 220, boto3 80, httpx 50), then our modules (180: FastAPI
building 66 routes about 115, the Strawberry types 50) and, on the first request,
Powertools (25), PyJWT (45: it imports cryptography, which the API bundle has for authlib
and mcp), two boto3 clients (50) and the calls. `make rehearse`, API median of 5 cold
starts: 2.57 s and 2.48 s before, 1.07 s and 1.14 s after (two runs each, alternated).

    python -m benchmarks.cold_start [--runs 9]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

ED25519 = "nacl.signing"
# What a planner query loads beyond init: routing (numpy), agent tokens (PyJWT, PyNaCl)
# and the offline LLM; the lazy imports in those modules say so.
FIRST_QUERY = ("import jwt, " + ED25519 + ", codeshot.routing.router, codeshot.routing.index, "
               "codeshot.llm.fewshot, codeshot.auth.tokens")

@dataclass(frozen=True)
class Compiled:
    """Code run with no bytecode to read: every module it imports is compiled first."""

    code: str


CASES: dict[str, dict[str, str | Compiled]] = {
    "API": {
        "handler": "import handlers.api",
        "imports only": "import boto3, fastapi, strawberry, strawberry.fastapi, mangum",
        "the same, compiling every module (stdlib too)": Compiled("import handlers.api"),
        "frameworks, minimal app": """
import boto3, fastapi, strawberry, mangum, pydantic
from strawberry.fastapi import GraphQLRouter
@strawberry.type
class Query:
    hello: str = "hi"
class Body(pydantic.BaseModel):
    text: str
app = fastapi.FastAPI()
@app.post("/x")
def x(body: Body) -> dict:
    return {}
app.include_router(GraphQLRouter(strawberry.Schema(query=Query)), prefix="/graphql")
handler = mangum.Mangum(app, lifespan="off")
""",
    },
    "runner": {
        "handler": "import handlers.runner; handlers.runner._runner()",
        "imports only": "import boto3, httpx",
        "frameworks, minimal app": "import boto3, httpx; httpx.Client()",
    },
    "runner, first query": {
        "handler": "import handlers.runner; handlers.runner._runner(); " + FIRST_QUERY,
        "imports only": "import boto3, httpx, numpy, jwt, " + ED25519,
    },
}

TIMER = "import time; _t = time.perf_counter()\n{code}\nprint(time.perf_counter() - _t)"


def run_once(code: str | Compiled) -> float:
    env = {"PATH": os.environ.get("PATH", ""), "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_LAMBDA_FUNCTION_NAME": "cold-start-benchmark",
           "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    with tempfile.TemporaryDirectory() as empty:
        if isinstance(code, Compiled):  # bytecode is looked for (and not written) there only
            code, env["PYTHONPYCACHEPREFIX"] = code.code, empty
        out = subprocess.run([sys.executable, "-c", TIMER.format(code=code)],
                             capture_output=True, text=True, env=env, cwd=ROOT, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    print(f"## Cold start (median of {args.runs} fresh processes, interleaved)\n")
    print("| handler | handler + app (ms) | baseline | baseline (ms) | ratio |")
    print("|---|---:|---|---:|---:|")
    for name, case in CASES.items():
        times: dict[str, list[float]] = {k: [] for k in case}
        for _ in range(args.runs):  # interleaved, so machine noise hits all alike
            for label, code in case.items():
                times[label].append(run_once(code))
        handler = statistics.median(times["handler"]) * 1000
        for label in [k for k in case if k != "handler"]:
            base = statistics.median(times[label]) * 1000
            print(f"| {name} | {handler:.0f} | {label} | {base:.0f} | {handler / base:.2f} |")


if __name__ == "__main__":
    main()

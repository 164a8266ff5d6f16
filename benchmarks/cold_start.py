"""Cold start of each Lambda handler, in fresh processes: importing the handler and
building what it serves, against importing only the dependencies it cannot avoid.

Two baselines per handler: the bare imports (the strict one), and the same frameworks
doing a minimal version of the job (a FastAPI app with one pydantic-bodied route and a
one-field Strawberry schema behind Mangum; for the runner, a pydantic model as well), which
is what any app on these frameworks pays. Ratios compare medians within one run.

    python -m benchmarks.cold_start [--runs 9]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASES = {
    "API": {
        "handler": "import handlers.api",
        "imports only": "import boto3, fastapi, strawberry, strawberry.fastapi, mangum",
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
        "frameworks, minimal app": """
import boto3, httpx, pydantic
class Work(pydantic.BaseModel):
    session_id: str
client = httpx.Client()
""",
    },
}

TIMER = "import time; _t = time.perf_counter()\n{code}\nprint(time.perf_counter() - _t)"


def run_once(code: str) -> float:
    env = {"PATH": os.environ.get("PATH", ""), "AWS_DEFAULT_REGION": "us-east-1",
           "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run([sys.executable, "-c", TIMER.format(code=code)], capture_output=True,
                         text=True, env=env, cwd=ROOT, check=True)
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
        for label in ("imports only", "frameworks, minimal app"):
            base = statistics.median(times[label]) * 1000
            print(f"| {name} | {handler:.0f} | {label} | {base:.0f} | {handler / base:.2f} |")


if __name__ == "__main__":
    main()

"""The API's cold start loads what its first requests use and no more: the agent
protocols' SDKs (mcp, a2a-sdk and google-auth under it), OAuth for agents (authlib) and
the console's templates (jinja2) wait for the first request that needs them.
benchmarks/cold_start.py measures the times; this keeps the imports from creeping back."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from codeshot.services import Services
from tests.api.test_lambda_handler import http_api_event

# What a fresh API process loads on each request, in order (top-level package names).
SCRIPT = """
import json, sys
def loaded():
    return sorted({name.split(".")[0] for name in sys.modules})
import handlers.api
report = {"init": {"loaded": loaded()}}
for name, event in json.loads(sys.stdin.read()):
    answer = handlers.api.handler(event, None)
    report[name] = {"status": answer["statusCode"], "body": answer["body"], "loaded": loaded()}
print(json.dumps(report))
"""
PROTOCOLS = {"mcp", "a2a", "google", "authlib"}


def test_the_protocols_and_templates_load_on_the_first_request_that_needs_them(server_aws):
    services = Services(server_aws)
    key = services.auth.issue_api_key(services.users.create("cold"))
    requests = [
        ("graphql", http_api_event("POST", "/graphql", json.dumps({"query": "{ user { username } }"}),
                                   {"authorization": f"Bearer {key}"})),
        ("console", http_api_event("GET", "/console/", headers={"accept": "text/html"})),
        ("a2a", http_api_event("GET", "/.well-known/agent-card.json")),
        ("mcp", http_api_event("POST", "/mcp", "{}", {"authorization": f"Bearer {key}"})),
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODESHOT_", "PYTHON"))}
    env.update({f"CODESHOT_{name.upper()}": str(value)
                for name, value in dataclasses.asdict(server_aws).items() if value is not None})
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    run = subprocess.run([sys.executable, "-c", SCRIPT], input=json.dumps(requests), env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    report = json.loads(run.stdout.splitlines()[-1])
    loaded = {name: set(step["loaded"]) for name, step in report.items()}

    assert {"fastapi", "strawberry", "boto3"} <= loaded["init"]
    assert not loaded["init"] & (PROTOCOLS | {"jinja2"})
    assert json.loads(report["graphql"]["body"]) == {"data": {"user": {"username": "cold"}}}
    assert not loaded["graphql"] & (PROTOCOLS | {"jinja2"})
    assert report["console"]["status"] == 200 and "jinja2" in loaded["console"]
    assert not loaded["console"] & PROTOCOLS
    assert report["a2a"]["status"] == 200 and "a2a" in loaded["a2a"]
    assert "mcp" not in loaded["a2a"]
    assert "mcp" in loaded["mcp"]



@pytest.mark.parametrize("in_lambda", [True, False])
def test_the_garbage_collector_is_back_on_after_the_init_it_sat_out(in_lambda):
    """In Lambda the API's init runs without the cyclic collector and then freezes what
    it built (codeshot.observability.lambda_init); warm requests are collected as usual.
    Outside Lambda nothing is frozen."""
    script = "import gc, handlers.api\nprint(gc.isenabled(), gc.get_freeze_count() > 10_000)"
    env = {"PYTHONPATH": str(Path(__file__).resolve().parents[2]), "PATH": "",
           "AWS_DEFAULT_REGION": "us-east-1"}
    if in_lambda:
        env["AWS_LAMBDA_FUNCTION_NAME"] = "codeshot-api"
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=True, env=env)
    assert run.stdout.split() == ["True", str(in_lambda)]

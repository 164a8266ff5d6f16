"""Bundles: what goes in, cache keys, and one real Docker-free bundling of the agent (pip
downloads arm64 wheels from PyPI) through CDK's local bundling hook."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra import bundling
from infra.bundling import AGENT_ENTRY_MODULE, agent_bundle, platform_bundle
from infra.config import REPO_ROOT
from tests.infra.conftest import synthesize

LAMBDA_UNZIPPED_LIMIT = 250 * 1024 * 1024
TEMPLATE = REPO_ROOT / "agent_template"


def test_platform_bundle_ships_the_platform_without_local_or_dev_code():
    spec = platform_bundle()
    dests = {d for d, _ in spec.files}
    assert {"handlers/api.py", "handlers/runner.py", "handlers/register_agent.py",
            "codeshot/store/tables.py", "codeshot/api/app.py", "codeshot/runner/batch.py"} <= dests
    assert not [d for d in dests if d.startswith(bundling.PLATFORM_EXCLUDED_PATHS)]
    names = {bundling.dist_name(r) for r in spec.requirements}
    assert {"fastapi", "strawberry-graphql", "mangum", "pydantic", "pyjwt", "numpy"} <= names
    assert not names & {"boto3", "botocore", "uvicorn", "moto"}
    assert "boto3" in {bundling.dist_name(r) for r in platform_bundle(True).requirements}


def test_agent_bundle_spec_has_only_the_sdk_and_the_agent():
    spec = agent_bundle(TEMPLATE, "agent:agent")
    dests = {d for d, _ in spec.files}
    assert {"agent.py", "agent.yaml", "codeshot/sdk/__init__.py", "codeshot/sdk/app.py"} <= dests
    assert not [d for d in dests if d.startswith(bundling.PLATFORM_ONLY)]
    assert not [d for d in dests if d.startswith(("tests/", "codeshot/local/"))]
    assert not [d for d in dests if d.startswith("codeshot/devtools/")]
    names = {bundling.dist_name(r) for r in spec.requirements}
    assert "codeshot-kit" not in names  # the template's requirement: served from this checkout
    assert not names & {"boto3", "numpy", "strawberry-graphql", "uvicorn"}
    assert {"fastapi", "mangum", "pydantic", "pyjwt", "httpx", "pyyaml"} <= names
    entry = dict(spec.generated)[AGENT_ENTRY_MODULE + ".py"]
    assert "from agent import agent as _agent" in entry


def test_bundle_hash_follows_code_and_requirements(tmp_path):
    agent_dir = tmp_path / "agent"
    shutil.copytree(TEMPLATE, agent_dir, ignore=shutil.ignore_patterns("__pycache__"))
    first = agent_bundle(agent_dir, "agent:agent").hash
    assert agent_bundle(agent_dir, "agent:agent").hash == first  # stable
    (agent_dir / "tests" / "test_agent.py").write_text("# tests are not shipped\n")
    assert agent_bundle(agent_dir, "agent:agent").hash == first
    with (agent_dir / "agent.py").open("a") as f:
        f.write("\n# changed\n")
    second = agent_bundle(agent_dir, "agent:agent").hash
    assert second != first
    with (agent_dir / "requirements.txt").open("a") as f:
        f.write("\nhumanize>=4\n")
    assert agent_bundle(agent_dir, "agent:agent").hash != second
    other_entry = agent_bundle(agent_dir, "other:thing").hash
    assert other_entry != agent_bundle(agent_dir, "agent:agent").hash


def test_requirements_reject_pip_options(tmp_path):
    (tmp_path / "requirements.txt").write_text("codeshot-kit\n-r other.txt\n")
    with pytest.raises(bundling.BundlingError, match="not supported"):
        bundling.read_requirements(tmp_path / "requirements.txt")


def _asset_dir(synth, template) -> Path:
    (_, props) = template.function(f"{AGENT_ENTRY_MODULE}.handler")
    return synth.outdir / ("asset." + props["Code"]["S3Key"].removesuffix(".zip"))


def _run_bundled_handler(bundle: Path, task: Path) -> dict:
    """Run the bundle's own code (codeshot + agent + entry module) with this machine's
    third-party packages (the bundle's are arm64); report where codeshot came from."""
    task.mkdir()
    for item in bundle.iterdir():
        if item.name == "codeshot" or item.suffix in (".py", ".yaml"):
            (shutil.copytree if item.is_dir() else shutil.copy2)(item, task / item.name)
    probe = f"""
import json, sys
import {AGENT_ENTRY_MODULE} as entry
event = {{"version": "2.0", "routeKey": "$default", "rawPath": "/", "rawQueryString": "",
          "headers": {{"host": "agent.example", "accept": "application/json"}},
          "requestContext": {{"http": {{"method": "GET", "path": "/", "protocol": "HTTP/1.1",
                               "sourceIp": "203.0.113.1", "userAgent": "t"}},
                              "domainName": "agent.example", "stage": "$default",
                              "requestId": "r", "accountId": "1", "apiId": "a"}},
          "isBase64Encoded": False}}
out = entry.handler(event, None)
files = [m.__file__ for n, m in list(sys.modules.items())
         if n.split(".")[0] == "codeshot" and getattr(m, "__file__", None)]
print(json.dumps({{"status": out["statusCode"], "files": files,
                  "boto3": "boto3" in sys.modules}}))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODESHOT_", "PYTHON"))}
    env.update(PYTHONPATH=str(task), CODESHOT_API_URL="http://127.0.0.1:9",
               CODESHOT_AGENT_ID="admin/notes")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=task, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_real_agent_bundling_through_cdk_with_the_cache(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("CODESHOT_BUNDLE_CACHE", str(tmp_path / "cache"))
    spec = agent_bundle(TEMPLATE, "agent:agent")
    started = time.monotonic()
    synth = synthesize(tmp_path / "out", **{"aws:cdk:bundling-stacks": ["CodeshotAgent-notes"]})
    built_in = time.monotonic() - started
    assert "bundle agent:agent_template" in capfd.readouterr().err

    bundle = _asset_dir(synth, synth.agent)
    assert bundle.is_dir(), "CDK staged the locally bundled asset"
    size, count = bundling.dir_size(bundle)
    print(f"\nagent bundle: {size / 1e6:.1f} MB unzipped, {count} files, built in {built_in:.0f}s")
    assert size < LAMBDA_UNZIPPED_LIMIT / 5

    # Only the SDK and the agent: none of the platform, no boto3.
    for absent in ("codeshot/store", "codeshot/api", "codeshot/runner", "codeshot/local",
                   "codeshot/services.py", "codeshot/aws.py", "boto3", "botocore", "tests",
                   "numpy", "strawberry", "uvicorn"):
        assert not (bundle / absent).exists(), absent
    for present in ("codeshot/sdk/__init__.py", "agent.py", "agent.yaml",
                    f"{AGENT_ENTRY_MODULE}.py", "fastapi", "mangum", "jwt", "pydantic_core"):
        assert (bundle / present).exists(), present
    # arm64 wheels for the Lambda's CPython, not this machine's.
    (core,) = (bundle / "pydantic_core").glob("_pydantic_core*.so")
    abi = "cpython-" + bundling.PYTHON_VERSION.replace(".", "")
    assert "aarch64" in core.name and abi in core.name

    # The cache: the second time nothing is built.
    logs: list[str] = []
    started = time.monotonic()
    cached = bundling.ensure_bundle(spec, log=logs.append)
    assert "(cached," in logs[0] and time.monotonic() - started < 5
    assert cached.parent == tmp_path / "cache"

    # The bundle's codeshot is self-sufficient: the handler builds and answers with it.
    result = _run_bundled_handler(bundle, tmp_path / "task")
    assert result["status"] in (200, 401)
    outside = [f for f in result["files"] if not f.startswith(str(tmp_path / "task"))]
    assert outside == [] and result["files"]
    assert result["boto3"] is False


@pytest.mark.slow
def test_platform_bundle_code_imports_without_the_excluded_parts(tmp_path):
    """Every module the platform bundle ships imports from the bundle alone (no local
    stack, CLI or dev tools), and the API handler answers /healthz."""
    task = tmp_path / "task"
    for dest, source in platform_bundle().files:
        (task / dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, task / dest)
    modules = sorted(d.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
                     for d, _ in platform_bundle().files)
    probe = f"""
import importlib, json, sys
for name in {modules!r}:
    importlib.import_module(name)
import handlers.api
event = {{"version": "2.0", "routeKey": "$default", "rawPath": "/healthz", "rawQueryString": "",
          "headers": {{"host": "api.example"}},
          "requestContext": {{"http": {{"method": "GET", "path": "/healthz",
                               "protocol": "HTTP/1.1", "sourceIp": "203.0.113.1",
                               "userAgent": "t"}}, "domainName": "api.example",
                              "stage": "$default", "requestId": "r", "accountId": "1",
                              "apiId": "a"}}, "isBase64Encoded": False}}
out = handlers.api.handler(event, None)
files = [m.__file__ for n, m in list(sys.modules.items())
         if n.split(".")[0] in ("codeshot", "handlers") and getattr(m, "__file__", None)]
print(json.dumps({{"status": out["statusCode"], "files": files}}))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODESHOT_", "PYTHON"))}
    env.update(PYTHONPATH=str(task), CODESHOT_QUEUE_URL="https://sqs.invalid/q.fifo")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=task, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["status"] == 200
    assert [f for f in result["files"] if not f.startswith(str(task))] == []

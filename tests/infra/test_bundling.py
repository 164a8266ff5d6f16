"""Bundles: what goes in, locks, cache keys, reproducibility, and one real Docker-free
bundling of the agent (uv installs the locked arm64 wheels from PyPI) through CDK's local
bundling hook. Running the bundles is `make rehearse`'s job (tests/infra/test_rehearsal.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from infra import bundling, locks
from infra.bundling import (
    AGENT_ENTRY_MODULE,
    API_FUNCTION,
    LAMBDA_TARGET,
    PLATFORM_FUNCTIONS,
    REGISTER_FUNCTION,
    RUNNER_FUNCTION,
    agent_bundle,
    platform_bundle,
)
from infra.config import REPO_ROOT
from tests.infra.conftest import synthesize

LAMBDA_UNZIPPED_LIMIT = 250 * 1024 * 1024
TEMPLATE = REPO_ROOT / "agent_template"


def dists(spec: bundling.BundleSpec) -> set[str]:
    return {locks.dist_name(r) for r in spec.requirements}


def test_each_platform_function_ships_only_what_it_imports():
    api, runner, register, eraser = (platform_bundle(f) for f in PLATFORM_FUNCTIONS)
    for spec in (api, runner, register, eraser):
        dests = {d for d, _ in spec.files}
        assert {"codeshot/store/tables.py", "codeshot/api/app.py", "handlers/__init__.py"} <= dests
        assert not [d for d in dests if d.startswith(bundling.PLATFORM_EXCLUDED_PATHS)]
        assert "moto" not in dists(spec)
        # Each but the eraser routes or embeds agents: codeshot:embedder=static needs its
        # vectors there.
        assert ({"codeshot/routing/data/static-minilm.bin",
                 "codeshot/routing/data/minilm-vocab.txt"} <= dests) == (spec is not eraser)
    # The protocol SDKs the API imports on /mcp and /a2a bring cryptography (`import mcp`
    # imports it, as a2a-sdk's google-auth does); the runner has mcp's client for MCP
    # servers registered as agents (imported only when one is called, see
    # tests/runner/test_cold_start.py), registration neither.
    assert not dists(register) & {"uvicorn", "cryptography", "mcp", "a2a-sdk"}
    assert "mcp" in dists(runner) and "a2a-sdk" not in dists(runner)
    # mcp's server process (uvicorn, click) is in neither Lambda; its form parsing only in
    # the API (FastAPI's Form). What `import mcp` and a tool call import stays (see
    # test_the_bundles_call_an_mcp_server_from_their_own_files).
    assert not (dists(runner) | dists(api)) & {"uvicorn", "click"}
    assert "python-multipart" in dists(api) and "python-multipart" not in dists(runner)
    assert {"starlette", "sse-starlette", "cryptography", "jsonschema", "rpds-py"} \
        <= dists(runner) & dists(api)
    for spec in (runner, register):
        assert {"boto3", "botocore", "pyjwt", "pynacl", "httpx"} <= dists(spec)
    assert [d for d, _ in api.files if d.startswith("handlers/")] == [
        "handlers/__init__.py", "handlers/api.py"]
    assert [d for d, _ in eraser.files if d.startswith("handlers/")] == [
        "handlers/__init__.py", "handlers/eraser.py"]
    assert not dists(eraser) & {"fastapi", "strawberry-graphql", "mangum", "python-multipart"}
    assert {"fastapi", "strawberry-graphql", "mangum", "pydantic"} <= dists(api)
    assert "numpy" not in dists(api) | dists(register)  # routing works without it
    assert "numpy" in dists(runner)  # routing thousands of agents: one matrix product
    assert not dists(runner) & {"fastapi", "strawberry-graphql", "mangum"}
    assert not dists(register) & {"fastapi", "strawberry-graphql", "mangum"}
    # The runtime's boto3 instead (codeshot:bundleBoto3=false): none of boto3's family.
    assert not dists(platform_bundle(API_FUNCTION, bundle_boto3=False)) & locks.BOTO3_FAMILY
    # Registration queues a deployed agent's corpus ingestion, and a deleted agent's S3
    # Vectors indexes go (each function's services are those its code makes clients of:
    # tests/infra/test_function_actions.py).
    assert set(RUNNER_FUNCTION.aws_services) <= set(API_FUNCTION.aws_services)
    assert {"sqs", "s3vectors"} <= set(REGISTER_FUNCTION.aws_services)


def test_agent_bundle_spec_has_only_the_sdk_and_the_agent():
    spec = agent_bundle(TEMPLATE, "agent:agent")
    dests = {d for d, _ in spec.files}
    assert {"agent.py", "agent.yaml", "codeshot/sdk/__init__.py", "codeshot/sdk/app.py"} <= dests
    assert not [d for d in dests if d.startswith(bundling.PLATFORM_ONLY)]
    assert not [d for d in dests if d.startswith(("tests/", "codeshot/local/"))]
    assert not [d for d in dests if d.startswith("codeshot/devtools/")]
    assert "codeshot-kit" not in dists(spec)  # the template's requirement: this checkout
    assert not dists(spec) & {"boto3", "numpy", "strawberry-graphql", "uvicorn", "cryptography"}
    assert {"fastapi", "mangum", "pydantic", "pyjwt", "pynacl", "httpx", "pyyaml"} <= dists(spec)
    entry = dict(spec.generated)[AGENT_ENTRY_MODULE + ".py"]
    assert "from agent import agent as _agent" in entry


def test_the_clock_example_ships_its_zone_data():
    """Deployed as an agent (the rehearsal does), it named a city's time from zone data a
    Lambda runtime need not have: its own lock adds tzdata."""
    spec = agent_bundle(REPO_ROOT / "codeshot/local/examples/clock", "agent:clock")
    assert "tzdata" in dists(spec)
    assert {"fastapi", "mangum", "pydantic"} <= dists(spec)


def test_every_lock_is_current_and_within_pyproject_ranges():
    ranges = locks.pyproject_dependencies()
    for lock in locks.platform_locks():
        pins = lock.pins()  # raises if the lock was made from other requirements
        for requirement in lock.requirements:
            wanted = Requirement(requirement)
            for line in pins[locks.dist_name(requirement)]:
                version = line.split("==", 1)[1].split(";")[0].strip()
                assert wanted.specifier.contains(version, prereleases=True), (lock.name, line)
        assert all(locks.dist_name(r) in ranges for r in lock.requirements)
        # Every pin carries hashes: installs are checked, not just named.
        assert lock.text().count("==") <= lock.text().count("--hash=sha256:")


def test_a_stale_lock_fails_the_synth(tmp_path, monkeypatch):
    lock = locks.api_lock()
    stale = locks.Lock(lock.name, (*lock.requirements, "humanize>=4"), lock.path)
    with pytest.raises(locks.LockError, match="make lock"):
        stale.text()
    missing = locks.Lock("x", ("humanize>=4",), tmp_path / "missing.txt")
    with pytest.raises(locks.LockError, match="make lock"):
        missing.text()


def test_bundle_hash_follows_code_lock_and_target(tmp_path):
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
    other_entry = agent_bundle(agent_dir, "other:thing").hash
    assert other_entry != second
    host = bundling.Target(LAMBDA_TARGET.python_version, "x86_64")
    assert agent_bundle(agent_dir, "agent:agent", host).hash != second
    # A requirement of the agent's own needs its own lock (`make lock` writes it).
    with (agent_dir / "requirements.txt").open("a") as f:
        f.write("\nhumanize>=4\n")
    with pytest.raises(locks.LockError, match="make lock"):
        agent_bundle(agent_dir, "agent:agent").hash  # noqa: B018
    locks.agent_lock(agent_dir).write()
    assert "humanize==" in (agent_dir / locks.AGENT_LOCK_FILE).read_text()
    assert agent_bundle(agent_dir, "agent:agent").hash not in (first, second)


def test_leaving_out_what_the_lock_does_not_pin_or_requires_fails_the_synth():
    runner = platform_bundle(RUNNER_FUNCTION)
    for left_out, says in (({"uvicorn", "humanize"}, r"\['humanize'\].*does not pin"),
                           ({"numpy"}, r"\['numpy'\].*requires")):
        spec = dataclasses.replace(runner, left_out=frozenset(left_out))
        with pytest.raises(bundling.BundlingError, match=says):
            spec.hash  # noqa: B018


def test_requirements_reject_pip_options(tmp_path):
    (tmp_path / "requirements.txt").write_text("codeshot-kit\n-r other.txt\n")
    with pytest.raises(locks.LockError, match="not supported"):
        locks.read_requirements(tmp_path / "requirements.txt")


def _asset_dir(synth, template) -> Path:
    (_, props) = template.function(f"{AGENT_ENTRY_MODULE}.handler")
    return synth.outdir / ("asset." + props["Code"]["S3Key"].removesuffix(".zip"))


@pytest.mark.slow
@pytest.mark.timeout(600)  # 20-40 s here, from scratch: a slower machine needs more
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
    assert LAMBDA_TARGET.abi_tag in core.name
    assert not list(bundle.rglob("*.pyi")) and not (bundle / "bin").exists()

    # The cache: the second time nothing is built.
    logs: list[str] = []
    started = time.monotonic()
    cached = bundling.ensure_bundle(spec, log=logs.append)
    assert "(cached," in logs[0] and time.monotonic() - started < 5
    assert cached.parent == tmp_path / "cache"


@pytest.mark.slow
def test_platform_bundle_code_imports_without_the_excluded_parts(tmp_path):
    """Every module the platform bundles ship imports from the bundle's code alone (no
    local stack, CLI or dev tools), and the API handler answers /healthz."""
    task = tmp_path / "task"
    for dest, source in platform_bundle(API_FUNCTION).files:
        (task / dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, task / dest)
    modules = sorted(d.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
                     for d, _ in platform_bundle(API_FUNCTION).files
                     if d.endswith(".py"))  # the console's templates and static files too
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


_MCP_PROBE = r"""
import json, sys
bundle, url, authorization = sys.argv[1:4]
sys.path[:0] = [bundle]
from codeshot.runner.mcp_servers import McpServer

server = McpServer(url, authorization, timeout=30, allow_loopback=True)
tools = [tool.func for tool in server.describe().tools]
text = server.call("stock_level", '{"sku": "SKU-1"}', "agent stock")
structured = json.loads(server.call("levels", '{"skus": ["SKU-1", "SKU-2"]}', "agent stock"))
if len(sys.argv) > 4:
    import codeshot.api.mcp  # the API's /mcp: the SDK's server, under Mangum
files = [getattr(m, "__file__", None) for m in list(sys.modules.values())]
print(json.dumps({"tools": tools, "text": text, "structured": structured,
                  "loaded": sorted({name.split(".")[0] for name in sys.modules}),
                  "outside": sorted(f for f in files if f and not f.startswith(
                      (bundle, sys.base_prefix)))}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("function", [RUNNER_FUNCTION, API_FUNCTION], ids=lambda f: f.name)
def test_the_bundles_call_an_mcp_server_from_their_own_files(function, tmp_path):
    """The runner calls MCP servers registered as agents and the API reads their tools (and
    serves /mcp): from the bundle alone (this machine's wheels, built once into the bundle
    cache), the SDK's client lists a real server's tools and calls them, one with structured
    output, which the SDK checks against the tool's output schema (jsonschema). What the
    bundle leaves out is not there, and nothing missed it."""
    from mcp.server.mcpserver import MCPServer

    from codeshot.local.http_server import mcp_http_server

    target = bundling.host_target()
    python = bundling.find_python(target.python_version)
    assert python is not None
    bundle = bundling.ensure_bundle(platform_bundle(function, target=target),
                                    log=lambda _msg: None)
    for dist in function.left_out:
        assert not list(bundle.glob(f"{dist.replace('-', '_')}-*.dist-info")), dist
    server = MCPServer("Warehouse")
    asked: list[str] = []

    @server.tool(description="Units of a product in stock")
    def stock_level(sku: str) -> str:
        asked.append(sku)
        return "17"

    @server.tool(description="Units in stock of several products")
    def levels(skus: list[str]) -> dict[str, int]:
        return {sku: 17 + i for i, sku in enumerate(skus)}

    http = mcp_http_server(server, "Bearer s3cret")
    url = http.start() + "/mcp"
    try:
        # -B: the cached bundle stays as built (no .pyc written into it).
        proc = subprocess.run(
            [python, "-I", "-S", "-B", "-c", _MCP_PROBE, str(bundle), url, "Bearer s3cret",
             *(["server"] if function is API_FUNCTION else [])],
            cwd=tmp_path, env={"PATH": os.environ.get("PATH", "")}, capture_output=True,
            text=True, timeout=120, check=False)
    finally:
        http.stop()
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["tools"] == ["stock_level", "levels"]
    assert result["text"] == "17" and asked == ["SKU-1"]
    assert result["structured"] == {"SKU-1": 17, "SKU-2": 18}
    assert {"mcp", "jsonschema", "cryptography"} <= set(result["loaded"])
    # (each left-out distribution's import name is its own: uvicorn, click, python_multipart)
    assert function.left_out and not {d.replace("-", "_") for d in function.left_out} \
        & set(result["loaded"])
    assert result["outside"] == []


@pytest.mark.slow
def test_two_builds_of_a_bundle_are_byte_identical(tmp_path, monkeypatch):
    """Same commit, same lock: the same bytes, whoever builds it (fresh caches)."""
    spec = agent_bundle(TEMPLATE, "agent:agent")
    digests = []
    for name in ("one", "two"):
        monkeypatch.setenv("CODESHOT_BUNDLE_CACHE", str(tmp_path / name))
        digests.append(bundling.tree_digest(bundling.ensure_bundle(spec, log=lambda m: None)))
    assert digests[0] == digests[1]


# Run by the bundle's Python: which modules of the bundle it compiles (rather than reading
# their bytecode) while importing an agent's SDK and frameworks.
_COMPILED_PROBE = r"""
import importlib._bootstrap_external as external, json, sys
compiled, original = [], external.SourceLoader.source_to_code
def recording(self, data, path, *, _optimize=-1):
    compiled.append(path)
    return original(self, data, path, _optimize=_optimize)
external.SourceLoader.source_to_code = recording
sys.path.insert(0, sys.argv[1])
import codeshot.sdk, fastapi, mangum, httpx
print(json.dumps([p for p in compiled if p.startswith(sys.argv[1])]))
"""


@pytest.mark.slow
def test_a_bundle_with_bytecode_is_reproducible_and_compiles_nothing(tmp_path, monkeypatch):
    """Bytecode written by the target's Python: two builds give the same bytes, and a cold
    start (nothing can be written: -B, as /var/task is read-only) reads it instead of
    compiling any of the bundle's modules."""
    spec = dataclasses.replace(agent_bundle(TEMPLATE, "agent:agent", bundling.host_target()),
                               bytecode=True)
    assert spec.compiler and spec.hash != dataclasses.replace(spec, bytecode=False).hash
    bundles = []
    for name in ("one", "two"):
        monkeypatch.setenv("CODESHOT_BUNDLE_CACHE", str(tmp_path / name))
        bundles.append(bundling.ensure_bundle(spec, log=lambda m: None))
    assert bundling.tree_digest(bundles[0]) == bundling.tree_digest(bundles[1])
    assert (bundles[0] / "codeshot" / "sdk" / "__pycache__").is_dir()
    probe = subprocess.run([spec.compiler, "-I", "-S", "-B", "-c", _COMPILED_PROBE,
                            str(bundles[0])], capture_output=True, text=True, timeout=120,
                           check=True)
    assert json.loads(probe.stdout.splitlines()[-1]) == []


@pytest.mark.slow
def test_two_synths_give_the_same_asset_hashes(tmp_path):
    def asset_keys(outdir: Path) -> list[str]:
        keys = []
        for manifest in sorted(outdir.glob("*.assets.json")):
            keys += sorted(json.loads(manifest.read_text())["files"])
        return keys

    first = asset_keys(synthesize(tmp_path / "a").outdir)
    second = asset_keys(synthesize(tmp_path / "b").outdir)
    assert first == second and len(first) >= 4  # api, runner, register, an agent

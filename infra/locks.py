"""Locked third-party dependencies of every Lambda bundle (``make lock`` writes them).

Each function ships only the distributions it imports (measured: see the README's deploy
guide), pinned with hashes in ``infra/locks/<name>.txt``. The locks are universal (uv's
``--universal``): one file serves Lambda (arm64, CPython 3.12) and the machine running
``make rehearse``. Each lock records a digest of its inputs (the requirement ranges from
pyproject.toml, or an agent's requirements.txt), so a synth refuses a stale lock instead
of shipping something nobody locked.

    python -m infra.locks            # every lock, and those of cdk.json's agent dirs
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from infra.config import REPO_ROOT

LOCK_DIR = REPO_ROOT / "infra" / "locks"
# The oldest Python the locks must cover (pyproject's requires-python; Lambda runs 3.12).
MIN_PYTHON = "3.11"
INPUTS_LINE = "# inputs: "
AGENT_LOCK_FILE = "requirements.lock"  # in an agent directory with its own requirements
# boto3 and what only it needs: left out of a bundle that uses the Lambda runtime's boto3.
BOTO3_FAMILY = frozenset({"boto3", "botocore", "s3transfer", "jmespath"})
# What the mcp SDK requires only to run a server as its own process: uvicorn (sse-starlette
# imports it if it can, to hook its shutdown) and click (uvicorn's command line). The API
# serves /mcp under Mangum and the runner is a client: left out of both (measured: their MCP
# paths never import them, tests/infra/test_bundling.py). `import mcp` does import the
# SDK's server side, so starlette, sse-starlette and cryptography (its request-state
# tokens) stay.
MCP_SERVER_PROCESS = frozenset({"uvicorn", "click"})
# starlette's form parsing (mcp's dependency): the runner parses no forms; the API does
# (FastAPI's Form), so it keeps it.
FORM_PARSING = frozenset({"python-multipart"})


class LockError(RuntimeError):
    pass


def dist_name(requirement: str) -> str:
    """The normalized distribution name of a requirement line (PEP 503)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if not match:
        raise LockError(f"cannot read a distribution name from {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def pyproject_dependencies() -> dict[str, str]:
    """pyproject.toml's requirements (dependencies and extras) by distribution name."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    extras = [r for lines in project.get("optional-dependencies", {}).values() for r in lines]
    return {dist_name(r): r for r in extras + project["dependencies"]}


@dataclass(frozen=True)
class Lock:
    """One lock file: what a bundle installs, by requirement line."""

    name: str
    requirements: tuple[str, ...]
    path: Path

    @property
    def inputs_digest(self) -> str:
        return hashlib.sha256("\n".join(sorted(self.requirements)).encode()).hexdigest()[:16]

    def text(self) -> str:
        """The lock file's text, checked to be made from the current inputs."""
        if not self.path.exists():
            raise LockError(f"{self.path} is missing: run `make lock`")
        text = self.path.read_text()
        if INPUTS_LINE + self.inputs_digest not in text:
            raise LockError(f"{self.path} was locked from other requirements than "
                            f"{list(self.requirements)}: run `make lock`")
        return text

    def pins(self) -> dict[str, list[str]]:
        """Distribution -> the ``name==version ; marker`` lines pinned for it."""
        out: dict[str, list[str]] = {}
        for line in self.text().splitlines():
            if line and not line[0].isspace() and not line.startswith("#"):
                requirement = line.rstrip(" \\")
                out.setdefault(dist_name(requirement), []).append(requirement)
        return out

    def write(self) -> None:
        """Resolve with uv and write the lock (network: PyPI)."""
        with tempfile.TemporaryDirectory() as tmp:
            infile = Path(tmp) / f"{self.name}.in"
            infile.write_text("\n".join(self.requirements) + "\n")
            # The current lock as uv's output file: it keeps those pins where they still
            # fit, so adding a requirement does not move every other one.
            outfile = Path(tmp) / f"{self.name}.txt"
            if self.path.exists():
                outfile.write_text(self.path.read_text())
            proc = subprocess.run(
                [sys.executable, "-m", "uv", "pip", "compile", "--quiet", "--no-config",
                 "--universal", "--python-version", MIN_PYTHON, "--generate-hashes",
                 "--no-header", "--output-file", outfile.name, infile.name],
                cwd=tmp, capture_output=True, text=True, timeout=600, check=False)
            locked = outfile.read_text() if proc.returncode == 0 else ""
        if proc.returncode:
            raise LockError(f"uv could not lock {self.name}:\n{proc.stderr[-3000:]}")
        header = (f"# Locked by `make lock` (uv pip compile --universal --generate-hashes) for "
                  f"the {self.name} bundle; do not edit.\n{INPUTS_LINE}{self.inputs_digest}\n")
        body = "\n".join(line for line in locked.splitlines()
                         if not line.startswith(("# Locked by", INPUTS_LINE))) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(header + body.lstrip("\n"))


def _platform_lock(name: str, *dists: str) -> Lock:
    deps = pyproject_dependencies()
    missing = [d for d in dists if d not in deps]
    if missing:
        raise LockError(f"pyproject.toml no longer lists {missing} (needed by {name})")
    return Lock(name, tuple(deps[d] for d in dists), LOCK_DIR / f"{name}.txt")


# What each function imports (third-party), measured by running it (`make rehearse`).
# PyStemmer: the router's word stems (API route query, registration, planner); tzdata:
# users' time zones (Lambda's image may have no zoneinfo); pypdf: fixie_query_embed;
# beautifulsoup4: HTML's text (fixie_query_embed, fixie_http_get).
def api_lock() -> Lock:
    # jinja2: the web console's pages (codeshot/api/console); mcp and a2a-sdk: /mcp, /a2a;
    # authlib: OAuth for agents' authorization URLs (codeshot/usecases/oauth.py).
    return _platform_lock("api", "fastapi", "pydantic", "strawberry-graphql", "mangum",
                          "httpx", "pyjwt", "pynacl", "pyyaml", "boto3", "jinja2",
                          "pystemmer", "tzdata", "mcp", "a2a-sdk", "authlib",
                          "aws-lambda-powertools")


def runner_lock() -> Lock:
    # numpy makes routing over thousands of agents one matrix product (codeshot/routing).
    # mcp: MCP servers registered as agents (imported only when one is called; what it pins
    # only for a server process is left out of the bundle: infra/bundling.py).
    return _platform_lock("runner", "httpx", "pyjwt", "pynacl", "pyyaml", "numpy", "boto3",
                          "pystemmer", "pypdf", "beautifulsoup4", "tzdata", "mcp",
                          "aws-lambda-powertools")


def register_lock() -> Lock:
    return _platform_lock("register", "pydantic", "httpx", "pyjwt", "pynacl", "pyyaml", "boto3",
                          "pystemmer")


def sdk_lock() -> Lock:
    """An agent's bundle: what ``codeshot.sdk`` imports. (An agent with ``oauth_params``
    lists authlib in its own requirements.txt: not every agent ships cryptography.)"""
    return _platform_lock("agent", "fastapi", "pydantic", "mangum", "httpx", "pyjwt", "pynacl",
                          "pyyaml")


def router_model_lock(base: Lock) -> Lock:
    """A platform function's lock with onnxruntime beside it: the bundle of a function
    that routes with a tuned model (``codeshot:routerModel``). One resolution, so what both
    need is pinned once; the function's own lock, and its default bundle, stay as they are."""
    onnxruntime = pyproject_dependencies()["onnxruntime"]
    return Lock(f"{base.name}-router", (*base.requirements, onnxruntime),
                LOCK_DIR / f"{base.name}-router.txt")


def lambda_runtime_lock() -> Lock:
    """What `make rehearse` puts where Lambda keeps its runtime (/var/runtime)."""
    return _platform_lock("lambda-runtime", "awslambdaric")


def platform_locks() -> list[Lock]:
    routing = [api_lock(), runner_lock(), register_lock()]
    return [*routing, *map(router_model_lock, routing), sdk_lock(), lambda_runtime_lock()]


def read_requirements(path: Path) -> list[str]:
    """An agent's requirements.txt, minus codeshot-kit (the SDK ships from this checkout)."""
    if not path.exists():
        return []
    lines = []
    for raw in path.read_text().splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-"):
            raise LockError(f"{path}: pip options ({line!r}) are not supported; "
                            "list requirements one per line")
        if dist_name(line) not in ("codeshot-kit", "codeshot"):
            lines.append(line)
    return lines


def agent_lock(agent_dir: Path) -> Lock:
    """The SDK's lock, or for an agent with requirements of its own, the agent's lock."""
    extra = read_requirements(agent_dir / "requirements.txt")
    if not extra:
        return sdk_lock()
    sdk = sdk_lock()
    return Lock(f"agent {agent_dir.name}", sdk.requirements + tuple(extra),
                agent_dir / AGENT_LOCK_FILE)


def main(argv: list[str]) -> int:
    import json

    context = json.loads((REPO_ROOT / "cdk.json").read_text()).get("context", {})
    agent_dirs = argv or context.get("codeshot:agentDirs", [])
    locks = platform_locks() + [agent_lock((REPO_ROOT / d).resolve()) for d in agent_dirs]
    for lock in {lock.path: lock for lock in locks}.values():
        lock.write()
        print(f"[codeshot] locked {lock.name}: {lock.path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Lambda bundles built without Docker: ``pip --platform`` for arm64 wheels, plus only the
code each function runs.

Each bundle is described by a :class:`BundleSpec` (files, generated files, requirements);
its hash covers all of them, is the asset's CUSTOM hash, and keys a cache directory, so a
bundle is built once and reused by every later synth until its inputs change.

- platform (API, runner, agent registration): ``codeshot`` without the local stack, CLI and
  dev tools, ``handlers/``, and pyproject.toml's dependencies plus its ``platform`` extra,
  except boto3 (the Lambda runtime provides it) and uvicorn (local serving only).
- agent: the agent directory, a generated entry module, only the ``codeshot`` modules the
  SDK imports (measured in a subprocess), pyproject.toml's dependencies (the SDK's, less
  uvicorn) and the agent's own requirements.txt. No store, api, runner or boto3.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, ILocalBundling
from aws_cdk import aws_lambda as lambda_

from infra.config import REPO_ROOT

BUNDLER_VERSION = "1"  # bump when the bundle layout changes, to invalidate caches
PYTHON_VERSION = "3.12"
RUNTIME = lambda_.Runtime.PYTHON_3_12
ARCHITECTURE = lambda_.Architecture.ARM_64
PIP_TARGET_ARGS = (
    "--platform", "manylinux2014_aarch64", "--implementation", "cp",
    "--python-version", PYTHON_VERSION, "--only-binary=:all:",
)

# Distributions no Lambda installs (local serving only); boto3 is the runtime's, unless bundled.
NOT_IN_LAMBDA = frozenset({"uvicorn"})
# Parts of codeshot that never run in Lambda.
PLATFORM_EXCLUDED_PATHS = ("codeshot/local/", "codeshot/devtools/", "codeshot/cli.py",
                           "codeshot/chat.py")
# Packages an agent bundle must never contain (asserted when it is built; import-linter's
# contract on codeshot.sdk keeps the SDK from importing them in the first place).
PLATFORM_ONLY = ("codeshot/store/", "codeshot/api/", "codeshot/runner/", "codeshot/services.py",
                 "codeshot/aws.py", "codeshot/usecases/", "codeshot/devtools/",
                 "codeshot/local/", "boto3/", "botocore/")
AGENT_ENTRY_MODULE = "_codeshot_lambda"
AGENT_SKIP_DIRS = {"tests", "__pycache__", ".venv", "node_modules", "cdk.out"}


class BundlingError(RuntimeError):
    pass


def dist_name(requirement: str) -> str:
    """The normalized distribution name of a requirement line (PEP 503)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if not match:
        raise BundlingError(f"cannot read a distribution name from {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def pyproject_dependencies(extra: str | None = None) -> list[str]:
    """[project].dependencies (the SDK's), or the requirements of one extra."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    if extra is None:
        return list(project["dependencies"])
    return list(project["optional-dependencies"][extra])


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
            raise BundlingError(f"{path}: pip options ({line!r}) are not supported; "
                                "list requirements one per line")
        if dist_name(line) not in ("codeshot-kit", "codeshot"):
            lines.append(line)
    return lines


@dataclass(frozen=True)
class BundleSpec:
    name: str
    files: tuple[tuple[str, Path], ...]  # (path in the bundle, source file)
    generated: tuple[tuple[str, str], ...] = ()  # (path in the bundle, text)
    requirements: tuple[str, ...] = ()

    @cached_property
    def hash(self) -> str:
        h = hashlib.sha256()
        h.update(json.dumps([BUNDLER_VERSION, PIP_TARGET_ARGS, self.requirements]).encode())
        for dest, source in sorted(self.files):
            h.update(b"\0F" + dest.encode() + b"\0" + hashlib.sha256(source.read_bytes()).digest())
        for dest, text in sorted(self.generated):
            h.update(b"\0G" + dest.encode() + b"\0" + text.encode())
        return h.hexdigest()


def _tree(root: Path, rel: str, skip: tuple[str, ...] = ()) -> list[tuple[str, Path]]:
    out = []
    for path in sorted((root / rel).rglob("*.py")):
        dest = path.relative_to(root).as_posix()
        if "__pycache__" not in dest and not dest.startswith(skip):
            out.append((dest, path))
    return out


def platform_bundle(bundle_boto3: bool = False) -> BundleSpec:
    excluded = NOT_IN_LAMBDA if bundle_boto3 else NOT_IN_LAMBDA | {"boto3"}
    requirements = [r for r in pyproject_dependencies() + pyproject_dependencies("platform")
                    if dist_name(r) not in excluded]
    files = _tree(REPO_ROOT, "codeshot", PLATFORM_EXCLUDED_PATHS) + _tree(REPO_ROOT, "handlers")
    return BundleSpec("platform", tuple(files), requirements=tuple(requirements))


_SDK_PROBE = r"""
import importlib, json, pkgutil, sys
from pathlib import Path
import codeshot.sdk
for info in pkgutil.iter_modules(codeshot.sdk.__path__, "codeshot.sdk."):
    importlib.import_module(info.name)
from codeshot.sdk import StandaloneAgent
StandaloneAgent(lambda query: "ok").app()   # what agent.handler builds on a cold start
import mangum
root = Path(sys.argv[1]).resolve()
files = sorted({Path(m.__file__).resolve().relative_to(root).as_posix()
                for name, m in list(sys.modules.items())
                if name.split(".")[0] == "codeshot" and getattr(m, "__file__", None)})
print(json.dumps({"files": files, "boto3": "boto3" in sys.modules}))
"""


@lru_cache(maxsize=1)
def sdk_files() -> tuple[str, ...]:
    """Every codeshot file the SDK imports, found by importing it in a clean interpreter."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CODESHOT_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    proc = subprocess.run([sys.executable, "-c", _SDK_PROBE, str(REPO_ROOT)], cwd=REPO_ROOT,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode:
        raise BundlingError("importing codeshot.sdk failed:\n" + proc.stderr)
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    leaked = [f for f in found["files"] if f.startswith(PLATFORM_ONLY)]
    if leaked or found["boto3"]:
        raise BundlingError(f"codeshot.sdk imports platform code {leaked or ['boto3']}: an agent "
                            "bundle must not ship the platform")
    return tuple(found["files"])


def sdk_requirements() -> list[str]:
    return [r for r in pyproject_dependencies() if dist_name(r) not in NOT_IN_LAMBDA]


def agent_entry_source(entry_point: str) -> str:
    module, _, attr = entry_point.partition(":")
    return (f'"""Generated by infra/bundling.py: the Lambda entry point of this agent."""\n\n'
            f"from {module} import {attr} as _agent\n\nhandler = _agent.handler\n")


def agent_bundle(agent_dir: Path, entry_point: str) -> BundleSpec:
    agent_dir = agent_dir.resolve()
    files = [(f, REPO_ROOT / f) for f in sdk_files()]
    for path in sorted(agent_dir.rglob("*")):
        rel = path.relative_to(agent_dir)
        skipped = (set(rel.parts[:-1]) & AGENT_SKIP_DIRS
                   or any(part.startswith(".") for part in rel.parts)
                   or path.suffix == ".pyc" or rel.as_posix() == "requirements.txt")
        if not path.is_file() or skipped:
            continue
        if rel.parts[0] == "codeshot":
            raise BundlingError(f"{agent_dir} must not contain a 'codeshot' package")
        files.append((rel.as_posix(), path))
    requirements = sdk_requirements() + read_requirements(agent_dir / "requirements.txt")
    generated = ((AGENT_ENTRY_MODULE + ".py", agent_entry_source(entry_point)),)
    return BundleSpec(f"agent:{agent_dir.name}", tuple(files), generated, tuple(requirements))


def cache_root() -> Path:
    configured = os.environ.get("CODESHOT_BUNDLE_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "codeshot-bundles"


def dir_size(path: Path) -> tuple[int, int]:
    """(bytes, files) of a directory tree: what Lambda counts against 250 MB unzipped."""
    sizes = [p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()]
    return sum(sizes), len(sizes)


def _build(spec: BundleSpec, out: Path) -> None:
    if spec.requirements:
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
               "--no-compile", *PIP_TARGET_ARGS, "--target", str(out), *spec.requirements]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
        if proc.returncode:
            raise BundlingError(f"pip failed for bundle {spec.name}:\n{proc.stderr[-4000:]}")
    shutil.rmtree(out / "bin", ignore_errors=True)  # console scripts: never run in Lambda
    for cache in list(out.rglob("__pycache__")):
        shutil.rmtree(cache, ignore_errors=True)
    for dest, source in spec.files:
        target = out / dest
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    for dest, text in spec.generated:
        (out / dest).write_text(text)


def ensure_bundle(spec: BundleSpec, log: Any = None) -> Path:
    """The cached bundle directory for ``spec``, built first if it is not there yet."""
    log = log or (lambda msg: print(msg, file=sys.stderr))
    final = cache_root() / spec.hash
    state = "cached"
    if not (final / ".complete").exists():
        state = "built"
        final.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{spec.hash[:12]}-", dir=final.parent))
        try:
            _build(spec, work)
            (work / ".complete").write_text(spec.name)
            shutil.rmtree(final, ignore_errors=True)  # a half-built leftover
            try:
                work.rename(final)
            except OSError:  # another synth finished the same bundle first: use it
                if not (final / ".complete").exists():
                    raise
        finally:
            shutil.rmtree(work, ignore_errors=True)
    size, count = dir_size(final)
    log(f"[codeshot] bundle {spec.name}: {size / 1e6:.1f} MB unzipped, {count} files "
        f"({state}, {spec.hash[:12]})")
    return final


@jsii.implements(ILocalBundling)
class LocalBundler:
    """CDK's local bundling hook: copies the cached bundle into CDK's output directory."""

    def __init__(self, spec: BundleSpec) -> None:
        self.spec = spec

    def try_bundle(self, output_dir: str, *_args: Any, **_kwargs: Any) -> bool:
        shutil.copytree(ensure_bundle(self.spec), output_dir, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(".complete"))
        return True


def lambda_code(spec: BundleSpec, source_dir: Path) -> lambda_.Code:
    """An asset built by :class:`LocalBundler` (Docker is never used).

    ``source_dir`` is only what CDK stages when bundling is skipped
    (``aws:cdk:bundling-stacks``), so it should be small.
    """
    return lambda_.Code.from_asset(
        str(source_dir),
        asset_hash=spec.hash,
        asset_hash_type=AssetHashType.CUSTOM,
        bundling=BundlingOptions(image=RUNTIME.bundling_image, local=LocalBundler(spec)),
    )

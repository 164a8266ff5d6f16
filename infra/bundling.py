"""Lambda bundles built without Docker: locked wheels for the target (uv, binary only),
plus only the code each function runs.

Each bundle is described by a :class:`BundleSpec` (files, generated files, the lock it
installs, the target, what is pruned); its hash covers all of them, is the asset's CUSTOM
hash, and keys a cache directory, so a bundle is built once and reused by every later
synth until its inputs change. Two synths of the same commit give the same asset hashes
and the same bytes (tests/infra/test_bundling.py).

- api, runner, register: ``codeshot`` without the local stack, CLI and dev tools, the
  function's own handler, and its lock (``infra/locks``). boto3 is bundled (see
  ``codeshot:bundleBoto3``) with only the botocore service models the function calls.
  Distributions a lock pins that the function never imports (the mcp SDK's server
  process: uvicorn, click) are left out (``PlatformFunction.left_out``).
  Each ships its bytecode (``.pyc``, compiled by the target's Python). With
  ``codeshot:routerModel``, each also ships the tuned model's tuning and vocabulary and
  installs onnxruntime (its ``<name>-router`` lock); the graph is an S3 asset.
- agent: the agent directory, a generated entry module, only the ``codeshot`` modules the
  SDK imports (measured in a subprocess), and the SDK's lock (or the agent's own lock when
  its requirements.txt adds requirements). No store, api, runner or boto3.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, ILocalBundling
from aws_cdk import aws_lambda as lambda_

from codeshot.settings import MINILM_ONNX_FILE, MINILM_TUNING_FILE, MINILM_VOCAB_FILE
from infra.config import REPO_ROOT
from infra.locks import (
    BOTO3_FAMILY,
    FORM_PARSING,
    MCP_SERVER_PROCESS,
    Lock,
    agent_lock,
    api_lock,
    dist_name,
    register_lock,
    router_model_lock,
    runner_lock,
)

BUNDLER_VERSION = "2"  # bump when the bundle layout changes, to invalidate caches

# Parts of codeshot that never run in Lambda.
PLATFORM_EXCLUDED_PATHS = ("codeshot/local/", "codeshot/devtools/", "codeshot/cli.py",
                           "codeshot/chat.py", "codeshot/routing/distill.py")
# Packages an agent bundle must never contain (asserted when it is built; import-linter's
# contract on codeshot.sdk keeps the SDK from importing them in the first place).
PLATFORM_ONLY = ("codeshot/store/", "codeshot/api/", "codeshot/runner/", "codeshot/services.py",
                 "codeshot/aws.py", "codeshot/usecases/", "codeshot/devtools/",
                 "codeshot/local/", "boto3/", "botocore/")
AGENT_ENTRY_MODULE = "_codeshot_lambda"
AGENT_SKIP_DIRS = {"tests", "__pycache__", ".venv", "node_modules", "cdk.out"}
# Test suites some wheels ship; nothing imports them at run time (numpy's are 8 MB).
PRUNED_TEST_DIRS = ("numpy",)


class BundlingError(RuntimeError):
    pass


@dataclass(frozen=True)
class Target:
    """The platform the bundles' wheels are for: Lambda's, or this machine's (rehearsal).

    manylinux_2_28: Lambda's Python 3.12 runtime is Amazon Linux 2023 (glibc 2.34).
    """

    python_version: str  # "3.12"
    machine: str  # "aarch64" | "x86_64"

    @property
    def runtime(self) -> lambda_.Runtime:
        return lambda_.Runtime(f"python{self.python_version}", lambda_.RuntimeFamily.PYTHON)

    @property
    def architecture(self) -> lambda_.Architecture:
        return lambda_.Architecture.ARM_64 if self.machine == "aarch64" else \
            lambda_.Architecture.X86_64

    @property
    def uv_platform(self) -> str:
        return f"{self.machine}-manylinux_2_28"

    @property
    def abi_tag(self) -> str:
        """What CPython extension file names carry: ``cpython-312-aarch64-linux-gnu``."""
        return f"cpython-{self.python_version.replace('.', '')}-{self.machine}-linux-gnu"


LAMBDA_TARGET = Target("3.12", "aarch64")


@lru_cache(maxsize=8)
def find_python(version: str) -> str | None:
    """An interpreter of ``version`` on this machine (this one, pyenv's versions, PATH)."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return str(getattr(sys, "_base_executable", sys.executable))
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [str(p / "bin" / f"python{version}")
                  for p in sorted(pyenv.glob(f"{version}.*"), reverse=True)]
    candidates.append(shutil.which(f"python{version}") or "")
    for binary in filter(None, candidates):
        probe = subprocess.run([binary, "-c", "import sys; print(*sys.version_info[:2])"],
                               capture_output=True, text=True, timeout=30, check=False)
        if probe.stdout.split() == version.split("."):  # not a shim that fails
            return binary
    return None


def host_target() -> Target:
    """This machine's CPU, with Lambda's Python where the machine has it (else its own):
    what `make rehearse` runs bundles on."""
    machine = {"arm64": "aarch64", "amd64": "x86_64"}.get(platform.machine().lower(),
                                                          platform.machine().lower())
    version = LAMBDA_TARGET.python_version
    if find_python(version) is None:
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
    return Target(version, machine)


@dataclass(frozen=True)
class BundleSpec:
    name: str
    files: tuple[tuple[str, Path], ...]  # (path in the bundle, source file)
    lock: Lock
    target: Target = LAMBDA_TARGET
    generated: tuple[tuple[str, str], ...] = ()  # (path in the bundle, text)
    # botocore/boto3 service models kept; None = boto3 is not bundled (the runtime's).
    aws_services: tuple[str, ...] | None = None
    # Locked distributions the function never imports (its lock's requirements need them
    # for something else): not installed.
    left_out: frozenset[str] = frozenset()
    # Files of installed distributions the function never loads (globs in the bundle).
    pruned: tuple[str, ...] = ()
    # Ship each module's bytecode: /var/task is read-only, so a bundle without .pyc files
    # compiles every module it imports again on every cold start (most of the API's).
    bytecode: bool = True

    @cached_property
    def compiler(self) -> str | None:
        """The target's Python on this machine, which writes the bytecode (None: none is
        written, because the bundle ships none or this machine has no such Python)."""
        return find_python(self.target.python_version) if self.bytecode else None

    @cached_property
    def requirements(self) -> tuple[str, ...]:
        """The locked requirement lines installed (hashes stay in the lock file)."""
        pins = self.lock.pins()
        listed = {dist_name(r) for r in self.lock.requirements}
        for wrong, why in ((self.left_out - pins.keys(), "does not pin"),
                           (self.left_out & listed, "requires")):
            if wrong:  # a stale declaration, or one that would break the function
                raise BundlingError(f"bundle {self.name} leaves out {sorted(wrong)}, which its "
                                    f"lock ({self.lock.path.name}) {why}: fix its left_out")
        skip = self.left_out | (set() if self.aws_services is not None else BOTO3_FAMILY)
        return tuple(line for dist, lines in sorted(pins.items()) if dist not in skip
                     for line in lines)

    @cached_property
    def hash(self) -> str:
        h = hashlib.sha256()
        h.update(json.dumps([BUNDLER_VERSION, self.target.uv_platform, self.target.python_version,
                             self.aws_services, PRUNED_TEST_DIRS, self.requirements,
                             self.pruned, self.compiler is not None]).encode())
        h.update(hashlib.sha256(self.lock.text().encode()).digest())
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


def _data(rel: str) -> list[tuple[str, Path]]:
    """Every file under ``rel`` (templates, browser files): shipped as they are."""
    root = REPO_ROOT / rel
    files = [(p.relative_to(REPO_ROOT).as_posix(), p) for p in sorted(root.rglob("*"))
             if p.is_file() and "__pycache__" not in p.parts]
    if not files:
        raise BundlingError(f"{rel} is empty: run `make assets`")
    return files


CONSOLE = "codeshot/api/console"
# web/package.json lists the third-party browser files `make assets` copies from npm.
CONSOLE_VENDOR_MANIFEST = REPO_ROOT / "web" / "package.json"


def console_files() -> list[tuple[str, Path]]:
    """The web console's templates and browser files (the API serves them); a bundle
    without the third-party ones would serve a broken console, so it is not built."""
    vendor = json.loads(CONSOLE_VENDOR_MANIFEST.read_text())["vendor"]
    missing = [name for name in vendor
               if not (REPO_ROOT / CONSOLE / "static" / "vendor" / name).is_file()]
    if missing:
        raise BundlingError(f"the console's browser files {missing} are missing from "
                            f"{CONSOLE}/static/vendor: run `make assets`")
    return _data(f"{CONSOLE}/templates") + _data(f"{CONSOLE}/static")


def router_files() -> list[tuple[str, Path]]:
    """The static embedder's vectors and vocabulary (every function that routes or embeds
    agents: codeshot:embedder=static), and the router's no-agent examples."""
    return _data("codeshot/routing/data")


# Where a tuned router model's tuning and vocabulary go in a bundle (codeshot:routerModel):
# its functions' CODESHOT_MINILM_MODEL, relative to the working directory, which is the
# bundle's root (/var/task in Lambda, the asset directory in `make rehearse`). Its graph
# (90 MB) is an S3 asset the functions read at their first route: in each bundle it
# would take the API's past Lambda's 250 MB.
ROUTER_MODEL_DIR = "router-model"
ROUTER_MODEL_FILES = (MINILM_TUNING_FILE, MINILM_VOCAB_FILE)
# What of onnxruntime the router never loads (35 MB of 63 on arm64, measured by running the
# bundle: tests/infra/test_router_model.py): its C API library (the Python module links
# the runtime in), and the model tools (conversion, quantization, benchmarks).
ONNXRUNTIME_UNUSED = ("onnxruntime/capi/libonnxruntime.so.*", "onnxruntime/transformers",
                      "onnxruntime/quantization", "onnxruntime/tools", "onnxruntime/backend")


def router_graph(directory: Path) -> Path:
    """The graph of the model ``codeshot router tune`` made in ``directory``, checked
    against its tuning by its digest (else the synth fails: every function would fail to
    start, route with no model, or store rows of one model under another's id). Here, and
    not at each cold start, since it reads the 90 MB graph."""
    from codeshot.errors import LLMError
    from codeshot.routing.tune import check_files, read_tuning

    try:
        tuning = read_tuning(directory)
        missing = [name for name in (MINILM_ONNX_FILE, MINILM_VOCAB_FILE)
                   if not (directory / name).is_file()]
        if missing:
            raise BundlingError(f"codeshot:routerModel: {directory} has no "
                                f"{' or '.join(missing)}: tune it again with `codeshot router "
                                "tune` (which exports the graph the functions run)")
        check_files(directory, tuning, full=True)
    except LLMError as exc:
        raise BundlingError(f"codeshot:routerModel: {exc}") from None
    return directory / MINILM_ONNX_FILE


def router_model_files(directory: Path) -> list[tuple[str, Path]]:
    """What of a tuned model a bundle holds: not its graph (an S3 asset), nor its torch
    weights and sentence-transformers' files."""
    router_graph(directory)
    return [(f"{ROUTER_MODEL_DIR}/{name}", directory / name) for name in ROUTER_MODEL_FILES]


def api_files() -> list[tuple[str, Path]]:
    return console_files() + router_files()


@dataclass(frozen=True)
class PlatformFunction:
    """A platform Lambda: its handler module, its lock, the AWS services it calls and the
    data files it serves."""

    name: str
    handler: str  # "handlers.api.handler"
    lock: Callable[[], Lock]
    aws_services: tuple[str, ...]
    data: Callable[[], list[tuple[str, Path]]] = list
    left_out: frozenset[str] = frozenset()  # see BundleSpec.left_out
    routes: bool = True  # routes or embeds agents: ships a tuned router model's files


def platform_bundle(function: PlatformFunction, *, target: Target = LAMBDA_TARGET,
                    bundle_boto3: bool = True, router_model: Path | None = None) -> BundleSpec:
    """``router_model``: a tuned model's directory, which the function routes with (its
    files, and onnxruntime in its lock)."""
    handler_file = function.handler.rsplit(".", 1)[0].replace(".", "/") + ".py"
    files = [*_tree(REPO_ROOT, "codeshot", PLATFORM_EXCLUDED_PATHS),
             ("handlers/__init__.py", REPO_ROOT / "handlers" / "__init__.py"),
             (handler_file, REPO_ROOT / handler_file), *function.data()]
    lock = function.lock()
    pruned: tuple[str, ...] = ()
    if router_model is not None and function.routes:
        files += router_model_files(router_model)
        lock, pruned = router_model_lock(lock), ONNXRUNTIME_UNUSED
    return BundleSpec(function.name, tuple(files), lock, target,
                      aws_services=function.aws_services if bundle_boto3 else None,
                      left_out=function.left_out, pruned=pruned)


# Each platform function, with the AWS services its code calls and what of its lock it
# leaves out (infra/locks.py says why).
# cognito-idp: the console's accounts (codeshot/auth/cognito.py); s3vectors: a deleted
# agent's corpus indexes (codeshot:corpusSearch=s3vectors).
API_FUNCTION = PlatformFunction("api", "handlers.api.handler", api_lock,
                                ("dynamodb", "s3", "sqs", "secretsmanager", "bedrock-runtime",
                                 "cognito-idp", "s3vectors"), api_files,
                                left_out=MCP_SERVER_PROCESS)
# s3vectors: corpus search with codeshot:corpusSearch=s3vectors; sqs for registration:
# a deployed agent's corpus ingestion is queued.
RUNNER_FUNCTION = PlatformFunction("runner", "handlers.runner.handler", runner_lock,
                                   ("dynamodb", "s3", "sqs", "secretsmanager",
                                    "bedrock-runtime", "s3vectors"), router_files,
                                   left_out=MCP_SERVER_PROCESS | FORM_PARSING)
# s3 and s3vectors: an unregistered agent's corpus indexes are deleted.
REGISTER_FUNCTION = PlatformFunction("register", "handlers.register_agent.handler",
                                     register_lock,
                                     ("dynamodb", "s3", "sqs", "secretsmanager",
                                      "bedrock-runtime", "s3vectors",
                                      "cloudformation"),  # is its stack new? (new_stack.py)
                                     router_files)
# The eraser: deleted users' data (codeshot/usecases/erasure.py), on a role of its own. It
# embeds nothing and calls no LLM; it imports what the runner's lock holds, no more.
ERASER_FUNCTION = PlatformFunction("eraser", "handlers.eraser.handler", runner_lock,
                                   ("dynamodb", "s3", "sqs", "secretsmanager", "s3vectors"),
                                   left_out=MCP_SERVER_PROCESS | FORM_PARSING, routes=False)
PLATFORM_FUNCTIONS = (API_FUNCTION, RUNNER_FUNCTION, REGISTER_FUNCTION, ERASER_FUNCTION)


_SDK_PROBE = r"""
import importlib, json, pkgutil, sys
from pathlib import Path
import codeshot.sdk
for info in pkgutil.iter_modules(codeshot.sdk.__path__, "codeshot.sdk."):
    importlib.import_module(info.name)
from codeshot.sdk import StandaloneAgent
from codeshot.settings import Settings
# what agent.handler builds on a cold start (the CDK app sets CODESHOT_AGENT_ID)
StandaloneAgent(lambda query: "ok").app(Settings(agent_id="probe/agent"))
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


def agent_entry_source(entry_point: str) -> str:
    module, _, attr = entry_point.partition(":")
    return (f'"""Generated by infra/bundling.py: the Lambda entry point of this agent."""\n\n'
            f"from {module} import {attr} as _agent\n\nhandler = _agent.handler\n")


def agent_bundle(agent_dir: Path, entry_point: str, target: Target = LAMBDA_TARGET
                 ) -> BundleSpec:
    agent_dir = agent_dir.resolve()
    files = [(f, REPO_ROOT / f) for f in sdk_files()]
    for path in sorted(agent_dir.rglob("*")):
        rel = path.relative_to(agent_dir)
        skipped = (set(rel.parts[:-1]) & AGENT_SKIP_DIRS
                   or any(part.startswith(".") for part in rel.parts)
                   or path.suffix == ".pyc"
                   or rel.as_posix() in ("requirements.txt", "requirements.lock"))
        if not path.is_file() or skipped:
            continue
        if rel.parts[0] == "codeshot":
            raise BundlingError(f"{agent_dir} must not contain a 'codeshot' package")
        files.append((rel.as_posix(), path))
    generated = ((AGENT_ENTRY_MODULE + ".py", agent_entry_source(entry_point)),)
    return BundleSpec(f"agent:{agent_dir.name}", tuple(files), agent_lock(agent_dir), target,
                      generated)


def cache_root() -> Path:
    configured = os.environ.get("CODESHOT_BUNDLE_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "codeshot-bundles"


# What Lambda accepts of a function's code (with its layers) unzipped: 250 MiB.
LAMBDA_UNZIPPED_LIMIT = 250 * 1024 * 1024


def dir_size(path: Path) -> tuple[int, int]:
    """(bytes, files) of a directory tree: what Lambda counts against 250 MB unzipped."""
    sizes = [p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()]
    return sum(sizes), len(sizes)


def tree_digest(path: Path) -> str:
    """A digest of every file's path and bytes: equal for byte-identical bundles."""
    h = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(file.relative_to(path).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(file.read_bytes()).digest())
    return h.hexdigest()


def _install(spec: BundleSpec, out: Path) -> None:
    """The locked wheels for the target, hashes checked, nothing built from source."""
    with tempfile.TemporaryDirectory() as tmp:
        requirements = Path(tmp) / "requirements.txt"
        # The lock's own lines (with their hashes), minus what this bundle leaves out.
        keep = {dist_name(r) for r in spec.requirements}
        blocks, current = [], []
        for line in spec.lock.text().splitlines():
            if line and not line[0].isspace() and not line.startswith("#"):
                current = [line]
                blocks.append(current)
            elif current and line.strip().startswith("--hash"):
                current.append(line)
        requirements.write_text("\n".join(
            "\n".join(block) for block in blocks if dist_name(block[0]) in keep) + "\n")
        cmd = [sys.executable, "-m", "uv", "pip", "install", "--quiet", "--no-config",
               "--target", str(out), "--python-platform", spec.target.uv_platform,
               "--python-version", spec.target.python_version, "--no-deps", "--require-hashes",
               "--no-build", "--link-mode", "copy", "-r", str(requirements)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode:
        raise BundlingError(f"uv could not install bundle {spec.name}:\n{proc.stderr[-4000:]}")


def _prune(spec: BundleSpec, out: Path) -> None:
    shutil.rmtree(out / "bin", ignore_errors=True)  # console scripts: never run in Lambda
    for cache in list(out.rglob("__pycache__")):
        shutil.rmtree(cache, ignore_errors=True)
    for stub in list(out.rglob("*.pyi")):  # type stubs: read by type checkers, not by Python
        stub.unlink()
    for package in PRUNED_TEST_DIRS:
        for tests in sorted((out / package).rglob("tests"), reverse=True):
            shutil.rmtree(tests, ignore_errors=True)
    for pattern in spec.pruned:
        found = sorted(out.glob(pattern))
        if not found:  # a new version moved it: the declaration is stale
            raise BundlingError(f"bundle {spec.name} prunes {pattern}, which is not there")
        for path in found:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
    if spec.aws_services is not None:  # keep only the service models the function calls
        for data in (out / "botocore" / "data", out / "boto3" / "data"):
            for service in data.iterdir() if data.is_dir() else ():
                if service.is_dir() and service.name not in spec.aws_services:
                    shutil.rmtree(service)


def _compile(python: str, out: Path) -> None:
    """Every module's bytecode beside it, written by the target's Python: checked by the
    source's hash (zipping loses the mtimes), paths relative to the bundle, and one
    process in a fixed order (marshal's bytes depend on what it compiled before), so two
    builds give the same bytes."""
    cmd = [python, "-E", "-S", "-m", "compileall", "-q", "-s", str(out),
           "--invalidation-mode", "checked-hash", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode:
        raise BundlingError(f"compiling the bundle's bytecode failed:\n{proc.stdout[-4000:]}"
                            f"{proc.stderr[-4000:]}")


def _build(spec: BundleSpec, out: Path) -> None:
    if spec.requirements:
        _install(spec, out)
    _prune(spec, out)
    for dest, source in spec.files:
        target = out / dest
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    for dest, text in spec.generated:
        (out / dest).write_text(text)
    if spec.compiler:
        _compile(spec.compiler, out)


def ensure_bundle(spec: BundleSpec, log: Callable[[str], Any] | None = None) -> Path:
    """The cached bundle directory for ``spec``, built first if it is not there yet."""
    say = log or (lambda msg: print(msg, file=sys.stderr))
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
    say(f"[codeshot] bundle {spec.name}: {size / 1e6:.1f} MB unzipped, {count} files "
        f"({state}, {spec.hash[:12]})")
    if size > LAMBDA_UNZIPPED_LIMIT:  # else `cdk deploy` fails at this function, much later
        raise BundlingError(f"bundle {spec.name} is {size / 1e6:.1f} MB unzipped: Lambda "
                            f"takes at most {LAMBDA_UNZIPPED_LIMIT / 1e6:.1f} MB (250 MiB)")
    if spec.bytecode and not spec.compiler:
        say(f"[codeshot] bundle {spec.name}: no bytecode (this machine has no Python "
            f"{spec.target.python_version}), so its cold starts compile every module")
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
        bundling=BundlingOptions(image=spec.target.runtime.bundling_image,
                                 local=LocalBundler(spec)),
    )

"""The rehearsal, start to end: synthesize, deploy locally, check end to end, measure,
destroy, print. ``python -m infra.rehearsal`` (``make rehearse``); exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import infra.app  # noqa: F401  (first: quiets jsii's notes about this machine's Node)
from infra.config import REPO_ROOT
from infra.rehearsal.assembly import REGION, RehearsalError, read_assembly
from infra.rehearsal.aws_proxy import AwsProxy, secret_resource
from infra.rehearsal.deploy import Deployment, ResponseServer
from infra.rehearsal.lambdas import Lambdas

WORK_DIR = REPO_ROOT / ".rehearsal"
# The synth's context on top of cdk.json's: bundles for this machine, no Bedrock (offline
# LLM and embedder), the example agents beside the template's, and local mode (agents on
# loopback addresses would otherwise fail the platform's SSRF check, as they should).
CONTEXT = {
    "codeshot:bundleTarget": "host",
    "codeshot:llm": "fewshot",
    "codeshot:embedder": "static",
    "codeshot:agentDirs": ["agent_template", "codeshot/local/examples/dice",
                           "codeshot/local/examples/clock"],
    "codeshot:extraEnv": {"CODESHOT_LOCAL_MODE": "true"},
}


def synthesize(outdir: Path, context: dict[str, Any] | None = None) -> None:
    from infra.app import build_app, cdk_json_context

    shutil.rmtree(outdir, ignore_errors=True)
    build_app(cdk_json_context() | CONTEXT | (context or {}), outdir=str(outdir)).synth()


def lambda_runtime_dir(python_version: str) -> Path:
    """awslambdaric (locked) for the functions' Python: where Lambda keeps /var/runtime."""
    from infra.bundling import BundleSpec, ensure_bundle, host_target
    from infra.locks import lambda_runtime_lock

    target = host_target()
    spec = BundleSpec("lambda-runtime", (), lambda_runtime_lock(),
                      type(target)(python_version, target.machine))
    return ensure_bundle(spec, log=lambda _msg: None)


@dataclass
class Rehearsal:
    """A deployment standing on this machine; stop() takes it down."""

    outdir: Path
    deployment: Deployment
    lambdas: Lambdas
    proxy: AwsProxy
    moto_url: str
    outputs: dict[str, dict[str, Any]]
    python: str
    stoppers: list[Callable[[], None]] = field(default_factory=list)

    def admin(self, service: str) -> Any:
        return self.deployment.aws(service)

    def stop(self) -> None:
        for stop in reversed(self.stoppers):
            try:
                stop()
            except Exception as exc:  # keep stopping the rest
                print(f"[rehearsal] while stopping: {exc}", file=sys.stderr)


def _client_factory(moto_url: str, proxy_url: str) -> Callable[..., Any]:
    import boto3
    from botocore.config import Config

    session = boto3.session.Session()
    config = Config(region_name=REGION, retries={"mode": "standard", "total_max_attempts": 2},
                    s3={"addressing_style": "path"})

    def client(service: str, access_key: str | None = None) -> Any:
        return session.client(  # type: ignore[call-overload]
            service, endpoint_url=proxy_url if access_key else moto_url, config=config,
            aws_access_key_id=access_key or "rehearsal-admin",
            aws_secret_access_key="rehearsal",  # noqa: S106  (moto and the proxy take any)
            aws_session_token="rehearsal" if access_key else None)

    return client


def stand_up(outdir: Path, log_dir: Path) -> Rehearsal:
    """Deploy every stack of the assembly in ``outdir`` onto this machine."""
    from codeshot.local.aws_server import LocalAWS
    from infra.bundling import find_python

    stacks = read_assembly(outdir)
    runtimes = {r["Properties"]["Runtime"] for s in stacks
                for r in s.of_type("AWS::Lambda::Function").values()}
    if len(runtimes) != 1:
        raise RehearsalError(f"functions on several runtimes {runtimes}: one is rehearsed")
    version = runtimes.pop().removeprefix("python")
    python = find_python(version)
    if python is None:
        raise RehearsalError(f"the template's runtime is python{version}; this machine has "
                             "no such interpreter")
    stoppers: list[Callable[[], None]] = []
    try:
        moto = LocalAWS("127.0.0.1", 0)
        moto_url = moto.start()
        stoppers.append(moto.stop)
        deployment_ref: list[Deployment] = []
        proxy = AwsProxy(moto_url, lambda secret_id: secret_resource(
            deployment_ref[0].secret_arns, secret_id))
        stoppers.append(proxy.stop)
        lambdas = Lambdas(python, lambda_runtime_dir(version), proxy.url, log_dir)
        stoppers.append(lambdas.stop)
        responses = ResponseServer()
        stoppers.append(responses.stop)
        deployment = Deployment(moto_url, proxy, lambdas, responses,
                                _client_factory(moto_url, proxy.url))
        deployment_ref.append(deployment)
        stoppers.append(deployment.stop)
        rehearsal = Rehearsal(outdir, deployment, lambdas, proxy, moto_url, {}, python,
                              stoppers)
        for stack in stacks:
            try:
                rehearsal.outputs[stack.name] = deployment.deploy(stack).outputs
            except RehearsalError as exc:
                failed = "\n".join(str(e) for e in lambdas.errors[-3:])
                raise RehearsalError(f"deploying {stack.name}: {exc}" + (
                    f"\nfunctions failed: {failed}" if failed else "")) from exc
        return rehearsal
    except BaseException:
        for stop in reversed(stoppers):
            stop()
        raise


@contextmanager
def standing(outdir: Path, log_dir: Path) -> Iterator[Rehearsal]:
    rehearsal = stand_up(outdir, log_dir)
    try:
        yield rehearsal
    finally:
        rehearsal.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-synth", action="store_true",
                        help=f"reuse the assembly in {WORK_DIR / 'cdk.out'}")
    args = parser.parse_args(argv)
    from infra.rehearsal.checks import run_checks

    outdir, log_dir = WORK_DIR / "cdk.out", WORK_DIR / "logs"
    started = time.monotonic()
    if not args.no_synth:
        print("[rehearsal] synthesizing for this machine ...", file=sys.stderr, flush=True)
        synthesize(outdir)
    shutil.rmtree(log_dir, ignore_errors=True)
    try:
        with standing(outdir, log_dir) as rehearsal:
            report = run_checks(rehearsal)
    except RehearsalError as exc:
        print(f"\nREHEARSAL FAILED: {exc}", file=sys.stderr)
        print(f"(function logs: {log_dir})", file=sys.stderr)
        return 1
    print(report)
    print(f"\nrehearsal passed in {time.monotonic() - started:.0f} s")
    return 0


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")

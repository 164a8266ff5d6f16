"""Lambda functions run as AWS runs them: each instance is its own process, started from
the function's asset directory with only the template's environment (plus the variables
Lambda itself sets), and driven through the Lambda Runtime API by AWS's own runtime
interface client (``awslambdaric``), which imports the template's handler string.

The process sees the asset, the runtime client and the standard library, nothing of this
checkout (``python -I -S``): a module the bundle lacks fails as it would in Lambda. A
function gets a new instance (a cold start, timed from process start to its first
answered event) whenever all of its instances are busy, as Lambda scales.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from infra.rehearsal.assembly import ACCOUNT, PARTITION, REGION, RehearsalError
from infra.rehearsal.loopback import LoopbackServer, reply

RUNTIME_PATH = "/2018-06-01/runtime"
MAX_INSTANCES = 8  # per function; the rehearsal's traffic needs a few at most
INIT_SECONDS = 10.0  # Lambda's init phase limit


class FunctionError(RehearsalError):
    """An invocation that failed: the handler raised, init failed, or it timed out."""

    def __init__(self, function: str, error_type: str, message: str, log_tail: str = ""):
        super().__init__(f"{function}: {error_type}: {message}"
                         + (f"\n--- log ---\n{log_tail}" if log_tail else ""))
        self.function, self.error_type, self.detail = function, error_type, message


@dataclass
class FunctionSpec:
    """A function as the template defines it, references resolved."""

    name: str  # display name: api, runner, register, agent:notes ...
    physical_name: str
    asset: Path
    handler: str
    runtime: str  # python3.12
    memory_mb: int
    timeout_s: float
    environment: dict[str, str]
    role: str
    access_key: str
    log_group: str = ""

    @property
    def arn(self) -> str:
        return f"arn:{PARTITION}:lambda:{REGION}:{ACCOUNT}:function:{self.physical_name}"


@dataclass
class Invocation:
    request_id: str
    event: bytes
    deadline: float
    done: threading.Event = field(default_factory=threading.Event)
    result: bytes | None = None
    error: dict[str, Any] | None = None


class Instance:
    """One execution environment: a process and its Runtime API endpoint."""

    def __init__(self, spec: FunctionSpec, python: str, runtime_dir: Path, aws_endpoint: str,
                 log_dir: Path, number: int) -> None:
        self.spec = spec
        self.number = number
        self.pending: queue.Queue[Invocation] = queue.Queue()
        self.current: Invocation | None = None
        self.init_error: dict[str, Any] | None = None
        self.busy = False
        self.started = time.monotonic()
        self.first_answer: float | None = None
        self.log_path = log_dir / f"{spec.name.replace(':', '-')}-{number}.log"
        self.runtime_api = LoopbackServer(self._runtime_api)
        env = {
            **spec.environment,
            # What Lambda sets for every Python function.
            "AWS_LAMBDA_RUNTIME_API": self.runtime_api.url.removeprefix("http://"),
            "AWS_REGION": REGION, "AWS_DEFAULT_REGION": REGION,
            "AWS_LAMBDA_FUNCTION_NAME": spec.physical_name,
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(spec.memory_mb),
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_LOG_GROUP_NAME": spec.log_group,
            "AWS_LAMBDA_LOG_STREAM_NAME": f"rehearsal/{number}",
            "AWS_LAMBDA_LOG_FORMAT": "JSON", "AWS_LAMBDA_LOG_LEVEL": "INFO",
            "AWS_EXECUTION_ENV": f"AWS_Lambda_{spec.runtime}",
            "AWS_ACCESS_KEY_ID": spec.access_key, "AWS_SECRET_ACCESS_KEY": "rehearsal",
            "AWS_SESSION_TOKEN": "rehearsal",
            "LAMBDA_TASK_ROOT": str(spec.asset), "LAMBDA_RUNTIME_DIR": str(runtime_dir),
            "_HANDLER": spec.handler, "TZ": ":UTC", "LANG": "en_US.UTF-8",
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            # The rehearsal's stand-in for AWS's DNS: every SDK call goes to its IAM proxy.
            "AWS_ENDPOINT_URL": aws_endpoint,
        }
        bootstrap = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; "
                     "from awslambdaric.__main__ import main; main(['awslambdaric', sys.argv[3]])")
        self.log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            # -B: /var/task is read-only in Lambda, so no .pyc is ever written there.
            [python, "-I", "-S", "-B", "-c", bootstrap, str(spec.asset), str(runtime_dir),
             spec.handler], cwd=spec.asset, env=env, stdin=subprocess.DEVNULL,
            stdout=self.log, stderr=subprocess.STDOUT)

    # -- Runtime API ------------------------------------------------------------------
    def _runtime_api(self, request: BaseHTTPRequestHandler) -> None:
        if request.command == "GET" and request.path == f"{RUNTIME_PATH}/invocation/next":
            return self._next(request)
        if request.command != "POST":
            return reply(request, 404, b"{}")
        body = request.rfile.read(int(request.headers.get("Content-Length") or 0))
        parts = request.path.removeprefix(RUNTIME_PATH).strip("/").split("/")
        if parts == ["init", "error"]:
            self.init_error = json.loads(body or b"{}")
        elif len(parts) == 3 and parts[0] == "invocation":
            self._answer(parts[1], parts[2], body)
        return reply(request, 202, b'{"status":"OK"}')

    def _next(self, request: BaseHTTPRequestHandler) -> None:
        invocation = self.pending.get()
        self.current = invocation
        request.send_response(200)
        request.send_header("Lambda-Runtime-Aws-Request-Id", invocation.request_id)
        request.send_header("Lambda-Runtime-Deadline-Ms", str(int(invocation.deadline * 1000)))
        request.send_header("Lambda-Runtime-Invoked-Function-Arn", self.spec.arn)
        request.send_header("Lambda-Runtime-Trace-Id",
                            f"Root=1-{uuid.uuid4().hex[:8]}-{uuid.uuid4().hex[:24]};Sampled=0")
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(invocation.event)))
        request.end_headers()
        request.wfile.write(invocation.event)

    def _answer(self, request_id: str, kind: str, body: bytes) -> None:
        invocation = self.current
        if invocation is None or invocation.request_id != request_id:
            return
        if kind == "response":
            invocation.result = body
        else:
            invocation.error = json.loads(body or b"{}")
        if self.first_answer is None:
            self.first_answer = time.monotonic()
        self.current = None
        invocation.done.set()

    # -- use ----------------------------------------------------------------------------
    @property
    def cold_start_s(self) -> float | None:
        return None if self.first_answer is None else self.first_answer - self.started

    def invoke(self, event: Any) -> Any:
        invocation = Invocation(uuid.uuid4().hex, json.dumps(event).encode(),
                                time.time() + self.spec.timeout_s)
        self.pending.put(invocation)
        budget = self.spec.timeout_s + (INIT_SECONDS if self.first_answer is None else 0)
        end = time.monotonic() + budget
        while not invocation.done.wait(0.05):
            if self.process.poll() is not None:  # init failed, or the process died
                self.current = None
                invocation.error = self.init_error or {
                    "errorType": "Runtime.ExitError",
                    "errorMessage": f"process exited with {self.process.returncode}"}
                break
            if time.monotonic() > end:
                self.stop()
                raise FunctionError(self.spec.name, "Task timed out",
                                    f"after {budget:.0f} seconds", self.log_tail())
        if invocation.error is not None:
            raise FunctionError(self.spec.name, str(invocation.error.get("errorType")),
                                str(invocation.error.get("errorMessage")), self.log_tail())
        return json.loads(invocation.result or b"null")

    def log_tail(self, lines: int = 30) -> str:
        self.log.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.runtime_api.stop()
        self.log.close()


class Function:
    """A deployed function: its spec and its instances (Lambda's scaling, in small)."""

    def __init__(self, spec: FunctionSpec, launch: Callable[[FunctionSpec, int], Instance],
                 errors: list[FunctionError]) -> None:
        self.spec = spec
        self.errors = errors
        self._launch = launch
        self.instances: list[Instance] = []
        self._lock = threading.Lock()
        self.invocations = 0

    def _acquire(self, fresh: bool) -> Instance:
        with self._lock:
            self.invocations += 1
            if not fresh:
                for instance in self.instances:
                    if not instance.busy and instance.process.poll() is None:
                        instance.busy = True
                        return instance
            live = [i for i in self.instances if i.process.poll() is None]
            if len(live) >= MAX_INSTANCES:
                raise RehearsalError(f"{self.spec.name}: more than {MAX_INSTANCES} concurrent "
                                     "invocations in a rehearsal")
            instance = self._launch(self.spec, len(self.instances) + 1)
            instance.busy = True
            self.instances.append(instance)
            return instance

    def invoke(self, event: Any, fresh: bool = False) -> Any:
        """Run one event; ``fresh`` forces a new instance (to time a cold start)."""
        instance = self._acquire(fresh)
        try:
            return instance.invoke(event)
        except FunctionError as exc:
            self.errors.append(exc)
            raise
        finally:
            instance.busy = False

    def cold_starts(self) -> list[float]:
        return [i.cold_start_s for i in self.instances if i.cold_start_s is not None]

    def stop(self) -> None:
        for instance in self.instances:
            instance.stop()


class Lambdas:
    """Every function of the deployment, by physical name and by display name."""

    def __init__(self, python: str, runtime_dir: Path, aws_endpoint: str, log_dir: Path
                 ) -> None:
        self.python, self.runtime_dir = python, runtime_dir
        self.aws_endpoint, self.log_dir = aws_endpoint, log_dir
        self.functions: dict[str, Function] = {}
        self.errors: list[FunctionError] = []  # every failed invocation, in order
        log_dir.mkdir(parents=True, exist_ok=True)

    def add(self, spec: FunctionSpec) -> Function:
        function = Function(spec, lambda s, n: Instance(
            s, self.python, self.runtime_dir, self.aws_endpoint, self.log_dir, n), self.errors)
        self.functions[spec.physical_name] = function
        return function

    def by_arn(self, arn: str) -> Function:
        name = arn.split(":function:")[-1].split(":")[0] if ":function:" in arn else arn
        if name not in self.functions:
            raise RehearsalError(f"no function {arn}")
        return self.functions[name]

    def named(self, name: str) -> Function:
        for function in self.functions.values():
            if function.spec.name == name:
                return function
        raise RehearsalError(f"no function named {name}")

    def stop(self) -> None:
        for function in self.functions.values():
            function.stop()

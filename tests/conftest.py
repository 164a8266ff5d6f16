"""Shared fixtures: settings isolated from the developer's environment, moto in-process
for unit tests, and moto's real server over HTTP for end-to-end tests."""

from __future__ import annotations

import os
import random
import signal
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest import mock

import httpx
import moto  # noqa: F401  (before any client: see below)
import pytest
from fastapi import FastAPI, Request

from codeshot import ids
from codeshot.api.app import create_app
from codeshot.local.http_server import HttpServer
from codeshot.services import Services
from codeshot.settings import Settings

# A shell starts a background job with SIGINT ignored, and every process a test starts
# would inherit that: the Ctrl-C tests' commands (chat, fixie serve) never saw theirs.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# No test may reach real AWS, whatever the developer's shell holds.
for _name in list(os.environ):
    if _name.startswith(("CODESHOT_", "FIXIE_", "AWS_")):
        del os.environ[_name]
os.environ.update(
    AWS_ACCESS_KEY_ID="testing",
    AWS_SECRET_ACCESS_KEY="testing",
    AWS_DEFAULT_REGION="us-east-1",
)
# moto is imported above, before any client: codeshot.aws makes one boto3 session per
# process, and a session only has the botocore hooks (moto's mock_aws among them) that were
# registered when it was made.


TESTS = Path(__file__).resolve().parent
# Directories whose tests run in-process; a test there that asks for a server is still
# an integration test.
UNIT_DIRS = {"", "engine", "llm", "routing", "store"}
UNIT_FILES = {"sdk/test_sdk_units.py"}
SERVER_FIXTURES = {"server_aws", "moto_server", "platform", "live_stack", "live_stack_object",
                   "fixie_python"}
# Fixtures that take ten seconds or more to build (a CDK synth, a whole local stack).
SLOW_FIXTURES = {"synth", "live_stack", "live_stack_object"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """unit / integration / browser by where a test lives and what it starts; slow for
    the fixtures that take long (others mark themselves)."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if fixtures & SLOW_FIXTURES:
            item.add_marker(pytest.mark.slow)
        relative = Path(item.path).relative_to(TESTS)
        where = relative.parts[0] if len(relative.parts) > 1 else ""
        if where == "browser":
            item.add_marker(pytest.mark.browser)
        elif (where in UNIT_DIRS or relative.as_posix() in UNIT_FILES) \
                and not SERVER_FIXTURES & fixtures:
            item.add_marker(pytest.mark.unit)
        else:
            item.add_marker(pytest.mark.integration)
        if not item.get_closest_marker("unit"):
            # Processes, sockets and a browser on a shared machine: one run again, shown
            # as R in the output and listed in the summary (a failure twice fails CI).
            item.add_marker(pytest.mark.flaky(reruns=1))


def _ports_below_ephemeral() -> range:
    """Ports the kernel never hands out by itself: below its ephemeral range, from which
    outgoing connections and port-0 binds take theirs."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32_768
    return range(10_000, low) if low > 11_000 else range(0)


_FREE_PORTS = _ports_below_ephemeral()
_PORTS_GIVEN: set[int] = set()


def free_port() -> int:
    """A port nothing listens on, for a server a test starts later. A port-0 bind's port
    could be taken by any outgoing connection on the machine before the server binds it
    (the CI machine is busy); one below the ephemeral range only by another listener.
    Never the same one twice in a run."""
    for _ in range(100):
        port = random.choice(_FREE_PORTS) if _FREE_PORTS else 0
        if port in _PORTS_GIVEN:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            port = sock.getsockname()[1]
        _PORTS_GIVEN.add(port)
        return port
    raise RuntimeError("no free port found")


@pytest.fixture
def settings() -> Settings:
    return Settings(region="us-east-1")


@pytest.fixture
def aws(settings: Settings):
    """moto in-process with every codeshot resource created; yields the settings."""
    from moto import mock_aws

    from codeshot.local.aws_server import make_dynamodb_writes_atomic
    from codeshot.store.provision import create_all

    make_dynamodb_writes_atomic()
    with mock_aws():
        yield create_all(settings)


@pytest.fixture(scope="session")
def moto_server():
    """moto's server on loopback, shared by the end-to-end tests of one run."""
    from codeshot.local.aws_server import LocalAWS

    server = LocalAWS("127.0.0.1", 0)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def server_aws(moto_server, request):
    """Fresh resources on the moto server (unique names per test); yields settings."""
    from codeshot.store.provision import create_all

    settings = unique_settings(aws_endpoint_url=moto_server.endpoint_url)
    return create_all(settings)


def unique_settings(**overrides: Any) -> Settings:
    """Settings whose resources no other test uses: one moto server serves every
    end-to-end test of a run."""
    suffix = f"t{uuid.uuid4().hex[:12]}"
    return Settings(
        region="us-east-1",
        registry_table=f"registry-{suffix}",
        sessions_table=f"sessions-{suffix}",
        user_storage_table=f"user-storage-{suffix}",
        usage_table=f"usage-{suffix}",
        users_table=f"users-{suffix}",
        embeds_bucket=f"embeds-{suffix}",
        signing_secret_id=f"codeshot/signing-{suffix}",
        oauth_table=f"oauth-{suffix}",
        oauth_key_secret_id=f"codeshot/oauth-key-{suffix}",
        queue_name=f"sessions-{suffix}.fifo",
        prompt_queue_name=f"prompts-{suffix}",
        erasure_queue_name=f"erasure-{suffix}",
        **overrides,
    )


class TestClock:
    """The time the platform's rules see (usage windows): real unless a test sets it."""

    def __init__(self) -> None:
        self.now: datetime | None = None

    def __call__(self) -> datetime:
        return self.now or datetime.now(UTC)


@contextmanager
def signing_time(at: datetime) -> Iterator[None]:
    """Presigned URLs made in this block are signed as of ``at``: botocore reads the
    signing time from ``botocore.auth.get_current_datetime`` (naive UTC)."""
    naive = at.astimezone(UTC).replace(tzinfo=None)
    with mock.patch("botocore.auth.get_current_datetime", return_value=naive):
        yield


@dataclass
class Platform:
    url: str
    services: Services
    clock: TestClock

    def user(self, name: str | None = None, **profile: Any) -> tuple[str, str]:
        """A new user; returns (user_id, API key)."""
        user = self.services.users.create(name or f"u{ids.handle(4).lower().replace('-', '')}"
                                          .replace("_", ""), **profile)
        return user.user_id, self.services.auth.issue_api_key(user)

    def gql(self, key: str | None, query: str, variables: dict | None = None,
            timeout: float = 30) -> dict:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        r = httpx.post(f"{self.url}/graphql", json={"query": query, "variables": variables or {}},
                       headers=headers, timeout=timeout)
        assert r.status_code == 200, r.text
        return r.json()

    def rpc(self, key: str, path: str, method: str, params: dict,
            headers: dict | None = None) -> httpx.Response:
        """A JSON-RPC call (MCP's headers unless ``headers`` are given)."""
        return httpx.post(f"{self.url}{path}", timeout=60,
                          headers={"Authorization": f"Bearer {key}",
                                   **(headers or MCP_HEADERS)},
                          json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params})


MCP_HEADERS = {"Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2025-06-18"}


def code(result: dict) -> str:
    assert result.get("errors"), result
    return result["errors"][0]["extensions"]["code"]


@contextmanager
def serving(settings: Settings, **overrides: Any) -> Iterator[Platform]:
    """The API on loopback for ``settings`` (local mode, short reply waits) + overrides."""
    port = free_port()
    settings = settings.replace(**{
        "api_url": f"http://127.0.0.1:{port}", "local_mode": True, "reply_wait_seconds": 5.0,
        **overrides,
    })
    clock = TestClock()
    services = Services(settings, clock=clock)
    server = HttpServer(create_app(services=services), "127.0.0.1", port)
    server.start()
    try:
        yield Platform(server.url, services, clock)
    finally:
        server.stop()


def marked_settings(request: pytest.FixtureRequest) -> dict[str, Any]:
    marker = request.node.get_closest_marker("settings")
    return dict(marker.kwargs) if marker else {}


@pytest.fixture
def platform(server_aws, request):
    """The API on loopback; ``@pytest.mark.settings(name=value)`` overrides settings."""
    with serving(server_aws, **marked_settings(request)) as platform:
        yield platform


@pytest.fixture(scope="session")
def fixie_python() -> Path:
    """The virtualenv's python, built once and cached across runs (~150 MB)."""
    from infra.rehearsal.assembly import RehearsalError
    from infra.rehearsal.checks import fixie_python

    try:
        return fixie_python()
    except RehearsalError as exc:
        pytest.skip(str(exc))


# The Agent Protocol's official Python client pins pydantic < 2 and urllib3 < 2, which
# the platform's own dependencies (mcp, a2a-sdk) cannot share a virtualenv with.
AGENT_PROTOCOL_CLIENT = ("agent-protocol-client==1.1.0",)


@pytest.fixture(scope="session")
def agent_protocol_python() -> Path:
    """A virtualenv's python with the official agent-protocol-client, built once, cached."""
    from infra.rehearsal.assembly import RehearsalError
    from infra.rehearsal.checks import VENVS, cached_python

    try:
        return cached_python(VENVS / "agent-protocol-client-1.1.0", AGENT_PROTOCOL_CLIENT)
    except RehearsalError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def live_stack_object():
    """The local stack (the platform in this process, moto in a child), as `codeshot local
    up` runs it."""
    import tempfile

    from codeshot.local.stack import LocalStack

    with tempfile.TemporaryDirectory() as directory:
        stack = LocalStack(port=free_port(), aws_port=free_port(), directory=Path(directory),
                           base=unique_settings(), progress=lambda _line: None)
        stack.start()
        yield stack
        stack.stop()


@pytest.fixture(scope="module")
def live_stack(live_stack_object):
    """What `codeshot local up` writes to .codeshot/local.json for the stack above."""
    return live_stack_object.state


HANGING_DOMAIN = "hang.example"


@pytest.fixture
def hanging_dns(monkeypatch) -> Iterator[None]:
    """A resolver that hangs: names under ``HANGING_DOMAIN`` get no answer for 30 s (as a
    DNS server that drops queries, behind a resolver without a timeout), then loopback's;
    every other name resolves as usual. It replaces the resolver the whole process uses;
    the hung lookups are let go when the test ends."""
    import threading

    released, real = threading.Event(), socket.getaddrinfo

    def resolve(host: Any, port: Any, *args: Any, **kwargs: Any) -> list[tuple[Any, ...]]:
        if str(host).endswith(HANGING_DOMAIN):
            released.wait(30)
            host = "127.0.0.1"
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    yield
    released.set()


class PushReceiver:
    """A push-notification endpoint (A2A, session callbacks) on loopback that checks
    nothing: the test does."""

    def __init__(self) -> None:
        self.received: list[tuple[dict, dict]] = []
        app = FastAPI()

        @app.post("/hook")
        async def hook(request: Request) -> dict:
            self.received.append((dict(request.headers), await request.json()))
            return {}

        self.server = HttpServer(app, "127.0.0.1", 0)
        self.url = self.server.start() + "/hook"


@pytest.fixture
def receiver():
    hook = PushReceiver()
    yield hook
    hook.server.stop()

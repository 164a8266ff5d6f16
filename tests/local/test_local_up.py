"""`codeshot local up` as a user runs it: a real process, real ports, real signals."""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest

from tests.conftest import free_port

pytestmark = pytest.mark.slow


def start(tmp_path: Path, port: int, aws_port: int | None = None,
          host: str = "127.0.0.1") -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "codeshot.cli", "local", "up", "--port", str(port),
         "--aws-port", str(aws_port or free_port()), "--host", host],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )


def wait_for_file(path: Path, proc: subprocess.Popen, timeout: float = 30) -> dict:
    """``proc``'s local.json, once written (it names its pid)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and (state := json.loads(path.read_text())).get("pid") == proc.pid:
            return state
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("local.json never appeared")


def test_local_up_creates_resources_and_cleans_up_on_sigterm(tmp_path):
    proc = start(tmp_path, free_port())
    state_file = tmp_path / ".codeshot" / "local.json"
    try:
        state = wait_for_file(state_file, proc)
        assert {"api_url", "graphql_url", "aws_endpoint_url", "api_key"} <= set(state)
        kw = {"endpoint_url": state["aws_endpoint_url"], "region_name": "us-east-1",
                  "aws_access_key_id": "x", "aws_secret_access_key": "x"}
        tables = boto3.client("dynamodb", **kw).list_tables()["TableNames"]
        assert {"codeshot-registry", "codeshot-sessions", "codeshot-user-storage",
                "codeshot-usage", "codeshot-users"} <= set(tables)
        buckets = [b["Name"] for b in boto3.client("s3", **kw).list_buckets()["Buckets"]]
        assert "codeshot-embeds" in buckets
        queues = boto3.client("sqs", **kw).list_queues()["QueueUrls"]
        assert any(q.endswith("codeshot-sessions.fifo") for q in queues)
        # The whole loop runs: the example agents are registered and answer.
        import httpx

        def gql(query, **variables):
            return httpx.post(state["graphql_url"], json={"query": query, "variables": variables},
                              headers={"Authorization": f"Bearer {state['api_key']}"},
                              timeout=60).json()["data"]

        agents = {a["agentId"] for a in gql("{ allAgents { agentId } }")["allAgents"]}
        assert {"local/dice", "local/clock", "local/notes"} <= agents
        h = gql("mutation { createSession { session { handle } } }")["createSession"][
            "session"]["handle"]
        reply = gql("mutation ($s: String!) { sendSessionMessage(messageData: {session: $s, "
                    "text: \"Roll a d20\"}) { reply { text type } } }", s=h)[
            "sendSessionMessage"]["reply"]
        assert reply["type"] == "response" and reply["text"].startswith("You rolled ")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "AWS endpoint: http://127.0.0.1:" in out and "Ready in" in out
    assert "API: http://127.0.0.1:" in out and "API key: ey" in out
    assert not state_file.exists()


def test_listening_on_every_address_keeps_moto_on_loopback(tmp_path):
    """``--host 0.0.0.0`` shares the API; moto's server (no authentication, and it holds
    the platform's signing keys) stays on 127.0.0.1. 127.0.0.2 stands for another
    address: a socket bound to 127.0.0.1 does not answer there, one on 0.0.0.0 does."""
    port, aws_port = free_port(), free_port()
    proc = start(tmp_path, port, aws_port, host="0.0.0.0")  # noqa: S104 - the point
    try:
        wait_for_file(tmp_path / ".codeshot" / "local.json", proc)
        socket.create_connection(("127.0.0.2", port), timeout=5).close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.2", aws_port), timeout=5)
        socket.create_connection(("127.0.0.1", aws_port), timeout=5).close()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    # the gap that remains is said, whole: no account is needed, anyone can make one
    assert "anyone who reaches the API can sign up (any confirmation code works here)" in out


def test_a_second_local_up_in_the_directory_refuses_and_leaves_the_first_alone(tmp_path):
    first = start(tmp_path, free_port())
    state_file = tmp_path / ".codeshot" / "local.json"
    try:
        state = wait_for_file(state_file, first)
        second = start(tmp_path, free_port())  # another port: it would have started
        _out, err = second.communicate(timeout=30)
        assert second.returncode == 2, err
        assert err.startswith(f"codeshot: error: a local stack is already running from this "
                              f"directory at {state['api_url']} (pid {first.pid}")
        assert err.rstrip().endswith("(STACK_RUNNING)")
        assert json.loads(state_file.read_text()) == state  # commands still find the first
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=20)
    assert first.returncode == 0 and not state_file.exists()


def test_its_terminal_closing_stops_it_cleanly(tmp_path):
    """SIGHUP (the terminal closed, an ssh session dropped) ended it at once, leaving its
    local.json and moto's server behind."""
    proc = start(tmp_path, free_port())
    state_file = tmp_path / ".codeshot" / "local.json"
    wait_for_file(state_file, proc)
    proc.send_signal(signal.SIGHUP)
    _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert not state_file.exists()


def test_a_stack_removes_only_the_local_json_it_wrote(tmp_path):
    proc = start(tmp_path, free_port())
    state_file = tmp_path / ".codeshot" / "local.json"
    state = wait_for_file(state_file, proc)
    # Another stack's file in its place (one that started here while this one ran).
    other = {**state, "api_url": f"http://127.0.0.1:{free_port()}", "pid": os.getppid()}
    state_file.write_text(json.dumps(other))
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert json.loads(state_file.read_text()) == other


def test_a_crashed_stacks_local_json_does_not_block_the_next(tmp_path):
    crashed = start(tmp_path, free_port())
    state_file = tmp_path / ".codeshot" / "local.json"
    stale = wait_for_file(state_file, crashed)
    crashed.kill()  # no clean-up: its local.json stays behind
    crashed.communicate(timeout=20)
    assert json.loads(state_file.read_text()) == stale
    proc = start(tmp_path, free_port())
    try:
        assert wait_for_file(state_file, proc)["api_url"] != stale["api_url"]
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)
    assert proc.returncode == 0 and not state_file.exists()


@pytest.mark.parametrize("flag", ["--port", "--aws-port"])
def test_port_in_use_is_a_clear_error_naming_its_flag(tmp_path, flag):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = start(tmp_path, port) if flag == "--port" else \
            start(tmp_path, free_port(), aws_port=port)
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert err.endswith(f"port {port} on 127.0.0.1 is already in use; stop what is using it "
                        f"or pick another port ({flag}) (PORT_IN_USE)\n"), err
    assert not (tmp_path / ".codeshot" / "local.json").exists()


def test_users_create_targets_the_running_stack(tmp_path):
    proc = start(tmp_path, free_port())
    try:
        state = wait_for_file(tmp_path / ".codeshot" / "local.json", proc)
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        made = subprocess.run([sys.executable, "-m", "codeshot.cli", "users", "create", "zoe"],
                              cwd=tmp_path, capture_output=True, text=True, check=False, env=env, timeout=60)
        assert made.returncode == 0, made.stderr
        key = made.stdout.strip()
        import httpx

        r = httpx.post(state["graphql_url"], json={"query": "{ user { username } }"},
                       headers={"Authorization": f"Bearer {key}"})
        assert r.json() == {"data": {"user": {"username": "zoe"}}}
        again = subprocess.run([sys.executable, "-m", "codeshot.cli", "users", "create", "zoe"],
                               cwd=tmp_path, capture_output=True, text=True, check=False, env=env, timeout=60)
        assert again.returncode == 2 and "username 'zoe' is taken" in again.stderr
        # An operator sets her own limits; her profile shows them at once.
        limits = subprocess.run([sys.executable, "-m", "codeshot.cli", "users", "limits", "zoe",
                                 "--daily-queries", "7", "--daily-tokens", "5000"],
                                cwd=tmp_path, capture_output=True, text=True, check=False,
                                env=env, timeout=60)
        assert limits.stdout.strip() == "zoe: 7 queries and 5000 LLM tokens per day"
        r = httpx.post(state["graphql_url"], json={"query": "{ user { dailyQueryLimit "
                                                   "dailyTokenLimit dailyUsedTokens } }"},
                       headers={"Authorization": f"Bearer {key}"})
        assert r.json()["data"]["user"] == {"dailyQueryLimit": 7, "dailyTokenLimit": 5000,
                                            "dailyUsedTokens": 0}
        nobody = subprocess.run([sys.executable, "-m", "codeshot.cli", "users", "limits", "nobody",
                                 "--daily-tokens", "1"], cwd=tmp_path, capture_output=True,
                                text=True, check=False, env=env, timeout=60)
        assert nobody.returncode == 2 and "user 'nobody' not found" in nobody.stderr
        # The first user's key from local.json works as well.
        r = httpx.post(state["graphql_url"], json={"query": "{ user { username } }"},
                       headers={"Authorization": f"Bearer {state['api_key']}"})
        assert r.json() == {"data": {"user": {"username": "local"}}}
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)
    assert proc.returncode == 0


def test_ipv6_loopback(tmp_path):
    """``--host ::1`` was a gaierror: the port check spoke IPv4 only."""
    proc = start(tmp_path, free_port(), host="::1")
    try:
        state = wait_for_file(tmp_path / ".codeshot" / "local.json", proc)
        assert state["api_url"].startswith("http://[::1]:")
        import httpx

        r = httpx.post(state["graphql_url"], json={"query": "{ user { username } }"},
                       headers={"Authorization": f"Bearer {state['api_key']}"}, timeout=30)
        assert r.json() == {"data": {"user": {"username": "local"}}}
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=20)
    assert proc.returncode == 0


class _CtrlCInAFinalizer:
    """Ctrl-C arriving while a finalizer runs: what its handler raises is lost
    ("Exception ignored in ...")."""

    def __del__(self) -> None:
        signal.raise_signal(signal.SIGINT)


class _StackStartedThroughCtrlC:
    def __init__(self, progress, **_settings) -> None:
        self.progress, self.stopped = progress, False

    def start(self) -> dict:
        self.progress("Starting ...")
        _CtrlCInAFinalizer()  # dropped at once: its finalizer runs here
        self.progress("Ready")
        return {}

    def stop(self) -> None:
        self.stopped = True


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_ctrl_c_lost_in_a_finalizer_still_stops(monkeypatch, capsys):
    """A CI run's failure: Ctrl-C at 1.5 s landed in a finalizer, the stack started anyway
    and then waited for a signal that had come and gone (killed after 30 s)."""
    from codeshot.cli import _local_up

    stacks: list[_StackStartedThroughCtrlC] = []

    def new_stack(**settings) -> _StackStartedThroughCtrlC:
        stacks.append(_StackStartedThroughCtrlC(**settings))
        return stacks[-1]

    monkeypatch.setattr("codeshot.local.stack.LocalStack", new_stack)
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    try:
        assert _local_up(argparse.Namespace(
            port=free_port(), aws_port=None, host="127.0.0.1")) == 0
    finally:
        signal.signal(signal.SIGINT, handlers[0])
        signal.signal(signal.SIGTERM, handlers[1])
    assert stacks[0].stopped
    assert capsys.readouterr().out == "Starting ...\nStopping (SIGINT) ...\nStopped.\n"


@pytest.mark.parametrize("after", [0.5, 1.5, 2.5])
def test_ctrl_c_while_starting_stops_cleanly(tmp_path, after):
    """Ctrl-C while the stack started printed two tracebacks (0.5 s) or a false "cannot
    reach AWS (UNAVAILABLE)" (1.5-2.5 s); the same ports then start again at once."""
    port, aws_port = free_port(), free_port()
    proc = start(tmp_path, port, aws_port)
    first = proc.stdout.readline()  # once Ctrl-C is handled (0.5 s on a busy machine)
    time.sleep(after)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    out = first + out
    assert proc.returncode == 0 and err == "", err
    assert out.endswith("Stopping (SIGINT) ...\nStopped.\n"), out
    assert not (tmp_path / ".codeshot" / "local.json").exists()
    again = start(tmp_path, port, aws_port)
    try:
        wait_for_file(tmp_path / ".codeshot" / "local.json", again)
    finally:
        again.send_signal(signal.SIGINT)
        again.communicate(timeout=20)
    assert again.returncode == 0

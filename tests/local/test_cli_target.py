"""Which platform a user's command calls, and with which key: URL and key always come
from one source, so a .codeshot/local.json planted in a directory never receives the
key the environment or the command line names for another platform."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.local.test_cli_errors import ROOT, codeshot, one_error_line

REFUSAL = json.dumps({"errors": [{"message": "who are you", "extensions": {
    "code": "UNAUTHENTICATED"}}]}).encode()


class Listener(ThreadingHTTPServer):
    """A platform on 127.0.0.1 that writes down every Authorization header it gets and
    answers each request with ``body``."""

    def __init__(self, body: bytes = REFUSAL) -> None:
        self.seen: list[str] = []
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                listener.seen.append(self.headers.get("Authorization", ""))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def listeners() -> Iterator[tuple[Listener, Listener]]:
    """(the platform the user means, a planted local.json's)."""
    servers = (Listener(), Listener())
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield servers
    for server in servers:
        server.shutdown()
        server.server_close()


def plant(directory: Path, url: str, **fields: str) -> None:
    (directory / ".codeshot").mkdir()
    (directory / ".codeshot" / "local.json").write_text(json.dumps({"api_url": url, **fields}))


COMMANDS = [("chat",), ("oauth", "list"),
            ("agent", "register", str(ROOT / "agent_template"), "--url", "http://127.0.0.1:9")]


@pytest.mark.parametrize("command", COMMANDS)
def test_a_local_json_goes_with_its_own_key_never_the_environments(tmp_path, listeners,
                                                                    command):
    """The local stack's file wins over CODESHOT_API_URL (a stable contract), but only
    with the key it holds: the environment's key went to the file's URL before."""
    mine, planted = listeners
    plant(tmp_path, planted.url, api_key="FILE")
    out = codeshot(*command, cwd=tmp_path, CODESHOT_API_URL=mine.url, CODESHOT_API_KEY="REAL")
    assert out.returncode == 2 and out.stderr.strip().endswith("(UNAUTHENTICATED)"), out.stderr
    assert planted.seen[0] == "Bearer FILE" and "Bearer REAL" not in planted.seen
    assert mine.seen == []


def test_without_a_local_json_the_environment_names_the_platform(tmp_path, listeners):
    mine, _ = listeners
    out = codeshot("chat", cwd=tmp_path, CODESHOT_API_URL=mine.url, CODESHOT_API_KEY="REAL")
    assert out.stdout.startswith(f"Platform: {mine.url} (from CODESHOT_API_URL)\n")
    assert mine.seen == ["Bearer REAL"]


def test_a_local_json_without_a_key_never_gets_the_environments(tmp_path, listeners):
    _, planted = listeners
    plant(tmp_path, planted.url)
    err = one_error_line(codeshot("chat", cwd=tmp_path, CODESHOT_API_KEY="REAL"),
                         "INVALID_INPUT")
    assert f"no API key for {planted.url}/graphql (from .codeshot/local.json)" in err
    assert planted.seen == []


def test_a_key_on_the_command_line_needs_its_url_beside_a_local_json(tmp_path, listeners):
    mine, planted = listeners
    plant(tmp_path, planted.url, api_key="FILE")
    err = one_error_line(codeshot("chat", "--api-key", "REAL", cwd=tmp_path), "INVALID_INPUT")
    assert "give --api-url too" in err and planted.seen == []
    out = codeshot("chat", "--api-url", mine.url, "--api-key", "REAL", cwd=tmp_path)
    assert out.returncode == 2 and planted.seen == [] and mine.seen == ["Bearer REAL"]


def test_the_local_stacks_file_goes_with_its_own_key_and_says_so(tmp_path, listeners):
    stack, _ = listeners
    plant(tmp_path, stack.url, api_key="FILE")
    out = codeshot("chat", cwd=tmp_path, CODESHOT_API_KEY="REAL")
    assert out.stdout.startswith(f"Platform: {stack.url} (from .codeshot/local.json)\n")
    assert stack.seen == ["Bearer FILE"]


def error_line(out: subprocess.CompletedProcess[str], code: str) -> str:
    """The one coded line on stderr (chat says first, on stdout, which platform it tries)."""
    return one_error_line(subprocess.CompletedProcess(out.args, out.returncode, "",
                                                      out.stderr), code)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_platform_that_does_not_answer_is_unavailable(tmp_path, command):
    down = f"http://127.0.0.1:{free_port()}"
    err = error_line(codeshot(*command, cwd=tmp_path, CODESHOT_API_URL=down,
                              CODESHOT_API_KEY="k"), "UNAVAILABLE")
    assert f"cannot reach the platform at {down}" in err


def test_a_stale_local_json_says_its_stack_is_not_running(tmp_path):
    down = f"http://127.0.0.1:{free_port()}"
    plant(tmp_path, down, api_key="FILE")
    err = error_line(codeshot("chat", cwd=tmp_path), "UNAVAILABLE")
    assert f"the platform at {down}/graphql does not answer: the `codeshot local up` that " \
        "wrote .codeshot/local.json here is not running; start it again" in err


def test_an_error_without_a_message_still_gets_its_line(tmp_path):
    """A refusal whose message is empty printed nothing at all: exit 2 and a blank stderr."""
    blank = Listener(json.dumps({"errors": [{"message": "", "extensions": {
        "code": "FORBIDDEN"}}]}).encode())
    threading.Thread(target=blank.serve_forever, daemon=True).start()
    try:
        out = codeshot("oauth", "list", "--api-url", blank.url, "--api-key", "k", cwd=tmp_path)
    finally:
        blank.shutdown()
        blank.server_close()
    err = one_error_line(out, "FORBIDDEN")
    assert err == "codeshot: error: RemoteError without a message (docs/errors.md says what " \
        "FORBIDDEN means; the platform's log has this one's details) (FORBIDDEN)\n"


def test_the_local_json_is_looked_for_upward_until_home(tmp_path, monkeypatch):
    """As git looks for .git: from a directory under the stack's, the stack's file (the
    nearest one); never above the home directory."""
    from codeshot.client import find_state, read_state

    stack, home = tmp_path / "stack", tmp_path / "stack" / "home"
    nested = home / "agents" / "dice"
    nested.mkdir(parents=True)
    plant(stack, "http://127.0.0.1:9")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert find_state(nested) == (stack / ".codeshot" / "local.json",
                                  {"api_url": "http://127.0.0.1:9"})
    plant(home / "agents", "http://127.0.0.1:10")  # the nearest wins
    monkeypatch.chdir(nested)
    assert read_state() == {"api_url": "http://127.0.0.1:10"}
    monkeypatch.setenv("HOME", str(home / "agents" / "dice"))  # not above home
    assert find_state() is None and read_state() is None


def test_serves_lending_records_are_kept_beside_the_stack_they_lend_to(tmp_path,
                                                                      monkeypatch):
    """A serve run in an agent's directory below the stack's keeps what a restore needs
    beside the stack's local.json, where a serve or `agent restore` run elsewhere under
    it finds it (not in the agent's directory, which would ship it with the agent)."""
    from codeshot.client import Target

    stack, elsewhere = tmp_path / "stack", tmp_path / "elsewhere"
    nested = stack / "agents" / "dice"
    nested.mkdir(parents=True)
    elsewhere.mkdir()
    plant(stack, "http://127.0.0.1:9")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CODESHOT_API_URL", raising=False)
    monkeypatch.chdir(nested)
    assert Target.find().lending_records().directory == stack / ".codeshot" / "lent"
    monkeypatch.chdir(elsewhere)  # a platform not named by a local stack: here
    assert Target.find().lending_records().directory == elsewhere / ".codeshot" / "lent"


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="giving a file to another user takes root")
def test_a_local_json_another_user_owns_is_passed_over(tmp_path, monkeypatch):
    """In a shared directory (/tmp) anyone could plant one above a user's directory."""
    from codeshot.client import find_state

    nested = tmp_path / "mine"
    nested.mkdir()
    plant(tmp_path, "http://127.0.0.1:9")
    monkeypatch.setenv("HOME", "/nonexistent-home")
    assert find_state(nested) is not None
    os.chown(tmp_path / ".codeshot" / "local.json", 65534, 65534)
    assert find_state(nested) is None

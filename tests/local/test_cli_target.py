"""Which platform a user's command calls, and with which key: URL and key always come
from one source, so a .codeshot/local.json planted in a directory never receives the
key the environment or the command line names for another platform."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
def test_a_local_json_here_wins_over_codeshot_api_url_and_one_above_does_not(
        tmp_path, listeners, command):
    """The working directory's local.json wins over CODESHOT_API_URL (a stable contract:
    a command run where `codeshot local up` runs targets that stack), each with its own
    key only; a file found above is a guess the platform the user named wins over (one
    left above by a crashed stack, say, took over every command below it)."""
    mine, planted = listeners
    nested = tmp_path / "agents"
    nested.mkdir()
    plant(tmp_path, planted.url, api_key="FILE")
    out = codeshot(*command, cwd=nested, HOME=str(tmp_path), CODESHOT_API_URL=mine.url,
                   CODESHOT_API_KEY="REAL")
    assert out.returncode == 2 and out.stderr.strip().endswith("(UNAUTHENTICATED)"), \
        out.stderr
    assert planted.seen == [] and mine.seen and set(mine.seen) == {"Bearer REAL"}
    out = codeshot(*command, cwd=tmp_path, HOME=str(tmp_path), CODESHOT_API_URL=mine.url,
                   CODESHOT_API_KEY="REAL")
    assert out.returncode == 2 and planted.seen and set(planted.seen) == {"Bearer FILE"}
    assert set(mine.seen) == {"Bearer REAL"}


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


def gone_pid() -> int:
    """The pid of a process that has ended (a crashed stack's)."""
    process = subprocess.Popen([sys.executable, "-c", ""])
    process.wait()
    return process.pid


def test_a_crashed_stacks_local_json_above_is_passed_over_with_a_note(tmp_path, listeners):
    """A file kill -9, an OOM kill or a reboot left in ~ took over every command in that
    tree; the working directory's own still says its stack is not running."""
    mine, _ = listeners
    nested = tmp_path / "projects" / "deployed-agent"
    nested.mkdir(parents=True)
    plant(tmp_path, "http://127.0.0.1:9", api_key="FILE")
    state = tmp_path / ".codeshot" / "local.json"
    state.write_text(json.dumps({**json.loads(state.read_text()), "pid": gone_pid()}))
    out = codeshot("chat", cwd=nested, HOME=str(tmp_path), CODESHOT_API_KEY="REAL")
    assert out.stdout.startswith("Platform: http://127.0.0.1:8080 (from the default URL)\n")
    assert out.stderr.startswith(f"codeshot: passing over {state}: the `codeshot local up` "
                                 "that wrote it (pid "), out.stderr
    out = codeshot("chat", "--api-key", "REAL", cwd=nested, HOME=str(tmp_path),
                   CODESHOT_API_URL=mine.url)  # no longer refused beside the file
    assert mine.seen == ["Bearer REAL"], out.stderr
    err = error_line(codeshot("chat", cwd=tmp_path), "UNAVAILABLE")
    assert "wrote .codeshot/local.json here is not running" in err


def test_a_local_json_that_is_a_symlink_is_passed_over(tmp_path):
    """It was followed: a symlink swapped in between the owner check and the read (both
    followed it) gave another user's file to this one's commands."""
    from codeshot.client import find_state

    nested = tmp_path / "mine"
    nested.mkdir()
    plant(tmp_path, "http://127.0.0.1:9")
    real = tmp_path / "real.json"
    (tmp_path / ".codeshot" / "local.json").rename(real)
    (tmp_path / ".codeshot" / "local.json").symlink_to(real)
    assert find_state(nested) is None
    (tmp_path / ".codeshot").rename(tmp_path / "elsewhere")
    (tmp_path / ".codeshot").symlink_to(tmp_path / "elsewhere")  # nor its directory
    assert find_state(nested) is None


@pytest.mark.parametrize(("mode", "found"), [(0o777, False), (0o1777, True), (0o755, True)])
def test_the_search_stops_at_a_directory_anyone_may_write_to_unless_sticky(tmp_path, mode,
                                                                           found):
    """As git's safe.directory: there anyone could rename this user's .codeshot away and
    put their own in its place. In a sticky one (/tmp) only the owner may."""
    from codeshot.client import find_state

    shared, nested = tmp_path / "shared", tmp_path / "shared" / "mine"
    nested.mkdir(parents=True)
    plant(shared, "http://127.0.0.1:9")
    shared.chmod(mode)
    assert (find_state(nested) is not None) is found


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="giving a file to another user takes root")
def test_the_search_stops_at_a_directory_another_user_owns(tmp_path):
    """Its owner may swap what is in it, this user's own file included; nothing above it
    is looked at either."""
    from codeshot.client import find_state

    theirs, nested = tmp_path / "theirs", tmp_path / "theirs" / "mine"
    nested.mkdir(parents=True)
    plant(theirs, "http://127.0.0.1:9")
    plant(tmp_path, "http://127.0.0.1:10")
    assert find_state(nested)[1] == {"api_url": "http://127.0.0.1:9"}
    os.chown(theirs, 65534, 65534)
    assert find_state(nested) is None
    os.chown(theirs / ".codeshot", 65534, 65534)  # and a .codeshot of theirs anywhere
    os.chown(theirs, 0, 0)
    assert find_state(nested)[1] == {"api_url": "http://127.0.0.1:10"}


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

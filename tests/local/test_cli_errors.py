"""AWS failures that reach a `codeshot` command: one coded line and exit 2, never a
traceback (docs/errors.md), whatever the command."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parents[2]


def codeshot(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The command as a new user runs it: no AWS credentials anywhere (HOME has none)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CODESHOT_"))}
    return subprocess.run(
        [sys.executable, "-m", "codeshot.cli", *args], cwd=cwd, capture_output=True,
        text=True, timeout=120, check=False,
        env={**clean, "PYTHONPATH": str(ROOT), "HOME": str(cwd),
             "AWS_EC2_METADATA_DISABLED": "true", **env})


def local_json(directory: Path, aws_endpoint_url: str) -> None:
    (directory / ".codeshot").mkdir()
    (directory / ".codeshot" / "local.json").write_text(json.dumps({
        "api_url": f"http://127.0.0.1:{free_port()}", "aws_endpoint_url": aws_endpoint_url}))


def one_error_line(out: subprocess.CompletedProcess[str], code: str) -> str:
    assert out.returncode == 2, out.stderr
    assert out.stdout == "" and len(out.stderr.splitlines()) == 1, out.stderr
    assert out.stderr.startswith("codeshot: error: "), out.stderr
    assert out.stderr.rstrip().endswith(f"({code})"), out.stderr
    return out.stderr


@pytest.mark.parametrize("args", [("users", "create", "bob"), ("users", "list"),
                                  ("keys", "rotate")])
def test_no_local_stack_and_no_aws_credentials(tmp_path, args):
    err = one_error_line(codeshot(*args, cwd=tmp_path), "UNAUTHENTICATED")
    assert "no local stack here (no .codeshot/local.json in this directory or above) and no AWS " \
        "credentials either: run this beside a running `codeshot local up`" in err
    assert not (tmp_path / ".codeshot").exists()


def test_operator_commands_take_a_local_stack_above_only_while_no_platform_is_named(
        tmp_path):
    """`users` commands find the local stack as the user's do: its file in this directory
    whatever CODESHOT_API_URL says, one above only while it is unset."""
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    local_json(tmp_path, endpoint)
    below = tmp_path / "agents"
    below.mkdir()
    named = {"CODESHOT_API_URL": f"http://127.0.0.1:{free_port()}", "HOME": str(tmp_path)}
    for cwd, env in ((tmp_path, named), (below, {"HOME": str(tmp_path)})):
        err = one_error_line(codeshot("users", "list", cwd=cwd, **env), "UNAVAILABLE")
        assert f"the local stack's AWS endpoint {endpoint} does not answer" in err
    err = one_error_line(codeshot("users", "list", cwd=below, **named), "UNAUTHENTICATED")
    assert "no local stack here (no .codeshot/local.json in this directory; with " \
        "CODESHOT_API_URL (or FIXIE_API_URL) set, one above does not count) and no AWS " \
        "credentials" in err


def test_a_local_stack_that_is_down(tmp_path):
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    local_json(tmp_path, endpoint)
    err = one_error_line(codeshot("users", "create", "bob", cwd=tmp_path), "UNAVAILABLE")
    assert f"the local stack's AWS endpoint {endpoint} does not answer: the `codeshot local " \
        "up` that wrote .codeshot/local.json here is not running; start it again" in err


def test_the_platforms_tables_are_missing(tmp_path, moto_server):
    local_json(tmp_path, moto_server.endpoint_url)  # moto answers, with none of our tables
    err = one_error_line(codeshot("users", "list", cwd=tmp_path,
                                  CODESHOT_USERS_TABLE="no-such-users-table"), "NOT_FOUND")
    assert "(Scan): the platform's tables, queue, bucket or secret are not in the local " \
        "stack; run this with the CODESHOT_* names its `codeshot local up` has" in err


@pytest.mark.parametrize(("aws_code", "code"), [
    ("AccessDenied", "FORBIDDEN"), ("AccessDeniedException", "FORBIDDEN"),
    ("InvalidClientTokenId", "UNAUTHENTICATED"), ("ExpiredToken", "UNAUTHENTICATED"),
])
def test_credentials_aws_refuses_and_calls_it_does_not_allow_are_told_apart(aws_code, code):
    from botocore.exceptions import ClientError

    from codeshot.cli import _aws_error

    error = _aws_error(ClientError({"Error": {"Code": aws_code, "Message": "no"}}, "PutItem"))
    assert error is not None and error.code == code and "PutItem" in error.message


@pytest.mark.parametrize(("args", "says"), [
    (["--port", "65535"], "--port 65535 leaves no port for moto's server (--port + 1): give "
                          "--aws-port"),
    (["--port", "-1"], "--port -1 is not a port: give 1-65535"),
    (["--port", "0"], "--port 0 is not a port: give 1-65535"),
    (["--port", "8180", "--aws-port", "70000"], "--aws-port 70000 is not a port"),
    (["--port", "8180", "--aws-port", "8180"], "--port and --aws-port are both 8180: give "
                                               "two ports"),
    (["--host", "nosuchhost.invalid"], "cannot listen on 'nosuchhost.invalid': "),
    (["--host", "10.255.255.1"], "cannot listen on 10.255.255.1: it is not an address of "
                                 "this machine (--host)"),
])
def test_local_up_refuses_what_it_cannot_listen_on_before_starting(tmp_path, args, says):
    """Each was a traceback (OverflowError, OSError 99, gaierror), or a stack that started
    and then failed (the same two ports; --port 0, whose API URL said :0)."""
    err = one_error_line(codeshot("local", "up", *args, cwd=tmp_path), "INVALID_INPUT")
    assert says in err
    assert not (tmp_path / ".codeshot").exists()


def test_a_file_named_codeshot_is_a_clear_error(tmp_path):
    (tmp_path / ".codeshot").write_text("mine")
    port = str(free_port())
    err = one_error_line(codeshot("local", "up", "--port", port, cwd=tmp_path),
                         "INVALID_INPUT")
    assert ".codeshot is a file: local up keeps its local.json in that directory" in err
    assert (tmp_path / ".codeshot").read_text() == "mine"
    # Commands that look for a local stack see none there.
    one_error_line(codeshot("users", "list", cwd=tmp_path), "UNAUTHENTICATED")


def test_a_user_is_not_made_when_no_key_can_be_signed_for_them(tmp_path, server_aws):
    """The signing keys are read before the user is written: a user made first was left
    with no API key, and their name taken."""
    local_json(tmp_path, server_aws.aws_endpoint_url)
    names = {f"CODESHOT_{name.upper()}": str(getattr(server_aws, name)) for name in (
        "users_table", "registry_table", "sessions_table", "usage_table")}
    err = one_error_line(codeshot("users", "create", "bob", cwd=tmp_path, **names,
                                  CODESHOT_SIGNING_SECRET_ID="no/such-secret"), "UNAVAILABLE")
    assert "signing keys are unavailable" in err
    out = codeshot("users", "list", cwd=tmp_path, **names)
    assert out.returncode == 0 and "bob" not in out.stdout, out.stderr


@pytest.mark.parametrize(("args", "says"), [
    (["serve", "agent", "--port", "99999"], "--port 99999 is not a port: give 1-65535 (0: any)"),
    (["serve", "agent", "--port", "-1"], "--port -1 is not a port"),
    (["new", "afile/agent"], "cannot make afile/agent: Not a directory"),
])
def test_serve_and_new_refuse_what_they_cannot_do_in_one_line(tmp_path, args, says):
    """Each was a traceback (an OverflowError from the server's thread, a NotADirectoryError
    from the copy), or blamed a --host that serve does not have."""
    (tmp_path / "afile").write_text("a file, not a folder")
    err = one_error_line(codeshot(*args, cwd=tmp_path), "INVALID_INPUT")
    assert says in err


def test_local_up_without_moto_says_what_to_install(tmp_path, monkeypatch, capsys):
    """`pip install codeshot-kit` is the SDK alone: `local up` (and `agent test`) ended in
    a child's ModuleNotFoundError and "moto server ... exited with code 1"."""
    import importlib.util

    from codeshot import cli

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "moto" else real(name, *args))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["local", "up", "--port", str(free_port())]) == 2
    err = capsys.readouterr().err
    assert f"needs `pip install -e '{ROOT}[local]'` (moto is missing)" in err, err
    assert not (tmp_path / ".codeshot" / "local.json").exists()


def test_a_reader_that_left_the_pipe_is_no_traceback(tmp_path, server_aws):
    """`codeshot users keys bob | head -1`: head left, and print raised BrokenPipeError."""
    local_json(tmp_path, server_aws.aws_endpoint_url)
    names = {f"CODESHOT_{name.upper()}": str(getattr(server_aws, name)) for name in (
        "users_table", "registry_table", "sessions_table", "usage_table", "signing_secret_id")}
    assert codeshot("users", "create", "bob", cwd=tmp_path, **names).returncode == 0
    reader, writer = os.pipe()
    os.close(reader)  # the reader left before a byte was written: every write fails
    try:
        out = subprocess.run(
            [sys.executable, "-m", "codeshot.cli", "users", "keys", "bob"], cwd=tmp_path,
            stdout=writer, stderr=subprocess.PIPE, text=True, timeout=120, check=False,
            env={**os.environ, "PYTHONPATH": str(ROOT), **names})
    finally:
        os.close(writer)
    assert (out.returncode, out.stderr) == (1, "")

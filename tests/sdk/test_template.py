"""The copy-and-edit workflow: ``codeshot new``, edit, ``pytest`` in the copy,
``codeshot agent test`` and ``codeshot serve``, all as an author runs them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest
import yaml

import codeshot as codeshot_package
from codeshot.devtools.agents import handle_for
from codeshot.runner.handshake import fetch_handshake
from tests.conftest import free_port

NEW_FEW_SHOT = '''
Q: Delete note 1
Ask Func[forget_note]: 1
Func[forget_note] says: Deleted note 1: buy milk
A: Deleted note 1: buy milk
'''

NEW_FUNC = '''

@agent.register_func
def forget_note(number: int, user_storage: UserStorage) -> str:
    """Delete the note with this number."""
    notes = user_storage.get("notes", [])
    if not 1 <= number <= len(notes):
        return f"There is no note {number}."
    removed = notes.pop(number - 1)
    user_storage["notes"] = notes
    return f"Deleted note {number}: {removed}"
'''

NEW_TEST = '''
def test_forget_note_takes_a_typed_number(agent_server):
    for text in ("first", "second"):
        assert agent_server.client.call("add_note", text)[0] == 200
    assert agent_server.client.call("forget_note", "1")[1]["message"]["text"] == (
        "Deleted note 1: first")
    status, reply = agent_server.client.call("forget_note", "one")
    assert status == 400 and reply["error"]["code"] == "INVALID_INPUT"
'''


def codeshot(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "codeshot.cli", *args], cwd=cwd, text=True,
                          capture_output=True, env={**os.environ, **env}, timeout=120,
                          check=False)


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    target = tmp_path / "Shopping List"
    made = codeshot("new", str(target))
    assert made.returncode == 0, made.stderr
    return target


def test_new_copies_the_template_with_the_directory_as_handle(copy):
    assert sorted(p.name for p in copy.iterdir()) == [
        "README.md", "agent.py", "agent.yaml", "requirements.txt", "tests"]
    config = yaml.safe_load((copy / "agent.yaml").read_text())
    assert config["handle"] == "shopping-list"
    # Not a second "Notes" with the template's description for the router to tie on.
    assert config["name"] == "Shopping List"
    assert config["description"] == ("Shopping List, copied from the notes template: it "
                                     "saves short notes and reads them back.")
    assert "# Who this agent is." in (copy / "agent.yaml").read_text()
    assert codeshot("new", str(copy)).returncode == 2  # never over an existing directory


def test_new_says_what_to_edit_and_run_next(tmp_path):
    """It said only "Created agent 'tipper' in tipper": the copy still answers as the notes
    template, its agent.yaml tests the template's Funcs."""
    made = codeshot("new", "my tips", cwd=tmp_path)
    assert made.stdout.splitlines() == [
        "Created agent 'my-tips' in my tips. It is still the notes template:",
        "  1. edit my tips/agent.py: the base prompt, few-shots and Funcs",
        "  2. edit my tips/agent.yaml: its description, sample queries and tests are the "
        "template's",
        "  3. codeshot agent test 'my tips'",
        "  4. codeshot serve 'my tips' --register   (beside `codeshot local up`)"]


@pytest.mark.parametrize(("name", "handle"), [
    ("My Notes_Agent!", "my-notes_agent"), ("--x--", "x"), ("Ünïcode 2", "n-code-2")])
def test_handles_are_normalised(name, handle):
    assert handle_for(name) == handle


@pytest.mark.slow
def test_an_edited_copy_passes_its_own_tests(copy):
    agent_py = copy / "agent.py"
    source = agent_py.read_text()
    assert '"""\n\nagent = CodeShotAgent' in source
    agent_py.write_text(source.replace('"""\n\nagent = CodeShotAgent',
                                       NEW_FEW_SHOT + '"""\n\nagent = CodeShotAgent') + NEW_FUNC)
    config = yaml.safe_load((copy / "agent.yaml").read_text())
    config["tests"] += [{"query": "Delete note 1", "expected": "Deleted note 1: call the dentist"},
                        {"query": "What are my notes?", "expected": "no notes"}]
    (copy / "agent.yaml").write_text(yaml.safe_dump(config))
    (copy / "tests" / "test_forget.py").write_text(NEW_TEST)

    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
                           cwd=copy, capture_output=True, text=True, timeout=300, check=False)
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "5 passed" in tests.stdout

    checked = codeshot("agent", "test", str(copy))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "PASS  Delete note 1" in checked.stdout
    assert "4 passed, 0 failed, 0 skipped" in checked.stdout


@pytest.mark.slow
def test_agent_test_fails_on_a_wrong_expectation(copy):
    config = yaml.safe_load((copy / "agent.yaml").read_text())
    config["tests"][1]["expected"] = "buy bread"
    (copy / "agent.yaml").write_text(yaml.safe_dump(config))
    checked = codeshot("agent", "test", str(copy))
    assert checked.returncode == 1
    assert "FAIL  What are my notes?" in checked.stdout
    assert "1 passed, 1 failed, 0 skipped" in checked.stdout


def test_serve_runs_the_agent_on_loopback(copy, platform):
    port, agent_id = free_port(), "acme/shopping-list"
    server = subprocess.Popen(
        [sys.executable, "-m", "codeshot.cli", "serve", str(copy), "--port", str(port)],
        env={**os.environ, "CODESHOT_API_URL": platform.url, "CODESHOT_AGENT_ID": agent_id},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        token = platform.services.auth.agent_token(agent_id, None, None)
        deadline = time.monotonic() + 30
        while True:
            try:
                handshake = fetch_handshake(f"http://127.0.0.1:{port}", token, timeout=2,
                                            allow_loopback=True)
                break
            except Exception:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        assert handshake.base_prompt.startswith("I am a notes agent.")
        other = platform.services.auth.agent_token("acme/other", None, None)
        refused = httpx.get(f"http://127.0.0.1:{port}/", headers={"Authorization": f"Bearer {other}"})
        assert refused.status_code == 403
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.mark.slow
def test_agent_test_runs_a_standalone_agent(tmp_path):
    (tmp_path / "agent.py").write_text(
        "from codeshot.sdk import StandaloneAgent\n\n"
        "def handle(query: str):\n"
        "    yield 'thinking'\n"
        "    yield query[::-1]\n\n"
        "agent = StandaloneAgent(handle, sample_queries=['abc'])\n")
    (tmp_path / "agent.yaml").write_text(
        "handle: reverser\ntests:\n  - {query: abc, expected: cba}\n  - {query: xy, expected: xy}\n")
    checked = codeshot("agent", "test", str(tmp_path))
    assert checked.returncode == 1
    assert "PASS  abc" in checked.stdout and "FAIL  xy" in checked.stdout, checked.stdout


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["agent_template", "local/examples/dice", "local/examples/clock"])
def test_the_shipped_agents_pass_their_own_tests(agent):
    """What `make run` registers is what a new user tries first: each agent's own tests
    pass offline (the dice example's test once asked for a die its Func refuses)."""
    checked = codeshot("agent", "test", str(Path(codeshot_package.__file__).parent / agent))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert " 0 failed, 0 skipped" in checked.stdout, checked.stdout


def test_the_readmes_lambda_handler_answers_a_gateway_event(copy):
    """Step 5 named `agent.handler` as the Lambda handler: agent.py has no such function
    (it is a method of `agent`), so Lambda could not have found it."""
    readme = (copy / "README.md").read_text()
    step = readme[readme.index("5. **Deploy.**"):]
    source = textwrap.dedent(step.split("```python\n", 1)[1].split("```", 1)[0])
    module, function = re.search(r"name `(\w+)\.(\w+)`", step).group(1, 2)
    (copy / f"{module}.py").write_text(source)
    probe = f"""
import importlib, json
handler = getattr(importlib.import_module({module!r}), {function!r})  # as Lambda does
event = {{"version": "2.0", "routeKey": "$default", "rawPath": "/", "rawQueryString": "",
          "headers": {{"host": "agent.example"}},
          "requestContext": {{"http": {{"method": "GET", "path": "/", "protocol": "HTTP/1.1",
                               "sourceIp": "203.0.113.1", "userAgent": "t"}},
                              "domainName": "agent.example", "stage": "$default",
                              "requestId": "r", "accountId": "1", "apiId": "a"}},
          "isBase64Encoded": False}}
out = handler(event, None)
print(json.dumps({{"status": out["statusCode"], "body": json.loads(out["body"])}}))
"""
    proc = subprocess.run([sys.executable, "-c", probe], cwd=copy, capture_output=True,
                          text=True, timeout=120, check=False,
                          env={**os.environ, "CODESHOT_API_URL": "https://platform.example",
                               "CODESHOT_AGENT_ID": "admin/shopping-list"})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # The agent's app answered: the handshake needs the platform's token, as it should.
    assert out["status"] == 401 and out["body"]["error"]["code"] == "UNAUTHENTICATED", out

"""``codeshot serve DIR --register``, ``codeshot agent register DIR --url`` and
``codeshot agent test DIR`` as a user runs them: real processes in the directory of a
running local stack (its .codeshot/local.json), against agents written as Fixie's are,
and an unmodified fixieai 1.0.4 agent served by fixieai's own loader."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

import codeshot as codeshot_package
from codeshot.devtools.agents import (
    NEEDS_JUDGE,
    format_results,
    local_platform,
    run_agent_tests,
    run_cases,
    serve_agent_dir,
)
from codeshot.errors import InvalidInput
from codeshot.llm.fewshot import NO_PLACE
from codeshot.settings import Settings
from tests.conftest import free_port
from tests.engine.conftest import ScriptedLLM

ROOT = Path(__file__).resolve().parents[2]

MAIN = '''
import {module}

BASE_PROMPT = """I am an agent that shouts words back."""
FEW_SHOTS = """
Q: Shout hello
Ask Func[shout]: hello
Func[shout] says: HELLO
A: HELLO!
"""
agent = fixieai.CodeShotAgent(BASE_PROMPT, FEW_SHOTS)


@agent.register_func
def shout(query: fixieai.Message) -> str:
    return query.text.upper()
'''

AGENT_YAML = """
handle: {handle}
name: Shouter
description: |
  The `shouter` agent shouts words back.
more_info_url: https://example.com/shouter
entry_point: main:agent
public: true
tests:
  - query: Shout hello
    expected: The response should be the word hello in capitals.
  - query: Shout hello
    expected: HELLO
  - query: Shout hello
    regex: "^HEL+O!$"
"""


def agent_dir(tmp_path: Path, handle: str, module: str = "codeshot.sdk as fixieai") -> Path:
    directory = tmp_path / handle
    directory.mkdir()
    (directory / "main.py").write_text(MAIN.format(module=module))
    (directory / "agent.yaml").write_text(AGENT_YAML.format(handle=handle))
    return directory


def codeshot(*args: str, cwd: Path, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "codeshot.cli", *args], cwd=cwd, check=False,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, **kwargs)


@pytest.fixture(scope="module")
def stack_dir(live_stack_object) -> Path:
    """Where `codeshot local up` runs: its .codeshot/local.json is there."""
    return live_stack_object.state_path.parent.parent


def gql(live_stack, query: str, **variables) -> dict:
    body = httpx.post(live_stack["graphql_url"], json={"query": query, "variables": variables},
                      headers={"Authorization": f"Bearer {live_stack['api_key']}"},
                      timeout=60).json()
    assert "errors" not in body, body
    return body["data"]


def ask(live_stack, agent_id: str, text: str) -> str:
    handle = gql(live_stack, "mutation ($f: String) { createSession(sessionData: "
                 "{frontendAgentId: $f}) { session { handle } } }",
                 f=agent_id)["createSession"]["session"]["handle"]
    return gql(live_stack, "mutation ($s: String!, $t: String!) { sendSessionMessage("
               "messageData: {session: $s, text: $t}) { reply { text } } }",
               s=handle, t=text)["sendSessionMessage"]["reply"]["text"]


@contextmanager
def running(argv: list[str], cwd: Path, env: dict[str, str], until: str,
            stop: tuple[signal.Signals, ...] = (signal.SIGTERM,)) -> Iterator[list[str]]:
    """A long-running process, once it printed a line containing ``until`` (within 60 s,
    however silent it stays); its output, read on until it ends (at ``stop``'s signals,
    sent at once)."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if until in line:
                seen.set()
        seen.set()  # ended

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        if not seen.wait(60) or not any(until in line for line in lines):
            pytest.fail(f"{argv} printed no {until!r} in 60 s: {''.join(lines)}")
        yield lines
    finally:
        for signum in stop:
            proc.send_signal(signum)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            reader.join(timeout=20)
            pytest.fail(f"{argv} did not end within 20 s of {stop}: {''.join(lines)}")
        reader.join(timeout=20)
    assert proc.returncode == (-signal.SIGKILL if signal.SIGKILL in stop else 0), lines


def test_serve_register_reads_local_json_and_agent_yaml(live_stack, stack_dir, tmp_path):
    directory = agent_dir(tmp_path, "shouter")
    argv = [sys.executable, "-m", "codeshot.cli", "serve", str(directory), "--port", "0",
            "--register"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with running(argv, stack_dir, env, until="Registered local/shouter") as lines:
        assert ask(live_stack, "local/shouter", "Shout hello") == "HELLO!"
        agent = gql(live_stack, 'query { agentById(agentId: "local/shouter") { name '
                    'description moreInfoUrl published } }')["agentById"]
    # agent.yaml's block scalar, folded to the one line the platform keeps
    assert agent == {"name": "Shouter", "description": "The `shouter` agent shouts words "
                     "back.", "moreInfoUrl": "https://example.com/shouter", "published": True}
    assert lines[0].startswith("Serving shouter at http://127.0.0.1:")
    assert lines[-1].strip() == "Stopping (SIGTERM) ..."


def test_register_an_unmodified_fixieai_agent_by_url(live_stack, stack_dir, tmp_path,
                                                     fixie_python):
    directory = agent_dir(tmp_path, "fxshouter", module="fixieai")
    port = free_port()
    argv = [str(fixie_python), "-m", "uvicorn", "fixieai.cli.agent.loader:uvicorn_app_factory",
            "--factory", "--host", "127.0.0.1", "--port", str(port)]
    env = {"PATH": os.environ["PATH"], "FIXIE_API_URL": live_stack["api_url"],
           "FIXIE_ALLOWED_AGENT_ID": "local/fxshouter"}
    with running(argv, directory, env, until="Uvicorn running"):
        out = codeshot("agent", "register", str(directory), "--url",
                       f"http://127.0.0.1:{port}", cwd=stack_dir)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == f"Registered local/fxshouter at http://127.0.0.1:{port} " \
            f"with the platform at {live_stack['api_url']} (from .codeshot/local.json)"
        assert ask(live_stack, "local/fxshouter", "Shout hello") == "HELLO!"
        (directory / "agent.yaml").write_text(AGENT_YAML.format(handle="fxshouter")
                                              .replace("name: Shouter", "name: Loud"))
        again = codeshot("agent", "register", str(directory), "--url",
                         f"http://127.0.0.1:{port}", cwd=stack_dir)  # an update
        assert again.returncode == 0, again.stderr
    assert gql(live_stack, 'query { agentById(agentId: "local/fxshouter") { name } }'
               )["agentById"]["name"] == "Loud"


def test_agent_register_again_says_updated_and_keeps_what_agent_yaml_leaves_out(
        live_stack, stack_dir, tmp_path):
    """It said "Registered" for an update too, and sent an empty description, which
    erased the one the agent had."""
    directory = agent_dir(tmp_path, "keeper")
    port = free_port()
    argv = [sys.executable, "-m", "codeshot.cli", "serve", str(directory), "--port", str(port)]
    with running(argv, stack_dir, {**os.environ, "PYTHONPATH": str(ROOT)}, until="Serving"):
        url = f"http://127.0.0.1:{port}"
        first = codeshot("agent", "register", str(directory), "--url", url, cwd=stack_dir)
        assert first.stdout.startswith(f"Registered local/keeper at {url} "), first.stderr
        yaml = directory / "agent.yaml"
        yaml.write_text(yaml.read_text().replace(
            "description: |\n  The `shouter` agent shouts words back.\n", ""))
        again = codeshot("agent", "register", str(directory), "--url", url, cwd=stack_dir)
        assert again.stdout.startswith(f"Updated local/keeper at {url} "), again.stderr
    assert gql(live_stack, 'query { agentById(agentId: "local/keeper") { description } }'
               )["agentById"]["description"] == "The `shouter` agent shouts words back."


def test_serve_chat_and_register_find_the_stack_from_inside_an_agents_directory(
        live_stack, stack_dir):
    """Run in the agent's own directory under the stack's, each said to run it "in the
    directory where `codeshot local up` runs": local.json is now looked for upward."""
    handle = f"nested{uuid.uuid4().hex[:6]}"
    (stack_dir / "agents").mkdir(exist_ok=True)
    directory = agent_dir(stack_dir / "agents", handle)
    found = f"{live_stack['api_url']} (from {stack_dir.resolve() / '.codeshot' / 'local.json'})"
    argv = [sys.executable, "-m", "codeshot.cli", "serve", ".", "--port", "0", "--register"]
    try:
        with running(argv, directory, {**os.environ, "PYTHONPATH": str(ROOT)},
                     until=f"Registered local/{handle}") as lines:
            talked = codeshot("chat", "--agent", f"local/{handle}", cwd=directory,
                              input="Shout hello\n")
            url = lines[0].split(" at ")[1].split()[0]
            registered = codeshot("agent", "register", ".", "--url", url, cwd=directory)
    finally:
        shutil.rmtree(directory)
    assert lines[0] == f"Serving {handle} at {url} for the platform at {found}\n", lines
    assert talked.stdout.startswith(f"Platform: {found}\n"), talked.stderr
    assert "HELLO!" in talked.stdout, talked.stdout
    assert registered.stdout == f"Updated local/{handle} at {url} with the platform at " \
        f"{found}\n", registered.stderr


def readme_steps() -> list[list[str]]:
    """The commands of the README's "Writing an agent" block, as a new user types them."""
    section = (ROOT / "README.md").read_text().split("\n## Writing an agent\n", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [shlex.split(line.split("#", 1)[0]) for line in block.splitlines() if line.strip()]


def test_the_readmes_writing_an_agent_steps_end_in_a_chat_with_it(live_stack, stack_dir):
    steps = readme_steps()
    assert [step[:2] for step in steps] == [[".venv/bin/codeshot", "new"],
                                            [".venv/bin/codeshot", "agent"],
                                            [".venv/bin/codeshot", "serve"],
                                            [".venv/bin/codeshot", "chat"]]
    new, test, serve, chat = ([sys.executable, "-m", "codeshot.cli", *step[1:]]
                              for step in steps)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for argv in (new, test):
        done = subprocess.run(argv, cwd=stack_dir, env=env, capture_output=True, text=True,
                              timeout=300, check=False)
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
    with running([*serve, "--port", "0"], stack_dir, env, until="Registered"):
        talked = subprocess.run(chat, cwd=stack_dir, env=env, input="Save a note: buy milk\n",
                                capture_output=True, text=True, timeout=120, check=False)
    assert talked.returncode == 0, talked.stderr
    assert "Saved note " in talked.stdout and "buy milk" in talked.stdout, talked.stdout


def test_the_readmes_curl_calls_of_the_api_run_as_written(live_stack, tmp_path):
    """The README's GraphQL block ("The API"), run by bash with API and KEY as
    `codeshot local up` printed them: a new user guessed the call shapes before."""
    if shutil.which("jq") is None:
        pytest.skip("!! jq is missing (`make test` installs it where it can): the README's "
                    "curl block is NOT RUN")
    section = (ROOT / "README.md").read_text().split("\n## The API\n", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    out = subprocess.run(["/bin/bash", "-euo", "pipefail", "-c", block], capture_output=True,
                         text=True, timeout=120, check=False, cwd=tmp_path,
                         env={**os.environ, "API": live_stack["api_url"],
                              "KEY": live_stack["api_key"]})
    assert out.returncode == 0 and out.stderr == "", out.stderr
    reply, *messages, route = out.stdout.splitlines()
    assert re.fullmatch(r"You rolled \d \+ \d = \d+\.", reply), reply
    assert (json.loads(messages[0]), json.loads(messages[-1])) == (
        {"type": "query", "text": "Roll 2d6"}, {"type": "response", "text": reply})
    assert json.loads(route)["agentId"] == "local/dice"


def test_bad_input_is_one_clear_line(stack_dir, tmp_path):
    directory = agent_dir(tmp_path, "oops")
    busy = free_port()
    cases = [
        (["serve", str(directory / "main.py")], "is a file: give the agent's directory"),
        (["serve", str(tmp_path)], "is not an agent directory: it has no agent.yaml"),
        (["agent", "register", str(tmp_path / "nowhere")], "does not exist"),
        (["agent", "register", str(directory)], "Give --url URL"),
    ]
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", busy))
        taken.listen()
        cases.append((["serve", str(directory), "--port", str(busy)],
                       f"port {busy} on 127.0.0.1 is already in use; stop what is using "
                       f"it or pick another port (--port) (PORT_IN_USE)"))
        for args, message in cases:
            out = codeshot(*args, cwd=stack_dir)
            assert out.returncode == 2, (args, out.stdout, out.stderr)
            assert out.stdout == "" and len(out.stderr.splitlines()) == 1, out.stderr
            assert message in out.stderr and out.stderr.startswith("codeshot: error: ")


def test_each_mistake_in_agent_yaml_is_a_line_of_its_own(tmp_path):
    directory = agent_dir(tmp_path, "tipper")
    yaml = directory / "agent.yaml"
    yaml.write_text(yaml.read_text().replace("description:", "descripton:")
                    .replace("name:", "nmae:"))
    out = codeshot("agent", "test", "tipper", cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.splitlines() == [
        "codeshot: error: tipper/agent.yaml: nmae: unknown field 'nmae' (did you mean "
        "'name'?) (INVALID_INPUT)",
        "codeshot: error: tipper/agent.yaml: descripton: unknown field 'descripton' (did you "
        "mean 'description'?) (INVALID_INPUT)"]


def test_agent_test_skips_sentences_offline_and_checks_text_and_regex(tmp_path):
    directory = agent_dir(tmp_path, "shouter")
    out = codeshot("agent", "test", str(directory), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr  # a skip is no failure
    rows = out.stdout.splitlines()
    assert rows[-1] == "2 passed, 0 failed, 1 skipped"
    assert rows[1].startswith("SKIP  Shout hello")
    assert [row[:4] for row in rows if row[:4] in ("PASS", "FAIL")] == ["PASS", "PASS"]
    skipped = run_agent_tests(directory, Settings())[0]
    assert (skipped.verdict.value, skipped.reason) == ("SKIP", NEEDS_JUDGE)
    assert sum(row.startswith("PASS") for row in rows) == 2

    # Only sentences to judge, offline: nothing was checked, which is no pass.
    config = directory / "agent.yaml"
    text = config.read_text()
    config.write_text(text[:text.index("  - query: Shout hello\n    expected: HELLO\n")])
    out = codeshot("agent", "test", str(directory), cwd=tmp_path)
    assert out.stdout.splitlines()[-1] == "0 passed, 0 failed, 1 skipped", out.stdout
    assert out.returncode == 1
    assert out.stderr == "codeshot: no test ran: each was skipped (see the reason above)\n"


def shouter_tested(tmp_path: Path, query: str, expected: str):
    """`codeshot agent test` of the shouter agent with this one test in its agent.yaml."""
    directory = agent_dir(tmp_path, "shouter")
    config = directory / "agent.yaml"
    config.write_text(config.read_text().split("tests:")[0] + "tests:\n"
                      f"  - query: {query}\n    expected: {expected}\n")
    [result] = run_agent_tests(directory, Settings())
    return result


def test_a_test_no_few_shot_fits_offline_names_the_nearest(tmp_path):
    """The replay's refusal was all the table said: nothing told the author what to
    reword."""
    result = shouter_tested(tmp_path, "Shout goodbye to everyone loudly", "GOODBYE")
    assert result.verdict.value == "FAIL"
    assert result.reason == ('the nearest few-shot is "Shout hello": word overlap 0.33, '
                             "under the replay's 0.40")


def test_a_test_the_replay_would_answer_with_the_examples_words_says_so(tmp_path):
    """"Shout" replayed "Shout hello" and shouted HELLO, a word the test never said."""
    result = shouter_tested(tmp_path, "Shout", '"!"')
    assert result.verdict.value == "FAIL"
    assert result.reason == ('the nearest few-shot, "Shout hello", would ask "hello": hello '
                             "not in the question")


def test_a_test_whose_count_the_replay_cannot_place_says_so(tmp_path):
    """The answer said no example was close where one was, only its Ask ("2d6") had no
    place for the test's "a": it says the replay cannot fit the number, and the reason
    says where."""
    directory = tmp_path / "dice"
    shutil.copytree(Path(codeshot_package.__file__).parent / "local/examples/dice", directory)
    main = directory / "agent.py"
    main.write_text(main.read_text().replace("Ask Func[roll]: two six-sided dice",
                                             "Ask Func[roll]: 2d6"))
    config = directory / "agent.yaml"
    config.write_text(config.read_text().split("tests:")[0] + "tests:\n"
                      "  - query: Throw a six-sided die\n    regex: \"^You rolled [1-6]\\\\.$\"\n")
    [result] = run_agent_tests(directory, Settings())
    assert result.verdict.value == "FAIL" and result.answer == NO_PLACE
    assert result.reason == ('the nearest few-shot, "Throw two six-sided dice", would ask '
                             '"2d6": it has no place for "a"')


def test_agent_test_finds_the_agents_own_mistakes_before_starting_a_platform(
        tmp_path, monkeypatch):
    """A few-shot's grammar or a file without tests is reported at once: no local
    platform (several seconds to start) is started first."""
    import codeshot.devtools.agents as devtools

    def no_platform(*_: object) -> None:
        raise AssertionError("a local platform was started")

    monkeypatch.setattr(devtools, "local_platform", no_platform)
    broken = agent_dir(tmp_path, "broken")
    main = broken / "main.py"
    main.write_text(main.read_text().replace("A: HELLO!", ""))
    with pytest.raises(InvalidInput, match="few-shot 1, line 3: a few-shot must end with"):
        run_agent_tests(broken, Settings())
    untested = agent_dir(tmp_path, "untested")
    yaml = untested / "agent.yaml"
    yaml.write_text(yaml.read_text().split("tests:")[0])
    with pytest.raises(InvalidInput, match="has no tests"):
        run_agent_tests(untested, Settings())


def test_an_agent_that_fails_to_import_is_one_line_naming_its_file_and_line(
        stack_dir, tmp_path):
    """`from codeshot.sdk import CodeShotAgent, Nope` in the agent: a long traceback through
    the CLI and importlib, for `agent test` and `serve` alike."""
    directory = agent_dir(tmp_path, "typo")
    (directory / "helpers.py").write_text("def help(:\n")
    for source, says in [
        ("from codeshot.sdk import CodeShotAgent, Nope\n",
         "main.py line 1: ImportError: cannot import name 'Nope' from 'codeshot.sdk'"),
        ("import os\nimport helpers\n", "helpers.py line 1: SyntaxError: invalid syntax"),
    ]:
        (directory / "main.py").write_text(source)
        for args in (["agent", "test", str(directory)], ["serve", str(directory)]):
            out = codeshot(*args, cwd=stack_dir)
            assert out.returncode == 2 and out.stdout == "", (args, out.stderr)
            assert out.stderr.startswith(f"codeshot: error: {says}"), (args, out.stderr)
            assert len(out.stderr.splitlines()) == 1, out.stderr
            assert out.stderr.rstrip().endswith("(INVALID_INPUT)"), out.stderr


def test_a_language_model_judges_sentences_with_its_reason(tmp_path):
    directory = agent_dir(tmp_path, "shouter")
    llm = ScriptedLLM("Ask Func[shout]: hello", "A: HELLO!",  # the agent's run
                      "FAIL\nIt is in capitals but not the word hello.",  # the judge
                      "Ask Func[shout]: hello", "A: HELLO!", "Ask Func[shout]: hello", "A: HELLO!")
    with local_platform(tmp_path / "state") as platform, \
            serve_agent_dir(directory, platform) as served:
        results = run_cases(served.client, served.config.tests, llm, judging=True)
    assert [r.verdict.value for r in results] == ["FAIL", "PASS", "PASS"]
    assert results[0].reason == "It is in capitals but not the word hello"
    judged = "\n".join(m.content for m in llm.calls[2][0])
    assert "The response should be the word hello in capitals." in judged and "HELLO!" in judged


def test_the_table_wraps_long_answers_instead_of_cutting_them(tmp_path):
    from codeshot.devtools.agents import CaseResult, Verdict
    from codeshot.sdk.project import AgentTest

    answer = "word " * 60 + "END"
    table = format_results([CaseResult(AgentTest(query="q", expected="word"), answer, "done",
                                       Verdict.PASS)])
    assert "END" in table and "..." not in table
    assert " ".join(table.split()).count("word") == 61  # 60 in the answer, one expected
    assert textwrap.dedent(table).splitlines()[-1] == "1 passed, 0 failed, 0 skipped"


def test_the_table_keeps_a_url_whole_on_one_line():
    from codeshot.devtools.agents import CaseResult, Verdict
    from codeshot.sdk.project import AgentTest

    url = "http://127.0.0.1:9/an-agent-that-is-not-served-here"
    table = format_results([CaseResult(AgentTest(query="q", expected="x"),
                                       f"the agent at {url} cannot be reached", "error",
                                       Verdict.FAIL)])
    assert any(url in line for line in table.splitlines()), table


@pytest.mark.parametrize(("argv", "text"), [
    (["users", "limits", "--help"], "Set NAME's own limits per day"),
    (["users", "keys", "--help"], "Print the id of each of NAME's active API keys"),
    (["users", "disable", "--help"], "Refuse all of a user's API keys and their sign-in"),
])
def test_users_help_names_the_argument_it_shows(capsys, argv, text):
    from codeshot.cli import main

    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert text in " ".join(out.split())
    assert "positional arguments:\n  NAME " in out, out


REVISIONS = "query ($id: String!) { agentById(agentId: $id) { allRevisions { isCurrent " \
    "externalDeployment { url } } } }"


def lender_dirs(tmp_path: Path) -> tuple[str, Path, Path]:
    """An agent id of its own (were the test run again) and two agents of that handle:
    the shouter, and one with its own name, description and few-shot (whose query the
    platform adds to its sample queries)."""
    handle = f"lender{uuid.uuid4().hex[:6]}"
    first, second = agent_dir(tmp_path, handle), tmp_path / "again"
    second.mkdir()
    (second / "main.py").write_text((first / "main.py").read_text().replace(
        "Q: Shout hello", "Q: Whisper hello"))
    (second / "agent.yaml").write_text((first / "agent.yaml").read_text().replace(
        "name: Shouter", "name: Whisperer").replace(
        "The `shouter` agent shouts words back.", "Whispers notes."))
    return f"local/{handle}", first, second


def serving(stack_dir: Path, directory: Path, until: str, port: int | None = None,
            register: bool = True, stop: tuple[signal.Signals, ...] = (signal.SIGTERM,)):
    """`codeshot serve DIR --register` (or without) on ``port`` (a free one by default),
    once it printed ``until``; and its URL."""
    port = port or free_port()
    return running([sys.executable, "-m", "codeshot.cli", "serve", str(directory), "--port",
                    str(port), *(["--register"] if register else [])], stack_dir,
                   {**os.environ, "PYTHONPATH": str(ROOT)}, until, stop), \
        f"http://127.0.0.1:{port}"


def revisions(live_stack, agent_id: str) -> list[tuple[bool, str]]:
    return [(r["isCurrent"], r["externalDeployment"]["url"]) for r in gql(
        live_stack, REVISIONS, id=agent_id)["agentById"]["allRevisions"]]


DESCRIBED = "query ($id: String!) { agentById(agentId: $id) { name description queries } }"


def test_serve_register_lends_an_existing_agent_and_gives_it_back(live_stack, stack_dir,
                                                                  tmp_path):
    """It re-pointed the registered agent for good and said "Registered": after Ctrl-C
    the agent was at a stopped server (AGENT_UNAVAILABLE). Then the URL came back, but
    the name, description and sample queries stayed the lending agent's (the router sent
    its queries to the agent served back)."""
    agent_id, first, second = lender_dirs(tmp_path)
    first_serving, first_url = serving(stack_dir, first, f"Registered {agent_id}")
    with first_serving:
        own = gql(live_stack, DESCRIBED, id=agent_id)["agentById"]
        assert own["name"] == "Shouter"
        lending, second_url = serving(stack_dir, second, f"Updated {agent_id}")
        with lending as lines:
            assert f"Updated {agent_id}: served here until Ctrl-C, then again at " \
                f"{first_url} with its own name, description and sample queries\n" in lines
            assert (True, second_url) in revisions(live_stack, agent_id)
            lent = gql(live_stack, DESCRIBED, id=agent_id)["agentById"]
            assert (lent["name"], lent["description"]) == ("Whisperer", "Whispers notes.")
            assert "Whisper hello" in lent["queries"]
            assert ask(live_stack, agent_id, "Whisper hello") == "HELLO!"
        assert lines[-1] == f"Restored {agent_id} at {first_url}, with its own name, " \
            "description and sample queries\n"
        assert revisions(live_stack, agent_id) == [(True, first_url)]
        assert gql(live_stack, DESCRIBED, id=agent_id)["agentById"] == own
        assert ask(live_stack, agent_id, "Shout hello") == "HELLO!"

    # Served again where it is registered (the edit-and-serve loop): updated there, and
    # left there at Ctrl-C. It said "then again at" and "Restored" that same URL.
    again, _ = serving(stack_dir, first, f"Updated {agent_id}",
                       port=int(first_url.rsplit(":", 1)[1]))
    with again as lines:
        assert f"Updated {agent_id} at {first_url} (agent.yaml and its handshake read): " \
            "it stays registered there after Ctrl-C, answering only while served\n" in lines
    assert not [line for line in lines if "Restored" in line or "then again" in line], lines
    assert revisions(live_stack, agent_id) == [(True, first_url)]


def test_a_lent_agent_whose_server_stopped_first_stays_where_it_was_lent(
        live_stack, stack_dir, tmp_path):
    """Two servers of one agent, the first stopped first: the second's Ctrl-C ended in
    AGENT_UNAVAILABLE ("revision ... was not made current") and exit 2, the agent at a
    dead URL; serving it again lent that dead URL and failed the same way at each Ctrl-C,
    leaving a revision behind each time."""
    agent_id, first, second = lender_dirs(tmp_path)
    first_port = free_port()
    first_serving, first_url = serving(stack_dir, first, f"Registered {agent_id}",
                                       port=first_port)
    first_serving.__enter__()
    lending, second_url = serving(stack_dir, second, f"Updated {agent_id}")
    with lending as lines:
        first_serving.__exit__(None, None, None)
    assert lines[-1] == f"{agent_id} stays at {second_url} (stopped now): its previous " \
        f"server {first_url} does not answer; serve it again with `codeshot serve DIR " \
        f"--register --port {first_port}`\n"
    assert revisions(live_stack, agent_id) == [(False, first_url), (True, second_url)]

    for _ in range(2):  # the agent's server did not answer: registered here, no lending
        again, url = serving(stack_dir, first, f"Updated {agent_id}")
        stopped = revisions(live_stack, agent_id)[-1][1]
        with again as lines:
            assert f"Updated {agent_id} at {url} (agent.yaml and its handshake read; its " \
                f"previous server {stopped} does not answer): it stays registered there " \
                "after Ctrl-C, answering only while served\n" in lines
            assert ask(live_stack, agent_id, "Shout hello") == "HELLO!"
        assert lines[-1] == "Stopping (SIGTERM) ...\n"
        assert revisions(live_stack, agent_id) == [(False, first_url), (True, url)]
        assert gql(live_stack, DESCRIBED, id=agent_id)["agentById"]["name"] == "Shouter"


SWITCH = "mutation ($h: String!, $r: ID!) { updateAgent(agentData: {handle: $h, " \
    "currentRevisionId: $r}) { agent { agentId } } }"
EDIT = "mutation ($h: String!, $d: String) { updateAgent(agentData: {handle: $h, " \
    "description: $d}) { agent { agentId } } }"
RESTORED = "description and sample queries\n"


def test_an_edit_made_while_lent_is_kept_at_ctrl_c(live_stack, stack_dir, tmp_path):
    """The Ctrl-C set back the name, description, sample queries... as they were before
    the lending: the owner's edit made meanwhile was lost."""
    agent_id, first, second = lender_dirs(tmp_path)
    first_serving, first_url = serving(stack_dir, first, f"Registered {agent_id}")
    with first_serving:
        lending, _ = serving(stack_dir, second, f"Updated {agent_id}")
        with lending as lines:
            gql(live_stack, EDIT, h=agent_id.split("/")[1], d="Edited while lent")
        assert lines[-1] == f"Restored {agent_id} at {first_url}; changed meanwhile, not " \
            "restored: description\n"
        described = gql(live_stack, DESCRIBED, id=agent_id)["agentById"]
        assert (described["name"], described["description"]) == ("Shouter",
                                                                  "Edited while lent")
        assert revisions(live_stack, agent_id) == [(True, first_url)]


def stopped_after_registering(stack_dir: Path, agent: Path, agent_id: str) -> tuple[int, str]:
    """``agent`` served and registered, then stopped: its port and URL, which no longer
    answer."""
    port = free_port()
    first_serving, url = serving(stack_dir, agent, f"Registered {agent_id}", port=port)
    with first_serving:
        pass
    return port, url


def test_a_server_down_at_start_is_kept_to_go_back_to(live_stack, stack_dir, tmp_path):
    """Its server did not answer when serve started (down for a moment, or its listen
    backlog full): its revision's URL was rewritten in place, gone for good; the agent
    stayed at the stopped serve's URL."""
    agent_id, first, second = lender_dirs(tmp_path)
    port, first_url = stopped_after_registering(stack_dir, first, agent_id)
    lending, second_url = serving(stack_dir, second, f"Updated {agent_id}")
    lines = lending.__enter__()
    try:
        kept = revisions(live_stack, agent_id)
        back, _ = serving(stack_dir, first, f"at {first_url} for", port=port, register=False)
        with back:  # its server is back before the Ctrl-C
            lending.__exit__(None, None, None)
            assert ask(live_stack, agent_id, "Shout hello") == "HELLO!"
    finally:
        lending.__exit__(None, None, None)
    assert f"Updated {agent_id}: served here until Ctrl-C, then again at {first_url} (it " \
        f"does not answer now) with its own name, {RESTORED}" in lines
    assert kept == [(False, first_url), (True, second_url)]
    assert lines[-1] == f"Restored {agent_id} at {first_url}, with its own name, {RESTORED}"
    assert revisions(live_stack, agent_id) == [(True, first_url)]
    assert gql(live_stack, DESCRIBED, id=agent_id)["agentById"]["name"] == "Shouter"


def test_a_server_still_down_at_ctrl_c_is_kept_and_no_revision_piles_up(
        live_stack, stack_dir, tmp_path):
    """Its URL was gone from the revisions at the start already; now the stopped serve's
    revision is left current, kept in the history with the server's, and the next serve
    takes it over rather than making one more."""
    agent_id, first, second = lender_dirs(tmp_path)
    port, first_url = stopped_after_registering(stack_dir, first, agent_id)
    lending, second_url = serving(stack_dir, second, f"Updated {agent_id}")
    with lending as lines:
        pass
    assert lines[-1] == f"{agent_id} stays at {second_url} (stopped now): its previous " \
        f"server {first_url} does not answer; serve it again with `codeshot serve DIR " \
        f"--register --port {port}`\n"
    assert revisions(live_stack, agent_id) == [(False, first_url), (True, second_url)]
    again, url = serving(stack_dir, second, f"Updated {agent_id}")
    with again:
        pass
    assert revisions(live_stack, agent_id) == [(False, first_url), (True, url)]


@pytest.mark.parametrize("first_stopped", ["lower", "upper", "lower killed"])
def test_serves_stacked_on_one_agent_go_home_whatever_the_stop_order(
        live_stack, stack_dir, tmp_path, first_stopped):
    """A serve lent the agent another serve had lent. Stopped in start order, the lower
    one left its revision behind and the upper one left the agent at its stopped URL
    with a hint, not back at its home (the lower's revision did not answer); so did a
    lower one killed with SIGKILL."""
    agent_id, first, second = lender_dirs(tmp_path)
    first_serving, first_url = serving(stack_dir, first, f"Registered {agent_id}")
    with first_serving:
        own = gql(live_stack, DESCRIBED, id=agent_id)["agentById"]
        lower, lower_url = serving(
            stack_dir, second, f"Updated {agent_id}",
            stop=(signal.SIGKILL,) if first_stopped == "lower killed" else (signal.SIGTERM,))
        lower_lines = lower.__enter__()
        try:
            upper, upper_url = serving(stack_dir, first, f"Updated {agent_id}")
            with upper as upper_lines:
                if first_stopped != "upper":
                    lower.__exit__(None, None, None)
                    assert ask(live_stack, agent_id, "Shout hello") == "HELLO!"
        finally:
            lower.__exit__(None, None, None)
        if first_stopped == "lower":
            assert lower_lines[-1] == f"{agent_id} was lent on to {upper_url} meanwhile by " \
                f"another serve: it goes back to {first_url} when that one stops; its " \
                f"revision at {lower_url} deleted\n"
        elif first_stopped == "upper":
            assert upper_lines[-1] == f"Restored {agent_id} at {lower_url}, with its own " \
                f"name, {RESTORED}"
        last = lower_lines if first_stopped == "upper" else upper_lines
        assert last[-1] == f"Restored {agent_id} at {first_url}, with its own name, {RESTORED}"
        assert revisions(live_stack, agent_id) == [(True, first_url)]
        assert gql(live_stack, DESCRIBED, id=agent_id)["agentById"] == own
        assert ask(live_stack, agent_id, "Shout hello") == "HELLO!"
    assert not records_of(stack_dir, agent_id)


def test_stacked_serves_the_upper_killed_the_lower_one_takes_it_home(live_stack, stack_dir,
                                                                      tmp_path):
    """The upper of two stacked serves SIGKILLed: the lower one's Ctrl-C said the agent
    "goes back to <home> when that one stops" (it had stopped) and left it at the dead
    upper URL."""
    agent_id, first, second = lender_dirs(tmp_path)
    home, first_url = serving(stack_dir, first, f"Registered {agent_id}")
    with home:
        own = gql(live_stack, DESCRIBED, id=agent_id)["agentById"]
        lower, _ = serving(stack_dir, second, f"Updated {agent_id}")
        with lower as lower_lines:
            upper, _ = serving(stack_dir, first, f"Updated {agent_id}",
                               stop=(signal.SIGKILL,))
            with upper:
                pass
        assert lower_lines[-1] == f"Restored {agent_id} at {first_url}, with its own name, " \
            f"{RESTORED}"
        assert revisions(live_stack, agent_id) == [(True, first_url)]
        assert gql(live_stack, DESCRIBED, id=agent_id)["agentById"] == own
        assert ask(live_stack, agent_id, "Shout hello") == "HELLO!"
    assert not records_of(stack_dir, agent_id)


def test_three_stacked_the_middle_killed_the_top_goes_back_to_the_bottom_one(
        live_stack, stack_dir, tmp_path):
    """Three stacked serves, the middle one SIGKILLed: the top one's Ctrl-C took the agent
    home past the bottom one, still serving it; that one's Ctrl-C then left its revision
    behind ("switched to <home> meanwhile ... kept")."""
    agent_id, first, second = lender_dirs(tmp_path)
    home, first_url = serving(stack_dir, first, f"Registered {agent_id}")
    with home:
        own = gql(live_stack, DESCRIBED, id=agent_id)["agentById"]
        bottom, bottom_url = serving(stack_dir, second, f"Updated {agent_id}")
        with bottom as bottom_lines:
            lent = gql(live_stack, DESCRIBED, id=agent_id)["agentById"]
            middle, _ = serving(stack_dir, first, f"Updated {agent_id}",
                                stop=(signal.SIGKILL,))
            with middle:
                top, _ = serving(stack_dir, second, f"Updated {agent_id}")
                top_lines = top.__enter__()
            top.__exit__(None, None, None)
            assert top_lines[-1] == f"Restored {agent_id} at {bottom_url}, with its own " \
                f"name, {RESTORED}"
            assert revisions(live_stack, agent_id) == [(False, first_url), (True, bottom_url)]
            assert gql(live_stack, DESCRIBED, id=agent_id)["agentById"] == lent
        assert bottom_lines[-1] == f"Restored {agent_id} at {first_url}, with its own name, " \
            f"{RESTORED}"
        assert revisions(live_stack, agent_id) == [(True, first_url)]
        assert gql(live_stack, DESCRIBED, id=agent_id)["agentById"] == own
    assert not records_of(stack_dir, agent_id)


def three_stacked_top_killed(live_stack, stack_dir: Path, tmp_path: Path, served: list):
    """An agent served at its home, lent by a bottom serve, on by a middle one (both
    entered, added to ``served``: the bottom one first) and on by a top one SIGKILLed: the
    agent id, the serves' lines (bottom, middle), their URLs (home, bottom, middle) and
    what described the agent while the bottom and while the middle one lent it."""
    agent_id, first, second = lender_dirs(tmp_path)
    home, first_url = serving(stack_dir, first, f"Registered {agent_id}")
    served.append(home)
    home.__enter__()
    lines, urls, described = [], [first_url], []
    for directory in (second, first):
        lending, url = serving(stack_dir, directory, f"Updated {agent_id}")
        served.append(lending)
        lines.append(lending.__enter__())
        urls.append(url)
        described.append(gql(live_stack, DESCRIBED, id=agent_id)["agentById"])
    top, _ = serving(stack_dir, second, f"Updated {agent_id}", stop=(signal.SIGKILL,))
    with top:
        pass
    return agent_id, lines, urls, described


def test_three_stacked_the_top_killed_the_middle_goes_back_to_the_bottom_one(
        live_stack, stack_dir, tmp_path, home_served):
    """Three stacked serves, the top one SIGKILLed: the middle one's Ctrl-C took the agent
    home past the bottom one, still serving it, whose Ctrl-C then left its revision behind
    ("switched to <home> meanwhile ... kept")."""
    agent_id, [bottom_lines, middle_lines], [first_url, bottom_url, _], [lent, _] = \
        three_stacked_top_killed(live_stack, stack_dir, tmp_path, home_served)
    home_served.pop().__exit__(None, None, None)  # the middle one
    assert middle_lines[-1] == f"Restored {agent_id} at {bottom_url}, with its own name, " \
        f"{RESTORED}"
    assert revisions(live_stack, agent_id) == [(False, first_url), (True, bottom_url)]
    assert gql(live_stack, DESCRIBED, id=agent_id)["agentById"] == lent
    home_served.pop().__exit__(None, None, None)  # the bottom one
    assert bottom_lines[-1] == f"Restored {agent_id} at {first_url}, with its own name, " \
        f"{RESTORED}"
    assert revisions(live_stack, agent_id) == [(True, first_url)]
    assert not records_of(stack_dir, agent_id)


def test_three_stacked_the_top_killed_the_bottom_stopping_leaves_it_to_the_middle_one(
        live_stack, stack_dir, tmp_path, home_served):
    """Three stacked serves, the top one SIGKILLed, the bottom one stopped first: it took
    the agent home, deleting the revision of the middle one, still serving it, and left
    its own behind."""
    agent_id, [bottom_lines, middle_lines], [first_url, _, middle_url], [_, lent_on] = \
        three_stacked_top_killed(live_stack, stack_dir, tmp_path, home_served)
    bottom = home_served.pop(1)
    bottom.__exit__(None, None, None)
    assert bottom_lines[-1] == f"Restored {agent_id} at {middle_url}, with its own name, " \
        f"{RESTORED}"
    assert revisions(live_stack, agent_id) == [(False, first_url), (True, middle_url)]
    assert gql(live_stack, DESCRIBED, id=agent_id)["agentById"] == lent_on
    home_served.pop().__exit__(None, None, None)  # the middle one
    assert middle_lines[-1] == f"Restored {agent_id} at {first_url}, with its own name, " \
        f"{RESTORED}"
    assert revisions(live_stack, agent_id) == [(True, first_url)]
    assert not records_of(stack_dir, agent_id)


def test_both_stacked_serves_killed_one_restore_says_it_once(live_stack, stack_dir,
                                                             tmp_path, home_served):
    """Both stacked serves SIGKILLed: `agent restore` gave the upper one back home past
    the lower one, then still said the lower one was being given back, and that its
    revision "was deleted meanwhile ...: nothing to give back"."""
    agent_id, first, second = lender_dirs(tmp_path)
    home, first_url = serving(stack_dir, first, f"Registered {agent_id}")
    home_served.append(home)
    home.__enter__()
    lower, _ = serving(stack_dir, second, f"Updated {agent_id}", stop=(signal.SIGKILL,))
    with lower:
        upper, upper_url = serving(stack_dir, first, f"Updated {agent_id}",
                                   stop=(signal.SIGKILL,))
        with upper:
            pass
    out = codeshot("agent", "restore", agent_id.split("/")[1], cwd=stack_dir)
    assert out.stdout == f"{agent_id} was left lent to {upper_url} by a serve that ended " \
        f"without giving it back: giving it back now\nRestored {agent_id} at {first_url}, " \
        f"with its own name, {RESTORED}", out
    assert revisions(live_stack, agent_id) == [(True, first_url)]
    assert not records_of(stack_dir, agent_id)


def records_of(stack_dir: Path, agent_id: str) -> list[dict]:
    """The pending-restore records serve keeps in .codeshot/lent/ for ``agent_id``."""
    found = [json.loads(path.read_text())
             for path in (stack_dir / ".codeshot" / "lent").glob("*.json")]
    return [record for record in found if record["agent_id"] == agent_id]


def killed_while_lending(live_stack, stack_dir: Path, tmp_path: Path, served: list
                         ) -> tuple[str, Path, str, str]:
    """An agent served at its home (its serve added to ``served``), lent by a serve
    killed with SIGKILL (no restore) after its owner edited its description: the agent
    id, the lender's directory, the home URL and the dead serve's."""
    agent_id, first, second = lender_dirs(tmp_path)
    home, first_url = serving(stack_dir, first, f"Registered {agent_id}")
    home.__enter__()
    served.append(home)
    lending, second_url = serving(stack_dir, second, f"Updated {agent_id}",
                                  stop=(signal.SIGKILL,))
    with lending as lines:
        gql(live_stack, EDIT, h=agent_id.split("/")[1], d="Edited while lent")
    assert lines[-1].startswith(f"Updated {agent_id}: served here until Ctrl-C"), lines
    assert revisions(live_stack, agent_id) == [(False, first_url), (True, second_url)]
    [record] = records_of(stack_dir, agent_id)
    assert (record["url"], record["previous_url"]) == (second_url, first_url)
    return agent_id, second, first_url, second_url


@pytest.fixture
def home_served() -> Iterator[list]:
    """Serves to stop when the test ends (their `with` blocks entered by hand)."""
    served: list = []
    yield served
    for each in served:
        each.__exit__(None, None, None)


def test_the_next_serve_gives_back_what_a_killed_serve_left_lent(live_stack, stack_dir,
                                                                 tmp_path, home_served):
    """After SIGKILL the agent stayed lent to the dead URL: the next serve took that
    revision over ("its previous server ... does not answer") and kept the lender's name,
    the home revision left behind."""
    agent_id, second, first_url, second_url = killed_while_lending(
        live_stack, stack_dir, tmp_path, home_served)
    again, _ = serving(stack_dir, second, f"Updated {agent_id}")
    with again as lines:
        assert ask(live_stack, agent_id, "Whisper hello") == "HELLO!"
    said = "".join(lines)
    assert f"{agent_id} was left lent to {second_url} by a serve that ended without " \
        f"giving it back: giving it back now\nRestored {agent_id} at {first_url}; " \
        "changed meanwhile, not restored: description\n" \
        f"Updated {agent_id}: served here until Ctrl-C, then again at {first_url} " in said, said
    assert lines[-1] == f"Restored {agent_id} at {first_url}, with its own name, {RESTORED}"
    assert revisions(live_stack, agent_id) == [(True, first_url)]
    described = gql(live_stack, DESCRIBED, id=agent_id)["agentById"]
    assert (described["name"], described["description"]) == ("Shouter", "Edited while lent")
    assert not records_of(stack_dir, agent_id)


ALL_REVISIONS = "query ($id: String!) { agentById(agentId: $id) { allRevisions { id " \
    "externalDeployment { url } } } }"


@pytest.mark.parametrize("switched", [False, True])
def test_agent_restore_gives_back_by_the_record_and_leaves_a_switched_agent(
        live_stack, stack_dir, tmp_path, home_served, switched):
    """The restore SIGKILL cut short, asked for: by the same rules as a Ctrl-C's."""
    agent_id, _, first_url, second_url = killed_while_lending(live_stack, stack_dir, tmp_path,
                                                              home_served)
    handle = agent_id.split("/")[1]
    if switched:  # the owner made the home revision current again by hand
        [home] = [r["id"] for r in gql(live_stack, ALL_REVISIONS, id=agent_id)["agentById"][
            "allRevisions"] if r["externalDeployment"]["url"] == first_url]
        gql(live_stack, SWITCH, h=handle, r=home)
    out = codeshot("agent", "restore", handle, cwd=stack_dir)
    assert out.returncode == 0, out.stderr
    then = f"{agent_id} was left lent to {second_url} by a serve that ended without " \
        "giving it back: giving it back now\n"
    if switched:
        assert out.stdout == f"{then}{agent_id} was switched to {first_url} meanwhile " \
            f"(another serve, or its owner): left there, its revision at {second_url} kept\n"
        assert sorted(revisions(live_stack, agent_id)) == [(False, second_url),
                                                           (True, first_url)]
        assert gql(live_stack, DESCRIBED, id=agent_id)["agentById"]["name"] == "Whisperer"
    else:
        assert out.stdout == f"{then}Restored {agent_id} at {first_url}; changed meanwhile, " \
            "not restored: description\n"
        assert revisions(live_stack, agent_id) == [(True, first_url)]
        assert gql(live_stack, DESCRIBED, id=agent_id)["agentById"]["name"] == "Shouter"
    assert not records_of(stack_dir, agent_id)
    again = codeshot("agent", "restore", handle, cwd=stack_dir)
    assert again.returncode == 0 and again.stdout.startswith(
        f"Nothing to restore: no serve left {agent_id} lent "
        f"({stack_dir.resolve() / '.codeshot' / 'lent'} names none"), again


def cut_short(live_stack, stack_dir: Path, tmp_path: Path, served: list):
    """A lending (by a client, its server run without --register) whose give_back lost
    the connection right after its switch home; the lender's server then stopped: the
    agent id, the client's target and records, the lending and the home URL."""
    from codeshot.client import DELETE_REVISION, PlatformClient, Target, agent_fields
    from codeshot.errors import Unavailable
    from codeshot.lending import LentRecords
    from codeshot.sdk.project import read_config

    agent_id, first, second = lender_dirs(tmp_path)
    home, first_url = serving(stack_dir, first, f"Registered {agent_id}")
    served.append(home)
    home.__enter__()
    lender, second_url = serving(stack_dir, second, "Serving ", register=False)
    lender.__enter__()
    target = Target(live_stack["api_url"], live_stack["api_key"], "the test")
    records = LentRecords(target.api_url, tmp_path / "lent")
    lent = PlatformClient(target, records).serve_here(
        agent_fields(read_config(second), second_url)).lent
    assert lent is not None and records.of(agent_id) == [lent]

    class LostAfterTheSwitch(PlatformClient):
        def call(self, query: str, variables: dict | None = None) -> dict:
            if query == DELETE_REVISION:
                raise Unavailable("the connection was lost")
            return super().call(query, variables)

    with pytest.raises(Unavailable):
        LostAfterTheSwitch(target, records).give_back(lent)
    lender.__exit__(None, None, None)
    assert sorted(revisions(live_stack, agent_id)) == [(False, second_url), (True, first_url)]
    return agent_id, target, records, lent, first_url


def test_a_restore_cut_short_after_its_switch_is_finished_not_taken_for_a_switch(
        live_stack, stack_dir, tmp_path, home_served):
    """The connection lost (or a third Ctrl-C) once the previous revision was current
    again: the restore finished from the record took that for a switch made meanwhile,
    leaving the lender's revision, name and description."""
    from codeshot.client import GivenBack, PlatformClient

    agent_id, target, records, lent, first_url = cut_short(live_stack, stack_dir, tmp_path,
                                                           home_served)
    [(finished, given)] = PlatformClient(target, records).finish_restores(agent_id)
    assert (finished.revision_id, given) == (lent.revision_id,
                                             GivenBack(True, back_to=first_url))
    assert revisions(live_stack, agent_id) == [(True, first_url)]
    assert gql(live_stack, DESCRIBED, id=agent_id)["agentById"]["name"] == "Shouter"
    assert records.of(agent_id) == []


def test_finishing_a_cut_short_restore_keeps_what_the_owner_changed_since(
        live_stack, stack_dir, tmp_path, home_served):
    """The owner edited the agent after the cut-short restore's switch home (seeing the
    lender's description there): finishing it set the description kept before the
    lending over that edit (what changed was judged at the switch only)."""
    from codeshot.client import GivenBack, PlatformClient

    agent_id, target, records, _, first_url = cut_short(live_stack, stack_dir, tmp_path,
                                                        home_served)
    gql(live_stack, EDIT, h=agent_id.split("/")[1], d="Edited after the switch")
    [(_, given)] = PlatformClient(target, records).finish_restores(agent_id)
    assert given == GivenBack(True, ("description",), back_to=first_url)
    described = gql(live_stack, DESCRIBED, id=agent_id)["agentById"]
    assert (described["name"], described["description"]) == ("Shouter",
                                                              "Edited after the switch")


def test_two_finishers_of_one_record_both_end_well(live_stack, stack_dir, tmp_path,
                                                   home_served):
    """Two processes finished one record at once (`agent restore` while a serve of the
    agent started): the second's delete of the revision the first deleted answered
    NOT_FOUND, and it ended with that error (a serve then never served)."""
    from codeshot.client import SET_CURRENT, GivenBack, PlatformClient, Target, agent_fields
    from codeshot.lending import LentRecords
    from codeshot.sdk.project import read_config

    agent_id, first, second = lender_dirs(tmp_path)
    home, first_url = serving(stack_dir, first, f"Registered {agent_id}")
    home_served.append(home)
    home.__enter__()
    lender, second_url = serving(stack_dir, second, "Serving ", register=False)
    lender.__enter__()
    target = Target(live_stack["api_url"], live_stack["api_key"], "the test")
    records = LentRecords(target.api_url, tmp_path / "lent")
    assert PlatformClient(target, records).serve_here(
        agent_fields(read_config(second), second_url)).lent is not None
    lender.__exit__(None, None, None)  # killed: its URL does not answer
    other: list = []

    class Racing(PlatformClient):
        def call(self, query: str, variables: dict | None = None) -> dict:
            if query == SET_CURRENT and not other:  # the other runs to its end meanwhile
                other.extend(PlatformClient(target, records).finish_restores(agent_id))
            return super().call(query, variables)

    [(_, given)] = Racing(target, records).finish_restores(agent_id)
    assert [given, other[0][1]] == [GivenBack(True, back_to=first_url)] * 2
    assert revisions(live_stack, agent_id) == [(True, first_url)]
    assert gql(live_stack, DESCRIBED, id=agent_id)["agentById"]["name"] == "Shouter"
    assert records.of(agent_id) == []


DELETE_AGENT = "mutation ($h: String!) { deleteAgent(agentData: {handle: $h}) { agent { " \
    "agentId } } }"


def test_an_agent_deleted_while_lent_is_said_to_be_gone(live_stack, stack_dir, tmp_path,
                                                        home_served):
    """The owner deleted the agent while a serve lent it: its Ctrl-C said it "stays at
    <url> (stopped now): its previous revision at None was deleted meanwhile"."""
    agent_id, first, second = lender_dirs(tmp_path)
    home, _ = serving(stack_dir, first, f"Registered {agent_id}")
    home_served.append(home)
    home.__enter__()
    lending, _ = serving(stack_dir, second, f"Updated {agent_id}")
    with lending as lines:
        gql(live_stack, DELETE_AGENT, h=agent_id.split("/")[1])
    assert lines[-1] == f"{agent_id} was deleted meanwhile (or renamed): nothing to give " \
        "back\n"
    assert not records_of(stack_dir, agent_id)


def test_the_same_serve_run_again_on_the_killed_ones_port_gives_back(
        live_stack, stack_dir, tmp_path, home_served):
    """The usual recovery: the same command run again (the same port), the killed serve's
    recorded URL is this serve's own, answering: it is given back, not taken for a serve
    still running."""
    agent_id, first, second = lender_dirs(tmp_path)
    home, first_url = serving(stack_dir, first, f"Registered {agent_id}")
    home_served.append(home)
    home.__enter__()
    port = free_port()
    killed, second_url = serving(stack_dir, second, f"Updated {agent_id}", port=port,
                                 stop=(signal.SIGKILL,))
    with killed:
        pass
    again, _ = serving(stack_dir, second, f"Updated {agent_id}", port=port)
    with again as lines:
        pass
    said = "".join(lines)
    assert f"{agent_id} was left lent to {second_url} by a serve that ended without " \
        f"giving it back: giving it back now\nRestored {agent_id} at {first_url}, with its " \
        f"own name, {RESTORED}Updated {agent_id}: served here until Ctrl-C" in said, said
    assert revisions(live_stack, agent_id) == [(True, first_url)]
    assert not records_of(stack_dir, agent_id)


def test_agent_restore_leaves_a_running_serves_lending_to_it(live_stack, stack_dir, tmp_path,
                                                             home_served):
    """`agent restore` while the serve lending the agent runs: it says so, changes
    nothing; the serve gives it back at its Ctrl-C."""
    agent_id, first, second = lender_dirs(tmp_path)
    home, first_url = serving(stack_dir, first, f"Registered {agent_id}")
    home_served.append(home)
    home.__enter__()
    lending, second_url = serving(stack_dir, second, f"Updated {agent_id}")
    with lending as lines:
        out = codeshot("agent", "restore", agent_id.split("/")[1], cwd=stack_dir)
        assert (out.returncode, out.stdout) == (0, f"{agent_id} is lent to {second_url} by a "
                                                "serve still running: it gives it back when "
                                                "it stops\n"), out
        assert revisions(live_stack, agent_id) == [(False, first_url), (True, second_url)]
    assert lines[-1] == f"Restored {agent_id} at {first_url}, with its own name, {RESTORED}"
    assert revisions(live_stack, agent_id) == [(True, first_url)]


def test_agent_restore_tells_of_a_record_it_cannot_read(stack_dir, tmp_path):
    """A record cut short by a power cut was skipped silently: "Nothing to restore", the
    file right there."""
    handle = f"lender{uuid.uuid4().hex[:6]}"
    cut = stack_dir / ".codeshot" / "lent" / f"{handle}.json"
    cut.parent.mkdir(parents=True, exist_ok=True)
    cut.write_text('{"api_url": "http://127.0.0.1:1", "agent_id": "local/')
    try:
        out = codeshot("agent", "restore", handle, cwd=stack_dir)
    finally:
        cut.unlink()
    assert out.returncode == 0 and out.stdout.startswith("Nothing to restore"), out
    assert out.stderr.startswith("codeshot: a lending record that cannot be read is left as "
                                 f"it is: {cut.resolve()} (Unterminated string"), out


def test_agent_restore_while_home_is_down_keeps_the_record_for_a_retry(
        live_stack, stack_dir, tmp_path):
    """The killed serve's home did not answer when `agent restore` ran (its server not
    started yet): the record was dropped all the same, exit 0, so once home answered
    there was "Nothing to restore", the agent left at the dead URL."""
    served: list = []
    try:
        agent_id, _, first_url, second_url = killed_while_lending(
            live_stack, stack_dir, tmp_path, served)
        served.pop().__exit__(None, None, None)  # the home server stops
        handle = agent_id.split("/")[1]
        out = codeshot("agent", "restore", handle, cwd=stack_dir)
        assert (out.returncode, out.stdout.splitlines()[-1], out.stderr) == (
            2, f"{agent_id} stays lent to {second_url}: its previous server {first_url} does "
            "not answer (its record is kept)",
            f"codeshot: error: {agent_id} is still lent: start its server at {first_url}, then "
            f"run `codeshot agent restore {handle}` again (AGENT_UNAVAILABLE)\n"), out
        assert revisions(live_stack, agent_id) == [(False, first_url), (True, second_url)]
        home, _ = serving(stack_dir, tmp_path / handle, "Serving ", register=False,
                          port=int(first_url.rsplit(":", 1)[1]))
        with home:
            again = codeshot("agent", "restore", handle, cwd=stack_dir)
            assert again.returncode == 0, again
            assert again.stdout.endswith(f"Restored {agent_id} at {first_url}; changed "
                                         "meanwhile, not restored: description\n"), again
            assert revisions(live_stack, agent_id) == [(True, first_url)]
        assert not records_of(stack_dir, agent_id)
    finally:
        for each in served:
            each.__exit__(None, None, None)


def elsewhere_env(live_stack) -> dict[str, str]:
    """A serve run outside the stack's directory: the platform named by the environment."""
    return {**os.environ, "PYTHONPATH": str(ROOT), "CODESHOT_API_URL": live_stack["api_url"],
            "CODESHOT_API_KEY": live_stack["api_key"]}


@pytest.mark.parametrize("taker_stopped", [False, True])
def test_a_killed_serves_revision_another_serve_took_over_is_left_to_it_while_served(
        live_stack, stack_dir, tmp_path, home_served, taker_stopped):
    """A serve from another directory took the killed serve's revision over (moved it to
    its own URL): `agent restore` by the killed one's record switched the agent home and
    deleted that revision while the other serve still served it; once that serve stopped,
    it said "taken over ...: left to it" and dropped the record, the agent stranded at a
    dead URL."""
    agent_id, second, first_url, second_url = killed_while_lending(
        live_stack, stack_dir, tmp_path, home_served)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    port = free_port()
    other_url = f"http://127.0.0.1:{port}"
    restore = ["agent", "restore", agent_id.split("/")[1]]
    with running([sys.executable, "-m", "codeshot.cli", "serve", str(second), "--port",
                  str(port), "--register"], elsewhere, elsewhere_env(live_stack),
                 f"Updated {agent_id} at {other_url}"):
        if not taker_stopped:
            out = codeshot(*restore, cwd=stack_dir)
            assert out.stdout.endswith(f"{agent_id}'s revision at {second_url} was taken "
                                       f"over meanwhile by a serve at {other_url}: left to "
                                       "it\n"), out
            assert revisions(live_stack, agent_id) == [(False, first_url), (True, other_url)]
            assert ask(live_stack, agent_id, "Whisper hello") == "HELLO!"
    if taker_stopped:
        out = codeshot(*restore, cwd=stack_dir)
        assert out.stdout.endswith(f"Restored {agent_id} at {first_url}, with its own name, "
                                   f"{RESTORED}"), out
        assert revisions(live_stack, agent_id) == [(True, first_url)]
        assert ask(live_stack, agent_id, "Shout hello") == "HELLO!"
    assert not records_of(stack_dir, agent_id)


def test_serve_that_cannot_keep_its_record_lends_nothing(live_stack, stack_dir, tmp_path,
                                                         home_served):
    """Where .codeshot/lent/ cannot be written (a read-only checkout; here .codeshot/lent a
    file): serve lent the agent, then died with a traceback writing its record, leaving
    the agent at its dead URL with no record to give it back."""
    agent_id, first, second = lender_dirs(tmp_path)
    home, first_url = serving(stack_dir, first, f"Registered {agent_id}")
    home_served.append(home)
    home.__enter__()
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / ".codeshot").mkdir(parents=True)
    (elsewhere / ".codeshot" / "lent").write_text("not a directory")
    out = subprocess.run([sys.executable, "-m", "codeshot.cli", "serve", str(second),
                          "--port", str(free_port()), "--register"], cwd=elsewhere,
                         env=elsewhere_env(live_stack), capture_output=True, text=True,
                         timeout=120, check=False)
    assert (out.returncode, out.stderr.splitlines()[-1]) == (2, (
        f"codeshot: error: cannot keep the record of lending {agent_id} in "
        f"{elsewhere.resolve() / '.codeshot' / 'lent'} (File exists): nothing was lent; make "
        "that directory writable, or serve without --register (INVALID_INPUT)")), out
    assert revisions(live_stack, agent_id) == [(True, first_url)]


@pytest.mark.parametrize("home_down", [False, True])
def test_a_record_that_cannot_be_written_once_lent_gives_the_agent_back(
        live_stack, stack_dir, tmp_path, home_served, home_down):
    """The record written after the agent was lent failed (a full disk): the agent was
    left lent with no record to give it back; one that could not be given back either
    (its server down) was said to be "given back"."""
    from codeshot.client import PlatformClient, Target, agent_fields
    from codeshot.lending import LentRecords
    from codeshot.sdk.project import read_config

    agent_id, first, second = lender_dirs(tmp_path)
    if home_down:
        _, first_url = stopped_after_registering(stack_dir, first, agent_id)
    else:
        home, first_url = serving(stack_dir, first, f"Registered {agent_id}")
        home_served.append(home)
        home.__enter__()
    lender, second_url = serving(stack_dir, second, "Serving ", register=False)
    home_served.append(lender)
    lender.__enter__()

    class DiskFull(LentRecords):
        def keep(self, lent) -> None:
            raise OSError(28, "No space left on device")

    target = Target(live_stack["api_url"], live_stack["api_key"], "the test")
    done = f"it stays lent to {second_url}, not given back (its previous server " \
        f"{first_url} does not answer)" if home_down else "given back"
    with pytest.raises(InvalidInput, match=re.escape(f"(No space left on device): {done}; ")):
        PlatformClient(target, DiskFull(target.api_url, tmp_path / "lent")).serve_here(
            agent_fields(read_config(second), second_url))
    if home_down:
        assert revisions(live_stack, agent_id) == [(False, first_url), (True, second_url)]
    else:
        assert revisions(live_stack, agent_id) == [(True, first_url)]
        assert gql(live_stack, DESCRIBED, id=agent_id)["agentById"]["name"] == "Shouter"


def test_a_second_signal_does_not_cut_the_restore_short(live_stack, stack_dir, tmp_path):
    """Ctrl-C twice (or SIGINT and SIGTERM at once) ended serve in the middle of giving
    the lent agent back, exit 130, nothing said: the agent at the stopped URL or with
    the lender's name."""
    agent_id, first, second = lender_dirs(tmp_path)
    first_serving, first_url = serving(stack_dir, first, f"Registered {agent_id}")
    with first_serving:
        lending, second_url = serving(stack_dir, second, f"Updated {agent_id}",
                                      stop=(signal.SIGINT, signal.SIGTERM))
        with lending as lines:
            pass
        assert f"Restoring {agent_id} ... (Ctrl-C again leaves it lent at {second_url})\n" \
            in lines
        assert lines[-1] == f"Restored {agent_id} at {first_url}, with its own name, {RESTORED}"
        assert revisions(live_stack, agent_id) == [(True, first_url)]
        assert gql(live_stack, DESCRIBED, id=agent_id)["agentById"]["name"] == "Shouter"


SLOW = '''
import time

import codeshot.sdk as fixieai

agent = fixieai.CodeShotAgent("I am an agent that waits.", """
Q: Wait a bit
Ask Func[wait]: 60
Func[wait] says: waited
A: I waited.
""")


@agent.register_func
def wait(query: fixieai.Message) -> str:
    print("The Func is running", flush=True)
    time.sleep(float(query.text))
    return "waited"
'''


def test_ctrl_c_during_a_func_tells_the_chat_the_agent_stopped(live_stack, stack_dir,
                                                               tmp_path):
    """uvicorn cancelled the Func's request 2 s after the Ctrl-C, printed some 60 lines
    of traceback and answered 500: the chat read AGENT_ERROR (the agent's own failure)
    where the agent had stopped."""
    handle = f"slow{uuid.uuid4().hex[:6]}"
    directory = agent_dir(tmp_path, handle)
    (directory / "main.py").write_text(SLOW)
    chat: list[subprocess.CompletedProcess] = []
    asking = threading.Thread(target=lambda: chat.append(codeshot(
        "chat", "--agent", f"local/{handle}", cwd=stack_dir, input="Wait a bit\n")))
    served, url = serving(stack_dir, directory, f"Registered local/{handle}")
    with served as lines:
        asking.start()
        for _ in range(300):
            if "The Func is running\n" in lines:
                break
            time.sleep(0.1)
        assert "The Func is running\n" in lines
    asking.join(timeout=60)
    assert lines[-1] == "Stopping (SIGTERM) ...\n", lines
    assert not [line for line in lines if "Error" in line or "ERROR" in line], lines
    assert "> ! AGENT_UNAVAILABLE: Sorry, I could not finish: Func[wait] failed (agent " \
        f"local/{handle}'s Func[wait] is unavailable: it answered HTTP 503: UNAVAILABLE the " \
        "server was stopped before it answered).\n" in chat[0].stdout, chat[0].stdout
    assert url not in chat[0].stdout  # the platform's address for the agent: the log's


def test_a_func_slower_than_the_call_timeout_fails_its_test_naming_the_setting(
        tmp_path, monkeypatch):
    """`codeshot agent test` waited its own 30 s whatever the setting, said "no reply
    within 30s" without naming it, then printed uvicorn's traceback of the Func it
    cancelled when the agent's server stopped."""
    directory = agent_dir(tmp_path, "slow")
    (directory / "main.py").write_text(SLOW)
    yaml = directory / "agent.yaml"
    yaml.write_text(yaml.read_text().split("tests:")[0]
                    + "tests:\n  - query: Wait a bit\n    expected: I waited\n")
    monkeypatch.setenv("CODESHOT_AGENT_CALL_TIMEOUT_SECONDS", "1")
    started = time.monotonic()
    out = codeshot("agent", "test", str(directory), cwd=tmp_path)
    assert time.monotonic() - started < 25  # a local platform starts, the Func is given 1 s
    assert out.returncode == 1 and out.stderr == "", out.stderr
    # The engine's wait for the Func or the call's own timeout, whichever ends first
    assert re.search(r"Func\[wait\] failed \((no reply|agent \S+'s Func\[wait\] did not "
                     r"answer) within 1s[^;]*; CODESHOT_AGENT_CALL_TIMEOUT_SECONDS sets how long\)\.",
                     " ".join(out.stdout.split())), out.stdout

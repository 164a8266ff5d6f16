"""The real fixieai 1.0.4 CLI and client (their own virtualenv) against the local stack, as
a Fixie user runs them: FIXIE_API_URL and FIXIE_API_KEY point them here, and no agent
named means Fixie's default agent, the planner here (fixieai posts /api/agents/None)."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import time
from pathlib import Path

ROLLED = re.compile(r"You rolled (\d+(?: \+ \d+)*)(?: = (\d+))?")


def fixie_env(live_stack, home: Path) -> dict[str, str]:
    # HOME: fixie keeps its console history and config under it.
    return {"PATH": os.environ["PATH"], "HOME": str(home),
            "FIXIE_API_URL": live_stack["api_url"], "FIXIE_API_KEY": live_stack["api_key"]}


def fixie(fixie_python: Path, env: dict[str, str], *args: str) -> str:
    out = subprocess.run([str(fixie_python.with_name("fixie")), *args], env=env,
                         capture_output=True, text=True, timeout=180, check=False)
    assert out.returncode == 0, (args, out.stdout[-2000:], out.stderr[-2000:])
    return out.stdout


def dice(answer: str, count: int, sides: int) -> None:
    """``answer`` reports ``count`` real rolls of a ``sides``-sided die and their sum."""
    match = ROLLED.search(answer)
    assert match, answer
    rolls = [int(x) for x in match.group(1).split(" + ")]
    assert len(rolls) == count and all(1 <= r <= sides for r in rolls), answer
    assert sum(rolls) == int(match.group(2) or rolls[0]), answer


def test_fixie_cli_queries_with_and_without_an_agent(live_stack, fixie_python, tmp_path):
    env = fixie_env(live_stack, tmp_path)
    assert "local" in fixie(fixie_python, env, "user")
    agents = fixie(fixie_python, env, "agent", "list")
    assert {"local/dice", "local/clock", "local/notes"} <= set(re.findall(r"local/\w+", agents))
    sessions = fixie(fixie_python, env, "session", "list").split()

    dice(fixie(fixie_python, env, "query", "Roll 2d6"), 2, 6)  # no agent: the planner
    dice(fixie(fixie_python, env, "query", "--agent", "local/dice", "Roll a d20"), 1, 20)
    dice(fixie(fixie_python, env, "query", "--agent", "dice", "Roll a d12"), 1, 12)  # own
    # `fixie query` deletes the session it made, unless told to keep it.
    assert fixie(fixie_python, env, "session", "list").split() == sessions
    fixie(fixie_python, env, "query", "--keep", "Roll 1d4")
    kept = set(fixie(fixie_python, env, "session", "list").split()) - set(sessions)
    assert len(kept) == 1
    # ... and `fixie session open` goes on in it, whoever answered it before.
    _, answers = converse(fixie_python, env, ["session", "open", kept.pop()], ["Roll 3d8"])
    dice(answers[0], 3, 8)


PROMPT = re.compile(re.escape(
    "fixie \N{FOX FACE}\N{HEAVY RIGHT-POINTING ANGLE QUOTATION MARK ORNAMENT}".encode()))
ANSWER = re.compile(rb"\d+\xe2\x9d\xaf ([^\r\n]*)[\r\n]")  # the answer's number, text, end


def converse(fixie_python: Path, env: dict[str, str], args: list[str], lines: list[str],
             wait: float = 60) -> tuple[str, list[str]]:
    """Drive fixie's console through a pseudo-terminal: at each prompt type a line and
    wait for its numbered answer, then Ctrl-D at the last prompt; the transcript and the
    answers to the lines typed."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: fixie, in the pty
        os.execve(str(fixie_python.with_name("fixie")), ["fixie", *args], env)  # noqa: S606
    out = b""

    def read_until(pattern: re.Pattern[bytes], start: int) -> re.Match[bytes]:
        """Read until ``pattern`` shows after ``start``."""
        nonlocal out
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if found := pattern.search(out, start):
                return found
            if select.select([fd], [], [], 0.1)[0]:
                try:
                    out += os.read(fd, 65536)
                except OSError:
                    break
        raise AssertionError(f"no {pattern!r} in {out.decode('utf-8', 'replace')}")

    answers = []
    try:
        at = read_until(PROMPT, 0).end()
        for line in lines:
            os.write(fd, line.encode() + b"\r")
            answer = read_until(ANSWER, at)
            answers.append(answer.group(1).decode())
            at = read_until(PROMPT, answer.end()).end()
        os.write(fd, b"\x04")  # Ctrl-D: fixie prints "Aborted!" and exits
        read_until(re.compile(b"Aborted!"), at)
    finally:
        _, status = os.waitpid(pid, 0)
        os.close(fd)
    text = out.decode("utf-8", "replace")
    assert os.waitstatus_to_exitcode(status) == 1, text
    return text, answers


def test_fixie_console_answers_each_line_in_one_session(live_stack, fixie_python, tmp_path):
    env = fixie_env(live_stack, tmp_path)
    transcript, answers = converse(fixie_python, env, ["console"], ["Roll 2d6", "Roll a d20"])
    assert "Welcome to Fixie!" in transcript
    dice(answers[0], 2, 6)
    dice(answers[1], 1, 20)
    # `fixie session new --agent` opens the same console on a new session with that agent.
    sessions = fixie(fixie_python, env, "session", "list").split()
    _, answers = converse(fixie_python, env, ["session", "new", "--agent", "local/dice"],
                          ["Roll 4d4"])
    dice(answers[0], 4, 4)
    assert len(set(fixie(fixie_python, env, "session", "list").split()) - set(sessions)) == 1


CLIENT = '''
import json
import fixieai

first = fixieai.query("Roll 2d6")  # the default session: the planner
session = fixieai.FixieClient().create_session()
print(json.dumps({
    "first": first,
    "agents": sorted(fixieai.get_agents()),
    "embeds": fixieai.get_embeds(),
    "second": session.query("Roll a d20"),
    "messages": len(session.get_messages()),
}))
'''


def test_fixieai_top_level_calls_and_a_new_session(live_stack, fixie_python, tmp_path):
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    out = subprocess.run([str(fixie_python), str(script)], env=fixie_env(live_stack, tmp_path),
                         capture_output=True, text=True, timeout=180, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    dice(result["first"], 2, 6)
    dice(result["second"], 1, 20)
    assert {"local/dice", "local/clock", "local/notes"} <= set(result["agents"])
    assert result["embeds"] == []  # the default session holds none
    assert result["messages"] >= 2  # the query and its answer, at least


def test_fixie_deploy_is_refused_with_the_ways_that_work(live_stack, fixie_python, tmp_path):
    directory = tmp_path / "coin"
    directory.mkdir()
    (directory / "main.py").write_text("import fixieai\n\nagent = fixieai.CodeShotAgent("
                                       "'I flip coins.', ['Q: Flip\\nA: heads'])\n")
    (directory / "agent.yaml").write_text("handle: coin\nname: Coin\nentry_point: main:agent\n")
    env = fixie_env(live_stack, tmp_path)
    out = subprocess.run([str(fixie_python.with_name("fixie")), "deploy", "--no-validate"],
                         cwd=directory, env=env, capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode != 0
    # What works instead comes first, not createAgent's arguments fixie deploy never sent.
    assert "{'message': 'an agent is registered where it answers: createAgent without a URL " \
        "(what `fixie deploy` and `fixie serve` send for a new agent) asks for its code to " \
        "be built and hosted; codeshot does not build code on request: use `codeshot serve " \
        "DIR --register` locally" in out.stderr and "INVALID_INPUT" in out.stderr
    assert "local/coin" not in fixie(fixie_python, env, "agent", "list")  # nothing half-made

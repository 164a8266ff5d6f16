"""`codeshot chat` against the running local stack."""

import io
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from codeshot.chat import REPLAY_NOTICE, ChatClient, run_chat
from codeshot.errors import CodeshotError


def chatted(live_stack, lines: str, agent: str | None = None, trace: bool = True) -> str:
    """What `codeshot chat` printed for ``lines`` typed into it (it must end cleanly)."""
    client = ChatClient(live_stack["graphql_url"], live_stack["api_key"])
    out = io.StringIO()
    assert run_chat(client, agent, show_trace=trace, stdout=out,
                    stdin=io.StringIO(lines)) == 0, out.getvalue()
    return out.getvalue()


def test_chat_answers_roll_a_d20_and_shows_the_trace(live_stack):
    state = live_stack
    client = ChatClient(state["graphql_url"], state["api_key"])
    out = io.StringIO()
    code = run_chat(client, None, show_trace=True,
                    stdin=io.StringIO("Roll a d20\n\nWhat time is it?\n"), stdout=out)
    text = out.getvalue()
    assert code == 0
    assert "with the planner" in text
    assert text.count(REPLAY_NOTICE) == 1  # the local stack runs the offline replay
    assert "[func_call] local/dice: Ask Func[roll]: a d20" in text
    lines = text.splitlines()
    rolled = [line for line in lines if line.startswith("You rolled ")]
    assert len(rolled) == 1 and rolled[0].removeprefix("You rolled ").rstrip(".").isdigit()
    assert any(line.startswith("It is ") and "UTC" in line for line in lines)


def test_the_example_agents_answer_their_own_sample_queries(live_stack):
    """Listed on the console's Agents page, yet the dice had no example of "Throw two
    six-sided dice" and the clock answered Tokyo's time in UTC. Dice said in words went
    to the Func as said ("a twenty-sided die"): "You rolled I can't read ..."; a roll
    the Func refuses came out "You rolled I roll 1 to 100 dice ..."."""
    from datetime import datetime
    from zoneinfo import ZoneInfo

    text = chatted(live_stack, "Throw two six-sided dice\n\nWhat time is it in Tokyo?\n\n"
                   "Roll a twenty-sided die\n\nRoll a d20000\n", trace=False)
    assert re.search(r"You rolled \d \+ \d = \d+\.", text), text
    assert re.search(r"You rolled \d+\.", text) and "can't read" not in text, text
    # A roll the Func refuses in words: its words passed on, never "You rolled I roll ...".
    assert "Func[roll] returned: I roll 1 to 100 dice of 2 to 1000 sides." in text, text
    assert "You rolled I" not in text, text
    tokyo = re.search(r"It is (\d\d):\d\d in Tokyo \(Asia/Tokyo, JST\)", text)
    assert tokyo, text
    hours = {datetime.now(ZoneInfo("Asia/Tokyo")).hour, (datetime.now(ZoneInfo("Asia/Tokyo"))
                                                        .hour - 1) % 24}  # around the hour
    assert int(tokyo.group(1)) in hours


def test_chat_reports_errors_with_their_code(live_stack):
    client = ChatClient(live_stack["graphql_url"], "not-a-key")
    out = io.StringIO()
    with pytest.raises(CodeshotError) as refused:  # creating the session already fails
        run_chat(client, None, False, stdin=io.StringIO("hi\n"), stdout=out)
    assert refused.value.code == "UNAUTHENTICATED"


def test_chat_command_line(live_stack):
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-m", "codeshot.cli", "chat", "--agent", "local/dice",
         "--api-url", live_stack["api_url"], "--api-key", live_stack["api_key"]],
        input="Roll 3d8\n", capture_output=True, text=True, check=False, timeout=60,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert out.returncode == 0, out.stderr
    assert "with local/dice" in out.stdout
    assert "You rolled " in out.stdout and " = " in out.stdout


def test_ctrl_c_ends_a_chat_without_a_traceback(live_stack):
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "codeshot.cli", "chat", "--api-url", live_stack["api_url"],
         "--api-key", live_stack["api_key"]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(root)})
    assert proc.stdout is not None
    while "Ctrl-D to quit" not in proc.stdout.readline():
        assert proc.poll() is None, proc.communicate()
    time.sleep(1)  # at the prompt, reading a line
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130 and err == "", err


def test_chat_at_a_terminal_edits_the_line(live_stack):
    """At a terminal the line is read with readline: Ctrl-A goes to its start (it was
    read raw, and Ctrl-A became part of the text)."""
    import pty

    root = Path(__file__).resolve().parents[2]
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "codeshot.cli", "chat", "--agent", "local/dice",
         "--api-url", live_stack["api_url"], "--api-key", live_stack["api_key"]],
        stdin=follower, stdout=follower, stderr=follower, close_fds=True,
        env={**os.environ, "PYTHONPATH": str(root), "TERM": "xterm"})
    os.close(follower)
    seen = b""

    def read_until(marker: bytes, after: bytes = b"", timeout: float = 60) -> None:
        """Until ``marker`` is seen (after ``after``, when given)."""
        nonlocal seen
        deadline = time.monotonic() + timeout
        while after not in seen or marker not in seen[seen.index(after):]:
            assert time.monotonic() < deadline, seen
            seen += os.read(leader, 4096)

    try:
        read_until(b"> ")
        os.write(leader, b"oll 3d8\x01R\r")  # Ctrl-A, then the missing R
        # The next prompt: a Ctrl-D typed before readline reads again (the reply still
        # printing) could be lost when it switches the terminal's mode, on a busy machine.
        read_until(b"> ", after=b"You rolled ")
        os.write(leader, b"\x04")  # Ctrl-D
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
        os.close(leader)
    session = re.search(rb"Session (\S+) with", seen).group(1).decode()
    sent = httpx.post(live_stack["graphql_url"], json={
        "query": "query ($h: String!) { sessionByHandle(handle: $h) { messages { text } } }",
        "variables": {"h": session}}, headers={"Authorization": f"Bearer {live_stack['api_key']}"}
    ).json()["data"]["sessionByHandle"]["messages"][0]["text"]
    assert sent == "Roll 3d8"


def test_offline_chat_runs_both_tasks_of_x_and_y(live_stack):
    """Offline, "Roll a d20 and save it as a note" rolled, said "You rolled 8." and saved
    no note, saying nothing of it: the replay routed the whole query to the dice."""
    text = chatted(live_stack, "Roll a d20 and save it as a note\n\nList my notes\n\n"
                   "Roll a d20 and save a note\n")
    rolled = re.search(r"^You rolled (\d+)\.$", text, re.M)
    assert rolled, text
    # Both said in the answer, and the note holds the roll.
    roll = f"rolled {rolled.group(1)}"
    assert re.search(rf"^Saved note \d+: (You )?{roll}\.?$", text, re.M), text  # not "given ..."
    assert re.search(rf"{roll}\b", text[text.index("Your notes:"):]), text
    # A note of nothing said: the replay saves none (not its example's "buy milk"), and
    # the answer says so after the roll.
    assert "Saved note" not in text[text.index("Your notes:"):], text
    assert re.search(r"^You rolled \d+\.\nNo example of this agent is close",
                     text[text.index("Your notes:"):], re.M), text


def test_the_trace_says_why_the_replay_had_no_example(live_stack):
    """`chat --trace` showed only "No example ... is close", not the nearest few-shot and
    its overlap that `codeshot agent test` prints."""
    text = chatted(live_stack, "What is the capital of France?\n", agent="local/dice")
    assert re.search(r"\[thought\] local/dice: No replay: the nearest few-shot is \".+\": "
                     r"word overlap 0\.\d\d, under the replay's 0\.40", text), text
    assert "No example of this agent is close to your question" in text, text


def test_an_and_inside_a_notes_text_is_the_notes_not_a_second_task(live_stack):
    """Offline "Save a note: call mom and check the time" saved "call mom" and asked the
    clock for the time: a bare "and" after a colon is the payload's."""
    text = chatted(live_stack, "Save a note: call mom and check the time\n")
    assert re.search(r"^Saved note \d+: call mom and check the time$", text, re.M), text
    assert "Ask Agent[local/clock]" not in text, text


def test_dice_said_in_words_roll_as_many_as_said(live_stack):
    """Offline, "Roll two d20" rolled one d20 and "Throw a six-sided die" two dice: the
    replay dropped count words ("a" was a function word), the dice example asked "2d6"
    for "two six-sided dice", and its Func read "two d20" as one die."""
    said = {"Roll two d20": ("two d20", 2, 20), "Throw a six-sided die": ("a six-sided die", 1, 6),
            "roll 3d6": ("3d6", 3, 6), "roll a d20": ("a d20", 1, 20),
            "roll me a twenty-sided die": ("a twenty-sided die", 1, 20),
            "roll a pair of dice": ("a pair of dice", 2, 6)}
    text = chatted(live_stack, "\n\n".join(said) + "\n")  # through the planner, as `make run`
    calls = re.findall(r"\[func_call\] local/dice: Ask Func\[roll\]: (.+)", text)
    assert calls == [ask for ask, _, _ in said.values()], text
    rolls = [[int(n) for n in shown.split(" + ")] for shown in
             re.findall(r"^You rolled (\d+(?: \+ \d+)*)(?: = \d+)?\.$", text, re.M)]
    assert [len(dice) for dice in rolls] == [count for _, count, _ in said.values()], text
    assert all(1 <= n <= sides for dice, (_, _, sides) in zip(rolls, said.values(), strict=True)
               for n in dice), text

"""Asking the user: the run pauses with a JSON state; a new executor resumes it."""

from __future__ import annotations

import json
import random

import pytest

from codeshot.engine.builtin import code_shot_components
from codeshot.engine.components import CommandResult
from codeshot.engine.executor import Executor, Status, TraceStep
from codeshot.errors import InvalidInput
from codeshot.llm.fewshot import FewShotLLM
from codeshot.models import MessageType

BOOKING_PROMPT = "I book restaurant tables."
BOOKING_SHOTS = [
    (
        "Q: Book a table for dinner\n"
        "Ask User: For how many people?\n"
        "User says: 4\n"
        "Ask Func[book]: 4\n"
        "Func[book] says: confirmation R-1001\n"
        "A: Your table for 4 is booked, confirmation R-1001."
    )
]


class Bookings:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, name: str, people: str) -> str:
        confirmation = f"R-{random.randint(2000, 9999)}"
        self.calls.append((people, confirmation))
        return f"confirmation {confirmation}"


def test_ask_user_pauses_and_a_new_executor_resumes(trace: list[TraceStep]) -> None:
    bookings = Bookings()
    first = Executor(
        code_shot_components(BOOKING_PROMPT, BOOKING_SHOTS, bookings), FewShotLLM(),
        trace=trace.append,
    )  # fmt: skip
    paused = first.run("Book a table for dinner tonight")
    assert (paused.status, paused.text) == (Status.AWAITING_INPUT, "For how many people?")
    assert trace == [TraceStep(MessageType.AWAITING_INPUT, "For how many people?")]
    assert bookings.calls == []

    stored = json.loads(json.dumps(paused.state))  # as the runner stores it
    second = Executor(
        code_shot_components(BOOKING_PROMPT, BOOKING_SHOTS, bookings), FewShotLLM(),
        trace=trace.append,
    )  # fmt: skip
    done = second.resume(stored, "2")

    [(people, confirmation)] = bookings.calls
    assert people == "2"
    assert done.status is Status.DONE
    assert done.text == f"Your table for 2 is booked, confirmation {confirmation}."
    assert done.steps == 3 and done.state is None
    assert [t.type for t in trace] == [
        MessageType.AWAITING_INPUT,
        MessageType.FUNC_CALL,
        MessageType.RESULT,
        MessageType.RESPONSE,
    ]


def test_a_func_can_ask_for_input(scripted, trace: list[TraceStep]) -> None:
    def balance(name: str, account: str) -> CommandResult:
        if not account:
            return CommandResult("Several accounts match.", needs_input=True,
                                 question="Which account, checking or savings?")  # fmt: skip
        return CommandResult(f"{account}: $12.50")

    shots = ["Q: What is my balance?\nAsk Func[balance]: savings\nFunc[balance] says: $1\nA: $1"]
    llm = scripted("Ask Func[balance]:")
    paused = Executor(code_shot_components("I bank.", shots, balance), llm, trace=trace.append).run(
        "What is my balance?"
    )
    assert (paused.status, paused.text) == (
        Status.AWAITING_INPUT,
        "Which account, checking or savings?",
    )
    assert [(t.type, t.text) for t in trace][-2:] == [
        (MessageType.RESULT, "Several accounts match."),
        (MessageType.AWAITING_INPUT, "Which account, checking or savings?"),
    ]

    llm = scripted("Ask Func[balance]: savings", "A: Your savings hold $12.50.")
    resumed = Executor(code_shot_components("I bank.", shots, balance), llm)
    done = resumed.resume(json.loads(json.dumps(paused.state)), "savings")
    assert done.text == "Your savings hold $12.50."
    assert llm.transcript(0).endswith(
        "Q: What is my balance?\nAsk Func[balance]:\nFunc[balance] says: Several accounts match.\n"
        "Ask User: Which account, checking or savings?\nUser says: savings\n"
    )
    assert llm.transcript(1).endswith("Func[balance] says: savings: $12.50\n")


def test_a_func_that_asks_the_user_to_act_elsewhere_is_called_again(scripted, trace) -> None:
    """``repeat_on_answer`` (an OAuth authorization): the answer calls the Func again as
    first asked, and the model reads the transcript as if the call had never paused."""
    tokens: list[str] = []

    def books(name: str, text: str) -> CommandResult:
        if not tokens:
            return CommandResult("", needs_input=True, repeat_on_answer=True,
                                 question="Authorize Books here: https://books.example/o")
        return CommandResult(f"{text}: Dune, Emma")

    shots = ["Q: What is on my list?\nAsk Func[books]: all\nFunc[books] says: X\nA: X"]
    paused = Executor(code_shot_components("I read.", shots, books), scripted("Ask Func[books]: all"),
                      trace=trace.append).run("What is on my list?")
    assert (paused.status, paused.text) == (
        Status.AWAITING_INPUT, "Authorize Books here: https://books.example/o")

    tokens.append("t")  # the user authorized the agent
    llm = scripted("A: Dune, Emma.")
    done = Executor(code_shot_components("I read.", shots, books), llm,
                    trace=trace.append).resume(json.loads(json.dumps(paused.state)),
                                               "I authorized acme/books.")
    assert done.text == "Dune, Emma."
    assert llm.transcript(0).endswith(
        "Q: What is on my list?\nAsk Func[books]: all\nFunc[books] says: all: Dune, Emma\n")
    assert "authorized" not in llm.transcript(0) and "Authorize" not in llm.transcript(0)
    assert [(t.type, t.text) for t in trace] == [  # the session's trace keeps the pause
        (MessageType.FUNC_CALL, "all"), (MessageType.RESULT, ""),
        (MessageType.AWAITING_INPUT, "Authorize Books here: https://books.example/o"),
        (MessageType.FUNC_CALL, "all"), (MessageType.RESULT, "all: Dune, Emma"),
        (MessageType.RESPONSE, "Dune, Emma.")]


def test_resume_rejects_a_state_that_is_not_paused(scripted) -> None:
    agent = Executor([], scripted())
    done_state = {"version": 1, "query": "q", "transcript": [{"kind": "q", "text": "q"}],
                  "steps": 1, "input_tokens": 0, "output_tokens": 0, "embeds": {}}  # fmt: skip
    with pytest.raises(InvalidInput, match="not awaiting user input"):
        agent.resume(done_state, "yes")
    with pytest.raises(InvalidInput, match="not a paused Code Shot state"):
        agent.resume({**done_state, "version": 99}, "yes")
    with pytest.raises(InvalidInput, match="not a paused Code Shot state"):
        agent.resume({"transcript": "nonsense"}, "yes")
    paused = {**done_state, "transcript": [{"kind": "q", "text": "q"},
                                           {"kind": "ask_user", "text": "how many?"}]}
    for pending in ({"state": {}}, {"ask": {"kind": "nonsense"}, "state": {}},
                    {"ask": {"kind": "ask_agent", "text": "q", "target": "a/b"}, "state": 3}):
        with pytest.raises(InvalidInput, match="not a paused Code Shot state"):
            agent.resume({**paused, "pending": pending}, "yes")

"""The two agents and the Funcs behind the recorded model output in ``llm_transcripts/``,
and a replay of one recorded query through the engine and the ``openai`` provider."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codeshot.engine.builtin import code_shot_components
from codeshot.engine.components import Command, command
from codeshot.engine.executor import Executor, Outcome, TraceStep
from codeshot.llm.openai import OpenAILLM
from tests.openai_server import completion_payload, serving

RECORDINGS = Path(__file__).parent / "llm_transcripts"

AGENTS = {
    "dice": ("I'm an agent that rolls virtual dice!", """
        Q: Roll a d20
        Ask Func[roll]: 20 1
        Func[roll] says: 12
        A: You rolled a 12!

        Q: Roll two dice and blow on them first for good luck
        Ask Func[roll]: 6 2
        Func[roll] says: 4 3
        A: You rolled a 4 and a 3, with a total of 7.

        Q: Roll 3d8
        Ask Func[roll]: 8 3
        Func[roll] says: 5 3 8
        A: You rolled 5, 3, and 8, for a total of 16."""),
    "quote": ("I'm an agent that looks up the latest price of a stock.", """
        Q: What is the price of AMZN?
        Ask Func[quote]: AMZN
        Func[quote] says: 178.25
        A: AMZN is trading at $178.25.

        Q: How much is Tesla stock?
        Ask Func[quote]: TSLA
        Func[quote] says: 251.10
        A: TSLA is trading at $251.10.

        Q: Compare NVDA and AMD
        Ask Func[quote]: NVDA
        Func[quote] says: 120.50
        Ask Func[quote]: AMD
        Func[quote] says: 160.20
        A: NVDA is at $120.50 and AMD is at $160.20, so AMD is higher."""),
}
PRICES = {"GOOG": "171.42", "AAPL": "227.15", "MSFT": "415.60"}


@command
def roll(size: int, count: int) -> str:
    """Roll ``count`` dice of ``size`` sides. The numbers are the recordings' (their roll
    gave 4 for any first die, 4 9 for 10 2, 4 3 2 1 for 6 4)."""
    return " ".join(str((3 + 5 * i) % size + 1) for i in range(count))


@command
def quote(symbol: str) -> str:
    """The latest price of a stock symbol."""
    return PRICES.get(symbol.strip().upper(), f"unknown symbol '{symbol}'")


FUNCS: dict[str, Command] = {"roll": roll, "quote": quote}


def records(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (RECORDINGS / name).read_text().splitlines()]


def recording_names() -> list[str]:
    return sorted(p.name for p in RECORDINGS.glob("*.jsonl"))


@dataclass
class Replay:
    outcome: Outcome
    requests: list[dict[str, Any]]  # what the engine sent, in order
    func_calls: list[tuple[str, str]]  # (func, input) of every call that ran
    trace: list[TraceStep] = field(default_factory=list)


def replay(name: str, index: int, **components: Any) -> Replay:
    """Run recorded query ``index`` of recording ``name`` through the engine, the server
    answering with the recorded texts in order. A run that asks more often than the
    recording holds gets the last text again (a model that says the same again)."""
    record = records(name)[index]
    replies = record["completions"]
    endpoint = name.split(".")[-2]
    calls: list[tuple[str, str]] = []

    def respond(path: str, body: dict[str, Any]) -> tuple[int, object]:
        reply = replies[min(len(server.requests), len(replies)) - 1]
        return 200, completion_payload(path, reply["text"], reply["prompt_tokens"],
                                       reply["completion_tokens"])

    def call_func(func: str, text: str) -> str:
        result = FUNCS[func].call(text).text
        calls.append((func, text))
        return result

    prompt, shots = AGENTS[record["agent"]]
    trace: list[TraceStep] = []
    with serving(respond) as server:
        llm = OpenAILLM("recorded", server.url, endpoint=endpoint)
        executor = Executor(code_shot_components(prompt, shots, call_func, **components), llm,
                            trace=trace.append)
        outcome = executor.run(record["query"])
    return Replay(outcome, server.bodies, calls, trace)

"""The two classic Fixie Code Shot agents, end to end with the offline ``fewshot`` provider
and real Funcs."""

from __future__ import annotations

import random

import pytest

from codeshot.engine.builtin import code_shot_components
from codeshot.engine.executor import Executor, Status, TraceStep
from codeshot.engine.prompt import STOP_SEQUENCES
from codeshot.llm.fewshot import CANT_HELP, FewShotLLM
from codeshot.models import MessageType

GENRAND_PROMPT = "I am a simple agent that generates random numbers."
GENRAND_SHOTS = [
    (
        "Q: Generate a random number between 0 and 100.\n"
        "Ask Func[genrand]: 0, 100\n"
        "Func[genrand] says: 42\n"
        "A: The random number is 42."
    )
]

STOCK_PROMPT = "I am an agent that looks up stock prices."
STOCK_SHOTS = """
Q: What is the stock price for AAPL?
Ask Func[quote]: AAPL
Func[quote] says: $150.12
A: The stock price for AAPL is $150.12.

Q: Compare the prices of AAPL and MSFT
Ask Func[quote]: AAPL
Func[quote] says: $150.12
Ask Func[quote]: MSFT
Func[quote] says: $310.55
A: AAPL is at $150.12 and MSFT is at $310.55.
"""


class RecordingFuncs:
    """Real Funcs behind the injected caller, recording each call and its result."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.rng = random.Random()

    def __call__(self, name: str, text: str) -> str:
        result = getattr(self, name)(text)
        self.calls.append((name, text, result))
        return result

    def genrand(self, text: str) -> str:
        low, high = (int(part) for part in text.split(","))
        return str(self.rng.randint(low, high))

    def quote(self, symbol: str) -> str:
        return f"${self.rng.uniform(10, 999):.2f}"


@pytest.fixture
def funcs() -> RecordingFuncs:
    return RecordingFuncs()


def test_genrand_answers_with_the_funcs_number(
    funcs: RecordingFuncs, trace: list[TraceStep]
) -> None:
    agent = Executor(
        code_shot_components(GENRAND_PROMPT, GENRAND_SHOTS, funcs), FewShotLLM(), trace=trace.append
    )
    outcome = agent.run("Generate a random number between 0 and 19.")

    [(name, args, number)] = funcs.calls
    assert (name, args) == ("genrand", "0, 19")
    assert 0 <= int(number) <= 19
    assert outcome.status is Status.DONE
    assert outcome.text == f"The random number is {number}."
    assert [(t.type, t.text, t.target) for t in trace] == [
        (MessageType.FUNC_CALL, "0, 19", "Func[genrand]"),
        (MessageType.RESULT, number, "Func[genrand]"),
        (MessageType.RESPONSE, f"The random number is {number}.", None),
    ]
    assert outcome.steps == 2 and outcome.input_tokens > 0 and outcome.output_tokens > 0


def test_stock_quote_asks_for_the_new_symbol(funcs: RecordingFuncs, trace: list[TraceStep]) -> None:
    agent = Executor(
        code_shot_components(STOCK_PROMPT, STOCK_SHOTS, funcs), FewShotLLM(), trace=trace.append
    )
    outcome = agent.run("What is the stock price for GOOG?")

    [(_, symbol, price)] = funcs.calls
    assert symbol == "GOOG"
    assert trace[0].type is MessageType.FUNC_CALL and trace[0].text == "GOOG"
    assert outcome.text == f"The stock price for GOOG is {price}."


def test_two_symbols_call_the_func_twice_in_order(funcs: RecordingFuncs) -> None:
    agent = Executor(code_shot_components(STOCK_PROMPT, STOCK_SHOTS, funcs), FewShotLLM())
    outcome = agent.run("Compare the prices of GOOG and AMZN")

    assert [symbol for _, symbol, _ in funcs.calls] == ["GOOG", "AMZN"]
    (_, _, goog), (_, _, amzn) = funcs.calls
    assert outcome.text == f"GOOG is at {goog} and AMZN is at {amzn}."
    assert outcome.steps == 3


def test_the_fewshot_provider_stops_after_each_ask(funcs: RecordingFuncs) -> None:
    """What the provider returns per call is what a real LLM returns under the stop sequences."""
    seen: list[str] = []

    class Spy(FewShotLLM):
        def complete(self, messages, stop, max_tokens):  # type: ignore[no-untyped-def]
            assert stop[: len(STOP_SEQUENCES)] == STOP_SEQUENCES
            completion = super().complete(messages, stop, max_tokens)
            seen.append(completion.text)
            return completion

    Executor(code_shot_components(STOCK_PROMPT, STOCK_SHOTS, funcs), Spy()).run(
        "Compare the prices of TSLA and NVDA"
    )
    (_, _, tsla), (_, _, nvda) = funcs.calls
    assert seen == [
        "Ask Func[quote]: TSLA",
        "Ask Func[quote]: NVDA",
        f"A: TSLA is at {tsla} and NVDA is at {nvda}.",
    ]


def test_an_unrelated_query_gets_a_plain_refusal(funcs: RecordingFuncs) -> None:
    agent = Executor(code_shot_components(STOCK_PROMPT, STOCK_SHOTS, funcs), FewShotLLM())
    outcome = agent.run("Write me a poem about the sea")
    assert outcome.status is Status.DONE and outcome.text == CANT_HELP
    assert funcs.calls == []

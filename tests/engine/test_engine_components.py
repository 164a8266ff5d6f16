"""Component protocols: who is called when, in which order, and what each may change."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Literal

import pytest

from codeshot.engine.builtin import (
    BasePrompt,
    Commands,
    Directives,
    FewShotExamples,
    SessionHistory,
)
from codeshot.engine.components import (
    AfterExecute,
    AfterParse,
    CommandProvider,
    CommandResult,
    DirectiveProvider,
    ExecutionFailure,
    Failure,
    Fallback,
    MessageProvider,
    Retry,
    command,
)
from codeshot.engine.executor import Executor, Status, TraceStep
from codeshot.engine.fewshot import Kind, Step, parse_few_shots
from codeshot.errors import AgentUnavailable, InvalidInput
from codeshot.llm.base import ChatMessage
from codeshot.models import MessageType

Log = list[str]


@dataclass
class Directive:
    log: Log

    def constraints(self) -> list[str]:
        self.log.append("constraints")
        return ["Never guess a price."]

    def resources(self) -> list[str]:
        return ["Prices come from the quote Func."]

    def best_practices(self) -> list[str]:
        return ["Quote with two decimals."]


@dataclass
class Flaky:
    """A quote command that fails ``failures`` times before answering."""

    log: Log
    failures: int = 1

    def commands(self) -> list:  # type: ignore[type-arg]
        @command
        def quote(symbol: str) -> str:
            """The latest price of a stock symbol."""
            self.log.append(f"quote({symbol})")
            if self.failures:
                self.failures -= 1
                raise AgentUnavailable("quote service is down")
            return "$98.76"

        return [quote]


@dataclass
class Messages:
    log: Log
    name: str

    def messages(self, query: str) -> list[ChatMessage]:
        self.log.append(f"{self.name}.messages({query})")
        return [ChatMessage("user", f"note from {self.name}")]


@dataclass
class Parse:
    log: Log
    name: str

    def after_parse(self, step: Step) -> Step:
        self.log.append(f"{self.name}.after_parse({step.kind.value}: {step.text})")
        if step.kind is Kind.ASK_FUNC:
            return Step(step.kind, step.text.upper(), step.target)
        return step


@dataclass
class OnFailure:
    log: Log
    name: str
    decision: Retry | None = None

    def on_failure(self, failure: Failure) -> Retry | None:
        self.log.append(f"{self.name}.on_failure({failure.code}, attempt {failure.attempt})")
        return self.decision


@dataclass
class Executed:
    log: Log
    name: str

    def after_execute(self, step: Step, result: CommandResult) -> CommandResult:
        self.log.append(f"{self.name}.after_execute({result.text})")
        return CommandResult(f"{result.text} ({self.name})", result.embeds)


def test_each_protocol_is_recognised_by_its_methods() -> None:
    log: Log = []
    assert isinstance(Directive(log), DirectiveProvider)
    assert isinstance(Flaky(log), CommandProvider)
    assert isinstance(Messages(log, "m"), MessageProvider)
    assert isinstance(Parse(log, "p"), AfterParse)
    assert isinstance(OnFailure(log, "f"), ExecutionFailure)
    assert isinstance(Executed(log, "e"), AfterExecute)
    assert not isinstance(Directive(log), (CommandProvider, AfterParse, ExecutionFailure))


def test_order_of_calls_for_one_component_of_each_protocol(
    scripted, trace: list[TraceStep]
) -> None:
    log: Log = []
    sleeps: list[float] = []
    # Order-dependent components sit in two places; order-independent ones anywhere.
    components = [
        Messages(log, "m1"), Parse(log, "p1"), OnFailure(log, "f1"), Executed(log, "e1"),
        Flaky(log), BasePrompt("I quote stocks."),
        Messages(log, "m2"), Parse(log, "p2"), OnFailure(log, "f2", Retry(0.25)),
        Executed(log, "e2"), Directive(log),
    ]  # fmt: skip
    llm = scripted("Ask Func[quote]: goog", "A: GOOG is at $98.76.")
    outcome = Executor(components, llm, trace=trace.append, sleep=sleeps.append).run("GOOG?")

    assert outcome.status is Status.DONE and outcome.text == "GOOG is at $98.76."
    assert sleeps == [0.25]
    assert log == [
        "constraints", "m1.messages(GOOG?)", "m2.messages(GOOG?)",
        "p1.after_parse(ask_func: goog)", "p2.after_parse(ask_func: GOOG)",
        "quote(GOOG)", "f1.on_failure(AGENT_UNAVAILABLE, attempt 1)",
        "f2.on_failure(AGENT_UNAVAILABLE, attempt 1)",
        "quote(GOOG)", "e1.after_execute($98.76)", "e2.after_execute($98.76 (e1))",
        "constraints", "m1.messages(GOOG?)", "m2.messages(GOOG?)",
        "p1.after_parse(a: GOOG is at $98.76.)", "p2.after_parse(a: GOOG is at $98.76.)",
    ]  # fmt: skip
    system, note1, note2, transcript = llm.calls[1][0]
    assert system.content.startswith("I quote stocks.\n\nConstraints:\n- Never guess a price.")
    assert "Resources:\n- Prices come from the quote Func." in system.content
    assert "Best practices:\n- Quote with two decimals." in system.content
    assert (
        '- Func[quote]: The latest price of a stock symbol. Parameters (JSON schema): {"properties": {"symbol": {"type": "string"}}'
        in system.content
    )
    assert (note1.content, note2.content) == ("note from m1", "note from m2")
    assert transcript.content.endswith(
        "Q: GOOG?\nAsk Func[quote]: GOOG\nFunc[quote] says: $98.76 (e1) (e2)\n"
    )
    assert [(t.type, t.text) for t in trace] == [
        (MessageType.FUNC_CALL, "GOOG"),
        (MessageType.ERROR, "Func[quote] failed: quote service is down"),
        (MessageType.RESULT, "$98.76 (e1) (e2)"),
        (MessageType.RESPONSE, "GOOG is at $98.76."),
    ]
    assert trace[1].error_code == "AGENT_UNAVAILABLE"


def test_a_failing_command_is_retried_with_backoff_then_explained(
    scripted, trace: list[TraceStep]
) -> None:
    log: Log = []
    sleeps: list[float] = []
    llm = scripted("Thought: I need the price\nAsk Func[quote]: GOOG")
    outcome = Executor([Flaky(log, failures=99)], llm, trace=trace.append, sleep=sleeps.append).run(
        "Price of GOOG?"
    )
    assert (outcome.status, outcome.error_code) == (Status.ERROR, "AGENT_UNAVAILABLE")
    assert outcome.text == "Sorry, I could not finish: Func[quote] failed (quote service is down)."
    assert log == ["quote(GOOG)"] * 3
    assert sleeps == [0.5, 1.0]
    assert [t.type for t in trace] == [
        MessageType.THOUGHT,
        MessageType.FUNC_CALL,
        *[MessageType.ERROR] * 3,
        MessageType.RESPONSE,
    ]
    assert len(llm.calls) == 1


def test_a_failure_handler_may_fall_back_to_a_result(scripted) -> None:
    class Cached:
        def on_failure(self, failure: Failure) -> Fallback:
            return Fallback(CommandResult("$90.00 (cached)"))

    log: Log = []
    llm = scripted("Ask Func[quote]: GOOG", "A: GOOG was $90.00.")
    outcome = Executor([Flaky(log, failures=1), Cached(), Executed(log, "e")], llm).run("GOOG?")
    assert outcome.text == "GOOG was $90.00."
    assert "Func[quote] says: $90.00 (cached)" in llm.transcript()
    assert log == ["quote(GOOG)"]  # a fallback is no success: AfterExecute is not called


def test_endless_retries_are_capped(scripted) -> None:
    sleeps: list[float] = []
    flaky = Flaky([], failures=99)
    components = [flaky, OnFailure([], "always", Retry(0.0))]
    outcome = Executor(components, scripted("Ask Func[quote]: X"), sleep=sleeps.append).run("X?")
    assert len(sleeps) == 4  # Limits.max_attempts = 5 calls
    assert outcome.text.startswith("Sorry, I could not finish: Func[quote] failed")


def test_bad_input_goes_back_to_the_model_once_then_is_explained(scripted) -> None:
    @command
    def genrand(low: int, high: int) -> int:
        """A random integer between low and high."""
        return (low + high) // 2

    sleeps: list[float] = []
    llm = scripted("Ask Func[genrand]: 1, many", "Ask Func[genrand]: 1 9", "A: 5")
    agent = Executor([Commands([genrand])], llm, sleep=sleeps.append)
    outcome = agent.run("a")
    assert (outcome.text, outcome.steps) == ("5", 3)
    note = llm.calls[1][0][-2].content
    assert note.startswith("Your previous reply to this transcript could not be used: "
                           'Func[genrand] refused the input "1, many": argument high must be '
                           "integer, got 'many'; ask again with input it accepts.")
    assert "Ask Func[genrand]: 1, many" not in llm.transcript(1)  # the step was taken back
    assert "Func[genrand] says: 5" in llm.transcript(2)

    llm = scripted("Ask Func[genrand]: 1, many", "Ask Func[genrand]: 1, lots")
    outcome = Executor([Commands([genrand])], llm, sleep=sleeps.append).run("b")
    # a failure for good: the run ends as an error with the command's code (#13 item 13)
    assert (outcome.status, outcome.error_code, outcome.steps) == (
        Status.ERROR, "INVALID_INPUT", 2)
    assert outcome.text == (
        "Sorry, I could not finish: Func[genrand] failed (argument high must be integer, "
        "got 'lots')."
    )
    assert sleeps == []


def test_an_unknown_command_is_not_called_and_ends_in_an_llm_error(scripted) -> None:
    llm = scripted("Ask Func[nope]: 1", "Ask Func[nope]: 2")
    outcome = Executor([Commands([])], llm).run("b")
    assert (outcome.status, outcome.error_code, outcome.steps) == (Status.ERROR, "LLM_ERROR", 2)
    assert outcome.text == "Sorry, the language model gave no usable step: there is no Func[nope]."


def test_command_decorator_builds_schema_and_parses_arguments() -> None:
    @command(name="between")
    def genrand(
        low: int,
        high: int = 100,
        *,
        unit: Literal["int", "float"] = "int",
        tags: list[str] | None = None,
        exact: bool = False,
    ) -> dict[str, object]:
        """A number between low and high.

        More words."""
        return {"low": low, "high": high, "unit": unit, "tags": tags, "exact": exact}

    assert genrand.name == "between"
    assert genrand.description == "A number between low and high.\n\nMore words."
    assert genrand.parameters == {
        "type": "object",
        "properties": {
            "low": {"type": "integer"}, "high": {"type": "integer"},
            "unit": {"enum": ["int", "float"]},
            "tags": {"type": "array", "items": {"type": "string"}}, "exact": {"type": "boolean"},
        },
        "required": ["low"],
    }  # fmt: skip
    assert genrand.call("0, 19").text == (
        '{"low": 0, "high": 19, "unit": "int", "tags": null, "exact": false}'
    )
    assert genrand.call('{"low": 5, "tags": ["a"], "exact": "yes", "unit": "float"}').text == (
        '{"low": 5, "high": 100, "unit": "float", "tags": ["a"], "exact": true}'
    )
    for bad, message in [
        ("", "between expects (low, high, unit, tags, exact), got ''"),
        ("{not json", "between: arguments are not valid JSON"),
        ('{"low": 1, "size": 2}', "between has no argument 'size'"),
        ('{"low": 1, "exact": "maybe"}', "argument exact must be boolean, got 'maybe'"),
        # A JSON object's values are checked too: they reached the function as sent.
        ('{"low": {"a": 1}}', "argument low must be integer, got {'a': 1}"),
        ('{"low": 1.5}', "argument low must be integer, got 1.5"),
        ('{"low": true}', "argument low must be integer, got True"),
        ('{"low": 1, "unit": "secrets"}', "argument unit must be one of ['int', 'float'], "
                                          "got 'secrets'"),
        ('{"low": 1, "tags": [1, {"x": 2}]}', "argument tags must be array, got [1, {'x': 2}]"),
        ('{"low": 1, "tags": "abc"}', "argument tags must be array, got 'abc'"),
    ]:
        with pytest.raises(InvalidInput) as info:
            genrand.call(bad)
        assert info.value.message.endswith(message)

    @command
    def echo(text: str) -> CommandResult:
        """Echo."""
        return CommandResult(text, {"out": {"content_type": "text/plain", "uri": "s3://x"}})

    assert echo.call("a, b").embeds == {"out": {"content_type": "text/plain", "uri": "s3://x"}}
    assert echo.call("a, b").text == "a, b"


def test_session_history_and_few_shot_messages_keep_list_order(scripted) -> None:
    history = SessionHistory([("What is AAPL at?", "$150.12")], {"chart": "image/png"})
    examples = FewShotExamples(parse_few_shots(["Q: hi\nA: hello"]))
    llm = scripted("A: ok")
    Executor([history, BasePrompt("I help."), examples, Directives(("Be brief.",))], llm).run("x")
    system, past, embeds, shots, transcript = llm.calls[0][0]
    assert system.content.startswith("I help.\n\nConstraints:\n- Be brief.\n\nAnswer by writing")
    assert past.content == "Earlier in this conversation:\nQ: What is AAPL at?\nA: $150.12"
    assert embeds.content.endswith("\n- #chart: image/png")
    assert shots.content.endswith("\n\nQ: hi\nA: hello")
    assert transcript.content.endswith("\n\nQ: x\n")


def test_a_parameter_no_model_can_write_is_refused_when_the_func_is_made() -> None:
    """A date, a dataclass or an Enum arrived as text or a dict, whatever the hint said."""

    def on(day: datetime.date) -> str:
        return str(day)

    with pytest.raises(TypeError, match=r"Func on: parameter day has type .*date"):
        command(on)

    def tagged(tags: list[datetime.date] | None = None) -> str:
        return str(tags)

    with pytest.raises(TypeError, match="parameter tags"):
        command(tagged)


def test_positional_arguments_split_on_commas_or_else_on_spaces() -> None:
    @command
    def roll(size: int, count: int = 1) -> str:
        """Roll dice."""
        return f"{count}d{size}"

    assert roll.call("6 2").text == "2d6"
    assert roll.call("6, 2").text == "2d6"
    assert roll.call("20").text == "1d20"
    with pytest.raises(InvalidInput, match="argument size must be integer, got '4 4 4 4'"):
        roll.call("4 4 4 4")  # more words than parameters: one value
    with pytest.raises(InvalidInput, match="argument size must be integer, got 'a'"):
        roll.call("a d6")

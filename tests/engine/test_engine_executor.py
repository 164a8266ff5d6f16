"""The executor loop: limits, misbehaving models and commands, agents as commands."""

from __future__ import annotations

import threading
import time

import pytest

from codeshot.engine.builtin import AgentTool, code_shot_components, planner_components
from codeshot.engine.components import CommandResult
from codeshot.engine.executor import Executor, Limits, Status, TraceStep
from codeshot.engine.fewshot import Kind, Step
from codeshot.engine.prompt import ECHO_STOPS, STOP_SEQUENCES
from codeshot.errors import InvalidInput, LLMError, Timeout
from codeshot.models import MessageType
from codeshot.text import MAX_REPLY_TEXT_BYTES

QUOTE_SHOTS = ["Q: Price of AAPL?\nAsk Func[quote]: AAPL\nFunc[quote] says: $1\nA: AAPL is at $1."]


def quote(name: str, text: str) -> str:
    return f"{text} is at $7"


def test_stop_sequences_and_token_limits_reach_the_llm(scripted) -> None:
    llm = scripted("Ask Func[quote]: GOOG", "A: done", tokens=(300, 50))
    agent = Executor(
        code_shot_components("I quote.", QUOTE_SHOTS, quote), llm,
        limits=Limits(token_budget=1000, max_tokens_per_call=800),
    )  # fmt: skip
    outcome = agent.run("Price of GOOG?")
    assert [(stop, max_tokens) for _, stop, max_tokens in llm.calls] == [
        ([*STOP_SEQUENCES, *ECHO_STOPS], 800),
        ([*STOP_SEQUENCES, *ECHO_STOPS], 650),
    ]
    assert STOP_SEQUENCES == ["] says:", "\nUser says:", "\nQ:",
                              "Continue this transcript with its next lines:"]
    assert (outcome.input_tokens, outcome.output_tokens, outcome.steps) == (600, 100, 2)


def test_token_budget_stops_the_run(scripted, trace: list[TraceStep]) -> None:
    llm = scripted("Ask Func[quote]: A", "Ask Func[quote]: B", tokens=(60, 40))
    agent = Executor(code_shot_components("I quote.", QUOTE_SHOTS, quote), llm,
                     limits=Limits(token_budget=150), trace=trace.append)
    outcome = agent.run("q")
    assert outcome.status is Status.ERROR and outcome.error_code == "AGENT_ERROR"
    assert outcome.text == "I used up my token budget before reaching an answer."
    assert len(llm.calls) == 2
    assert trace[-1] == TraceStep(MessageType.ERROR, outcome.text, error_code="AGENT_ERROR")


def test_step_limit_stops_a_model_that_never_answers(scripted) -> None:
    llm = scripted(*["Ask Func[quote]: GOOG"] * 10)
    agent = Executor(code_shot_components("I quote.", QUOTE_SHOTS, quote), llm,
                     limits=Limits(max_steps=3))
    outcome = agent.run("q")
    assert (outcome.status, outcome.error_code, outcome.steps) == (Status.ERROR, "AGENT_ERROR", 3)
    assert outcome.text == "I stopped after 3 steps without reaching an answer."
    assert llm.transcript().endswith("Ask Func[quote]: GOOG\nFunc[quote] says: GOOG is at $7\n")


def test_llm_failures_end_in_an_error_outcome_not_an_exception(trace: list[TraceStep]) -> None:
    class Failing:
        def __init__(self, exc: Exception) -> None:
            self.exc = exc

        def complete(self, messages, stop, max_tokens):  # type: ignore[no-untyped-def]
            raise self.exc

    outcome = Executor([], Failing(LLMError("Bedrock ThrottlingException: slow down"))).run("q")
    assert (outcome.status, outcome.error_code) == (Status.ERROR, "LLM_ERROR")
    assert outcome.text == "The language model failed: Bedrock ThrottlingException: slow down"
    outcome = Executor([], Failing(Timeout("the query's time ran out"))).run("q")
    assert (outcome.status, outcome.error_code) == (Status.ERROR, "TIMEOUT")  # not LLM_ERROR
    assert outcome.text == "This query's time ran out before I reached an answer."
    outcome = Executor([], Failing(KeyError("choices")), trace=trace.append).run("q")
    assert outcome.text == "The language model failed: internal error"  # no repr of a bug
    assert trace[-1].error_code == "LLM_ERROR"


def test_a_command_failing_unexpectedly_is_not_called_again_and_shows_no_internals(
        scripted, trace: list[TraceStep], caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []

    def sends_then_fails(name: str, text: str) -> str:
        calls.append(text)  # it ran (sent the email); reading its reply failed
        raise OSError("/var/task/codeshot/secret-path: read-only file system")

    agent = Executor(code_shot_components("I quote.", QUOTE_SHOTS, sends_then_fails),
                     scripted("Ask Func[quote]: GOOG"), trace=trace.append,
                     sleep=lambda s: None)
    outcome = agent.run("Price of GOOG?")
    assert calls == ["GOOG"]
    assert (outcome.status, outcome.error_code) == (Status.ERROR, "INTERNAL")
    assert outcome.text == "Sorry, I could not finish: Func[quote] failed (internal error)."
    assert not any("secret-path" in step.text for step in trace)
    assert "secret-path" in caplog.text  # the operator's log has it


def test_no_step_is_larger_than_a_reply_may_be(scripted, trace: list[TraceStep]) -> None:
    # A platform Func is not checked as an agent's reply is: a megabyte of result would
    # make a trace item (and the answer quoting it) too large to store.
    llm = scripted("Ask Func[quote]: GOOG", "A: GOOG is at " + "7" * 1_000_000)
    agent = Executor(code_shot_components("I quote.", QUOTE_SHOTS,
                                          lambda name, text: "$" + "7" * 1_000_000),
                     llm, trace=trace.append)
    outcome = agent.run("Price of GOOG?")
    assert outcome.status is Status.DONE
    for text in [outcome.text, *(step.text for step in trace), llm.transcript()]:
        assert len(text.encode()) <= MAX_REPLY_TEXT_BYTES + 1_000  # the transcript's lines
    [result] = [step for step in trace if step.type is MessageType.RESULT]
    assert result.text.startswith("$777")
    assert result.text.endswith(" … [cut: 1,000,001 bytes in all]")
    assert outcome.text.endswith(" … [cut: 1,000,011 bytes in all]")


def test_a_hanging_command_times_out(scripted, trace: list[TraceStep]) -> None:
    release = threading.Event()

    def hang(name: str, text: str) -> str:
        release.wait(10)
        return "too late"

    agent = Executor(
        code_shot_components("I quote.", QUOTE_SHOTS, hang), scripted("Ask Func[quote]: GOOG"),
        limits=Limits(command_timeout=0.2), trace=trace.append, sleep=lambda s: None,
    )  # fmt: skip
    started = time.monotonic()
    try:
        outcome = agent.run("Price of GOOG?")
    finally:
        release.set()
    assert time.monotonic() - started < 2
    assert outcome.text == "Sorry, I could not finish: Func[quote] failed (no reply within " \
        "0.2s; CODESHOT_AGENT_CALL_TIMEOUT_SECONDS sets how long)."
    # Once: the first call may still be running, so it is not made again.
    assert [t.error_code for t in trace if t.type is MessageType.ERROR] == ["TIMEOUT"]


def test_a_nested_run_whose_caller_timed_out_stops_at_its_next_step(scripted) -> None:
    # A nested agent's run is left in its thread when the planner's Ask times out; it
    # must not keep the model busy (and call Funcs) for a query that has moved on.
    nested_calls: list[str] = []
    funcs_called: list[str] = []

    class SlowModel:
        def complete(self, messages, stop, max_tokens):  # type: ignore[no-untyped-def]
            from codeshot.llm.base import Completion
            nested_calls.append("call")
            time.sleep(0.3)
            return Completion("Ask Func[quote]: GOOG", 10, 5)

    def nested_agent(agent_id: str, text: str) -> CommandResult:
        agent = Executor(code_shot_components("I quote.", QUOTE_SHOTS,
                                              lambda n, t: funcs_called.append(t) or "$7"),
                         SlowModel())
        return CommandResult(agent.run(text).text)

    components = planner_components("I route.", [], [AgentTool("fixie/stocks", "Prices.")],
                                    nested_agent)
    planner = Executor(components, scripted("Ask Agent[fixie/stocks]: GOOG?"),
                       limits=Limits(command_timeout=0.1, max_attempts=1),
                       sleep=lambda s: None)
    outcome = planner.run("What is GOOG at?")
    assert (outcome.error_code, outcome.text) == (
        "TIMEOUT", "Sorry, I could not finish: Agent[fixie/stocks] failed (no reply within "
        "0.1s; CODESHOT_AGENT_CALL_TIMEOUT_SECONDS sets how long).")
    time.sleep(1.0)  # time for three more of the nested model's steps, were it going on
    assert nested_calls == ["call"] and funcs_called == []


def test_a_func_always_asked_with_no_input_is_called_when_the_model_skips_its_ask(
    scripted, trace: list[TraceStep]
) -> None:
    # qwen2.5-coder-1.5b answered the clock's few-shot with "Func[now" (then the '] says:'
    # stop), twice, and the query failed.
    shots = ["Q: What time is it?\nAsk Func[now]:\nFunc[now] says: 08:15 UTC\nA: It is 08:15."]
    asked: list[str] = []
    llm = scripted("Func[now", "A: It is 23:41 UTC.")
    agent = Executor(code_shot_components("I tell the time.", shots,
                                          lambda n, t: asked.append(t) or "23:41 UTC"),
                     llm, trace=trace.append)
    assert agent.run("What time is it?").text == "It is 23:41 UTC."
    assert asked == [""]
    assert [(t.type, t.target, t.text) for t in trace[:2]] == [
        (MessageType.FUNC_CALL, "Func[now]", ""), (MessageType.RESULT, "Func[now]", "23:41 UTC")]


def test_a_model_running_past_its_turn_is_cut_at_the_ask(scripted) -> None:
    calls: list[str] = []
    llm = scripted(
        "Thought: need GOOG\nAsk Func[quote]: GOOG\nFunc[quote] says: $1 (made up)\nA: $1",
        "A: GOOG is at $7.",
    )
    agent = Executor(
        code_shot_components("I quote.", QUOTE_SHOTS, lambda n, t: calls.append(t) or "$7"), llm
    )
    assert agent.run("Price of GOOG?").text == "GOOG is at $7."
    assert calls == ["GOOG"]
    assert llm.transcript().endswith(
        "Q: Price of GOOG?\nThought: need GOOG\nAsk Func[quote]: GOOG\nFunc[quote] says: $7\n"
    )


def test_free_text_is_taken_as_the_answer_and_empty_text_is_asked_again(scripted) -> None:
    outcome = Executor([], scripted("GOOG is at $7.\nHope that helps.")).run("q")
    assert (outcome.status, outcome.text) == (Status.DONE, "GOOG is at $7.\nHope that helps.")
    outcome = Executor([], scripted("  \n", "\n")).run("q")
    assert (outcome.status, outcome.error_code) == (Status.ERROR, "LLM_ERROR")
    assert outcome.text == "Sorry, the language model gave no usable step: the reply was empty."
    with pytest.raises(InvalidInput):
        Executor([], scripted()).run("   ")


def test_after_parse_may_replace_a_step(scripted) -> None:
    class NoFuncsOnSundays:
        def after_parse(self, step: Step) -> Step:
            if step.kind is Kind.ASK_FUNC:
                return Step(Kind.A, "Funcs rest today.")
            return step

    calls: list[str] = []
    components = [
        *code_shot_components("I quote.", QUOTE_SHOTS, lambda n, t: calls.append(t) or ""),
        NoFuncsOnSundays(),
    ]
    outcome = Executor(components, scripted("Ask Func[quote]: GOOG")).run("Price of GOOG?")
    assert outcome.text == "Funcs rest today." and calls == []


def test_embeds_from_results_reach_the_trace_and_the_outcome(
    scripted, trace: list[TraceStep]
) -> None:
    chart = {"content_type": "image/png", "uri": "https://embeds.example/abc"}

    def plot(name: str, text: str) -> CommandResult:
        return CommandResult("Here is the chart: #chart", {"chart": chart})

    shots = ["Q: Plot AAPL\nAsk Func[plot]: AAPL\nFunc[plot] says: #chart\nA: See #chart."]
    llm = scripted("Ask Func[plot]: GOOG", "A: See #chart.")
    outcome = Executor(code_shot_components("I plot.", shots, plot), llm, trace=trace.append).run(
        "Plot GOOG"
    )
    assert outcome.embeds == {"chart": chart}
    assert [t.embeds for t in trace if t.type is MessageType.RESULT] == [{"chart": chart}]


def test_the_planner_asks_agents_through_the_agent_caller(scripted, trace: list[TraceStep]) -> None:
    asked: list[tuple[str, str]] = []

    def agent_caller(agent_id: str, text: str) -> str:
        asked.append((agent_id, text))
        return "GOOG is at $7."

    shots = [("Q: What is AAPL at?\nAsk Agent[fixie/stocks]: What is AAPL at?\n"
             "Agent[fixie/stocks] says: AAPL is at $1.\nA: AAPL is at $1.")]  # fmt: skip
    components = planner_components(
        "I route questions to agents.", shots,
        [AgentTool("fixie/stocks", "Stock prices."), AgentTool("dev/weather", "Forecasts.")],
        agent_caller,
    )  # fmt: skip
    llm = scripted("Ask Agent[fixie/stocks]: What is GOOG at?", "A: GOOG is at $7.")
    outcome = Executor(components, llm, trace=trace.append).run("What is GOOG at?")
    assert outcome.text == "GOOG is at $7."
    assert asked == [("fixie/stocks", "What is GOOG at?")]
    system = llm.calls[0][0][0].content
    assert "- Agent[fixie/stocks]: Stock prices.\n- Agent[dev/weather]: Forecasts." in system
    assert [(t.type, t.target) for t in trace] == [
        (MessageType.AGENT_CALL, "Agent[fixie/stocks]"),
        (MessageType.RESULT, "Agent[fixie/stocks]"),
        (MessageType.RESPONSE, None),
    ]


REMINDER_SHOTS = [
    "Q: Remind me to call the plumber in two hours\nThought: I need the current time first.\n"
    "Func[fixie_local_datetime] says: Tuesday May 6 2025 02:15 PM\n"
    "Ask Func[remind]: May 6 2025 04:15 PM, call the plumber\nFunc[remind] says: Reminder set\n"
    "A: I will remind you at 4:15 PM to call the plumber."
]


def test_a_func_the_few_shots_show_with_no_ask_is_called_when_the_model_starts_its_reply(
    scripted, trace: list[TraceStep]
) -> None:
    calls: list[tuple[str, str]] = []

    def funcs(name: str, text: str) -> str:
        calls.append((name, text))
        return {"fixie_local_datetime": "Friday June 6 2025 09:00 AM", "remind": "Reminder set"}[
            name]

    llm = scripted(
        "Thought: I need the time.\nFunc[fixie_local_datetime",  # cut at the "] says:" stop
        "Ask Func[remind]: June 6 2025 10:00 AM, water the plants",
        "A: I will remind you at 10:00 AM.",
    )
    agent = Executor(code_shot_components("I set reminders.", REMINDER_SHOTS, funcs), llm,
                     trace=trace.append)
    outcome = agent.run("Remind me to water the plants in an hour")
    assert outcome.text == "I will remind you at 10:00 AM."
    assert calls == [("fixie_local_datetime", ""), ("remind", "June 6 2025 10:00 AM, water the plants")]
    assert llm.transcript(1).endswith(
        "Q: Remind me to water the plants in an hour\nThought: I need the time.\n"
        "Func[fixie_local_datetime] says: Friday June 6 2025 09:00 AM\n")
    assert [(t.type, t.text) for t in trace[:3]] == [
        (MessageType.THOUGHT, "I need the time."), (MessageType.FUNC_CALL, ""),
        (MessageType.RESULT, "Friday June 6 2025 09:00 AM")]


def test_a_server_ignoring_stops_gets_the_real_reply_not_the_invented_one(scripted) -> None:
    llm = scripted("Func[fixie_local_datetime] says: Monday 1999\nA: It is 1999.",
                   "A: It is Friday.")
    agent = Executor(code_shot_components(
        "I set reminders.", REMINDER_SHOTS, lambda name, text: "Friday June 6 2025"), llm)
    assert agent.run("What day is it?").text == "It is Friday."
    assert "Func[fixie_local_datetime] says: Friday June 6 2025\n" in llm.transcript(1)
    assert "1999" not in llm.transcript(1)


def test_a_model_writing_a_reply_itself_is_told_so_once(scripted) -> None:
    llm = scripted("Func[quote", "Func[quote")
    outcome = Executor(code_shot_components("I quote.", QUOTE_SHOTS, quote), llm).run("GOOG?")
    assert (outcome.error_code, outcome.steps) == ("LLM_ERROR", 2)
    assert outcome.text == ('Sorry, the language model gave no usable step: it wrote '
                            '"Func[quote] says:" itself; only the engine writes replies, after '
                            "an Ask line.")
    assert llm.calls[1][0][-2].content.startswith(
        "Your previous reply to this transcript could not be used: it wrote \"Func[quote] says:\"")


def test_only_thoughts_is_no_step(scripted) -> None:
    outcome = Executor([], scripted("Thought: hmm", "Thought: still hmm")).run("q")
    assert outcome.text == "Sorry, the language model gave no usable step: it had only a " \
                           "Thought and no step."


def test_multi_line_answers_are_kept_and_text_running_on_is_cut(scripted) -> None:
    table = "A: Your cellar holds:\nWine | Bottles\n--- | ---\nBarolo 2016 | 6\n" \
            "Thought: that was easy\nQ: and now?"
    outcome = Executor([], scripted(table)).run("What is in my cellar?")
    assert outcome.text == "Your cellar holds:\nWine | Bottles\n--- | ---\nBarolo 2016 | 6"
    run_on = "A: You rolled a 4! Thought: The user asked for a d6. Agent[id"
    assert Executor([], scripted(run_on)).run("Roll a d6").text == "You rolled a 4!"
    outcome = Executor([], scripted("A: Thought: nothing", "A: 4")).run("q")
    assert (outcome.text, outcome.steps) == ("4", 2)  # an answer that was only run-on


def test_self_ask_lines_before_the_ask_are_thoughts(scripted, trace: list[TraceStep]) -> None:
    llm = scripted("Self Ask: Which symbol is Alphabet?\nAnswer: GOOG\nAsk Func[quote]: GOOG",
                   "A: GOOG is at $7.")
    agent = Executor(code_shot_components("I quote.", QUOTE_SHOTS, quote), llm, trace=trace.append)
    assert agent.run("Price of Alphabet?").text == "GOOG is at $7."
    assert trace[0] == TraceStep(MessageType.THOUGHT,
                                 "Self Ask: Which symbol is Alphabet?\nAnswer: GOOG")


def test_ungrounded_answers_are_flagged_or_sent_back_once(scripted) -> None:
    invented = "A: GOOG is at $812.00."
    outcome = Executor(code_shot_components("I quote.", QUOTE_SHOTS, quote),
                       scripted(invented)).run("Price of GOOG?")
    assert outcome.steps == 1 and outcome.flags == (
        "Grounding check: 812.00 in the answer came from no reply (no command was asked).",)
    llm = scripted(invented, "Ask Func[quote]: GOOG", "A: GOOG is at $7.")
    outcome = Executor(code_shot_components("I quote.", QUOTE_SHOTS, quote,
                                            reprompt_ungrounded=True), llm).run("Price of GOOG?")
    assert (outcome.text, outcome.steps, outcome.flags) == ("GOOG is at $7.", 3, ())
    assert "812.00 in the answer came from no reply" in llm.calls[1][0][-2].content

"""The planner on what small real models did (issue 22; the replies below are taken from
../shared/llm-transcripts/planner/): examples built from the routed agents' samples,
placeholders filled with real answers, an answer with an example's time or no agent
asked sent back once and then delegated, auto mode, nested failures not retried."""

from __future__ import annotations

from typing import Any

import pytest

from codeshot.engine.executor import Status
from codeshot.engine.prompt import CORRECTION_HEADER, EXAMPLES_HEADER
from codeshot.models import Agent, AgentKind, MessageType
from codeshot.routing.embedders import HashingEmbedder
from codeshot.routing.index import with_embeddings
from codeshot.routing.router import Router
from codeshot.runner.agent_client import AgentClient
from codeshot.runner.embeds import EmbedBook
from codeshot.runner.platform_funcs import FuncContext
from codeshot.runner.programs import PLANNER_ID, PlannerProgram, RunContext
from codeshot.store.embeds import EmbedStore
from codeshot.store.registry import AgentRegistry
from tests.engine.conftest import ScriptedLLM


def agent(handle: str, description: str, samples: list[str], shot: str) -> Agent:
    """A Code Shot agent with no Funcs (its own model run answers, from the script)."""
    return Agent(agent_id=f"me/{handle}", owner="me", handle=handle, published=True,
                 kind=AgentKind.CODE_SHOT, description=description, base_prompt=description,
                 sample_queries=samples, few_shots=[shot])


AGENTS = [
    agent("dice", "Rolls dice: d6, d20, d100, 3d6 and so on.",
          ["Roll a d20", "Roll 3d6", "Roll a d100", "Throw two six-sided dice"],
          "Q: Roll a d6\nA: You rolled 4."),
    agent("notes", "Saves and lists the user's notes.",
          ["Save a note: buy milk", "What notes do I have?", "Note that the gym is at 6"],
          "Q: Save a note: call mum\nA: Saved note 1: call mum."),
    agent("clock", "Tells the current time and date.",
          ["What time is it?", "What's today's date?", "What day is it?"],
          "Q: What time is it?\nA: It is 09:00 UTC."),
]


@pytest.fixture
def registry(aws: Any) -> AgentRegistry:
    registry = AgentRegistry(aws)
    for a in AGENTS:
        registry.create(with_embeddings(a, HashingEmbedder()))
    return registry


def planner(registry: AgentRegistry, llm: ScriptedLLM, mode: str,
            trace: list[tuple[str, MessageType, str]]) -> PlannerProgram:
    embeds = EmbedBook(EmbedStore(registry.settings),
                       fetch=lambda url: pytest.fail(f"fetched {url}"))
    ctx = RunContext(llm=llm, registry_get=registry.get, embeds=embeds,
                     platform=FuncContext(lambda: "UTC", embeds, None),
                     client=AgentClient(lambda _: "", timeout=1, allow_loopback=True),
                     trace=lambda by, step: trace.append((by, step.type, step.text)))
    return PlannerProgram(ctx, Router(registry, HashingEmbedder()), viewer=None, mode=mode)


def examples(llm: ScriptedLLM, call: int = 0) -> str:
    return next(m.content for m in llm.calls[call][0] if m.content.startswith(EXAMPLES_HEADER))


def test_a_two_step_plan_carries_the_first_answer_into_the_second_ask(registry):
    # plan15 #11: the model wrote "<result of previous command>" and notes saved it.
    llm = ScriptedLLM(
        "Thought: Two agents are needed.\nAsk Agent[me/dice]: Roll a d100",  # planner
        "A: You rolled 90.",  # dice
        "Ask Agent[me/notes]: Save the result as a note: <result of previous command>",
        "A: Saved note 1: You rolled 90.",  # notes
        "A: Saved note 1: You rolled 90.")  # planner
    trace: list = []
    done = planner(registry, llm, "auto", trace).run("Roll a d100 then save the result as a note")
    assert (done.status, done.text, done.flags) == (Status.DONE, "Saved note 1: You rolled 90.", ())
    assert "Q: Save the result as a note: You rolled 90." in llm.transcript(3)  # notes' run
    shown = examples(llm)
    # Built from the agents' own samples: a direct answer, one Ask each, and a two-step
    # plan whose second Ask carries the first answer; no value to copy.
    assert "Q: Thanks, that is all for now\nA: You're welcome!" in shown
    assert "Ask Agent[me/dice]: Roll a d100\nAgent[me/dice] says: <what Agent[me/dice] says>" \
        in shown
    assert "(given: <what Agent[me/dice] says>)" in shown
    assert "10:04" not in shown and "Roll 2d6" not in shown


def test_an_invented_time_is_sent_back_once_then_the_routed_agent_answers(registry):
    # plan05 #3: "What time is it?" answered with the example's time, no agent asked.
    invented = "A: It is 10:04 UTC on Monday, 2 March 2026."
    llm = ScriptedLLM(invented, invented, "A: It is 23:01 UTC.")  # planner x2, then clock
    trace: list = []
    done = planner(registry, llm, "plan", trace).run("What time is it?")
    assert (done.status, done.text) == (Status.DONE, "It is 23:01 UTC.")
    assert len(llm.calls) == 3
    note = next(m.content for m in llm.calls[1][0] if m.content.startswith(CORRECTION_HEADER))
    assert "it answered without asking Agent[me/clock]" in note
    assert (PLANNER_ID, MessageType.AGENT_CALL, "What time is it?") in trace


def test_numbers_no_agent_returned_are_sent_back_once(registry):
    # plan05 #0: the dice answer with the example's clock time appended.
    llm = ScriptedLLM("Ask Agent[me/dice]: Roll a d20", "A: You rolled 7.",
                      "A: You rolled 7. It is 10:04 UTC.", "A: You rolled 7.")
    done = planner(registry, llm, "plan", []).run("Roll a d20")
    assert (done.text, done.flags) == ("You rolled 7.", ())
    note = next(m.content for m in llm.calls[3][0] if m.content.startswith(CORRECTION_HEADER))
    assert "10, 04 in the answer came from no agent or the question" in note


def test_auto_routes_one_task_and_plans_compound_or_unfitting_queries(registry):
    llm = ScriptedLLM("A: You rolled 12.")  # dice only: the planner makes no LLM call
    assert planner(registry, llm, "auto", []).run("Roll a d20").text == "You rolled 12."
    assert len(llm.calls) == 1 and "Q: Roll a d20" in llm.transcript(0)

    trace: list = []
    llm = ScriptedLLM("A: Hello! How can I help?")  # hello: no agent fits, direct answer
    done = planner(registry, llm, "auto", trace).run("hello")
    assert done.text == "Hello! How can I help?" and len(llm.calls) == 1
    assert "Ask Agent[" not in llm.calls[0][0][0].content  # no agent offered
    assert trace[0][2].startswith("Router proposes: no agent fits")


def test_a_failed_nested_run_is_not_retried(registry):
    # plan15 #0: a nested "stopped after 12 steps" was retried twice (37 LLM calls).
    llm = ScriptedLLM("Ask Agent[me/dice]: Roll a d20", "", "")  # dice: two empty replies
    done = planner(registry, llm, "plan", []).run("Roll a d20 and tell me the time")
    assert len(llm.calls) == 3
    assert done.text.startswith("Sorry, I could not finish: Agent[me/dice] failed (me/dice: "
                                "Sorry, the language model gave no usable step")


def test_a_copied_placeholder_answer_is_never_the_reply(registry):
    # benchmarks/planner.py, qwen0.5b: "Your time is <what Agent[bench/notes] says>".
    copied = "A: Your time is <what Agent[me/clock] says>"
    llm = ScriptedLLM(copied, copied, "A: It is 23:41 UTC.")  # planner x2, then clock
    done = planner(registry, llm, "plan", []).run("What time is it?")
    assert done.text == "It is 23:41 UTC." and len(llm.calls) == 3

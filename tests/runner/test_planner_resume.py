"""An agent that asks the user while the planner is running it keeps its own paused run:
the answer goes back to that agent, not to a fresh call of it (plan mode, any LLM); in
auto mode a two-task query then runs its second task."""

import json

import pytest

from codeshot.engine.executor import Status
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

BOOKING = Agent(
    agent_id="me/booking", owner="me", handle="booking", published=True,
    kind=AgentKind.CODE_SHOT, description="books restaurant tables",
    base_prompt="I book restaurant tables.", sample_queries=["book a table for dinner"],
    few_shots=["Q: Book a table\nAsk User: For how many people?\nUser says: 2\n"
               "A: Booked a table for 2."],
)


NOTES = Agent(
    agent_id="me/notes", owner="me", handle="notes", published=True,
    kind=AgentKind.CODE_SHOT, description="saves the user's notes",
    base_prompt="I save notes.", sample_queries=["save a note: buy milk", "note this down"],
    few_shots=["Q: Save a note: call mum\nA: Saved note 1: call mum."],
)


def planner(aws, llm, trace, mode="plan"):
    registry = AgentRegistry(aws)
    embeds = EmbedBook(EmbedStore(aws), fetch=lambda url, _deadline: pytest.fail(f"fetched {url}"))
    ctx = RunContext(llm=llm, registry_get=registry.get, embeds=embeds,
                     platform=FuncContext(lambda: "UTC", embeds, None),
                     client=AgentClient(lambda *_: "", timeout=1, allow_loopback=True),
                     trace=lambda sent_by, step: trace.append((sent_by, step.type, step.text)))
    return PlannerProgram(ctx, Router(registry, HashingEmbedder()), viewer=None, mode=mode)


def test_the_paused_agent_resumes_with_the_answer(aws):
    AgentRegistry(aws).create(with_embeddings(BOOKING, HashingEmbedder()))
    trace: list = []
    llm = ScriptedLLM("Ask Agent[me/booking]: Book a table for dinner",  # planner
                      "Ask User: For how many people?")  # the booking agent
    paused = planner(aws, llm, trace).run("Book me a table for dinner")
    assert (paused.status, paused.text) == (Status.AWAITING_INPUT, "For how many people?")

    stored = json.loads(json.dumps(paused.state))  # as the runner keeps it between messages
    llm = ScriptedLLM("A: Booked a table for 4.",  # the booking agent, resumed
                      "A: Your table for 4 is booked.")  # planner
    done = planner(aws, llm, trace).resume(stored, "4")

    assert (done.status, done.text) == (Status.DONE, "Your table for 4 is booked.")
    agent_sees = llm.transcript(0)  # its own run goes on: its query, its question, the answer
    assert "Q: Book a table for dinner" in agent_sees
    assert "Ask User: For how many people?\nUser says: 4" in agent_sees
    planner_sees = llm.transcript(1)
    assert ("User says: 4\nAsk Agent[me/booking]: 4\n"
            "Agent[me/booking] says: Booked a table for 4.") in planner_sees
    assert (PLANNER_ID, MessageType.AGENT_CALL, "4") in trace  # the answer, passed on


def test_a_two_task_query_whose_first_agent_asks_the_user_runs_its_second_after_the_answer(aws):
    for agent in (BOOKING, NOTES):
        AgentRegistry(aws).create(with_embeddings(agent, HashingEmbedder()))
    query = "Book me a table for dinner and then save it as a note"
    llm = ScriptedLLM("Ask User: For how many people?")  # the booking agent (auto: no plan)
    paused = planner(aws, llm, [], mode="auto").run(query)
    assert (paused.status, paused.text) == (Status.AWAITING_INPUT, "For how many people?")

    stored = json.loads(json.dumps(paused.state))
    llm = ScriptedLLM("A: Booked a table for 4.",  # the booking agent, resumed
                      "A: Saved note 1: Booked a table for 4.")  # then the notes agent
    done = planner(aws, llm, [], mode="auto").resume(stored, "4")
    assert (done.status, done.text) == (
        Status.DONE, "Booked a table for 4.\nSaved note 1: Booked a table for 4.")
    assert "Q: save it as a note (given: Booked a table for 4.)" in llm.transcript(1)


def test_a_second_task_asking_the_user_shows_the_first_answer_with_its_question(aws):
    for agent in (BOOKING, NOTES):
        AgentRegistry(aws).create(with_embeddings(agent, HashingEmbedder()))
    llm = ScriptedLLM("A: Saved note 1: buy milk.",  # notes
                      "Ask User: For how many people?")  # then the booking agent
    paused = planner(aws, llm, [], mode="auto").run(
        "Save a note: buy milk and then book a table for dinner")
    assert (paused.status, paused.text) == (
        Status.AWAITING_INPUT, "Saved note 1: buy milk.\nFor how many people?")
    llm = ScriptedLLM("A: Booked a table for 2.")  # the booking agent, resumed
    done = planner(aws, llm, [], mode="auto").resume(json.loads(json.dumps(paused.state)), "2")
    assert (done.status, done.text) == (Status.DONE, "Booked a table for 2.")

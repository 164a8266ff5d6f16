"""An agent's own model settings (Fixie's ``llm_settings``) reach the model its program
calls, over a real OpenAI-compatible server on loopback; other agents keep the platform's."""

from __future__ import annotations

import pytest

from codeshot.engine.executor import Status
from codeshot.llm.openai import OpenAILLM
from codeshot.models import Agent, AgentKind
from codeshot.runner.agent_client import AgentClient
from codeshot.runner.embeds import EmbedBook
from codeshot.runner.platform_funcs import FuncContext
from codeshot.runner.programs import CodeShotProgram, RunContext
from codeshot.store.embeds import EmbedStore
from tests.openai_server import scripted_texts, serving

GREETER = Agent(
    agent_id="me/greeter", owner="me", handle="greeter", published=True,
    kind=AgentKind.CODE_SHOT, base_prompt="I greet people.",
    few_shots=["Q: Say hello\nA: Hello!"],
)


def run(aws, llm, agent: Agent, models: frozenset[str] = frozenset({"agent-model"})) -> str:
    embeds = EmbedBook(EmbedStore(aws), fetch=lambda url, _deadline: pytest.fail(f"fetched {url}"))
    ctx = RunContext(llm=llm, registry_get=lambda _: agent, embeds=embeds,
                     platform=FuncContext(lambda: "UTC", embeds, None),
                     client=AgentClient(lambda *_: "", timeout=1, allow_loopback=True),
                     trace=lambda _by, _step: None, agent_models=models)
    outcome = CodeShotProgram(agent, ctx).run("Say hello to Ann")
    assert outcome.status is Status.DONE
    return outcome.text


def test_an_agents_llm_settings_reach_its_model_calls_and_no_one_elses(aws):
    with serving(scripted_texts(["A: Hello, Ann!", "A: Hi, Ann!"])) as server:
        llm = OpenAILLM("platform-model", server.url)
        tuned = GREETER.replace(llm_settings={"model": "agent-model", "temperature": 0.7,
                                              "maximum_tokens": 40})
        assert run(aws, llm, tuned) == "Hello, Ann!"
        assert run(aws, llm, GREETER) == "Hi, Ann!"
        own, platform = server.bodies
    assert (own["model"], own["temperature"], own["max_tokens"]) == ("agent-model", 0.7, 40)
    assert (platform["model"], platform["temperature"]) == ("platform-model", 0)
    assert platform["max_tokens"] > 40


def test_an_agent_chooses_its_model_only_among_those_the_platform_allows(aws):
    """The platform pays for the calls: an agent naming another model (the priciest)
    runs on the platform's, with its other settings kept."""
    from codeshot.settings import Settings

    allowed = Settings(agent_llm_models=" agent-model , other ").agent_models()
    assert allowed == {"agent-model", "other"}
    with serving(scripted_texts(["A: Hello, Ann!", "A: Hi, Ann!"])) as server:
        llm = OpenAILLM("platform-model", server.url)
        pricey = GREETER.replace(llm_settings={"model": "gpt-4-32k", "temperature": 0.7})
        run(aws, llm, pricey, allowed)
        run(aws, llm, GREETER.replace(llm_settings={"model": "other"}), frozenset())
    assert [(b["model"], b["temperature"]) for b in server.bodies] == \
        [("platform-model", 0.7), ("platform-model", 0)]

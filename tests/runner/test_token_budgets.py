"""LLM token budgets: every LLM call is checked against its user's and agent's budgets
and counted; a spent budget ends the query with RATE_LIMITED and no further call."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from codeshot.engine.builtin import code_shot_components
from codeshot.engine.executor import Executor
from codeshot.errors import BudgetExceeded
from codeshot.llm.base import ChatMessage, Completion
from codeshot.llm.fewshot import FewShotLLM
from codeshot.runner.budgets import AGENT_TOKENS, USER_TOKENS, TokenBudget
from codeshot.store.usage import UsageCounters
from tests.runner.conftest import messages, register, running, send, session


class Pondering:
    """A model that never answers: each call asks Func[think] again, for ``tokens``."""

    def __init__(self, tokens: tuple[int, int] = (60, 40)) -> None:
        self.tokens, self.calls, self.lock = tokens, 0, threading.Lock()

    def complete(self, messages: list[ChatMessage], stop: list[str], max_tokens: int
                 ) -> Completion:
        with self.lock:
            self.calls += 1
            step = self.calls
        return Completion(f"Ask Func[think]: step {step}", *self.tokens)


THINKER = ["Q: Think hard\nAsk Func[think]: step 1\nFunc[think] says: hmm\nA: Done."]


def pondering_run(budget: TokenBudget, agent_id: str, llm: Pondering):
    components = code_shot_components("I think.", THINKER, lambda name, text: "hmm")
    return Executor(components, budget.metered(llm, agent_id)).run("Think hard")


def test_user_budget_stops_the_run_before_the_call_that_would_pass_it(aws):
    counters = UsageCounters(aws, clock=lambda: datetime(2026, 11, 21, 15, 30, tzinfo=UTC))
    budget = TokenBudget(counters, "u_alice", lambda: 250, agent_limit=10_000)
    llm = Pondering()
    with pytest.raises(BudgetExceeded) as err:
        pondering_run(budget, "alice/thinker", llm)
    assert llm.calls == 3  # 0, 100, 200 used before each call: the fourth is refused
    assert err.value.code == "RATE_LIMITED"
    assert err.value.message == ("your daily LLM token limit of 250 is used up (300 tokens "
                                 "today); it resets at 2026-11-22T00:00:00+00:00")
    assert err.value.details["resets_at"] == "2026-11-22T00:00:00+00:00"
    user, agent = counters.token_usage([(USER_TOKENS, "u_alice"),
                                        (AGENT_TOKENS, "alice/thinker")])
    assert (user.used, user.input_tokens, user.output_tokens, user.calls) == (300, 180, 120, 3)
    assert agent == user


def test_concurrent_queries_overspend_by_at_most_one_call_each(aws):
    counters = UsageCounters(aws)
    limit, per_call, queries = 1_000, 100, 8
    llm = Pondering((70, 30))
    failures: list[BaseException] = []
    barrier = threading.Barrier(queries)

    def query() -> None:
        budget = TokenBudget(counters, "u_bob", lambda: limit, agent_limit=10**9)
        barrier.wait()
        try:
            pondering_run(budget, "bob/thinker", llm)
        except BudgetExceeded as exc:
            failures.append(exc)

    threads = [threading.Thread(target=query) for _ in range(queries)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(failures) == queries  # every query ended on the budget
    [used] = counters.token_usage([(USER_TOKENS, "u_bob")])
    assert limit <= used.used <= limit + queries * per_call, used
    assert used.calls == llm.calls  # every call counted


def test_agent_budgets_are_separate_from_user_budgets(aws):
    counters = UsageCounters(aws)
    llm = Pondering()

    def budget(user: str) -> TokenBudget:
        return TokenBudget(counters, user, lambda: 10_000, agent_limit=300)

    with pytest.raises(BudgetExceeded) as err:  # carol spends the shared agent's budget
        pondering_run(budget("u_carol"), "x/shared", llm)
    assert "agent x/shared's daily LLM token limit of 300" in err.value.message
    calls = llm.calls
    with pytest.raises(BudgetExceeded) as err:  # so dave gets no call of it at all...
        pondering_run(budget("u_dave"), "x/shared", llm)
    assert "agent x/shared's" in err.value.message and llm.calls == calls
    with pytest.raises(BudgetExceeded) as err:  # ...but another agent serves him in full
        pondering_run(budget("u_dave"), "x/other", llm)
    assert "agent x/other's" in err.value.message and llm.calls == calls + 3
    carol, dave = counters.token_usage([(USER_TOKENS, "u_carol"), (USER_TOKENS, "u_dave")])
    assert (carol.used, dave.used) == (300, 300)


def test_a_spent_budget_is_not_retried_or_explained_by_a_calling_planner(aws):
    """A nested agent's refusal ends the planner's run too: no more planner calls."""
    from codeshot.engine.builtin import AgentTool, planner_components
    from codeshot.engine.components import CommandResult

    counters = UsageCounters(aws)
    budget = TokenBudget(counters, "u_erin", lambda: 10_000, agent_limit=150)
    inner = Pondering()

    class Planner:
        calls = 0

        def complete(self, messages, stop, max_tokens):  # type: ignore[no-untyped-def]
            Planner.calls += 1
            return Completion("Ask Agent[x/inner]: think", 10, 10)

    def call_agent(agent_id: str, text: str) -> CommandResult:
        outcome = pondering_run(budget, agent_id, inner)
        return CommandResult(text=outcome.text)

    components = planner_components("I plan.", [], [AgentTool("x/inner", "thinks")],
                                    call_agent, lambda *a: CommandResult(text=""))
    with pytest.raises(BudgetExceeded):
        Executor(components, budget.metered(Planner(), "platform/planner")).run("go")
    assert Planner.calls == 1 and inner.calls == 2


class CountingFewShot(FewShotLLM):
    def __init__(self) -> None:
        self.calls = 0

    def complete(self, messages: list[ChatMessage], stop: list[str], max_tokens: int
                 ) -> Completion:
        self.calls += 1
        return super().complete(messages, stop, max_tokens)


@pytest.fixture
def counted(platform):
    """The platform with a runner whose (offline) LLM counts its calls."""
    llm = CountingFewShot()
    with running(platform, llm):
        yield platform, llm


def usage(platform, key: str) -> dict:
    out = platform.gql(key, "{ user { dailyTokenLimit dailyUsedTokens } }")
    return out["data"]["user"]


def test_query_past_the_users_token_limit_stops_mid_way(counted, agents):
    platform, llm = counted
    user_id, key = platform.user("fran")
    dice = register(platform, key, "dice", agents.url + "/dice")
    h = session(platform, key, frontend=dice)
    first = send(platform, key, h, "Roll 1d20")
    assert first["reply"]["type"] == "response" and llm.calls == 2
    spent = usage(platform, key)["dailyUsedTokens"]
    assert spent > 0 and usage(platform, key)["dailyTokenLimit"] == 200_000
    # Her own limit, set by an operator: room for one more call, not two.
    platform.services.users.set_limits(user_id, None, spent + 1)
    rolls = len(agents.rolls)
    second = send(platform, key, h, "Roll 3d8 for me")
    assert second["reply"]["type"] == "error"
    assert llm.calls == 3  # the Ask was written; the answer's call was never made
    assert len(agents.rolls) == rolls + 1  # mid-way: the Func ran before the budget ended
    text = second["reply"]["text"]
    assert f"your daily LLM token limit of {spent + 1} is used up" in text
    assert "resets at " in text and "T00:00:00+00:00" in text
    last = messages(platform, key, h)[-1]
    assert last["errorCode"] == "RATE_LIMITED"
    assert usage(platform, key)["dailyUsedTokens"] > spent + 1
    # The agent's owner sees its tokens; another user sees none.
    agent_query = "query ($id: String!) { agentById(agentId: $id) { dailyUsedTokens } }"
    owner_view = platform.gql(key, agent_query, {"id": dice})["data"]["agentById"]
    assert owner_view["dailyUsedTokens"] == usage(platform, key)["dailyUsedTokens"]
    _, other = platform.user("gus")
    other_view = platform.gql(other, agent_query, {"id": dice})["data"]["agentById"]
    assert other_view["dailyUsedTokens"] is None


class Scripted:
    """A model answering ``texts`` in order, each call costing ``tokens``."""

    def __init__(self, texts: list[str], tokens: tuple[int, int] = (30, 10)) -> None:
        self.texts, self.tokens = list(texts), tokens

    def complete(self, messages: list[ChatMessage], stop: list[str], max_tokens: int
                 ) -> Completion:
        return Completion(self.texts.pop(0), *self.tokens)


def test_a_platform_funcs_model_calls_count_against_the_agent_and_user(aws, monkeypatch):
    from codeshot.models import Agent, AgentKind
    from codeshot.runner.agent_client import AgentClient
    from codeshot.runner.embeds import EmbedBook
    from codeshot.runner.platform_funcs import LIBRARY, FuncContext
    from codeshot.runner.programs import CodeShotProgram, RunContext
    from codeshot.store.embeds import EmbedStore

    # A platform Func that asks the model, as fixie_query_embed does with a real provider.
    monkeypatch.setitem(LIBRARY, "fixie_summary", lambda text, ctx: ctx.llm.complete(
        [ChatMessage("user", text)], [], 50).text)
    agent = Agent(agent_id="me/reader", owner="me", handle="reader", published=True,
                  kind=AgentKind.CODE_SHOT, base_prompt="I summarize.",
                  few_shots=["Q: Sum up x\nAsk Func[fixie_summary]: x\n"
                             "Func[fixie_summary] says: x in short\nA: x in short"])
    llm = Scripted(["Ask Func[fixie_summary]: the report", "the report, in short",
                    "A: The report, in short."])
    counters = UsageCounters(aws)
    budget = TokenBudget(counters, "u_me", lambda: 10_000, agent_limit=10_000)
    embeds = EmbedBook(EmbedStore(aws), fetch=lambda url, _deadline: pytest.fail(f"fetched {url}"))
    ctx = RunContext(llm=llm, registry_get=lambda _: agent, embeds=embeds,
                     platform=FuncContext(lambda: "UTC", embeds, llm),
                     client=AgentClient(lambda *_: "", timeout=1, allow_loopback=True),
                     trace=lambda _by, _step: None, budget=budget)
    assert CodeShotProgram(agent, ctx).run("Sum up the report").text == \
        "The report, in short."
    user, reader = counters.token_usage([(USER_TOKENS, "u_me"), (AGENT_TOKENS, "me/reader")])
    assert (user.calls, user.used) == (3, 120)  # the agent's two calls and the Func's one
    assert reader == user


def test_a_call_past_the_deadline_is_not_made_and_not_counted(aws):
    """A call the provider would refuse to send (the query's time up) was counted at its
    most, as a call cut off at the deadline is: 2,024 tokens for nothing."""
    from codeshot.errors import Timeout
    from codeshot.llm.base import calls_ending_by

    counters = UsageCounters(aws, clock=lambda: datetime(2026, 11, 21, 15, 30, tzinfo=UTC))
    budget = TokenBudget(counters, "u_olga", lambda: 10_000, agent_limit=10_000)
    llm = Pondering()
    with calls_ending_by(0.0), pytest.raises(Timeout):  # long past
        budget.metered(llm, "olga/thinker").complete([ChatMessage("user", "hi")], [], 2000)
    assert llm.calls == 0
    [user] = counters.token_usage([(USER_TOKENS, "u_olga")])
    assert user.used == 0

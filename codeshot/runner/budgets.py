"""LLM token budgets: every LLM call of a query is checked against its user's and its
agent's daily budgets before it is made, and its tokens (the provider's usage) are
counted after.

The check reads both counters; the count adds to each (a count that fails even after
retries is logged, never the call's failure: its answer is there, its tokens spent). A query
whose budget is spent ends with RATE_LIMITED (``BudgetExceeded``) naming the limit and
when it resets, and makes no further LLM call. Concurrent queries of one user can each
pass the check once more before seeing the others' tokens: the overspend is at most one
call per query. The OpenAI proxy's calls, which an agent makes as often and as many at
once as it likes, are counted before they are made instead (their most: the prompt,
estimated, and ``max_tokens``), and settled to the provider's count after.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from codeshot.errors import BudgetExceeded, Timeout
from codeshot.llm.base import (
    LLM,
    ChatMessage,
    Completion,
    call_ends,
    estimated_prompt_tokens,
    out_of_time,
)
from codeshot.store.usage import TokenUsage, UsageCounters, Window

if TYPE_CHECKING:
    from codeshot.services import Services

log = logging.getLogger("codeshot.runner")
USER_TOKENS = "tokens"  # per user per day
AGENT_TOKENS = "agent_tokens"  # per agent (the planner included) per day
WINDOW = "day"


class TokenBudget:
    """One query's budgets: its user's and, per LLM call, the calling agent's.

    ``user_limit`` is called at most once, at the first LLM call (a query answered
    without the LLM reads nothing)."""

    def __init__(self, usage: UsageCounters, user_id: str, user_limit: Callable[[], int],
                 agent_limit: int) -> None:
        self.usage, self.user_id, self.agent_limit = usage, user_id, agent_limit
        self._user_limit = user_limit
        self._limit: int | None = None

    def charges(self, agent_id: str) -> list[tuple[str, str]]:
        return [(USER_TOKENS, self.user_id), (AGENT_TOKENS, agent_id)]

    def check(self, agent_id: str, needed: int = 0) -> None:
        """Raise BudgetExceeded when the user's or the agent's tokens are spent, or would
        be by ``needed`` more."""
        if self._limit is None:
            self._limit = self._user_limit()
        now = self.usage.clock()
        user, agent = self.usage.token_usage(self.charges(agent_id), WINDOW, now)
        if user.used + max(needed, 1) > self._limit:
            raise exceeded(f"your daily LLM token limit of {self._limit}", user, now)
        if agent.used + max(needed, 1) > self.agent_limit:
            raise exceeded(f"agent {agent_id}'s daily LLM token limit of {self.agent_limit}",
                           agent, now)

    def reserve(self, agent_id: str, amount: int) -> datetime:
        """Count ``amount`` tokens of a call about to be made in both budgets, or raise
        BudgetExceeded counting none: concurrent calls of one caller cannot all pass a
        check against the same room (the OpenAI proxy's, which agents make at will).
        Returns the window's time, for :meth:`record` to settle the call in."""
        if self._limit is None:
            self._limit = self._user_limit()
        now = self.usage.clock()
        (user_kind, user), (agent_kind, agent) = self.charges(agent_id)
        for kind, subject, limit, name in (
                (user_kind, user, self._limit, f"your daily LLM token limit of {self._limit}"),
                (agent_kind, agent, self.agent_limit,
                 f"agent {agent_id}'s daily LLM token limit of {self.agent_limit}")):
            if not self.usage.reserve(kind, subject, amount, limit, WINDOW, now):
                if kind == agent_kind:  # the user's room, counted above, is given back
                    self.usage.add([(user_kind, user)], 0, 0, WINDOW, now, amount, calls=0)
                [used] = self.usage.token_usage([(kind, subject)], WINDOW, now)
                raise exceeded(name, used, now)
        return now

    def record(self, agent_id: str, completion: Completion, reserved: int = 0,
               at: datetime | None = None, calls: int = 1) -> None:
        """Count the call's tokens (less ``reserved``, counted at ``at`` already)."""
        try:
            self.usage.add(self.charges(agent_id), completion.input_tokens,
                           completion.output_tokens, WINDOW, at, reserved, calls)
        except Exception:
            log.exception("the tokens of %s's call for %s went uncounted: %d in, %d out",
                          agent_id, self.user_id, completion.input_tokens,
                          completion.output_tokens)

    def metered(self, llm: LLM, agent_id: str, reserve: bool = False) -> LLM:
        return MeteredLLM(llm, self, agent_id, reserve)


def budget_for(services: Services, user_id: str) -> TokenBudget:
    """The budgets of ``user_id``'s LLM calls: their own daily limit (read at the first
    call) or the platform's, and each agent's."""
    settings = services.settings

    def user_limit() -> int:
        own = services.users.get(user_id).daily_token_limit
        return settings.daily_token_limit if own is None else own

    return TokenBudget(services.usage, user_id, user_limit, settings.agent_daily_token_limit)


def exceeded(limit: str, usage: TokenUsage, now: datetime) -> BudgetExceeded:
    resets = Window.of(WINDOW, now).end.isoformat()
    return BudgetExceeded(
        f"{limit} is used up ({usage.used} tokens today); it resets at {resets}",
        used=usage.used, resets_at=resets,
    )


class MeteredLLM:
    """An LLM whose every call is checked against, and counted in, a query's budgets;
    with ``reserve``, each call's most (its prompt, estimated, and ``max_tokens``) is
    counted before it is made (:meth:`TokenBudget.reserve`) and settled after."""

    def __init__(self, llm: LLM, budget: TokenBudget, agent_id: str,
                 reserve: bool = False) -> None:
        self.llm, self.budget, self.agent_id, self.reserve = llm, budget, agent_id, reserve

    def complete(self, messages: list[ChatMessage], stop: list[str], max_tokens: int
                 ) -> Completion:
        ends = call_ends()
        if ends is not None and time.monotonic() >= ends:
            raise out_of_time()  # the provider would send nothing: nothing to count
        most = Completion("", estimated_prompt_tokens(messages), max_tokens)
        reserved, at = 0, None
        if self.reserve:
            reserved = most.input_tokens + most.output_tokens
            at = self.budget.reserve(self.agent_id, reserved)
        else:
            self.budget.check(self.agent_id)
        try:
            completion = self.llm.complete(messages, stop, max_tokens)
        except Timeout:
            # Cut off at the query's deadline: the model read the prompt and wrote nobody
            # knows how much of max_tokens; count the most.
            self.budget.record(self.agent_id, most, reserved, at)
            raise
        except BaseException:
            if reserved:  # not answered: the reservation is given back
                self.budget.record(self.agent_id, Completion("", 0, 0), reserved, at, calls=0)
            raise
        self.budget.record(self.agent_id, completion, reserved, at)
        return completion

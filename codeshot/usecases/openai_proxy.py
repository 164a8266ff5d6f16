"""The LLM for agents: Fixie 1.0's OpenAI proxy.

fixieai 1.0.4's loader points an agent's ``openai`` package (0.27) at
``{API}/api/openai-proxy/v1`` and sends, as the API key, the agent-call token of the
request it is answering. The platform answers with its own provider (bedrock, openai or
fewshot), so no provider key ever reaches an agent, and it counts every call as the
engine's own: against the token's user's daily LLM budget and the agent's, and against a
per-minute limit of calls per user and agent.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from codeshot.errors import CodeshotError, Forbidden, LLMError
from codeshot.llm import ChatMessage, Completion, LlmSettings, configured, get_llm
from codeshot.llm.base import calls_ending_by, estimated_prompt_tokens
from codeshot.models import Principal
from codeshot.runner.budgets import budget_for
from codeshot.services import Services

__all__ = ["ChatMessage", "Completion", "ProxyRequest", "complete"]
log = logging.getLogger("codeshot.api")
CALL_SECONDS = 25.0  # a proxied call ends by then: API Gateway answers 504 at 29 s


@dataclass(frozen=True)
class ProxyRequest:
    messages: list[ChatMessage]
    stop: list[str]
    max_tokens: int | None = None
    temperature: float | None = None


def complete(services: Services, caller: Principal, request: ProxyRequest) -> Completion:
    """One completion for the agent and user of ``caller`` (an agent token's principal)."""
    if not caller.user_id or not caller.agent_id:
        raise Forbidden("the OpenAI proxy needs an agent-call token issued for a user")
    settings = services.settings
    limit = settings.openai_proxy_max_tokens
    max_tokens = limit if request.max_tokens is None else max(1, min(request.max_tokens, limit))
    budget = budget_for(services, caller.user_id)
    # An agent writes this prompt, not the platform: it and the completion it asks for
    # must fit in what is left of the budgets (estimated from its length), or one call
    # could spend a day's many times. Checked before the per-minute charge, so a refused
    # call spends none of the minute's calls.
    prompt = estimated_prompt_tokens(request.messages)
    budget.check(caller.agent_id, prompt + max_tokens)
    services.usage.charge("llm_proxy", f"{caller.user_id}#{caller.agent_id}",
                          settings.openai_proxy_rate_limit, window="minute")
    llm = configured(get_llm(settings), LlmSettings(temperature=request.temperature))
    # Counted before it is made (calls at once all passed the check above together: 12
    # spent six times the day's budget), and held to an end within API Gateway's 29 s.
    metered = budget.metered(llm, caller.agent_id, reserve=True)
    try:
        with calls_ending_by(time.monotonic() + min(settings.llm_timeout_seconds,
                                                    CALL_SECONDS)):
            return metered.complete(request.messages, request.stop, max_tokens)
    except CodeshotError:
        raise
    except Exception as exc:  # a provider's bug, not the agent's: said as the engine does
        log.exception("the OpenAI proxy's call failed")
        raise LLMError("the language model's answer could not be read") from exc

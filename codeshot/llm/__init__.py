"""LLM providers: ``get_llm(settings)`` picks one; each imports its client lazily."""

from __future__ import annotations

from codeshot.llm.base import LLM, ChatMessage, Completion, LlmSettings, configured
from codeshot.settings import Settings

__all__ = ["LLM", "ChatMessage", "Completion", "LlmSettings", "configured", "get_llm"]


def get_llm(settings: Settings) -> LLM:
    """The provider ``settings.llm`` names, configured from settings."""
    if settings.llm == "bedrock":
        from codeshot.llm.bedrock import BedrockLLM

        return BedrockLLM(settings.llm_model, settings=settings)
    if settings.llm == "openai":
        from codeshot.llm.openai import OpenAILLM

        return OpenAILLM(settings.llm_model, settings.openai_base_url, settings.openai_api_key,
                         timeout=settings.llm_timeout_seconds, endpoint=settings.openai_endpoint)
    from codeshot.llm.fewshot import FewShotLLM

    return FewShotLLM()

"""``LlmSettings``: the model parameters an agent asks the platform to run it with.

Fixie 1.0's class: sent in the handshake as ``response_model`` and kept on the agent's
registry record as ``llm_settings``; the provider applies what its model allows.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field
from pydantic.dataclasses import dataclass

from codeshot.models import MAX_INT


@dataclass
class LlmSettings:
    """``model``: the provider's model id (None: the platform's); ``temperature``: 0 to 2;
    ``maximum_tokens``: most tokens per reply (1 to 2,147,483,647, as the platform takes)."""

    model: str | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    maximum_tokens: int | None = Field(default=None, ge=1, le=MAX_INT)

    def to_wire(self) -> dict[str, Any]:
        return {"maximum_tokens": self.maximum_tokens, "model": self.model,
                "temperature": self.temperature}

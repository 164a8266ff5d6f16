"""Lambda environment variables named from :class:`codeshot.settings.Settings` fields.

Building names from the Settings model (not typing them) means a renamed or misspelt
setting fails the synth instead of silently falling back to a default in AWS.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codeshot.settings import ENV_PREFIX as PREFIX
from codeshot.settings import env_names, field_named


def env_name(field: str) -> str:
    return env_names(field_named(field))[0]


def _text(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if not isinstance(value, (int, float)) else str(value)


def settings_env(**values: Any) -> dict[str, Any]:
    """``settings_env(registry_table=t.table_name)`` -> ``{"CODESHOT_REGISTRY_TABLE": ...}``.

    Values may be CDK tokens (strings that resolve at deploy time).
    """
    return {env_name(k): _text(v) for k, v in values.items()}


def extra_env(values: Mapping[str, str]) -> dict[str, str]:
    """User-supplied ``CODESHOT_*`` overrides from context, checked against Settings."""
    out = {}
    for name, value in values.items():
        if not name.startswith(PREFIX):
            raise KeyError(f"codeshot:extraEnv keys are CODESHOT_* settings, got {name!r}")
        out[env_name(name[len(PREFIX):].lower())] = str(value)
    return out

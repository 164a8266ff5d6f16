"""Lambda environment variables named from :class:`codeshot.settings.Settings` fields.

Building names from the Settings model (not typing them) means a renamed or misspelt
setting fails the synth instead of silently falling back to a default in AWS.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from codeshot.settings import ENV_PREFIX as PREFIX
from codeshot.settings import FIELDS, SettingsError, check_setting, env_names, field_named
from infra.config import CONTEXT_KEYS

FIELD_NAMES = {f.name for f in FIELDS}


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


# Settings a Lambda function cannot use: a synth that set them would deploy a failure.
LOCAL_ONLY = {"minilm_model": "is a directory on this machine, not in the functions: set "
                              "codeshot:routerModel to a model `codeshot router tune` made, "
                              "which the synth ships to them"}
# Values a Lambda function cannot run: the untuned minilm needs torch (too big for Lambda).
LOCAL_ONLY_VALUES = {("corpus_embedder", "minilm"): "is the untuned minilm, which needs torch: "
                                                     "Lambda's functions embed corpora with "
                                                     "static, hashing or bedrock"}
# Settings the stack sets from context keys of other names.
SET_BY = {"corpus_embedder": "codeshot:embedder", "minilm_graph": "codeshot:routerModel"}


def extra_env(values: Mapping[str, str]) -> dict[str, str]:
    """User-supplied ``CODESHOT_*`` overrides from context, each name and value checked as
    :class:`Settings` would read it in the Lambda: a bad one fails the synth, not a
    function's first cold start."""
    out = {}
    for name, value in values.items():
        field = name.removeprefix(PREFIX).lower()
        if not name.startswith(PREFIX) or field not in FIELD_NAMES:
            raise ValueError(f"codeshot:extraEnv: {name!r} is not a CODESHOT_* setting")
        if field in LOCAL_ONLY:
            raise ValueError(f"codeshot:extraEnv: {name} {LOCAL_ONLY[field]}")
        if (field, value) in LOCAL_ONLY_VALUES:
            raise ValueError(f"codeshot:extraEnv: {name}={value} "
                             f"{LOCAL_ONLY_VALUES[field, value]}")
        try:
            check_setting(field, str(value))
        except SettingsError as e:
            raise ValueError(f"codeshot:extraEnv: {e}") from None
        out[env_name(field)] = str(value)
    return out


def refuse_stack_settings(extra: Mapping[str, str], stack_env: Mapping[str, Any]) -> None:
    """A ValueError if ``codeshot:extraEnv`` sets what the stack sets for every function
    (from its resources or a context key): a function would read one value and its role
    be granted for the other (a Bedrock model), or point at a table it has no access to."""
    taken = sorted(set(extra) & set(stack_env))
    if taken:
        field = taken[0].removeprefix(PREFIX).lower()
        key = CONTEXT_KEYS.get(field) or SET_BY.get(field)
        instead = f"set {key} instead" if key else "it names one of the stack's own resources"
        raise ValueError(f"codeshot:extraEnv: {taken[0]} is set by the stack: {instead}")


def configured(env: Mapping[str, Any], field: str) -> Any:
    """What a function with environment ``env`` reads for ``field``: its variable's value,
    else the setting's default."""
    name = env_name(field)
    return check_setting(field, env[name]) if name in env else field_named(field).default

"""``codeshot:extraEnv``: each setting checked at synth as the Lambda would read it."""

from __future__ import annotations

import pytest

from infra.settings_env import extra_env


def test_extra_env_passes_good_settings_through_as_text():
    assert extra_env({"CODESHOT_DAILY_QUERY_LIMIT": 50, "CODESHOT_LLM": "fewshot",
                      "CODESHOT_ROUTER_FLOOR": "0.3"}) == {
        "CODESHOT_DAILY_QUERY_LIMIT": "50", "CODESHOT_LLM": "fewshot",
        "CODESHOT_ROUTER_FLOOR": "0.3"}


@pytest.mark.parametrize(("name", "value", "error"), [
    ("CODESHOT_QUERY_TIME_BUDGET_SECONDS", "two minutes", "not a number"),
    ("CODESHOT_QUERY_TIME_BUDGET_SECONDS", "0", "must be gt 0"),
    ("CODESHOT_LLM", "gpt", "expected one of bedrock, openai, fewshot"),
    ("CODESHOT_GRAPHQL_INTROSPECTION", "maybe", "expected bool"),
    ("CODESHOT_NO_SUCH_SETTING", "1", "is not a CODESHOT_\\* setting"),
    ("AWS_REGION", "eu-west-1", "is not a CODESHOT_\\* setting"),
    # a path of the synth's machine
    ("CODESHOT_MINILM_MODEL", "/srv/router-model", "set codeshot:routerModel"),
    ("CODESHOT_CORPUS_EMBEDDER", "minilm", "needs torch"),
])
def test_a_bad_setting_fails_the_synth_naming_it(name, value, error):
    """Before, a bad value reached the Lambda and failed each cold start there."""
    with pytest.raises(ValueError, match=f"^codeshot:extraEnv: .*{name}.*{error}"):
        extra_env({name: value})

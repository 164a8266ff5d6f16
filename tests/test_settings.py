"""Settings come from the environment; explicit values win; bad values are refused by name."""

import pytest

from codeshot.settings import Settings, SettingsError


def test_environment_is_read_and_explicit_values_win(monkeypatch):
    monkeypatch.setenv("CODESHOT_DAILY_QUERY_LIMIT", "7")
    monkeypatch.setenv("CODESHOT_LOCAL_MODE", "true")
    monkeypatch.setenv("CODESHOT_LLM", "openai")
    settings = Settings()
    assert (settings.daily_query_limit, settings.local_mode, settings.llm) == (7, True, "openai")
    assert Settings(llm="fewshot").llm == "fewshot"
    assert Settings(llm="fewshot").daily_query_limit == 7


def test_names_in_any_case_and_pydantic_boolean_words(monkeypatch):
    monkeypatch.delenv("CODESHOT_LLM", raising=False)
    monkeypatch.setenv("codeshot_llm", "openai")
    monkeypatch.setenv("CODESHOT_LOCAL_MODE", "t")
    assert (Settings().llm, Settings().local_mode) == ("openai", True)
    monkeypatch.setenv("CODESHOT_LLM", "bedrock")  # the exact name wins
    assert Settings().llm == "bedrock"


def test_aliases_are_read_in_order(monkeypatch):
    monkeypatch.delenv("CODESHOT_API_URL", raising=False)
    monkeypatch.setenv("FIXIE_API_URL", "https://fixie.example")
    assert Settings().api_url == "https://fixie.example"
    monkeypatch.setenv("CODESHOT_API_URL", "https://ours.example")
    assert Settings().api_url == "https://ours.example"


@pytest.mark.parametrize(("var", "value", "why"), [
    ("CODESHOT_DAILY_QUERY_LIMIT", "-1", "must be ge 0"),
    ("CODESHOT_DAILY_QUERY_LIMIT", "ten", "not a number"),
    ("CODESHOT_LLM", "gpt", "expected one of bedrock, openai, fewshot"),
    ("CODESHOT_LOCAL_MODE", "maybe", "expected bool"),
    ("CODESHOT_AGENT_TOKEN_TTL_SECONDS", "301", "must be le 300"),
    # GraphQL's Int is 32-bit: a profile showing a larger limit failed, INTERNAL.
    *[(var, "5000000000", "must be le 2147483647") for var in (
        "CODESHOT_DAILY_QUERY_LIMIT", "CODESHOT_DAILY_SESSION_LIMIT",
        "CODESHOT_DAILY_AGENT_CHANGES", "CODESHOT_DAILY_TOKEN_LIMIT",
        "CODESHOT_AGENT_DAILY_TOKEN_LIMIT", "CODESHOT_MAX_EMBED_BYTES",
        "CODESHOT_CORPUS_MAX_DOCUMENT_BYTES", "CODESHOT_CORPUS_MAX_BYTES")],
])
def test_bad_values_are_refused_naming_the_variable(monkeypatch, var, value, why):
    monkeypatch.setenv(var, value)
    with pytest.raises(SettingsError, match=f"^{var}='{value}': {why}$"):
        Settings()


def test_the_highest_limits_a_profile_can_show_are_taken(monkeypatch):
    monkeypatch.setenv("CODESHOT_DAILY_QUERY_LIMIT", "2147483647")
    assert Settings().daily_query_limit == 2**31 - 1


def test_overrides_are_checked_and_unknown_ones_refused(monkeypatch):
    assert Settings(reply_wait_seconds=2).reply_wait_seconds == 2.0
    with pytest.raises(SettingsError, match="agent_call_timeout_seconds=0"):
        Settings(agent_call_timeout_seconds=0)
    with pytest.raises(SettingsError, match="unknown settings: daily_limit"):
        Settings(daily_limit=3)
    base = Settings(llm="openai")
    assert base.replace(region="eu-west-1").llm == "openai"
    assert base.replace(region="eu-west-1") != base

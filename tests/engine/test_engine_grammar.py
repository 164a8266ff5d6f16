"""The Code Shot grammar: every rule, with the error text a few-shot author sees."""

from __future__ import annotations

import pytest

from codeshot.engine.fewshot import (
    FewShotError,
    Kind,
    Step,
    func_names,
    parse_few_shots,
    parse_lines,
    sample_queries,
    validate_base_prompt,
)
from codeshot.errors import InvalidInput

GOOD = "Q: What is the stock price for AAPL?\nAsk Func[quote]: AAPL\nFunc[quote] says: $150.12\nA: It is $150.12."


def error_of(few_shots: str | list[str]) -> str:
    with pytest.raises(FewShotError) as info:
        parse_few_shots(few_shots)
    assert isinstance(info.value, InvalidInput) and info.value.code == "INVALID_INPUT"
    return info.value.message


def test_every_line_kind_parses_into_typed_steps() -> None:
    text = """Q: Ask the weather agent, then the user
    Thought: I need the forecast
    Ask Agent[fixie/weather.bot]: Weather in Paris?
    Agent[fixie/weather.bot] says: Sunny
    Ask User: Do you want tomorrow too?
    User says: yes
    Ask Func[forecast_2]: Paris, tomorrow
    Func[forecast_2] says: Rain
    A: Sunny today, rain tomorrow."""
    [shot] = parse_few_shots(text)
    assert shot.steps == (
        Step(Kind.Q, "Ask the weather agent, then the user"),
        Step(Kind.THOUGHT, "I need the forecast"),
        Step(Kind.ASK_AGENT, "Weather in Paris?", "fixie/weather.bot"),
        Step(Kind.AGENT_SAYS, "Sunny", "fixie/weather.bot"),
        Step(Kind.ASK_USER, "Do you want tomorrow too?"),
        Step(Kind.USER_SAYS, "yes"),
        Step(Kind.ASK_FUNC, "Paris, tomorrow", "forecast_2"),
        Step(Kind.FUNC_SAYS, "Rain", "forecast_2"),
        Step(Kind.A, "Sunny today, rain tomorrow."),
    )
    assert shot.render() == "\n".join(line.strip() for line in text.split("\n"))


def test_text_splits_on_blank_lines_and_a_list_is_taken_as_is() -> None:
    text = f"\n  {GOOD}\n   \r\n\nQ: Hi\r\nA: Hello.\n\n"
    from_text = parse_few_shots(text)
    assert len(from_text) == 2
    assert from_text == parse_few_shots([GOOD, "Q: Hi\nA: Hello."])
    assert [s.text for s in from_text[1].steps] == ["Hi", "Hello."]


def test_several_turns_in_one_few_shot_interleave() -> None:
    [shot] = parse_few_shots(["Q: one\nA: 1\nQ: two\nAsk Func[f]: x\nFunc[f] says: y\nA: 2"])
    assert [turn[0].text for turn in shot.turns()] == ["one", "two"]
    assert [len(turn) for turn in shot.turns()] == [2, 4]


def test_must_start_with_q() -> None:
    assert error_of(["Thought: hm\nA: x"]) == (
        'few-shot 1, line 1: a few-shot must start with "Q:", got "Thought: hm"'
    )


def test_must_end_with_a() -> None:
    assert error_of([GOOD, "Q: x\nThought: still thinking"]) == (
        'few-shot 2, line 2: a few-shot must end with "A:", got "Thought: still thinking"'
    )


def test_ask_must_be_followed_by_its_says_line() -> None:
    shots = [GOOD, "Q: price of GOOG?\nAsk Func[quote]: GOOG\nA: It is $1."]
    assert error_of(shots) == (
        'few-shot 2, line 3: expected "Func[quote] says:" after "Ask Func[quote]: GOOG", '
        'got "A: It is $1."'
    )
    assert error_of(["Q: x\nAsk User: which?\nThought: wait\nUser says: a\nA: b"]) == (
        'few-shot 1, line 3: expected "User says:" after "Ask User: which?", got "Thought: wait"'
    )


def test_says_must_name_the_same_func_or_agent() -> None:
    assert error_of(["Q: x\nAsk Func[quote]: A\nFunc[price] says: 1\nA: 1"]) == (
        'few-shot 1, line 3: expected "Func[quote] says:" after "Ask Func[quote]: A", '
        'got "Func[price] says: 1"'
    )
    assert error_of(["Q: x\nAsk Agent[a/b]: hi\nAgent[a/c] says: yo\nA: yo"]) == (
        'few-shot 1, line 3: expected "Agent[a/b] says:" after "Ask Agent[a/b]: hi", '
        'got "Agent[a/c] says: yo"'
    )


def test_says_without_an_ask() -> None:
    assert error_of(["Q: x\nFunc[quote] says: 1\nA: 1"]) == (
        'few-shot 1, line 2: "Func[quote] says: 1" must follow its "Ask Func[quote]:" line'
    )
    assert error_of(["Q: x\nUser says: hi\nA: 1"]) == (
        'few-shot 1, line 2: "User says: hi" must follow its "Ask User:" line'
    )


def test_a_few_shot_cannot_end_on_an_ask() -> None:
    assert error_of(["Q: x\nAsk Agent[fixie/x]: hi"]) == (
        'few-shot 1, line 2: expected "Agent[fixie/x] says:" after "Ask Agent[fixie/x]: hi", '
        "got the end"
    )


def test_q_and_a_interleave() -> None:
    assert error_of(["Q: one\nQ: two\nA: x"]) == (
        'few-shot 1, line 2: "Q: two" comes before the previous "Q:" was answered with "A:"'
    )
    assert error_of(["Q: one\nA: 1\nThought: more\nA: 2"]) == (
        'few-shot 1, line 3: expected "Q:" after "A: 1", got "Thought: more"'
    )


def test_func_names_are_word_characters_and_agent_ids_owner_slash_handle() -> None:
    assert error_of(["Q: x\nAsk Func[get-quote]: A\nFunc[get-quote] says: 1\nA: 1"]) == (
        "few-shot 1, line 2: func name 'get-quote' must be letters, digits and _ "
        'in "Ask Func[get-quote]: A"'
    )
    assert "agent name 'a/b/c' must be" in error_of(["Q: x\nAsk Agent[a/b/c]: hi"])
    parse_few_shots(
        ["Q: x\nAsk Agent[dev-1/my.agent_2]: hi\nAgent[dev-1/my.agent_2] says: ok\nA: ok"]
    )
    parse_few_shots(["Q: x\nAsk Agent[planner]: hi\nAgent[planner] says: ok\nA: ok"])


def test_unknown_lines_blank_and_empty_few_shots() -> None:
    message = error_of(["Q: x\nThe answer is 4\nA: 4"])
    assert message.startswith(
        'few-shot 1, line 2: unknown line "The answer is 4"; lines start with "Q:"'
    )
    assert error_of(["Q: x\n\nA: 4"]) == "few-shot 1, line 2: blank line inside a few-shot"
    assert error_of([GOOD, "  "]) == "few-shot 2 is empty"
    assert error_of(["Q:\nA: 4"]) == 'few-shot 1, line 1: "Q:" has no text'


def test_long_lines_are_quoted_shortened() -> None:
    message = error_of(["A: " + "x" * 200])
    assert message.endswith('got "A: ' + "x" * 74 + '..."')


def test_base_prompt_is_trimmed_and_not_empty() -> None:
    assert validate_base_prompt("I quote stocks.") == "I quote stocks."
    for bad, why in [
        (" I quote stocks.", "whitespace"),
        ("I quote.\n", "whitespace"),
        ("", "empty"),
    ]:
        with pytest.raises(FewShotError, match=why):
            validate_base_prompt(bad)


def test_sample_queries_and_func_names() -> None:
    shots = parse_few_shots(
        [
            GOOD,
            (
                "Q: Compare AAPL and MSFT\nAsk Func[quote]: AAPL\nFunc[quote] says: 1\n"
                "Ask Func[history]: MSFT\nFunc[history] says: 2\nA: x\nQ: and now?\nA: same"
            ),
        ]
    )
    assert sample_queries(shots) == [
        "What is the stock price for AAPL?",
        "Compare AAPL and MSFT",
        "and now?",
    ]
    assert func_names(shots) == ["quote", "history"]


def test_lenient_parse_of_model_output_and_transcripts() -> None:
    steps = parse_lines(
        "Let me see.\nThought: need a quote\nAsk Func[quote]: GOOG\n  and more\nA: It is:\n- $1"
    )
    assert steps == [
        Step(Kind.THOUGHT, "Let me see."),
        Step(Kind.THOUGHT, "need a quote"),
        Step(Kind.ASK_FUNC, "GOOG\nand more", "quote"),
        Step(Kind.A, "It is:\n- $1"),
    ]
    # A bad target makes the line text, not an error: the model wrote it, not an author.
    assert parse_lines("A: see\nAsk Func[no such]: x") == [
        Step(Kind.A, "see\nAsk Func[no such]: x")
    ]


def test_multi_line_text_renders_indented_and_reads_back() -> None:
    step = Step(Kind.FUNC_SAYS, "line one\nA: not an answer", "quote")
    assert step.render() == "Func[quote] says: line one\n  A: not an answer"
    assert parse_lines(step.render()) == [step]
    assert Step.from_dict(step.to_dict()) == step

"""The offline ``fewshot`` provider: reading the prompt back, matching, substituting."""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Callable, Collection
from types import FrameType
from typing import Any

import pytest

from codeshot.engine.builtin import code_shot_components
from codeshot.engine.executor import Executor, TraceStep
from codeshot.engine.fewshot import Kind, Step, parse_few_shots
from codeshot.engine.prompt import STOP_SEQUENCES, read_examples, read_transcript
from codeshot.llm import fewshot
from codeshot.llm.fewshot import (
    CANT_HELP,
    NEEDS_LLM,
    NO_PLACE,
    FewShotLLM,
    miss,
    next_lines,
    similarity,
    substitute,
    word_substitutions,
)
from codeshot.models import MessageType

WEATHER = [
    (
        "Q: What's the weather in Paris tomorrow?\n"
        "Thought: I need the Paris forecast for tomorrow\n"
        "Ask Func[forecast]: Paris, tomorrow\n"
        "Func[forecast] says: 18C, light rain\n"
        "Thought: 18C, light rain is mild\n"
        "A: Tomorrow in Paris: 18C, light rain.\n"
        "Q: Will it snow in Berlin this week?\n"
        "A: I only forecast one day at a time."
    )
]


def test_the_prompt_the_engine_builds_reads_back() -> None:
    agent = Executor(code_shot_components("I forecast.", WEATHER, lambda n, t: ""), FewShotLLM())
    transcript = [Step(Kind.Q, "Weather in Oslo?"), Step(Kind.FUNC_SAYS, "5C\nwindy", "forecast")]
    messages = agent.messages("Weather in Oslo?", transcript)
    assert read_examples(messages) == parse_few_shots(WEATHER)
    assert read_transcript(messages) == transcript


def test_similarity_ignores_function_words_and_has_a_threshold() -> None:
    assert (
        similarity("What is the stock price for AAPL?", "What is the stock price for GOOG?") > 0.6
    )
    assert similarity("What is the capital of France?", "What is the stock price for AAPL?") == 0
    assert similarity("the of and", "the of and") == 0
    examples = parse_few_shots(WEATHER)
    # Why, for `agent test` to tell the agent's author what to reword, and a Thought for
    # the trace (`chat --trace`) to say the same.
    why = ("the nearest few-shot is \"What's the weather in Paris tomorrow?\": word overlap "
           "0.33, under the replay's 0.40")
    assert miss(examples, "Tell me a joke about weather") == why
    assert next_lines(examples, [Step(Kind.Q, "Tell me a joke about weather")]) == \
        f"Thought: No replay: {why}\nA: {CANT_HELP}"
    # no few-shots at all: a plain LLM agent, which nothing offline can stand in for
    assert next_lines([], [Step(Kind.Q, "Weather in Rome?")]) == f"A: {NEEDS_LLM}"
    assert next_lines(examples, []) == f"A: {CANT_HELP}"


def test_word_substitutions_align_the_differing_words() -> None:
    assert word_substitutions("between 0 and 100.", "between 0 and 19.") == {"100": "19"}
    assert word_substitutions("Compare AAPL and MSFT", "Compare GOOG and BRK.B") == {
        "AAPL": "GOOG", "MSFT": "BRK.B"
    }  # fmt: skip
    assert word_substitutions("price for AAPL", "price of Alphabet Inc") == {"AAPL": "Alphabet Inc"}
    # Replaced runs of unequal length map phrase to phrase; function words never map.
    assert word_substitutions("weather in Paris", "weather at New York") == {"Paris": "New York"}
    # The example's article goes with its run where the query's run has none: the Ask
    # line said "the green eggs and ham", so the Func counted 5 words.
    subs = word_substitutions('words in "the quick brown fox"', 'words in "green eggs and ham"')
    assert substitute("Ask Func[count_words]: the quick brown fox", subs) == \
        "Ask Func[count_words]: green eggs and ham"
    # Only an article: a preposition stays in the example's answer.
    subs = word_substitutions("weather in Paris tomorrow", "weather London tomorrow")
    assert substitute("A: Tomorrow in Paris: 5C.", subs) == "A: Tomorrow in London: 5C."
    assert substitute("0, 100 or 1000", {"100": "19"}) == "0, 19 or 1000"
    assert substitute("$150.12 and 150", {"$150.12": "$9.99", "150": "7"}) == "$9.99 and 7"


NOTES = ["Q: Save a note: buy milk\nAsk Func[add_note]: buy milk\n"
         "Func[add_note] says: Saved note 1: buy milk\nA: Saved note 1: buy milk"]


def test_words_added_or_left_out_reach_the_func() -> None:
    """Only replaced words were carried: "Save a note: buy oat milk" saved "buy milk",
    the example's note, and "Roll a d20 twice" lost its "twice"."""
    examples = parse_few_shots(NOTES)
    asked = {query: next_lines(examples, [Step(Kind.Q, query)]) for query in (
        "Save a note: milk", "Save a note: buy oat milk", "Save a note: buy milk tomorrow",
        "Save a note: please buy the milk")}
    assert asked == {
        "Save a note: milk": "Ask Func[add_note]: milk",
        "Save a note: buy oat milk": "Ask Func[add_note]: buy oat milk",
        "Save a note: buy milk tomorrow": "Ask Func[add_note]: buy milk tomorrow",
        # function words alone are nothing to carry
        "Save a note: please buy the milk": "Ask Func[add_note]: buy milk",
    }
    assert word_substitutions("Roll a d20", "Roll a d20 twice") == {"d20": "d20 twice"}


def test_thoughts_are_replayed_and_results_carried_into_the_answer() -> None:
    examples = parse_few_shots(WEATHER)
    query = Step(Kind.Q, "What's the weather in Oslo tomorrow?")
    assert next_lines(examples, [query]) == (
        "Thought: I need the Oslo forecast for tomorrow\nAsk Func[forecast]: Oslo, tomorrow"
    )
    done = [query, Step(Kind.ASK_FUNC, "Oslo, tomorrow", "forecast"),
            Step(Kind.FUNC_SAYS, "4C, snow", "forecast")]  # fmt: skip
    assert next_lines(examples, done) == (
        "Thought: 4C, snow is mild\nA: Tomorrow in Oslo: 4C, snow."
    )


def test_the_second_turn_of_a_few_shot_is_a_candidate_too() -> None:
    transcript = [Step(Kind.Q, "Will it snow in Madrid this week?")]
    assert next_lines(parse_few_shots(WEATHER), transcript) == (
        "A: I only forecast one day at a time."
    )


def test_completion_is_deterministic_counts_tokens_and_honours_max_tokens() -> None:
    agent = Executor(code_shot_components("I forecast.", WEATHER, lambda n, t: ""), FewShotLLM())
    messages = agent.messages("x", [Step(Kind.Q, "What's the weather in Oslo tomorrow?")])
    llm = FewShotLLM()
    full = llm.complete(messages, STOP_SEQUENCES, 100)
    assert full == llm.complete(messages, STOP_SEQUENCES, 100)
    assert full.output_tokens == len(full.text.split()) == 12
    assert full.input_tokens == sum(len(m.content.split()) for m in messages)
    short = llm.complete(messages, STOP_SEQUENCES, 4)
    assert (short.text, short.output_tokens) == ("Thought: I need the", 4)


DICE = ["Q: Roll two dice and blow on them first for good luck\nAsk Func[roll]: 6 2\n"
        "Func[roll] says: 4 3\nA: You rolled a 4 and a 3, with a total of 7.",
        "Q: Roll a d20\nAsk Func[roll]: 20 1\nFunc[roll] says: 12\nA: You rolled a 12!"]


def roll_transcript(query: str, ask: str, result: str) -> list[Step]:
    return [Step(Kind.Q, query), Step(Kind.ASK_FUNC, ask, "roll"),
            Step(Kind.FUNC_SAYS, result, "roll")]


def test_a_replay_never_contradicts_a_result() -> None:
    examples = parse_few_shots(DICE)
    # The example's total (7) cannot be carried: the results come as returned.
    assert next_lines(examples, roll_transcript("Roll two dice for luck", "6 2", "3 2")) == (
        "A: The offline replay cannot fit these results into its example's answer:\n"
        "  Func[roll] returned: 3 2")
    # More dice than the example rolled: nothing of the example's answer fits.
    assert next_lines(examples, roll_transcript("Roll three dice for luck", "6 3", "1 5 2")) == (
        "A: The offline replay cannot fit these results into its example's answer:\n"
        "  Func[roll] returned: 1 5 2")
    # What the example's answer carries, the replay carries.
    assert next_lines(examples, roll_transcript("Roll a d12", "12 1", "9")) == "A: You rolled a 9!"


def test_a_funcs_refusal_in_words_is_passed_on_not_put_where_its_number_was() -> None:
    """The dice Func answers a roll it cannot make in words: the replay made "You rolled a
    I roll 1 to 100 dice of 2 to 1000 sides.!", where a model says it could not."""
    examples = parse_few_shots(DICE)
    refusal = "I roll 1 to 100 dice of 2 to 1000 sides."
    assert next_lines(examples, roll_transcript("Roll a d20000", "20000 1", refusal)) == (
        "A: The offline replay cannot fit these results into its example's answer:\n"
        f"  Func[roll] returned: {refusal}")
    # A user's answer in words where the example's was a number is still carried.
    booking = parse_few_shots(["Q: Book a table\nAsk User: For how many?\nUser says: 4\n"
                               "A: Booked a table for 4."])
    assert next_lines(booking, [Step(Kind.Q, "Book a table"), Step(Kind.ASK_USER, "For how many?"),
                                Step(Kind.USER_SAYS, "four")]) == "A: Booked a table for four."


def test_below_the_threshold_it_says_it_is_an_offline_replay() -> None:
    answer = next_lines(parse_few_shots(DICE), [Step(Kind.Q, "What is the capital of France?")])
    assert answer.splitlines()[-1].startswith("A: No example of this agent is close to your question, and this "
                             "is an offline replay (the fewshot provider), not a language model")


def test_a_func_shown_replying_with_no_ask_is_left_to_the_engine() -> None:
    shots = ["Q: What time is it in my place?\nThought: I need the local time.\n"
             "Func[fixie_local_datetime] says: Monday 09:00\nA: It is Monday 09:00."]
    calls: list[tuple[str, str]] = []
    agent = Executor(code_shot_components(
        "I tell the time.", shots, lambda name, text: calls.append((name, text)) or "Friday 17:30"),
        FewShotLLM())
    outcome = agent.run("What time is it in my place now?")
    assert outcome.text == "It is Friday 17:30."
    assert calls == [("fixie_local_datetime", "")]


def test_numbers_match_numbers_in_the_overlap() -> None:
    """"What is a 20% tip on $50?" was refused against the few-shot "What is a 15% tip on
    $80?" (word overlap 0.33): only its numbers differ."""
    shots = ["Q: What is a 15% tip on $80?\nAsk Func[tip]: 15% of 80\n"
             "Func[tip] says: 12.00\nA: A 15% tip on $80 is $12.00."]
    assert similarity("What is a 15% tip on $80?", "What is a 20% tip on $50?") == 1.0
    assert similarity("What is a 15% tip on $80?", "What is a 20% fee?") == 0  # no word
    calls: list[str] = []

    def tip(name: str, text: str) -> str:
        calls.append(text)
        percent, amount = (float(n) for n in text.replace("%", "").split(" of "))
        return f"{percent * amount / 100:.2f}"

    outcome = Executor(code_shot_components("I work out tips.", shots, tip),
                       FewShotLLM()).run("What is a 20% tip on $50?")
    assert calls == ["20% of 50"]
    assert outcome.text == "A 20% tip on $50 is $10.00."


def test_an_ask_never_passes_on_the_examples_own_words() -> None:
    """"save a note" replayed "Save a note: buy milk" and saved "buy milk"; with numbers
    matching numbers, "a 20% tip" would work out 20% of the example's $80."""
    notes = parse_few_shots(["Q: Save a note: buy milk\nAsk Func[add_note]: buy milk\n"
                             "Func[add_note] says: Saved note 1: buy milk\n"
                             "A: Saved note 1: buy milk"])
    assert next_lines(notes, [Step(Kind.Q, "save a note")]) == (
        'Thought: No replay: the nearest few-shot, "Save a note: buy milk", would ask '
        f'"buy milk": buy, milk not in the question\nA: {CANT_HELP}')
    assert next_lines(notes, [Step(Kind.Q, "Save a note: buy oat milk")]) == \
        "Ask Func[add_note]: buy oat milk"
    tips = parse_few_shots(["Q: What is a 15% tip on $80?\nAsk Func[tip]: 15% of 80\n"
                            "Func[tip] says: 12.00\nA: A 15% tip on $80 is $12.00."])
    assert next_lines(tips, [Step(Kind.Q, "What is a 20% tip?")]).endswith(f"A: {CANT_HELP}")


def test_the_planners_hand_off_is_read_as_the_text_it_gives_and_given_stays_a_word():
    """A second task, "save it as a note (given: You rolled 15.)", was saved as "given You
    rolled 15"; and "given" is a word like any other where an agent's example uses it."""
    notes = parse_few_shots("Q: Save a note: buy milk\nAsk Func[add_note]: buy milk\n"
                            "Func[add_note] says: Saved note 1: buy milk\nA: Saved note 1.")
    assert next_lines(notes, [Step(Kind.Q, "save it as a note (given: You rolled 15.)")]) == \
        "Ask Func[add_note]: rolled 15"  # its run of words, trimmed as any query's
    profile = parse_few_shots("Q: What is my given name?\nAsk Func[profile]: given name\n"
                              "Func[profile] says: Ada\nA: Your given name is Ada.")
    assert next_lines(profile, [Step(Kind.Q, "What is my family name?")]) == \
        "Ask Func[profile]: family name"


def test_a_count_the_query_changed_reaches_the_func_call_or_the_replay_declines() -> None:
    """An article was a function word: "Roll two d20" replayed "Roll a d20" as "a d20"
    (one die), and an example that asks "20 1" for "a d20" had no place for "two"."""
    words = parse_few_shots("Q: Roll a d20\nAsk Func[roll]: a d20\nFunc[roll] says: 17\n"
                            "A: You rolled 17.")
    asked = {query: next_lines(words, [Step(Kind.Q, query)]) for query in (
        "Roll two d20", "Roll 3 d20", "Roll a pair of d20", "Roll one d20")}
    assert asked == {"Roll two d20": "Ask Func[roll]: two d20",
                     "Roll 3 d20": "Ask Func[roll]: 3 d20",
                     "Roll a pair of d20": "Ask Func[roll]: a pair of d20",
                     "Roll one d20": "Ask Func[roll]: one d20"}
    # A count replaced by an article, with the article: "a six-sided die", not "dice".
    pair = parse_few_shots("Q: Throw two six-sided dice\nAsk Func[roll]: two six-sided dice\n"
                           "Func[roll] says: 3 + 5 = 8\nA: You rolled 3 + 5 = 8.")
    assert next_lines(pair, [Step(Kind.Q, "Throw a six-sided die")]) == \
        "Ask Func[roll]: a six-sided die"
    assert next_lines(pair, [Step(Kind.Q, "Throw a pair of six-sided dice")]) == \
        "Ask Func[roll]: a pair of six-sided dice"
    # Asks that hold no word of the question: the replay would roll the example's count.
    coded = parse_few_shots([*DICE, "Q: Throw two six-sided dice\nAsk Func[roll]: 2d6\n"
                                    "Func[roll] says: 3 + 5 = 8\nA: You rolled 3 + 5 = 8."])
    assert next_lines(coded, [Step(Kind.Q, "Roll two d20")]) == (
        'Thought: No replay: the nearest few-shot, "Roll a d20", would ask "20 1": it has no '
        f'place for "two"\nA: {NO_PLACE}')
    assert next_lines(coded, [Step(Kind.Q, "Throw a six-sided die")]) == (
        'Thought: No replay: the nearest few-shot, "Throw two six-sided dice", would ask '
        f'"2d6": it has no place for "a"\nA: {NO_PLACE}')
    # What both say alike still replays.
    assert next_lines(coded, [Step(Kind.Q, "Throw two six-sided dice")]) == "Ask Func[roll]: 2d6"


def dice_example(query: str) -> tuple[list[str], str]:
    """The example dice agent, replayed: the Func calls the trace shows, and the answer."""
    from codeshot.local.examples.dice.agent import BASE_PROMPT, FEW_SHOTS, roll
    from codeshot.sdk import Message

    trace: list[TraceStep] = []
    agent = Executor(code_shot_components(BASE_PROMPT, [FEW_SHOTS],
                                          lambda name, text: roll(Message(text))),
                     FewShotLLM(), trace=trace.append)
    answer = agent.run(query).text
    return [t.text for t in trace if t.type is MessageType.FUNC_CALL], answer


def rolled(query: str) -> tuple[list[str], list[int]]:
    """The dice example's Func calls for ``query``, and the dice its answer states."""
    asks, answer = dice_example(query)
    shown = re.fullmatch(r"You rolled (\d+(?: \+ \d+)*)(?: = \d+)?\.", answer)
    assert shown, answer
    return asks, [int(n) for n in shown.group(1).split(" + ")]


def test_the_dice_example_rolls_the_dice_said_in_words() -> None:
    """The example dice agent, replayed: "Roll two d20" rolled one d20 and "Throw a
    six-sided die" two dice (its Ask was "2d6", and its Func read "two d20" as one)."""
    dice = {query: rolled(query) for query in (
        "Roll two d20", "Throw a six-sided die", "roll 3d6", "roll a d20",
        "roll me a twenty-sided die", "roll a pair of dice", "Throw three six-sided dice")}
    calls = {query: (asks, len(rolls)) for query, (asks, rolls) in dice.items()}
    assert calls == {
        "Roll two d20": (["two d20"], 2),
        "Throw a six-sided die": (["a six-sided die"], 1),
        "roll 3d6": (["3d6"], 3),
        "roll a d20": (["a d20"], 1),
        "roll me a twenty-sided die": (["a twenty-sided die"], 1),
        "roll a pair of dice": (["a pair of dice"], 2),
        "Throw three six-sided dice": (["three six-sided dice"], 3),
    }
    sides = {"Roll two d20": 20, "roll a d20": 20, "roll me a twenty-sided die": 20}
    assert all(1 <= n <= sides.get(query, 6) for query, (_, rolls) in dice.items()
               for n in rolls)


QUOTE = ["Q: What is the price of AMZN?\nAsk Func[quote]: AMZN\nFunc[quote] says: 178.25\n"
         "A: AMZN is trading at $178.25.",
         "Q: How much is Tesla stock?\nAsk Func[quote]: TSLA\nFunc[quote] says: 251.10\n"
         "A: TSLA is trading at $251.10."]
WORDS = ["Q: Roll a d20\nAsk Func[roll]: a d20\nFunc[roll] says: 17\nA: You rolled 17."]


def test_a_number_that_counts_nothing_the_ask_receives_still_replays() -> None:
    """Any number the example lacked made the replay decline: "How much is Tesla stock at
    3pm?" had "no place for "at 3pm"", and "Today at 5: save a note: buy milk" saved
    nothing. A number is a count only where the example said one or right before a
    word its Ask receives; a year, a time or a "#2" elsewhere a model would drop too."""
    asked = {query: next_lines(parse_few_shots(examples), [Step(Kind.Q, query)])
             for examples, query in (
                 (QUOTE, "How much is Tesla stock at 3pm?"),
                 (QUOTE, "In 2024, what is the price of AMZN?"),
                 (QUOTE, "Quick question #2: what is the price of AMZN?"),
                 (NOTES, "Today at 5: save a note: buy milk"),
                 (WORDS, "In 2024, roll a d20"))}
    assert asked == {"How much is Tesla stock at 3pm?": "Ask Func[quote]: TSLA",
                     "In 2024, what is the price of AMZN?": "Ask Func[quote]: AMZN",
                     "Quick question #2: what is the price of AMZN?": "Ask Func[quote]: AMZN",
                     "Today at 5: save a note: buy milk": "Ask Func[add_note]: buy milk",
                     "In 2024, roll a d20": "Ask Func[roll]: a d20"}


def test_a_count_only_the_answer_holds_was_never_asked_for() -> None:
    """"Book two tables for 2 at 8pm" booked one table ("8pm, 2") and answered "Done:
    tables 4...": the answer held "table", so the count had a place. Only an Ask is one."""
    booking = parse_few_shots("Q: Book a table for 2 at 8pm\nAsk Func[book]: 8pm, 2\n"
                              "Func[book] says: Booked table 4 for 2 at 8pm\n"
                              "A: Done: table 4 for 2 people at 8pm.")
    assert next_lines(booking, [Step(Kind.Q, "Book two tables for 2 at 8pm")]) == (
        'Thought: No replay: the nearest few-shot, "Book a table for 2 at 8pm", would ask '
        f'"8pm, 2": it has no place for "two tables"\nA: {NO_PLACE}')
    # A number the example has no count beside is no count ("from 2024"): it replays.
    notes = parse_few_shots("Q: What are my notes?\nAsk Func[list_notes]: all\n"
                            "Func[list_notes] says: 1. buy milk\nA: Your notes: 1. buy milk")
    assert next_lines(notes, [Step(Kind.Q, "What are my notes from 2024?")]) == \
        "Ask Func[list_notes]: all"


def test_a_count_after_a_function_word_is_still_a_count() -> None:
    """"Roll me two d20" declined ("no place for "me two"") and "Throw me a six-sided die"
    said "two not in the question": a function word before the count hid it."""
    words, pair = parse_few_shots(WORDS), parse_few_shots(
        "Q: Throw two six-sided dice\nAsk Func[roll]: two six-sided dice\n"
        "Func[roll] says: 3 + 5 = 8\nA: You rolled 3 + 5 = 8.")
    asked = {query: next_lines(examples, [Step(Kind.Q, query)]) for examples, query in (
        (words, "Roll me two d20"), (words, "Roll me 2 d20"), (words, "Roll the two d20"),
        (pair, "Throw me a six-sided die"))}
    assert asked == {"Roll me two d20": "Ask Func[roll]: two d20",
                     "Roll me 2 d20": "Ask Func[roll]: 2 d20",
                     "Roll the two d20": "Ask Func[roll]: two d20",
                     "Throw me a six-sided die": "Ask Func[roll]: a six-sided die"}



def test_the_dice_example_rolls_every_count_it_reads_and_refuses_the_rest() -> None:
    """"Roll a couple of dice", "Roll a dozen dice", "Roll eleven d6" and "Roll some dice"
    each rolled ONE die: a word the Func could not read before the dice counted one."""
    counts = {query: (asks, len(dice)) for query in (
        "Throw a couple of six-sided dice", "Roll a couple of dice", "Roll a dozen dice",
        "Roll eleven d6") for asks, dice in [rolled(query)]}
    assert counts == {"Throw a couple of six-sided dice": (["a couple of six-sided dice"], 2),
                      "Roll a couple of dice": (["a couple of dice"], 2),
                      "Roll a dozen dice": (["a dozen dice"], 12),
                      "Roll eleven d6": (["eleven d6"], 11)}
    asks, answer = dice_example("Roll some dice")
    assert asks == ["some dice"]
    assert "I can't read 'some dice' as dice" in answer and "You rolled" not in answer, answer


def test_the_dice_func_reads_a_whole_request_as_a_model_may_pass_it() -> None:
    """A model may hand the Func the user's words: "Roll d20" and "roll the dice" are one
    die (the verb is no count), "roll 0 d6" is refused, not read as one die; a number word
    is read ("fifteen") and any other word before the dice is refused, not one die."""
    from codeshot.local.examples.dice.agent import roll
    from codeshot.sdk import Message

    answers = {text: roll(Message(text)) for text in (
        "Roll d20", "roll the dice", "roll 0 d6", "Roll fifteen d6", "Roll a trio of dice",
        "Roll two pairs of dice", "Roll a handful of dice")}
    assert re.fullmatch(r"([1-9]|1\d|20)", answers["Roll d20"]), answers
    assert re.fullmatch(r"[1-6]", answers["roll the dice"]), answers
    assert answers["roll 0 d6"] == "I roll 1 to 100 dice of 2 to 1000 sides."
    assert answers["Roll fifteen d6"].count(" + ") == 14, answers
    # Rolled again: "twice", "3 times" (the replay passes them on; they rolled one die).
    assert roll(Message("a d20 3 times")).count(" + ") == 2
    assert roll(Message("a d20 twice")).count(" + ") == 1
    assert roll(Message("a d20 many times")).startswith("I can't read")
    assert roll(Message("roll d20x3")).count(" + ") == 2  # fused: one die was rolled
    assert roll(Message("roll 2d6 3x")).count(" + ") == 5
    assert roll(Message("roll d20 x 1000")) == "I roll 1 to 100 dice of 2 to 1000 sides."
    for vague in ("Roll a trio of dice", "Roll two pairs of dice", "Roll a handful of dice"):
        assert answers[vague].startswith("I can't read"), answers


def test_a_count_of_thousands_of_digits_is_past_the_dice_limit_not_a_crash() -> None:
    """"Roll <4301 nines> d20" ended the query LLM_ERROR "internal error" (the replay's
    int() refuses more than 4300 digits), and the dice Func raised the same: a number
    that long is a count like any other, over the dice agent's limit."""
    huge = "9" * 4301
    for query in (f"Roll {huge} d20", f"Roll a d{huge}"):
        asks, answer = dice_example(query)
        assert asks == [query.removeprefix("Roll ")], query
        assert answer.endswith("returned: I roll 1 to 100 dice of 2 to 1000 sides."), query


# The benchmark's dice, converter and booking agents (benchmarks/engine.py), in part.
CODED = parse_few_shots(
    "Q: Roll a d20\nAsk Func[roll]: 20 1\nFunc[roll] says: 12\nA: You rolled a 12!\n\n"
    "Q: Roll two dice and blow on them first\nAsk Func[roll]: 6 2\nFunc[roll] says: 4 3\n"
    "A: You rolled a 4 and a 3, 7 in total.")
CONVERTER = parse_few_shots(
    "Q: How many km is 5 miles?\nAsk Func[convert]: 5, mi, km\nFunc[convert] says: 8.05\n"
    "A: 5 miles is 8.05 km.\n\nQ: What is 70 kg in pounds?\nAsk Func[convert]: 70, kg, lb\n"
    "Func[convert] says: 154.32\nA: 70 kg is 154.32 lb.")
BOOKING = parse_few_shots(
    "Q: Book a table for 2 at 8pm\nAsk Func[book]: 8pm, 2\n"
    "Func[book] says: Booked table 4 for 2 at 8pm\nA: Done: table 4 for 2 people at 8pm.\n\n"
    "Q: I need a table for 5 people\nAsk User: At what time?\nUser says: 1pm\n"
    "Ask Func[book]: 1pm, 5\nFunc[book] says: Booked table 2 for 5 at 1pm\n"
    "A: Done: table 2 for 5 people at 1pm.")


def test_a_number_fused_with_letters_or_before_times_is_a_count_wherever_it_stands() -> None:
    """"Roll two d12" rolled two d6 ("6 2") and "Roll a d20 3 times" one d20 ("20 1"): a
    number was a count only right before a word the Ask receives."""
    declined = {query: next_lines(CODED, [Step(Kind.Q, query)]).splitlines()[-1] for query in (
        "Roll two d12", "Roll a d20 3 times", "Roll 3 times a d20", "Roll a d20 and a d6",
        "Roll a d20 x3")}
    assert declined == dict.fromkeys(declined, f"A: {NO_PLACE}")
    # A time or an ordinal is no count.
    assert next_lines(CODED, [Step(Kind.Q, "Roll a d20 at 3pm")]) == "Ask Func[roll]: 20 1"
    assert next_lines(CODED, [Step(Kind.Q, "Roll a d20 for the 2nd time")]) == \
        "Ask Func[roll]: 20 1"
    asks, answer = dice_example("Roll 3 times a d20")  # it rolled "a d20"
    assert (asks, answer) == ([], NO_PLACE)
    # "3x" had a place ("d20" -> "d20 3x"), but "a d20" -> "2 d20" took the Ask first.
    assert next_lines(parse_few_shots(WORDS), [Step(Kind.Q, "Roll 2 d20 3x")]) == (
        'Thought: No replay: the nearest few-shot, "Roll a d20", would ask "2 d20": it has no '
        f'place for "3x"\nA: {NO_PLACE}')


def test_a_number_the_alignment_misplaced_is_not_passed_on() -> None:
    """"Convert 10 miles to km in 2 minutes" converted 2 miles: the alignment put "2"
    where the example's "5" (of "5 miles") was."""
    assert next_lines(CONVERTER, [Step(Kind.Q, "Convert 10 miles to km in 2 minutes")]) == (
        'Thought: No replay: the nearest few-shot, "How many km is 5 miles?", would ask '
        '"2, mi, km": the question\'s number for "5" is not where the example\'s was\n'
        f"A: {NO_PLACE}")
    assert next_lines(CONVERTER, [Step(Kind.Q, "How many km is 10 miles?")]) == \
        "Ask Func[convert]: 10, mi, km"
    assert next_lines(CONVERTER, [Step(Kind.Q, "How many pounds is 3 kg?")]) == \
        "Ask Func[convert]: 3, kg, lb"


def test_a_number_before_punctuation_counts_nothing_after_it() -> None:
    """"In 2024, table for 8 people please" declined (no place for "In 2024"): the run "I
    need a" -> "In 2024" changed the example's count "a"."""
    asked = {query: next_lines(BOOKING, [Step(Kind.Q, query)]) for query in (
        "Table for 8 people please", "In 2024, Table for 8 people please",
        "Today at 5: Table for 8 people please", "Quick question #2: Table for 8 people please")}
    assert asked == dict.fromkeys(asked, "Ask User: At what time?")


def test_a_count_said_otherwise_is_mapped_apart_from_the_words_before_it() -> None:
    """"Roll a pair of six-sided dice" said "No example of this agent is close" ("two not
    in the question"): "Throw two" -> "Roll a pair of" was mapped as one phrase."""
    counts = {query: (asks, len(dice)) for query in (
        "Roll a pair of six-sided dice", "Roll a couple of six-sided dice")
        for asks, dice in [rolled(query)]}
    assert counts == {"Roll a pair of six-sided dice": (["a pair of six-sided dice"], 2),
                      "Roll a couple of six-sided dice": (["a couple of six-sided dice"], 2)}
    # A count the replay cannot place is said to be one, not "no example is close".
    pair = parse_few_shots("Q: Throw two six-sided dice\nAsk Func[roll]: two six-sided dice\n"
                           "Func[roll] says: 3 + 5 = 8\nA: You rolled 3 + 5 = 8.")
    assert next_lines(pair, [Step(Kind.Q, "Roll a handful of six-sided dice")]) == (
        'Thought: No replay: the nearest few-shot, "Throw two six-sided dice", would ask '
        f'"two six-sided dice": two not in the question\nA: {NO_PLACE}')


def lines_run(call: Callable[[], object], files: Collection[str] = (fewshot.__file__,)) -> int:
    """How many lines of the replay's code (or of ``files``) ``call`` runs: its work,
    counted, not timed."""
    count = 0

    def line(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        count += event == "line"
        return line

    def enter(frame: FrameType, event: str, arg: Any) -> Any:
        return line if frame.f_code.co_filename in files else None

    sys.settrace(enter)
    try:
        call()
    finally:
        sys.settrace(None)
    return count


ROLLED = parse_few_shots([*WORDS, "Q: Roll 3d8\nAsk Func[roll]: 3d8\n"
                          "Func[roll] says: 4 + 2 + 7 = 13\nA: You rolled 4 + 2 + 7 = 13."])


def func_reply(n: int) -> None:
    sums = " + ".join(["3"] * n) + f" = {3 * n}"
    next_lines(ROLLED, [Step(Kind.Q, "Roll 3d8"), Step(Kind.ASK_FUNC, "3d8", "roll"),
                        Step(Kind.FUNC_SAYS, sums, "roll")])


@pytest.mark.parametrize("replay", [
    func_reply,  # a Func's reply of n numbers
    lambda n: next_lines(ROLLED, [Step(Kind.Q, "Roll a d20 " + " ".join(["two"] * n))]),
    # (within the words the replay aligns, MAX_ALIGNED: 100 x 400 at most)
    lambda n: word_substitutions(" ".join(["3"] * (n // 20)), " ".join(["4"] * (n // 5))),
    lambda n: word_substitutions(" ".join(["5 miles"] * (n // 20)),
                                 " ".join(["10 miles"] * (n // 20))),
], ids=["a Func's long reply", "a long query", "an example of many numbers",
        "many numbers beside a word"])
def test_the_replay_of_a_text_twice_as_long_does_twice_the_work(
        replay: Callable[[int], object]) -> None:
    """An agent's Func replying "3 + 3 + ... = 60000" (80 kB, under the reply limit) took
    10 s of the runner's CPU per replay step: each word re-read the rest of the run for a
    count (three words at most), each number of an example rescanned the whole reply."""
    once, twice = (lines_run(lambda n=n: replay(n)) for n in (1000, 2000))
    assert twice < 2.2 * once, (once, twice)  # was 3.9 times


ALIGNING = (fewshot.__file__, difflib.__file__)  # the replay's work and its alignment's


def walked(n: int) -> str:
    """The replay's answer after a Func replied 5 * n times "10 miles" where its few-shot
    replied n times "5 miles"."""
    legs = " ".join(["5 miles"] * n)
    walk = parse_few_shots(f"Q: How far is the walk?\nAsk Func[distance]: the walk\n"
                           f"Func[distance] says: {legs}\nA: The walk is {legs}.")
    return next_lines(walk, [Step(Kind.Q, "How far is the walk?"),
                             Step(Kind.ASK_FUNC, "the walk", "distance"),
                             Step(Kind.FUNC_SAYS, " ".join(["10 miles"] * 5 * n), "distance")])


def test_a_long_repetitive_reply_is_replaced_whole_not_aligned_word_by_word() -> None:
    """A few-shot's reply of 200 x "5 miles" against a Func's 1,000 x "10 miles" (9 kB)
    took 3 to 6 s of the runner's CPU per replay step: difflib's alignment of repetitive words
    grows with their cube. The answer carries the reply whole, as it did."""
    once, twice = (lines_run(lambda n=n: walked(n), ALIGNING) for n in (50, 100))
    assert twice < 2.2 * once, (once, twice)  # was 7.8 times
    assert walked(200) == "A: The walk is " + " ".join(["10 miles"] * 1000) + "."


def test_a_question_too_long_to_align_with_its_few_shot_is_declined_saying_why() -> None:
    """The same alignment of a long question against a long few-shot question: the replay
    declines, as for a question it has no example for, and its Thought says why."""

    def asked(n: int) -> str:
        walk = "Walk " + " ".join(["5 miles"] * (n // 16))
        legs = parse_few_shots(f"Q: {walk}\nAsk Func[walk]: 5 miles\nFunc[walk] says: done\n"
                               "A: Walked.")
        return next_lines(legs, [Step(Kind.Q, "Walk " + " ".join(["10 miles"] * n))])

    once, twice = (lines_run(lambda n=n: asked(n), ALIGNING) for n in (400, 800))
    assert twice < 2.2 * once, (once, twice)  # was 7.4 times
    walk = "Walk " + " ".join(["5 miles"] * 50)
    assert asked(800) == (
        "Thought: No replay: the question (1601 words) is too long to align word by word with "
        f'the nearest few-shot, "{walk}" (101 words): the replay aligns 40,000 pairs of '
        f"words at most\nA: {CANT_HELP}")

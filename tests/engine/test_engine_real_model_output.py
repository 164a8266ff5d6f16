"""Real model output through the engine: every recorded query of ``llm_transcripts/``
(four small models, two endpoints) replayed by an OpenAI-compatible server on loopback
that returns the recorded texts, through the ``openai`` provider.

The outcomes issue 15 asks for: a reply that adds no step gets one corrective re-prompt
(never an identical re-send) and then a clean LLM_ERROR, so a step that adds nothing costs
at most 2 LLM calls; a placeholder command (``Func[name]``) is not called; input a Func's
typed parameters refuse goes back to the model once, and the user gets the failure
explained, not the model's paraphrase of it; answers that ran on are cut at the protocol;
invented numbers are flagged.
"""

from __future__ import annotations

import itertools

import pytest

from codeshot.engine.executor import Status
from codeshot.engine.prompt import CORRECTION_HEADER
from codeshot.models import MessageType
from tests.engine.real_models import recording_names, records, replay

# (recording, query index) -> (DONE or error code, LLM calls, answer, Funcs run, flagged)
OUTCOMES = {
    # gemma-3-270m-base.chat.jsonl
    ('gemma-3-270m-base.chat', 0): ('DONE', 2, 'You rolled a 4, 3, and 6, for a total of 12.', [('roll', '6 2')], True),
    ('gemma-3-270m-base.chat', 1): ('LLM_ERROR', 3, 'Sorry, the language model gave no usable step: the reply was empty.', [('roll', '10 2')], False),
    ('gemma-3-270m-base.chat', 2): ('LLM_ERROR', 3, 'Sorry, the language model gave no usable step: the reply was empty.', [('roll', '4 2')], False),
    ('gemma-3-270m-base.chat', 3): ('LLM_ERROR', 3, 'Sorry, the language model gave no usable step: the reply was empty.', [('roll', '100 2')], False),
    ('gemma-3-270m-base.chat', 4): ('DONE', 2, 'GOOG is trading at $171.42 and is currently down 30% from its high of $185.69.', [('quote', 'GOOG')], True),
    ('gemma-3-270m-base.chat', 5): ('LLM_ERROR', 2, 'Sorry, the language model gave no usable step: the reply was empty.', [], False),
    # qwen2.5-coder-0.5b-instruct.chat.jsonl
    ('qwen2.5-coder-0.5b-instruct.chat', 0): ('DONE', 2, 'You rolled a 4!', [('roll', '6 1')], False),
    ('qwen2.5-coder-0.5b-instruct.chat', 1): ('DONE', 2, 'You rolled a 4 and a 9, for a total of 13.', [('roll', '10 2')], False),
    ('qwen2.5-coder-0.5b-instruct.chat', 2): ('DONE', 2, "Sorry, I could not finish: Func[roll] failed (roll expects (size, count), got '4 4 4 4').", [], False),
    ('qwen2.5-coder-0.5b-instruct.chat', 3): ('DONE', 2, 'You rolled a 4!', [('roll', '100 1')], False),
    ('qwen2.5-coder-0.5b-instruct.chat', 4): ('DONE', 2, 'GOOG is trading at $171.42.', [('quote', 'GOOG')], False),
    ('qwen2.5-coder-0.5b-instruct.chat', 5): ('DONE', 1, 'AAPL is at $105.20 and MSFT is at $134.80, so AAPL is higher.', [], True),
    # qwen2.5-coder-0.5b-instruct.completions.jsonl
    ('qwen2.5-coder-0.5b-instruct.completions', 0): ('DONE', 2, "Sorry, I could not finish: Func[roll] failed (roll expects (size, count), got '6').", [], False),
    ('qwen2.5-coder-0.5b-instruct.completions', 1): ('DONE', 2, 'You rolled a 4 and a 9, for a total of 13.', [('roll', '10 2')], False),
    ('qwen2.5-coder-0.5b-instruct.completions', 2): ('DONE', 2, "Sorry, I could not finish: Func[roll] failed (roll expects (size, count), got '4 4 4 4').", [], False),
    ('qwen2.5-coder-0.5b-instruct.completions', 3): ('DONE', 2, "Sorry, I could not finish: Func[roll] failed (roll expects (size, count), got '100').", [], False),
    ('qwen2.5-coder-0.5b-instruct.completions', 4): ('DONE', 2, 'GOOG is trading at $171.42.', [('quote', 'GOOG')], False),
    ('qwen2.5-coder-0.5b-instruct.completions', 5): ('DONE', 3, 'AAPL is at $227.15 and MSFT is at $415.60, so MSFT is higher.', [('quote', 'AAPL'), ('quote', 'MSFT')], False),
    # qwen2.5-coder-1.5b-instruct.chat.jsonl
    ('qwen2.5-coder-1.5b-instruct.chat', 0): ('DONE', 2, "Sorry, I could not finish: Func[roll] failed (roll expects (size, count), got '6').", [], False),
    ('qwen2.5-coder-1.5b-instruct.chat', 1): ('DONE', 2, 'You rolled a 4 and a 9, for a total of 13.', [('roll', '10 2')], False),
    ('qwen2.5-coder-1.5b-instruct.chat', 2): ('DONE', 2, 'You rolled a 4, 3, 2, and 1, for a total of 10.', [('roll', '6 4')], False),
    ('qwen2.5-coder-1.5b-instruct.chat', 3): ('DONE', 2, "Sorry, I could not finish: Func[roll] failed (roll expects (size, count), got '100').", [], False),
    ('qwen2.5-coder-1.5b-instruct.chat', 4): ('LLM_ERROR', 2, 'Sorry, the language model gave no usable step: there is no Func[name].', [], False),
    ('qwen2.5-coder-1.5b-instruct.chat', 5): ('DONE', 1, 'AAPL is at $170.25 and MSFT is at $349.80, so AAPL is higher.', [], True),
    # qwen2.5-coder-1.5b-instruct.completions.jsonl
    ('qwen2.5-coder-1.5b-instruct.completions', 0): ('DONE', 2, 'You rolled a 4!', [('roll', '6 1')], False),
    ('qwen2.5-coder-1.5b-instruct.completions', 1): ('DONE', 2, 'You rolled a 4 and a 9, for a total of 13.', [('roll', '10 2')], False),
    ('qwen2.5-coder-1.5b-instruct.completions', 2): ('DONE', 2, 'You rolled a 4, 3, 2, and 1, for a total of 10.', [('roll', '6 4')], False),
    ('qwen2.5-coder-1.5b-instruct.completions', 3): ('DONE', 2, 'You rolled a 4!', [('roll', '100 1')], False),
    ('qwen2.5-coder-1.5b-instruct.completions', 4): ('DONE', 2, 'GOOG is trading at $171.42.', [('quote', 'GOOG')], False),
    ('qwen2.5-coder-1.5b-instruct.completions', 5): ('DONE', 3, 'AAPL is at $227.15 and MSFT is at $415.60, so AAPL is higher.', [('quote', 'AAPL'), ('quote', 'MSFT')], False),
    # smollm2-135m-instruct.chat.jsonl
    ('smollm2-135m-instruct.chat', 0): ('DONE', 1, "You rolled a 6, and you're going to roll another one.", [], True),
    ('smollm2-135m-instruct.chat', 1): ('DONE', 1, 'You rolled a 2, 10.', [], True),
    ('smollm2-135m-instruct.chat', 2): ('DONE', 1, "You rolled a 4, and you're going to blow your own head off.", [], True),
    ('smollm2-135m-instruct.chat', 3): ('DONE', 1, 'You rolled a 100, for a total of 21.', [], True),
    ('smollm2-135m-instruct.chat', 4): ('DONE', 1, 'GOOG', [], False),
    ('smollm2-135m-instruct.chat', 5): ('LLM_ERROR', 2, 'Sorry, the language model gave no usable step: it wrote a new question ("Q: What is the difference between Apple and Microsoft?"); only the user asks questions.', [], False),
    # smollm2-135m-instruct.completions.jsonl
    ('smollm2-135m-instruct.completions', 0): ('DONE', 2, "You rolled a 4, and you're going to roll another.", [('roll', '6 1')], False),
    ('smollm2-135m-instruct.completions', 1): ('DONE', 2, "You rolled a 4, and you're going to blow your own head off.", [('roll', '20 1')], False),
    ('smollm2-135m-instruct.completions', 2): ('DONE', 2, "You rolled a 4, and you're going to blow up.", [('roll', '4 5')], False),
    ('smollm2-135m-instruct.completions', 3): ('DONE', 2, "Sorry, I could not finish: Func[roll] failed (roll expects (size, count), got '100').", [], False),
    ('smollm2-135m-instruct.completions', 4): ('DONE', 2, "GOOG is at $171.42, so it's higher than the price of Apple.", [('quote', 'GOOG')], False),
    ('smollm2-135m-instruct.completions', 5): ('DONE', 2, "MSFT is at $415.60, so it's higher than AAPL.", [('quote', 'MSFT')], False),
}


def test_every_recorded_query_is_covered() -> None:
    recorded = {(name.removesuffix(".jsonl"), i)
                for name in recording_names() for i in range(len(records(name)))}
    assert recorded == set(OUTCOMES)


@pytest.mark.parametrize(("name", "index"), sorted(OUTCOMES), ids=str)
def test_recorded_output_has_its_defined_outcome(name: str, index: int) -> None:
    status, calls, answer, funcs, flagged = OUTCOMES[name, index]
    run = replay(name + ".jsonl", index)
    outcome = run.outcome
    assert (outcome.error_code or "DONE", outcome.text) == (status, answer)
    assert outcome.status is (Status.ERROR if outcome.error_code else Status.DONE)
    assert (len(run.requests), run.func_calls, bool(outcome.flags)) == (calls, funcs, flagged)
    # Never an identical re-send, and the server gets four stops (the rest are cut here).
    prompts = [r.get("messages") or r.get("prompt") for r in run.requests]
    assert all(a != b for a, b in itertools.pairwise(prompts))
    assert all(len(r["stop"]) == 4 for r in run.requests)


def correction(run_request: dict) -> str:
    """The corrective note of a chat request (the message before the transcript)."""
    notes = [m["content"] for m in run_request["messages"]
             if m["content"].startswith(CORRECTION_HEADER)]
    assert len(notes) == 1
    return notes[0]


def test_a_reply_starting_with_q_is_corrected_once_not_resent_twelve_times() -> None:
    recorded = records("smollm2-135m-instruct.chat.jsonl")[5]
    assert len(recorded["completions"]) == 12  # the old engine's identical re-sends
    run = replay("smollm2-135m-instruct.chat.jsonl", 5)
    first, second = run.requests
    assert not any(m["content"].startswith(CORRECTION_HEADER) for m in first["messages"])
    assert correction(second).startswith(
        f'{CORRECTION_HEADER} it wrote a new question ("Q: What is the difference between '
        'Apple and Microsoft?"); only the user asks questions. Continue the transcript below '
        'with one step: "Ask Func[quote]: ..." (then stop), or "A: ...".')
    assert run.func_calls == []  # the Ask under the invented question never ran


def test_a_placeholder_command_is_never_called_and_the_protocol_has_none() -> None:
    run = replay("qwen2.5-coder-1.5b-instruct.chat.jsonl", 4)
    system = run.requests[0]["messages"][0]["content"]
    assert "Func[name]" not in system and "Ask Func[quote]: <input>" in system
    assert "there is no Func[name]" in correction(run.requests[1])
    assert run.func_calls == []


def test_refused_input_reaches_the_model_as_a_failure_and_the_user_gets_it_explained() -> None:
    run = replay("qwen2.5-coder-0.5b-instruct.completions.jsonl", 0)
    refused = "Func[roll] refused the input \"6\": roll expects (size, count), got '6'"
    assert refused in run.requests[1]["prompt"]
    assert "Ask Func[roll]: 6\n" not in run.requests[1]["prompt"]  # taken back, not a result
    # The model's next reply was "A: You rolled an error!": the user gets the failure.
    assert run.outcome.text == (
        "Sorry, I could not finish: Func[roll] failed (roll expects (size, count), got '6').")
    assert [(t.type, t.error_code) for t in run.trace if t.type is MessageType.ERROR] == [
        (MessageType.ERROR, "INVALID_INPUT")]


def test_completions_runaways_and_echoed_headers_are_cut() -> None:
    recorded = records("qwen2.5-coder-1.5b-instruct.completions.jsonl")
    assert recorded[0]["completions"][1]["completion_tokens"] == 1024
    run = replay("qwen2.5-coder-1.5b-instruct.completions.jsonl", 0)
    assert run.outcome.text == "You rolled a 4!"
    assert all("prompt" in r and "messages" not in r for r in run.requests)
    echoed = replay("qwen2.5-coder-1.5b-instruct.completions.jsonl", 1).outcome.text
    assert recorded[1]["engine_answer"].endswith("Continue this transcript with its next lines:")
    assert echoed == "You rolled a 4 and a 9, for a total of 13."
    assert replay("gemma-3-270m-base.chat.jsonl", 0).outcome.text == (
        "You rolled a 4, 3, and 6, for a total of 12.")  # "\n[INST]Continue ..." cut


def test_an_empty_reply_is_asked_again_once() -> None:
    run = replay("gemma-3-270m-base.chat.jsonl", 5)
    assert len(run.requests) == 2
    assert correction(run.requests[1]).startswith(f"{CORRECTION_HEADER} the reply was empty.")
    assert run.outcome.error_code == "LLM_ERROR"


def test_thoughts_before_the_ask_are_kept_in_the_trace() -> None:
    run = replay("qwen2.5-coder-1.5b-instruct.chat.jsonl", 1)
    assert [(t.type, t.text) for t in run.trace[:2]] == [
        (MessageType.THOUGHT, "The user wants to roll two 10-sided dice."),
        (MessageType.FUNC_CALL, "10 2")]
    assert "Thought: The user wants to roll two 10-sided dice.\nAsk Func[roll]: 10 2\n" \
           "Func[roll] says: 4 9" in run.requests[1]["messages"][-1]["content"]


def test_invented_numbers_are_flagged_in_the_trace() -> None:
    run = replay("qwen2.5-coder-0.5b-instruct.chat.jsonl", 5)
    flag = "Grounding check: 105.20, 134.80 in the answer came from no reply (no command " \
           "was asked)."
    assert run.outcome.flags == (flag,)
    assert (MessageType.THOUGHT, flag) in [(t.type, t.text) for t in run.trace]
    gemma = replay("gemma-3-270m-base.chat.jsonl", 4).outcome.flags
    assert gemma == ("Grounding check: 30, 185.69 in the answer came from no reply of this "
                     "run or the question.",)
    # Every example rolls: "You rolled a 6" for "Roll a d6" rolled nothing.
    no_call = replay("smollm2-135m-instruct.chat.jsonl", 0).outcome.flags
    assert no_call == ("Grounding check: 6 in the answer came from no reply (no command was "
                       "asked).",)

"""The grammar accepts what fixieai 1.0.4 accepted and refuses what it refused, checked
against the real package: each few-shot below goes through fixieai's own
``CodeShotAgent(...).validate()`` (in its own virtualenv) and through ours.

The few differences are deliberate and listed in ``DIFFERENT`` with the reason.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from codeshot.engine.fewshot import FewShotError, func_names, parse_few_shots
from tests.engine.test_engine_grammar import CELLAR, LOGS, POET, READER, REMINDERS

# name -> (few_shots, conversational, the agent's registered Funcs)
CASES: dict[str, tuple[str | list[str], bool, list[str]]] = {
    "table and CSV answers": (CELLAR, False, ["inventory", "add"]),
    "poem answer, agent picture": (POET, False, []),
    "multi-line reply, Self Ask": (LOGS, False, ["search_logs"]),
    "replies with no Ask": (REMINDERS, False, ["remind", "work_hours"]),
    "conversational reader, list": (READER, True, ["fetch_doc"]),
    "indented text, CRLF": ("  Q: a\r\n  A: b\r\n\r\n  Q: c\r\n  A: d", False, []),
    "no space after the colon": ("Q:hi\nA:there", False, []),
    "no few-shots": ([], False, []),
    "text after the answer": ("Q: a\nA: b\nThought: after\nmore text", False, []),
    "any fixie_ Func": ("Q: x\nAsk Func[fixie_tarot]: q\nFunc[fixie_tarot] says: r\nA: s",
                        False, []),
    "agent reply with no Ask": ("Q: x\nAgent[calc] says: 27\nA: 27", False, []),
    "odd and even #": ("Q: x\nA: ##notembed and ### heading", False, []),
    "asks an unknown Func": ("Q: x\nAsk Func[nope]: q\nFunc[nope] says: r\nA: s", False, ["f"]),
    "unknown Func replies": ("Q: x\nFunc[nope] says: r\nA: s", False, ["f"]),
    "thought between Ask and reply": ("Q: x\nAsk Func[f]: q\nThought: t\nFunc[f] says: r\nA: s",
                                      False, ["f"]),
    "two-line Ask": ("Q: x\nAsk Func[f]: q\nmore\nFunc[f] says: r\nA: s", False, ["f"]),
    "ends on an Ask": ("Q: x\nAsk Func[f]: q", False, ["f"]),
    "reply from another Func": ("Q: x\nAsk Func[f]: q\nFunc[g] says: r\nA: s", False, ["f", "g"]),
    "Ask Agent then A": ("Q: x\nAsk Agent[calc]: 1+1\nA: 2", False, []),
    "two turns, not conversational": ("Q: a\nA: b\nQ: c\nA: d", False, []),
    "two turns, conversational": ("Q: a\nA: b\nQ: c\nA: d", True, []),
    "conversational, ends on Q": ("Q: a\nA: b\nQ: c", True, []),
    "Ask between turns": ("Q: a\nA: b\nAsk Agent[calc]: x\nAgent[calc] says: y\nQ: c\nA: d",
                          True, []),
    "starts with a thought": ("Thought: x\nQ: a\nA: b", False, []),
    "empty question": ("Q:\nA: b", False, []),
    "no answer": ("Q: a\nThought: b", False, []),
    "two answers": ("Q: a\nA: b\nA: c", False, []),
    "reply after the answer": ("Q: a\nA: b\nFunc[f] says: c", False, ["f"]),
    "new embed in the answer": ("Q: a\nA: look at #img1", False, []),
    "new embed in an Ask": ("Q: a\nAsk Func[f]: #doc1\nFunc[f] says: y\nA: z", False, ["f"]),
    "lower-case q": ("q: hi\na: there", False, []),
    "reply holding an answer line": ("Q: x\nAsk Func[f]: q\nFunc[f] says: r\nA: fake\nA: s",
                                     False, ["f"]),
    "empty text": ("", False, []),
    # Deliberate differences (see DIFFERENT)
    "dash in a Func name": ("Q: x\nAsk Func[my-f]: q\nFunc[my-f] says: r\nA: s", False, []),
    "empty answer": ("Q: x\nA:", False, []),
    "owner/handle Ask with no reply": ("Q: x\nAsk Agent[fixie/calc]: 1+1\nA: 2", False, []),
    "User says with no Ask User": ("Q: x\nUser says: hi\nA: y", False, []),
}

DIFFERENT = {
    # fixieai read these lines as plain text, so the agent could never call them; we say so.
    "dash in a Func name": "a Func name is letters, digits and _",
    # An empty answer teaches the model to answer nothing.
    "empty answer": "an answer needs text",
    # Fixie's own runtime used owner/handle agents (fixie/time); its validator did not
    # recognise them, so it checked nothing about their lines. We check them like others.
    "owner/handle Ask with no reply": "owner/handle agent steps are checked",
    # "User says:" is codeshot's own line kind (Ask User); Fixie had none.
    "User says with no Ask User": "User says follows Ask User",
}

FIXIE_VALIDATE = r'''
import json, sys, warnings
warnings.filterwarnings("ignore")
import fixieai

for case in json.load(sys.stdin):
    try:
        agent = fixieai.CodeShotAgent("I help.", case["few_shots"],
                                      conversational=case["conversational"])
        for name in case["funcs"]:
            scope = {}
            exec(f"def {name}(query):\n    return 'x'", scope)
            agent.register_func(scope[name])
        agent.validate()
        verdict = "accept"
    except Exception as exc:  # an IndexError on "" is Fixie's refusal too
        verdict = f"refuse: {type(exc).__name__}: {str(exc)[:120]}"
    print(json.dumps({"name": case["name"], "verdict": verdict}))
'''


def ours(few_shots: str | list[str], conversational: bool, funcs: list[str]) -> str:
    """Our verdict: the grammar, then Func names as Fixie checked them (registered, or a
    platform Func named fixie_*)."""
    try:
        shots = parse_few_shots(few_shots, conversational=conversational)
    except FewShotError as exc:
        return f"refuse: {exc.message}"
    unknown = [n for n in func_names(shots) if n not in funcs and not n.startswith("fixie_")]
    return f"refuse: unknown Funcs {unknown}" if unknown else "accept"


@pytest.fixture(scope="module")
def fixie_verdicts(fixie_python) -> dict[str, str]:
    cases = [{"name": name, "few_shots": shots, "conversational": conv, "funcs": funcs}
             for name, (shots, conv, funcs) in CASES.items()]
    done = subprocess.run([str(fixie_python), "-c", FIXIE_VALIDATE], input=json.dumps(cases),
                          capture_output=True, text=True, timeout=120, check=True,
                          env={"PATH": "/usr/bin:/bin", "FIXIE_API_URL": "http://127.0.0.1:9"})
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    return {row["name"]: row["verdict"] for row in rows}


@pytest.mark.parametrize("name", sorted(set(CASES) - set(DIFFERENT)))
def test_same_verdict_as_fixieai_1_0_4(fixie_verdicts: dict[str, str], name: str) -> None:
    fixie, mine = fixie_verdicts[name], ours(*CASES[name])
    assert fixie.split(":")[0] == mine.split(":")[0], f"fixieai: {fixie}\ncodeshot: {mine}"


@pytest.mark.parametrize("name", sorted(DIFFERENT))
def test_deliberate_differences_refuse_what_fixie_let_pass(
    fixie_verdicts: dict[str, str], name: str
) -> None:
    assert fixie_verdicts[name] == "accept"
    assert ours(*CASES[name]).startswith("refuse: few-shot 1, line ")

"""Fixie's public example agents on codeshot, both ways, as a Fixie 1.0 user would port them.

    .venv/bin/python -m benchmarks.fixie_examples PATH/TO/fixie-examples [--only dice,chart]
        [--fixie-python PATH] [--llm-base-url URL --llm-model NAME]

PATH is a checkout of github.com/fixie-ai/fixie-examples (not part of this repository, and
not run by CI). Every example agent that needs no internet service or third-party key is
copied to a temporary directory and run twice, each time on a fresh local stack:

- ``codeshot``: the copy with only ``import fixieai`` changed to
  ``import codeshot.sdk as fixieai``, served by ``codeshot serve`` and registered by
  ``codeshot agent register --url`` (both as processes, in the stack's directory);
- ``fixieai``: the copy unmodified, served by fixieai 1.0.4's own loader
  (``python -m uvicorn fixieai.cli.agent.loader:uvicorn_app_factory --factory``) in its
  own virtualenv, registered by ``codeshot agent register --url``.

Then queries taken from the agent's own few-shots go through a platform session (GraphQL
``createSession`` + ``sendSessionMessage``). A row passes when the session's trace shows
each Func call the few-shot makes, with the same input, and an answer came back (holding
the expected text where the offline fewshot provider can give it). Answers that need a
language model are listed with the reason; ``--llm-base-url`` runs the stacks with an
OpenAI-compatible server instead of the offline provider.
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.local import Client, free_port, local_stack
from codeshot.devtools.pages import serving_pages
from codeshot.engine.fewshot import Kind, parse_few_shots
from infra.rehearsal.checks import fixie_python

ROOT = Path(__file__).resolve().parents[1]
CODESHOT = str(Path(sys.executable).with_name("codeshot"))
OWNER = "local"  # the local stack's first user, whose key local.json holds
START_TIMEOUT = 60.0

MEETING = (b"Minutes of the town meeting.\n\n"
           b"The thing happened on March 1, 2023, in the town hall.\n\n"
           b"The thing was an event: the opening of the new library.\n\n"
           b"The thing occurred for a reason: the old library had flooded.\n")
VOYNICH = (b"The Voynich manuscript is an illustrated codex from the 15th century, written "
           b"in an unknown script that has never been decoded.\n\n"
           b"It was forgotten and rediscovered several times over 500 years.\n")
DOC_PATH = "/voynich.txt"


@dataclass(frozen=True)
class Case:
    """One example agent: which of its few-shots give the queries, and what to check."""

    agent: str  # directory under agents/ ("template": agents/template.py)
    shots: tuple[int, ...] = (0,)  # its few-shots whose Q lines are sent, in order
    query: str | None = None  # the query when it has no few-shots
    embeds: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # sent with the first
    answer_has: str | None = None  # text the (last) answer holds
    needs: str | None = None  # what its real answer needs beyond codeshot offline
    why: str = ""


CASES = [
    Case("dice", shots=(2,), answer_has="You rolled"),
    Case("template", shots=(1,), answer_has="output"),
    Case("chart", needs="internet", why="its Func returns a quickchart.io image URL, which "
         "the platform fetches to keep: offline, that is refused with a visible error"),
    Case("chatembed", embeds={"doc1": ("text/plain", MEETING)}, answer_has="March 1, 2023"),
    Case("portfolio", shots=(1, 0), answer_has=None),
    Case("summarizer", shots=(1,), answer_has="Voynich"),
    Case("dadjoke", needs="LLM", why="no Funcs: a new joke needs a language model (the "
         "offline provider replays an example's)"),
    Case("twenty_questions", query="Hi there, can we play?", needs="LLM",
         why="no few-shots: a plain LLM agent"),
    Case("haikuart", shots=(1,), needs="LLM, image agent", why="it asks Agent"
         "[stable_diffusion], Fixie's hosted image model, and writes haiku"),
    Case("posters", needs="LLM, image agent", why="it asks Agent[stable_diffusion], Fixie's "
         "hosted image model"),
    Case("tester", needs="LLM, Fixie's agents", why="it asks Fixie's hosted agents "
         "(Agent[fixie/calc] ...) and judges their answers"),
]


@dataclass
class Row:
    agent: str
    way: str
    loads: str = ""
    registers: str = ""
    funcs: str = ""
    answer: str = ""
    result: str = ""


def short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- the agents' copies --------------------------------------------------------------------
def copy_agent(examples: Path, case: Case, target: Path, port_import: bool) -> Path:
    """The agent's files in ``target``, with only its fixieai import changed if asked."""
    agents = examples / "agents"
    if case.agent == "template":  # what `fixie init` downloads: no agent.yaml of its own
        target.mkdir(parents=True)
        shutil.copy(agents / "template.py", target / "template.py")
        (target / "agent.yaml").write_text("handle: template\ndescription: Fixie's agent "
                                           "template\nentry_point: template:agent\n")
    else:
        shutil.copytree(agents / case.agent, target)
    if port_import:
        for source in target.glob("*.py"):
            text = source.read_text()
            ported = re.sub(r"(?m)^import fixieai$", "import codeshot.sdk as fixieai", text)
            if ported != text:
                source.write_text(ported)
    return target


def handle_of(agent_dir: Path) -> str:
    import yaml

    return str(yaml.safe_load((agent_dir / "agent.yaml").read_text())["handle"])


# -- serving --------------------------------------------------------------------------------
@contextmanager
def process(argv: list[str], **kwargs: Any) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **kwargs)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def wait_listening(proc: subprocess.Popen[str], url: str) -> str | None:
    """None once ``url`` answers HTTP; else why the server is not there."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else ""
            lines = [line for line in err.splitlines() if line.strip()]
            return lines[-1] if lines else f"exited {proc.returncode}"
        try:
            httpx.get(url + "/", timeout=1)
            return None
        except httpx.TransportError:
            time.sleep(0.2)
    return "did not start"


def serve_argv(way: str, agent_dir: Path, port: int, fixie_python: Path) -> list[str]:
    if way == "codeshot":
        return [CODESHOT, "serve", str(agent_dir), "--port", str(port)]
    return [str(fixie_python), "-m", "uvicorn", "fixieai.cli.agent.loader:uvicorn_app_factory",
            "--factory", "--host", "127.0.0.1", "--port", str(port)]


def serve_env(way: str, api_url: str, agent_id: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODESHOT_", "FIXIE_"))}
    if way == "codeshot":
        return {**env, "CODESHOT_AGENT_ID": agent_id, "PYTHONPATH": str(ROOT)}
    return {**env, "FIXIE_API_URL": api_url, "FIXIE_ALLOWED_AGENT_ID": agent_id}


# -- one agent ------------------------------------------------------------------------------
def expected_calls(shots: list[Any], case: Case, replace: dict[str, str]
                   ) -> list[list[str]]:
    """Per query: the Func calls its few-shot makes, as transcript lines."""
    calls = []
    for index in case.shots:
        turn = shots[index].turns()[0]
        calls.append([f"Ask Func[{s.target}]: {apply(s.text, replace)}" for s in turn
                      if s.kind is Kind.ASK_FUNC])
    return calls


def apply(text: str, replace: dict[str, str]) -> str:
    for old, new in replace.items():
        text = text.replace(old, new)
    return text


def queries(shots: list[Any], case: Case, replace: dict[str, str]) -> list[str]:
    if case.query:
        return [case.query]
    return [apply(shots[i].turns()[0][0].text, replace) for i in case.shots]


def run_case(case: Case, way: str, examples: Path, work: Path, stack_dir: Path,
             client: Client, api_url: str, fixie_python: Path, doc_url: str) -> Row:
    row = Row(case.agent, way)
    agent_dir = copy_agent(examples, case, work / way / case.agent, way == "codeshot")
    handle = handle_of(agent_dir)
    agent_id = f"{OWNER}/{handle}"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    replace = {"https://some_url": doc_url}
    with process(serve_argv(way, agent_dir, port, fixie_python),
                 cwd=agent_dir if way == "fixieai" else stack_dir,
                 env=serve_env(way, api_url, agent_id)) as server:
        problem = wait_listening(server, url)
        row.loads = "yes" if problem is None else f"no: {short(problem, 50)}"
        if problem:
            row.result = "FAIL: does not load"
            return row
        register = subprocess.run([CODESHOT, "agent", "register", str(agent_dir), "--url", url],
                                  cwd=stack_dir, capture_output=True, text=True, timeout=120,
                                  check=False,
                                  env=serve_env("codeshot", api_url, agent_id))
        out = (register.stdout + register.stderr).strip().splitlines()
        row.registers = "yes" if register.returncode == 0 else \
            f"no: {short(out[-1] if out else '', 50)}"
        if register.returncode:
            row.result = "FAIL: does not register"
            return row
        shots = parse_few_shots(client.gql(FEW_SHOTS, id=agent_id)["agentById"]["fewShots"])
        session = client.session(agent_id)
        wanted = expected_calls(shots, case, replace) if not case.query else [[]]
        seen, answer, failures = [], "", []
        for n, (text, calls) in enumerate(zip(queries(shots, case, replace), wanted)):
            embeds = case.embeds if n == 0 else {}
            reply, trace = ask(client, session, text, embeds)
            answer = reply["text"] if reply else "(no reply)"
            made = [m["text"] for m in trace if m["type"] == "func_call"]
            seen += made
            missing = [c for c in calls if c not in made]
            if missing:
                failures.append(f"no {short(missing[0], 50)}")
            if not reply or reply["type"] != "response":
                failures.append(f"{(reply or {}).get('type', 'no reply')}: {short(answer, 80)}")
        row.funcs = "; ".join(short(c, 40) for c in seen) or "-"
        row.answer = short(answer, 60)
        if case.answer_has and case.answer_has not in answer:
            failures.append(f"answer lacks {case.answer_has!r}")
        wrong_calls = [f for f in failures if f.startswith("no ")]
        if wrong_calls or not (case.needs or not failures):
            row.result = "FAIL: " + "; ".join(wrong_calls or failures)
        else:
            row.result = f"needs {case.needs}" if case.needs else "ok"
    return row


FEW_SHOTS = "query ($id: String!) { agentById(agentId: $id) { fewShots } }"
ASK = """mutation ($s: String!, $t: String!, $e: [EmbedInput!]) { sendSessionMessage(
  messageData: {session: $s, text: $t, embeds: $e}) { message { id } reply { text type } } }"""
TRACE = """query ($h: String!, $a: String) { sessionByHandle(handle: $h) {
  messages(after: $a) { text type } } }"""


def ask(client: Client, session: str, text: str, embeds: dict[str, tuple[str, bytes]]
        ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    uploads = [{"key": k, "contentType": t, "content": base64.b64encode(b).decode()}
               for k, (t, b) in embeds.items()] or None
    out = client.gql(ASK, s=session, t=text, e=uploads)["sendSessionMessage"]
    trace = client.gql(TRACE, h=session, a=out["message"]["id"])["sessionByHandle"]["messages"]
    return out["reply"], trace


# -- the document summarizer reads -----------------------------------------------------------
def document_server() -> AbstractContextManager[str]:
    """The summarizer's document on loopback (at DOC_PATH below the URL it yields)."""
    return serving_pages(lambda path: ("text/plain; charset=utf-8", VOYNICH)
                         if path == DOC_PATH else None)


def fixie_venv(python: Path | None) -> Path:
    """fixieai 1.0.4's own virtualenv (the tests' cached one, built if missing)."""
    return python or fixie_python()


def print_table(rows: list[Row], cases: list[Case]) -> None:
    header = ("agent", "way", "loads", "registers", "Func calls seen", "answer", "result")
    cells = [header] + [(r.agent, r.way, r.loads, r.registers, r.funcs, r.answer, r.result)
                        for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    for c in cells:
        print(" | ".join(v.ljust(w) for v, w in zip(c, widths)).rstrip())
    ok = sum(r.result == "ok" for r in rows)
    needs = sum(r.result.startswith("needs") for r in rows)
    print(f"\n{ok} ok, {needs} need more than codeshot offline, {len(rows) - ok - needs} "
          f"failed, of {len(rows)}")
    for case in cases:
        if case.needs:
            print(f"  {case.agent} needs {case.needs}: {case.why}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("examples", type=Path, help="a checkout of fixie-ai/fixie-examples")
    parser.add_argument("--only", help="comma-separated agent directories")
    parser.add_argument("--ways", default="codeshot,fixieai")
    parser.add_argument("--fixie-python", type=Path, help="python of a fixieai 1.0.4 venv")
    parser.add_argument("--llm-base-url", help="an OpenAI-compatible server (else fewshot)")
    parser.add_argument("--llm-model", default="local")
    args = parser.parse_args()
    if not (args.examples / "agents" / "dice" / "main.py").is_file():
        parser.error(f"{args.examples} is not a checkout of fixie-ai/fixie-examples")
    only = set(args.only.split(",")) if args.only else None
    cases = [c for c in CASES if only is None or c.agent in only]
    ways = args.ways.split(",")
    fixie_python = fixie_venv(args.fixie_python) if "fixieai" in ways else Path()
    # A local model on CPU takes its time: wait (nearly) as long as the client does.
    llm = {"llm": "openai", "openai_base_url": args.llm_base_url, "llm_model": args.llm_model,
           "reply_wait_seconds": 110.0} if args.llm_base_url else {}
    rows = []
    with tempfile.TemporaryDirectory(prefix="fixie-examples-") as tmp, \
            document_server() as doc_base:
        for way in ways:
            with local_stack(examples=False, **llm) as (stack, client):
                stack_dir = stack.state_path.parent.parent
                for case in cases:
                    began = time.perf_counter()
                    rows.append(run_case(case, way, args.examples, Path(tmp), stack_dir,
                                         client, stack.api_url, fixie_python,
                                         doc_base + DOC_PATH))
                    print(f"{way:8} {case.agent:16} {time.perf_counter() - began:5.1f}s  "
                          f"{rows[-1].result}", file=sys.stderr, flush=True)
    print_table(rows, cases)


if __name__ == "__main__":
    main()

"""Developer tools behind ``codeshot new``, ``codeshot agent test`` and the test fixtures.

These run the platform (moto + API on loopback) to give an agent real JWKS, real tokens
and real user storage, so they live outside ``codeshot.sdk``: an agent's bundle never
ships them, and the SDK installs without the platform's dependencies.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import socket
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from codeshot import ids
from codeshot.engine.builtin import code_shot_components
from codeshot.engine.components import CommandResult
from codeshot.engine.executor import (
    COMMAND_TIMEOUT_SETTING,
    Executor,
    Limits,
    Status,
    TraceStep,
)
from codeshot.engine.fewshot import parse_few_shots
from codeshot.errors import CodeshotError, InvalidInput
from codeshot.llm import LLM, ChatMessage, get_llm
from codeshot.llm.fewshot import DECLINES, NO_REPLAY, miss
from codeshot.local.http_server import HttpServer
from codeshot.local.stack import LOCAL_USER, TEMPLATE_DIR, LocalStack
from codeshot.net.http import public_client
from codeshot.runner.agent_client import AgentClient, request
from codeshot.runner.handshake import Handshake, fetch_handshake
from codeshot.sdk.agent import AgentBase
from codeshot.sdk.project import CONFIG_FILE, AgentConfig, AgentTest, load_agent, read_config
from codeshot.services import Services
from codeshot.settings import Settings, get_settings


def handle_for(name: str) -> str:
    """A directory name as an agent handle: lower case, runs of other characters -> '-'."""
    handle = re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-_")[:63].rstrip("-_")
    if not handle:
        raise InvalidInput(f"cannot make an agent handle out of {name!r}")
    return handle


def new_agent(target: Path) -> str:
    """Copy the template to ``target`` (which must not exist) with its own handle, name
    and description (the template's would make two "Notes" the router cannot tell
    apart)."""
    if not (TEMPLATE_DIR / CONFIG_FILE).is_file():
        raise InvalidInput(f"the agent template is missing (looked in {TEMPLATE_DIR})")
    if target.exists():
        raise InvalidInput(f"{target} already exists")
    handle = handle_for(target.resolve().name)
    try:
        shutil.copytree(TEMPLATE_DIR, target,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))
    except OSError as exc:  # a file where a folder should be, a folder it may not write
        raise InvalidInput(f"cannot make {target}: {exc.strerror or exc}") from exc
    name = target.resolve().name
    fields = {"handle": handle, "name": json.dumps(name),
              "description": json.dumps(f"{name}, copied from the notes template: it saves "
                                        f"short notes and reads them back.")}
    config = target / CONFIG_FILE
    lines = config.read_text().splitlines(keepends=True)
    for i, line in enumerate(lines):  # line by line: the template's comments stay
        field = line.split(":", 1)[0]
        if field in fields:
            lines[i] = f"{field}: {fields.pop(field)}\n"
    config.write_text("".join(lines))
    return handle


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class LocalPlatform:
    """The platform on loopback: what an agent needs from it (JWKS, storage, tokens)."""

    url: str
    services: Services

    def user(self) -> str:
        """A new user's id."""
        return self.services.users.create("u" + ids.ulid().lower()[-12:]).user_id

    def token(self, agent_id: str, user_id: str | None = None,
              session_id: str | None = None) -> str:
        return self.services.auth.agent_token(agent_id, user_id, session_id)


@contextmanager
def local_platform(state_dir: Path, base: Settings | None = None) -> Iterator[LocalPlatform]:
    """moto's server and the API on free loopback ports, for as long as the block runs."""
    stack = LocalStack(port=_free_port(), aws_port=0, directory=state_dir,
                       base=base or Settings(), progress=lambda line: None,
                       examples=False)
    stack.start()
    try:
        yield LocalPlatform(stack.api_url, stack.services)
    finally:
        stack.stop()


@dataclass
class AgentTestClient:
    """Calls one agent with a fresh token per call: raw (``call``) or as the runner does."""

    url: str
    agent_id: str
    token: Callable[[], str]
    # Each call's, as the platform's (CODESHOT_AGENT_CALL_TIMEOUT_SECONDS, this user's)
    timeout: float = dataclasses.field(
        default_factory=lambda: get_settings().agent_call_timeout_seconds)

    def handshake(self) -> Handshake:
        return fetch_handshake(self.url, self.token(), allow_loopback=True)

    def call(self, func: str, text: str) -> tuple[int, dict[str, Any]]:
        """(HTTP status, reply body) of ``POST /{func}``."""
        token = self.token()
        body = {"message": {"text": text, "embeds": {}}, "access_token": token}
        with public_client(allow_loopback=True) as client:
            status, _, raw = request("POST", f"{self.url}/{func}", token, timeout=self.timeout,
                                     json_body=body, client=client)
        return status, json.loads(raw)

    @contextmanager
    def runner(self) -> Iterator[AgentClient]:
        """The platform runner's own client (retries, reply parsing), minting our tokens."""
        client = AgentClient(lambda *_: self.token(), timeout=self.timeout,
                             allow_loopback=True, timeout_set_by=COMMAND_TIMEOUT_SETTING)
        try:
            yield client
        finally:
            client.close()


@dataclass
class ServedAgent:
    """An agent from a directory, served on loopback against a local platform."""

    config: AgentConfig
    agent_id: str
    user_id: str
    platform: LocalPlatform
    client: AgentTestClient


@contextmanager
def serve(agent: AgentBase, api_url: str, agent_id: str) -> Iterator[str]:
    """``agent`` on a free loopback port, trusting the platform at ``api_url``."""
    server = HttpServer(agent.app(Settings(api_url=api_url, agent_id=agent_id)), "127.0.0.1", 0)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@contextmanager
def serve_agent_dir(agent_dir: Path, platform: LocalPlatform,
                    agent: AgentBase | None = None) -> Iterator[ServedAgent]:
    """The agent of ``agent_dir`` (``agent``: already loaded from it) on loopback."""
    config = read_config(agent_dir)
    agent_id = f"{LOCAL_USER}/{config.handle}"
    user_id = platform.user()
    with serve(agent or load_agent(agent_dir, config), platform.url, agent_id) as url:
        client = AgentTestClient(url, agent_id,
                                 lambda: platform.token(agent_id, user_id, ids.ulid()))
        yield ServedAgent(config, agent_id, user_id, platform, client)


class Verdict(str, Enum):
    PASS = "PASS"  # noqa: S105 - a verdict, not a password
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclass(frozen=True)
class CaseResult:
    case: AgentTest
    answer: str
    status: str  # how the run ended (Status)
    verdict: Verdict
    reason: str = ""  # why it failed or was skipped; the judge's words

    @property
    def passed(self) -> bool:
        """Not failed: a test skipped for want of a language model is no failure."""
        return self.verdict is not Verdict.FAIL


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


JUDGE_PROMPT = (
    "You check an AI agent's answer against what its test expects. Reply with PASS or "
    "FAIL on the first line, then one short sentence saying why."
)
NEEDS_JUDGE = ("a sentence about the response needs a language model to judge it, and the "
               "offline fewshot provider is not one (set CODESHOT_LLM to bedrock or openai)")


def judge(llm: LLM, query: str, answer: str, expectation: str) -> tuple[Verdict, str]:
    """The language model's verdict on ``answer`` and its reason."""
    prompt = f"Query: {query}\nAnswer: {answer}\nExpectation: {expectation}\nVerdict:"
    text = llm.complete([ChatMessage("system", JUDGE_PROMPT), ChatMessage("user", prompt)],
                        ["\n\n"], 200).text.strip()
    word, _, reason = text.partition("\n") if "\n" in text else text.partition(" ")
    verdict = word.strip(" .:*").upper()
    if verdict not in (Verdict.PASS.value, Verdict.FAIL.value):
        return Verdict.FAIL, f"the judge answered neither PASS nor FAIL: {text[:200]!r}"
    return Verdict(verdict), reason.strip(" .:-") or text


def check(case: AgentTest, answer: str, status: str, llm: LLM,
          judging: bool) -> CaseResult:
    """``answer`` against the test: a judged sentence, contained text, or a regex."""
    if status != Status.DONE.value:
        return CaseResult(case, answer, status, Verdict.FAIL, f"the run ended in {status}")
    if case.regex is not None:
        found = re.search(case.regex, answer) is not None
        return CaseResult(case, answer, status, Verdict.PASS if found else Verdict.FAIL,
                          "" if found else f"no match for /{case.regex}/")
    expected = case.expected or ""
    if case.judged:
        if not judging:
            return CaseResult(case, answer, status, Verdict.SKIP, NEEDS_JUDGE)
        verdict, reason = judge(llm, case.query, answer, expected)
        return CaseResult(case, answer, status, verdict, reason)
    found = _norm(expected) in _norm(answer)
    return CaseResult(case, answer, status, Verdict.PASS if found else Verdict.FAIL,
                      "" if found else "the answer does not contain the expected text")


def run_cases(client: AgentTestClient, cases: list[AgentTest], llm: LLM,
              judging: bool = False) -> list[CaseResult]:
    """Each case through the engine (Code Shot) or the agent itself (standalone), in order,
    as one user: a case may rely on what earlier ones stored. ``judging``: ``llm`` is a
    language model, which judges sentences about the response (else they are skipped)."""
    handshake = client.handshake()
    results = []
    with client.runner() as runner:

        def call_func(func: str, text: str) -> CommandResult:
            reply = runner.call_func(client.agent_id, client.url, func, text)
            return CommandResult(reply.text, reply.embeds, reply.needs_input, reply.question)

        for case in cases:
            steps: list[TraceStep] = []
            if handshake.type == "standalone":
                try:
                    answer = runner.query_standalone(client.agent_id, client.url, case.query)
                    text, status = answer.text, Status.DONE.value
                except CodeshotError as exc:
                    text, status = exc.message, Status.ERROR.value
            else:
                components = code_shot_components(handshake.base_prompt, handshake.few_shots,
                                                  call_func)
                outcome = Executor(components, llm, trace=steps.append,
                                   limits=Limits(command_timeout=client.timeout)
                                   ).run(case.query)
                text, status = outcome.text, outcome.status.value
            result = check(case, text, status, llm, judging)
            if result.verdict is Verdict.FAIL and text in DECLINES:  # the replay declined
                why = [s.text.removeprefix(NO_REPLAY) for s in steps
                       if s.text.startswith(NO_REPLAY)]
                result = dataclasses.replace(result, reason=why[-1] if why else miss(
                    parse_few_shots(handshake.few_shots), case.query))
            results.append(result)
    return results


def run_agent_tests(agent_dir: Path, settings: Settings | None = None) -> list[CaseResult]:
    """``agent.yaml``'s tests against the agent, served on loopback with a local platform."""
    settings = settings or get_settings()
    llm = get_llm(settings)
    # The agent's own mistakes (no tests, a few-shot's grammar, a missing Func) first:
    # they take a second to find, a local platform several to start.
    config = read_config(agent_dir)
    if not config.tests:
        raise InvalidInput(f"{agent_dir / CONFIG_FILE} has no tests")
    agent = load_agent(agent_dir, config)
    with (
        tempfile.TemporaryDirectory(prefix="codeshot-agent-test-") as state,
        local_platform(Path(state)) as platform,
        serve_agent_dir(agent_dir, platform, agent) as served,
    ):
        return run_cases(served.client, config.tests, llm,
                         judging=settings.llm != "fewshot")


def format_results(results: list[CaseResult], width: int = 36) -> str:
    """A table of every test, cells wrapped (never cut) at ``width`` characters; a longer
    word (a URL) stays whole on its own line, so it can be copied."""
    rows = [("", "query", "expected", "answer", "reason")] + [
        (r.verdict.value, r.case.query,
         r.case.expected if r.case.expected is not None else f"/{r.case.regex}/",
         r.answer if r.status == Status.DONE.value else f"[{r.status}] {r.answer}", r.reason)
        for r in results
    ]
    cells = [[textwrap.wrap(c, width, replace_whitespace=True, break_long_words=False,
                            break_on_hyphens=False) or [""] for c in row]
             for row in rows]
    widths = [max(len(line) for row in cells for line in row[i]) for i in range(5)]
    lines = []
    for row in cells:
        for n in range(max(len(c) for c in row)):
            parts = [(c[n] if n < len(c) else "").ljust(w) for c, w in zip(row, widths)]
            lines.append("  ".join(parts).rstrip())
    counts = {v: sum(r.verdict is v for r in results) for v in Verdict}
    return "\n".join([*lines, f"{counts[Verdict.PASS]} passed, {counts[Verdict.FAIL]} "
                               f"failed, {counts[Verdict.SKIP]} skipped"])

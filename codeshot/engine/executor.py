"""The Code Shot loop: prompt -> LLM -> parse -> AfterParse -> command -> repeat until A:.

Every path ends in an Outcome: an answer, a pause for user input (with a JSON state that
a new executor resumes), or an error the user can read. Limits on steps, tokens and
command time keep a bad model, agent or Func from hanging a session.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from codeshot.engine.builtin import RetryThenExplain, explain
from codeshot.engine.components import (
    AfterExecute,
    AfterParse,
    BasePromptProvider,
    Command,
    CommandProvider,
    CommandResult,
    DirectiveProvider,
    EmbedLink,
    ExecutionFailure,
    Explain,
    Failure,
    Fallback,
    MessageProvider,
    Retry,
    as_result,
)
from codeshot.engine.fewshot import Kind, Step, lines_of, parse_line, parse_lines
from codeshot.engine.prompt import STOP_SEQUENCES, system_prompt, transcript_message
from codeshot.errors import AgentFailed, CodeshotError, InvalidInput, LLMError, NotFound, Timeout
from codeshot.llm.base import LLM, ChatMessage
from codeshot.models import MessageType

log = logging.getLogger(__name__)

STATE_VERSION = 1
_TRACE_TYPES = {
    Kind.THOUGHT: MessageType.THOUGHT,
    Kind.ASK_FUNC: MessageType.FUNC_CALL,
    Kind.ASK_AGENT: MessageType.AGENT_CALL,
    Kind.FUNC_SAYS: MessageType.RESULT,
    Kind.AGENT_SAYS: MessageType.RESULT,
    Kind.ASK_USER: MessageType.AWAITING_INPUT,
    Kind.A: MessageType.RESPONSE,
}
_ASKS = (Kind.ASK_FUNC, Kind.ASK_AGENT)
_REPLIES = {Kind.Q, Kind.FUNC_SAYS, Kind.AGENT_SAYS, Kind.USER_SAYS}


class Status(str, Enum):
    DONE = "done"
    AWAITING_INPUT = "awaiting_input"
    ERROR = "error"


@dataclass(frozen=True)
class Limits:
    max_steps: int = 12  # LLM calls per run (a resume starts from the paused count)
    token_budget: int = 30_000  # input + output tokens per run
    max_tokens_per_call: int = 1_024
    command_timeout: float = 30.0  # seconds per command call
    max_attempts: int = 5  # calls per command step, whatever failure handlers decide


@dataclass(frozen=True)
class TraceStep:
    """One step as the runner stores it; ``target`` is "Func[name]" or "Agent[id]"."""

    type: MessageType
    text: str
    target: str | None = None
    embeds: dict[str, EmbedLink] = field(default_factory=dict)
    error_code: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type.value,
            "text": self.text,
            "target": self.target,
            "embeds": self.embeds,
            "error_code": self.error_code,
        }


TraceSink = Callable[[TraceStep], None]


@dataclass(frozen=True)
class Outcome:
    """The end of a run: the answer, the question to the user (with ``state``), or an error."""

    status: Status
    text: str
    state: dict[str, Any] | None = None
    embeds: dict[str, EmbedLink] = field(default_factory=dict)
    error_code: str | None = None
    steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass
class _Run:
    query: str
    transcript: list[Step]
    steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    embeds: dict[str, EmbedLink] = field(default_factory=dict)
    # A command that asked the user and continues itself: {"ask": step, "state": its state}
    pending: dict[str, Any] | None = None

    def to_state(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "query": self.query,
            "transcript": [step.to_dict() for step in self.transcript],
            "steps": self.steps,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "embeds": self.embeds,
            "pending": self.pending,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> _Run:
        try:
            if state["version"] != STATE_VERSION:
                raise ValueError(f"version {state['version']}")
            run = cls(
                str(state["query"]),
                [Step.from_dict(s) for s in state["transcript"]],
                int(state["steps"]),
                int(state["input_tokens"]),
                int(state["output_tokens"]),
                dict(state["embeds"]),
                state.get("pending"),  # absent in states paused before it existed
            )
            if run.pending is not None:
                Step.from_dict(run.pending["ask"])
                if not isinstance(run.pending["state"], dict):
                    raise TypeError("pending state is not an object")
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput(f"not a paused Code Shot state: {exc}") from None
        if not run.transcript or run.transcript[-1].kind is not Kind.ASK_USER:
            raise InvalidInput("this Code Shot state is not awaiting user input")
        return run


def _error_of(exc: BaseException) -> tuple[str, str]:
    """A failure's stable code and a one-line message; never a traceback."""
    if isinstance(exc, CodeshotError):
        return exc.code, exc.message
    message = f"{type(exc).__name__}: {exc}"
    return AgentFailed.code, message if len(message) <= 200 else message[:197] + "..."


class Executor:
    """Runs one agent's components against an LLM.

    ``trace`` receives every step as it happens; ``sleep`` is how retries wait.
    """

    def __init__(
        self,
        components: Sequence[object],
        llm: LLM,
        *,
        limits: Limits = Limits(),
        trace: TraceSink | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.components = list(components)
        self.llm = llm
        self.limits = limits
        self._trace = trace or (lambda step: None)
        self._sleep = sleep
        self._commands: dict[tuple[str, str], Command] = {}
        for provider in self._of(CommandProvider):
            for cmd in provider.commands():
                self._commands.setdefault((cmd.kind, cmd.name), cmd)
        self._failure_handlers: list[ExecutionFailure] = [
            *self._of(ExecutionFailure),
            RetryThenExplain(),
        ]

    def _of(self, protocol: type) -> list[Any]:
        return [c for c in self.components if isinstance(c, protocol)]

    def run(self, query: str) -> Outcome:
        if not query.strip():
            raise InvalidInput("the query is empty")
        return self._loop(_Run(query, [Step(Kind.Q, query.strip())]))

    def resume(self, state: dict[str, Any], answer: str) -> Outcome:
        """Continue a paused run (``Outcome.state``) with the user's answer."""
        run = _Run.from_state(state)
        run.transcript.append(Step(Kind.USER_SAYS, answer.strip()))
        pending, run.pending = run.pending, None
        if pending is not None:
            # The command that asked continues with the answer, shown to this LLM as one
            # more Ask and its reply; it may ask again.
            asked = Step.from_dict(pending["ask"])
            ask = Step(asked.kind, answer.strip(), asked.target)
            run.transcript.append(ask)
            self._emit(ask)
            outcome = self._execute(run, ask, resume_state=pending["state"])
            if outcome is not None:
                return outcome
        return self._loop(run)

    def messages(self, query: str, transcript: Sequence[Step]) -> list[ChatMessage]:
        """The prompt: system text, component messages in list order, the transcript."""
        directives = self._of(DirectiveProvider)
        system = system_prompt(
            [p.base_prompt() for p in self._of(BasePromptProvider)],
            [x for d in directives for x in d.constraints()],
            [x for d in directives for x in d.resources()],
            [x for d in directives for x in d.best_practices()],
            list(self._commands.values()),
        )
        extra = [m for provider in self._of(MessageProvider) for m in provider.messages(query)]
        return [ChatMessage("system", system), *extra, transcript_message(transcript)]

    def _loop(self, run: _Run) -> Outcome:
        while True:
            if run.steps >= self.limits.max_steps:
                return self._stop(
                    run,
                    AgentFailed.code,
                    f"I stopped after {run.steps} steps without reaching an answer.",
                )
            remaining = self.limits.token_budget - run.input_tokens - run.output_tokens
            if remaining <= 0:
                return self._stop(
                    run, AgentFailed.code, "I used up my token budget before reaching an answer."
                )
            messages = self.messages(run.query, run.transcript)
            try:
                completion = self.llm.complete(
                    messages,
                    list(STOP_SEQUENCES),
                    min(self.limits.max_tokens_per_call, remaining),
                )
            except Exception as exc:  # a provider bug must not reach the user as a trace
                log.warning("LLM call failed", exc_info=not isinstance(exc, CodeshotError))
                _, message = _error_of(exc)
                return self._stop(run, LLMError.code, f"The language model failed: {message}")
            run.steps += 1
            run.input_tokens += completion.input_tokens
            run.output_tokens += completion.output_tokens
            outcome = self._apply(run, completion.text)
            if outcome is not None:
                return outcome

    def _apply(self, run: _Run, text: str) -> Outcome | None:
        """Carry out one LLM reply: thoughts, then one Ask or the answer."""
        steps = parse_lines(text)
        if not steps:
            return self._stop(run, LLMError.code, "The language model returned nothing.")
        first_line = (lines_of(text.strip()) or [""])[0]
        if _is_free_text(first_line) and not any(s.kind in (Kind.A, *_ASKS) for s in steps):
            steps = [Step(Kind.A, text.strip())]  # a model that forgot the protocol answered
        for parsed in steps:
            step = parsed
            for component in self._of(AfterParse):
                step = component.after_parse(step)
            if step.kind in _REPLIES:
                break  # the model ran on past its turn; replies are the engine's to write
            run.transcript.append(step)
            self._emit(step)
            if step.kind is Kind.A:
                return self._outcome(Status.DONE, step.text, run)
            if step.kind is Kind.ASK_USER:
                return self._outcome(Status.AWAITING_INPUT, step.text, run)
            if step.kind in _ASKS:
                return self._execute(run, step)
        return None

    def _execute(self, run: _Run, step: Step, resume_state: dict[str, Any] | None = None
                 ) -> Outcome | None:
        """Run the Ask's command (or continue it from ``resume_state``); its reply joins the
        transcript, or the failure ends the run."""
        attempted = self._attempt(step, resume_state)
        if isinstance(attempted, Explain):
            answer = Step(Kind.A, attempted.answer)
            run.transcript.append(answer)
            self._emit(answer)
            return self._outcome(Status.DONE, answer.text, run)
        result, succeeded = attempted
        if succeeded:
            for component in self._of(AfterExecute):
                result = component.after_execute(step, result)
        run.transcript.append(step.reply(result.text))
        run.embeds.update(result.embeds)
        self._trace(TraceStep(MessageType.RESULT, result.text, step.label, dict(result.embeds)))
        if not result.needs_input:
            return None
        if result.state is not None:
            run.pending = {"ask": step.to_dict(), "state": result.state}
        question = Step(Kind.ASK_USER, result.pause_question)
        run.transcript.append(question)
        self._emit(question)
        return self._outcome(Status.AWAITING_INPUT, question.text, run)

    def _attempt(self, step: Step, resume_state: dict[str, Any] | None = None
                 ) -> tuple[CommandResult, bool] | Explain:
        """(result, True) on success, (fallback, False), or the failure explained."""
        kind = "func" if step.kind is Kind.ASK_FUNC else "agent"
        command = self._commands.get((kind, step.target or ""))
        attempt = 0
        while True:
            attempt += 1
            try:
                if command is None:
                    raise NotFound(f"there is no {step.label}")
                if resume_state is None:
                    call = command.call
                elif command.resume is None:
                    raise NotFound(f"{step.label} cannot continue a paused call")
                else:
                    call = functools.partial(command.resume, resume_state)
                return as_result(self._call(command.name, call, step.text)), True
            except Exception as exc:
                code, message = _error_of(exc)
                log.info("%s failed (attempt %d): %s", step.label, attempt, message)
                self._trace(
                    TraceStep(MessageType.ERROR, f"{step.label} failed: {message}", step.label,
                              error_code=code)
                )  # fmt: skip
                decision = self._decide(Failure(step, code, message, attempt))
                if isinstance(decision, Retry):
                    self._sleep(decision.delay)
                    continue
                if isinstance(decision, Fallback):
                    return decision.result, False
                return decision

    def _decide(self, failure: Failure) -> Retry | Fallback | Explain:
        """The first decision of the failure handlers; retries stop at ``max_attempts``."""
        for handler in self._failure_handlers:
            decision = handler.on_failure(failure)
            if decision is None or (
                isinstance(decision, Retry) and failure.attempt >= self.limits.max_attempts
            ):
                continue
            return decision
        return Explain(explain(failure))

    def _call(self, name: str, call: Callable[[str], Any], text: str) -> CommandResult | str:
        """The command's result, or Timeout after ``command_timeout`` (the thread is left)."""
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["result"] = call(text)
            except BaseException as exc:
                box["error"] = exc

        worker = threading.Thread(target=target, name=f"command-{name}", daemon=True)
        worker.start()
        worker.join(self.limits.command_timeout)
        if worker.is_alive():
            raise Timeout(f"no reply within {self.limits.command_timeout:g}s")
        if "error" in box:
            raise box["error"]
        result: CommandResult | str = box["result"]
        return result

    def _emit(self, step: Step) -> None:
        target = step.label
        self._trace(TraceStep(_TRACE_TYPES[step.kind], step.text, target))

    def _stop(self, run: _Run, code: str, message: str) -> Outcome:
        self._trace(TraceStep(MessageType.ERROR, message, error_code=code))
        return self._outcome(Status.ERROR, message, run, error_code=code)

    def _outcome(
        self, status: Status, text: str, run: _Run, error_code: str | None = None
    ) -> Outcome:
        state = run.to_state() if status is Status.AWAITING_INPUT else None
        return Outcome(
            status,
            text,
            state,
            dict(run.embeds),
            error_code,
            run.steps,
            run.input_tokens,
            run.output_tokens,
        )


def _is_free_text(line: str) -> bool:
    try:
        return parse_line(line.strip()) is None
    except ValueError:
        return True

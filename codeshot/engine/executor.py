"""The Code Shot loop: prompt -> LLM -> parse -> AfterParse -> command -> repeat until A:.

Every path ends in an Outcome: an answer, a pause for user input (with a JSON state that
a new executor resumes), or an error the user can read. Limits on steps, tokens and
command time keep a bad model, agent or Func from hanging a session.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import itertools
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
    AnswerCheck,
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
from codeshot.engine.fewshot import ASKS, Kind, Step
from codeshot.engine.prompt import (
    ECHO_STOPS,
    STOP_SEQUENCES,
    correction_message,
    system_prompt,
    transcript_message,
)
from codeshot.engine.replies import clean_answer, read_reply
from codeshot.errors import (
    INTERNAL_MESSAGE,
    AgentFailed,
    BudgetExceeded,
    CallTimeout,
    CodeshotError,
    InvalidInput,
    LLMError,
    NotFound,
    Timeout,
)
from codeshot.llm.base import LLM, ChatMessage, calls_ending_by
from codeshot.models import MessageType
from codeshot.settings import env_names, field_named
from codeshot.text import cap_bytes

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
_OUT_OF_TIME = "This query's time ran out before I reached an answer."
# The timeouts of the command calls this run is nested in: a command that timed out sets
# its event, and the run inside it (a nested agent, still in its thread) stops at its
# next step instead of going on calling the model and tracing into the session.
_ABANDONED: contextvars.ContextVar[tuple[threading.Event, ...]] = contextvars.ContextVar(
    "codeshot_abandoned", default=())


class _Abandoned(BaseException):
    """Raised in a nested run whose caller gave up waiting; nobody reads it. Not an
    Exception, so no failure handler on the way out retries or traces it."""


def _stop_if_abandoned() -> None:
    if any(event.is_set() for event in _ABANDONED.get()):
        raise _Abandoned


class Status(str, Enum):
    DONE = "done"
    AWAITING_INPUT = "awaiting_input"
    ERROR = "error"


# What sets Limits.command_timeout where a query runs (the runner; `codeshot agent test`).
COMMAND_TIMEOUT_SETTING = env_names(field_named("agent_call_timeout_seconds"))[0]


@dataclass(frozen=True)
class Limits:
    max_steps: int = 12  # LLM calls per run (a resume starts from the paused count)
    token_budget: int = 30_000  # input + output tokens per run
    max_tokens_per_call: int = 1_024
    command_timeout: float = 30.0  # seconds per command call: COMMAND_TIMEOUT_SETTING
    max_attempts: int = 5  # calls per command step, whatever failure handlers decide
    # time.monotonic() by which the whole query ends (shared by nested runs); None: no end
    deadline: float | None = None

    def seconds_left(self, wanted: float) -> float:
        """``wanted`` seconds, or fewer when the query's deadline comes first."""
        if self.deadline is None:
            return wanted
        return max(0.0, min(wanted, self.deadline - time.monotonic()))


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
    flags: tuple[str, ...] = ()  # what answer checks found (AnswerCheck), as in the trace


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


@dataclass(frozen=True)
class _Unusable:
    """A reply (or the Ask it made) that adds no step, and why. ``explanation``: the
    answer the user gets when the model's next reply does not ask again (a command
    refused its input: the failure, explained, never the model's paraphrase of it)."""

    problem: str
    explanation: str | None = None


@dataclass(frozen=True)
class _GaveUp:
    """A command that failed for good: the answer explaining it, and the failure's code."""

    explain: Explain
    code: str


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _error_of(exc: BaseException) -> tuple[str, str]:
    """A failure's stable code and a one-line message. Anything but a CodeshotError is the
    platform's own fault (a bug, an AWS error): the user reads only "internal error", as
    its text may hold internals (ARNs, paths, reprs); the details go to the log."""
    if isinstance(exc, CodeshotError):
        return exc.code, exc.message
    log.error("unexpected failure in a run", exc_info=exc)
    return CodeshotError.code, INTERNAL_MESSAGE


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
        self._sink = trace or (lambda step: None)
        self._sleep = sleep
        self._commands: dict[tuple[str, str], Command] = {}
        for provider in self._of(CommandProvider):
            for cmd in provider.commands():
                self._commands.setdefault((cmd.kind, cmd.name), cmd)
        self._unasked = {cmd.name for (kind, _), cmd in self._commands.items()
                         if kind == "func" and cmd.unasked}
        self._agents = {name for kind, name in self._commands if kind == "agent"}
        self._failure_handlers: list[ExecutionFailure] = [
            *self._of(ExecutionFailure),
            RetryThenExplain(),
        ]

    def _of(self, protocol: type) -> list[Any]:
        return [c for c in self.components if isinstance(c, protocol)]

    def run(self, query: str) -> Outcome:
        if not query.strip():
            raise InvalidInput("the query is empty")
        with calls_ending_by(self.limits.deadline):  # its Funcs' model calls too
            return self._loop(_Run(query, [Step(Kind.Q, query.strip())]))

    def resume(self, state: dict[str, Any], answer: str) -> Outcome:
        """Continue a paused run (``Outcome.state``) with the user's answer."""
        with calls_ending_by(self.limits.deadline):
            return self._resume(state, answer)

    def _resume(self, state: dict[str, Any], answer: str) -> Outcome:
        run = _Run.from_state(state)
        pending, run.pending = run.pending, None
        if pending is not None and pending.get("repeat"):
            # The user acted outside the conversation (authorized an agent): the command is
            # called again as first asked; the model sees it as if it had never paused.
            run.transcript.pop()  # the question
            asked = Step.from_dict(pending["ask"])
            self._emit(asked)
            outcome = self._execute(run, asked)
            if isinstance(outcome, Outcome):
                return outcome
            return self._loop(run)
        run.transcript.append(Step(Kind.USER_SAYS, answer.strip()))
        if pending is not None:
            # The command that asked continues with the answer, shown to this LLM as one
            # more Ask and its reply; it may ask again.
            asked = Step.from_dict(pending["ask"])
            ask = Step(asked.kind, answer.strip(), asked.target)
            run.transcript.append(ask)
            self._emit(ask)
            outcome = self._execute(run, ask, resume_state=pending["state"])
            if isinstance(outcome, Outcome):  # not correctable: it never hands the step back
                return outcome
        return self._loop(run)

    def messages(self, query: str, transcript: Sequence[Step], problem: str | None = None
                 ) -> list[ChatMessage]:
        """The prompt: system text, component messages in list order, what was wrong with
        the previous reply (``problem``), the transcript."""
        directives = self._of(DirectiveProvider)
        system = system_prompt(
            [p.base_prompt() for p in self._of(BasePromptProvider)],
            [x for d in directives for x in d.constraints()],
            [x for d in directives for x in d.resources()],
            [x for d in directives for x in d.best_practices()],
            list(self._commands.values()),
        )
        extra = [m for provider in self._of(MessageProvider) for m in provider.messages(query)]
        commands = list(self._commands.values())
        correction = [] if problem is None else [correction_message(problem, commands)]
        return [ChatMessage("system", system), *extra, *correction, transcript_message(transcript)]

    def _loop(self, run: _Run) -> Outcome:
        pending: _Unusable | None = None  # the previous reply, not used; told to the model
        while True:
            _stop_if_abandoned()
            if self.limits.seconds_left(1.0) <= 0:
                return self._stop(run, Timeout.code, _OUT_OF_TIME)
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
            messages = self.messages(run.query, run.transcript,
                                     pending.problem if pending else None)
            try:
                completion = self.llm.complete(
                    messages,
                    [*STOP_SEQUENCES, *ECHO_STOPS],
                    min(self.limits.max_tokens_per_call, remaining),
                )
            except BudgetExceeded:
                raise  # the query's token budget is spent: it ends, whatever runs it
            except Timeout:  # the provider stopped the call at the query's deadline
                return self._stop(run, Timeout.code, _OUT_OF_TIME)
            except Exception as exc:  # a provider bug must not reach the user as a trace
                _, message = _error_of(exc)
                log.warning("LLM call failed: %s", message)
                return self._stop(run, LLMError.code, f"The language model failed: {message}")
            _stop_if_abandoned()  # its caller gave up during the call: nothing more to do
            run.steps += 1
            run.input_tokens += completion.input_tokens
            run.output_tokens += completion.output_tokens
            result = self._apply(run, completion.text, pending)
            if isinstance(result, Outcome):
                return result
            if isinstance(result, _Unusable):
                if pending is not None:  # told once already: this step adds nothing
                    if pending.explanation is not None:
                        return self._explained(run, pending.explanation)
                    return self._stop(run, LLMError.code, "Sorry, the language model gave no "
                                      f"usable step: {result.problem}.")
                self._trace(TraceStep(MessageType.THOUGHT, f"The language model's reply was not "
                                      f"used ({result.problem}); asking it again."))
                pending = result
                continue
            pending = None

    def _apply(self, run: _Run, text: str, pending: _Unusable | None
               ) -> Outcome | _Unusable | None:
        """Carry out one LLM reply: its thoughts, then one Ask or the answer. ``pending``:
        what was wrong with the previous reply (then nothing goes back to the model again)."""
        # Before any Ask on this query, an agent's says line the model wrote stands for
        # asking that agent the query itself.
        since_query = itertools.takewhile(lambda step: step.kind is not Kind.Q,
                                          reversed(run.transcript))
        first_step = not any(step.kind in ASKS for step in since_query)
        reply = read_reply(text, self._unasked, self._agents if first_step else ())
        if reply.action is None:
            return _Unusable(reply.problem or "it added no step")
        if pending is not None and pending.explanation is not None and \
                reply.action.kind not in _ASKS:
            return self._explained(run, pending.explanation)  # it gave up on the command
        correctable = pending is None
        thoughts = [self._after_parse(step) for step in reply.thoughts]
        action = self._after_parse(reply.action)
        if action.kind in _ASKS and self._command(action) is None:
            return _Unusable(f"there is no {action.label}")
        if action.kind is Kind.A:
            return self._answer(run, thoughts, action, correctable)
        mark = len(run.transcript)
        for step in [*thoughts, action]:
            if step.kind is not Kind.FUNC_SAYS:  # an unasked Func's reply comes from the call
                run.transcript.append(step)
                self._emit(step)
        if action.kind is Kind.ASK_USER:
            return self._outcome(Status.AWAITING_INPUT, action.text, run)
        if action.kind is Kind.FUNC_SAYS:  # the model began an unasked Func's says line
            ask = Step(Kind.ASK_FUNC, "", action.target)
            self._emit(ask)
            return self._execute(run, ask)
        if action.kind is Kind.AGENT_SAYS:  # it began an agent's reply, asking nothing
            ask = Step(Kind.ASK_AGENT, run.query, action.target)
            run.transcript.append(ask)
            self._emit(ask)
            return self._execute(run, ask)
        result = self._execute(run, action, correctable=correctable)
        if isinstance(result, _Unusable):
            del run.transcript[mark:]  # the model gets the step back, with what was wrong
        return result

    def _answer(self, run: _Run, thoughts: list[Step], action: Step, correctable: bool
                ) -> Outcome | _Unusable:
        """The model's answer, cleaned and checked; a check may give the model one more try."""
        answer = Step(Kind.A, clean_answer(action.text))
        if not answer.text:
            return _Unusable('its "A:" line had no answer')
        flags = [flag for check in self._of(AnswerCheck)
                 if (flag := check.check_answer(run.transcript, answer.text)) is not None]
        for flag in flags:
            self._trace(TraceStep(MessageType.THOUGHT, flag.message))
        retry = next((flag.note for flag in flags if flag.note), None)
        if retry is not None and correctable:
            return _Unusable(retry)
        for step in [*thoughts, answer]:
            run.transcript.append(step)
            self._emit(step)
        return self._outcome(Status.DONE, answer.text, run,
                             flags=tuple(flag.message for flag in flags))

    def _explained(self, run: _Run, explanation: str) -> Outcome:
        """The run ends with the engine's own answer (a command failed for good)."""
        answer = Step(Kind.A, explanation)
        run.transcript.append(answer)
        self._emit(answer)
        return self._outcome(Status.DONE, answer.text, run)

    def _after_parse(self, step: Step) -> Step:
        for component in self._of(AfterParse):
            step = component.after_parse(step)
        return step

    def _command(self, step: Step) -> Command | None:
        kind = "func" if step.kind is Kind.ASK_FUNC else "agent"
        return self._commands.get((kind, step.target or ""))

    def _execute(self, run: _Run, step: Step, resume_state: dict[str, Any] | None = None,
                 correctable: bool = False) -> Outcome | _Unusable | None:
        """Run the Ask's command (or continue it from ``resume_state``); its reply joins the
        transcript, or the failure ends the run. ``correctable``: input the command refuses
        goes back to the model once."""
        attempted = self._attempt(step, resume_state, correctable)
        if isinstance(attempted, _Unusable):
            return attempted
        if isinstance(attempted, _GaveUp):  # the run ends in that failure, with its code
            answer = Step(Kind.A, attempted.explain.answer)
            run.transcript.append(answer)
            self._emit(answer)
            return self._outcome(Status.ERROR, answer.text, run, error_code=attempted.code)
        result, succeeded = attempted
        if succeeded:
            for component in self._of(AfterExecute):
                result = component.after_execute(step, result)
        repeat = result.needs_input and result.repeat_on_answer
        if not repeat:  # a call to repeat has no reply yet, as far as the model knows
            run.transcript.append(step.reply(result.text))
        run.embeds.update(result.embeds)
        self._trace(TraceStep(MessageType.RESULT, result.text, step.label, dict(result.embeds)))
        if not result.needs_input:
            return None
        if repeat:
            run.pending = {"ask": step.to_dict(), "state": {}, "repeat": True}
        elif result.state is not None:
            run.pending = {"ask": step.to_dict(), "state": result.state}
        question = Step(Kind.ASK_USER, result.pause_question)
        run.transcript.append(question)
        self._emit(question)
        return self._outcome(Status.AWAITING_INPUT, question.text, run)

    def _attempt(self, step: Step, resume_state: dict[str, Any] | None = None,
                 correctable: bool = False) -> tuple[CommandResult, bool] | _GaveUp | _Unusable:
        """(result, True) on success, (fallback, False), the failure explained, or (input
        the command refused, when ``correctable``) the step back to the model."""
        command = self._command(step)
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
                result = as_result(self._call(command.name, call, step.text))
                # The transcript (the next prompt, a paused state) holds no more than a
                # reply may be: a platform Func's result is not checked as an agent's is.
                question = None if result.question is None else cap_bytes(result.question)
                return dataclasses.replace(result, text=cap_bytes(result.text),
                                           question=question), True
            except BudgetExceeded:
                raise  # a nested agent spent the budget: no retry, no explanation
            except Exception as exc:  # any other command failure is handled
                code, message = _error_of(exc)
                log.info("%s failed (attempt %d): %s", step.label, attempt, message)
                self._trace(
                    TraceStep(MessageType.ERROR, f"{step.label} failed: {message}", step.label,
                              error_code=code)
                )  # fmt: skip
                # An unexpected error may come after the command ran (its reply could not
                # be read or stored): calling again could repeat what it did.
                failure = Failure(step, code, message, attempt,
                                  not isinstance(exc, CodeshotError) or exc.permanent)
                if correctable and code == InvalidInput.code:
                    return _Unusable(f'{step.label} refused the input "{_short(step.text)}": '
                                     f"{message}; ask again with input it accepts",
                                     explain(failure))
                decision = self._decide(failure)
                if isinstance(decision, Retry):
                    self._sleep(decision.delay)
                    continue
                if isinstance(decision, Fallback):
                    return decision.result, False
                return _GaveUp(decision, code)

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
        """The command's result, or CallTimeout after ``command_timeout``. The thread is left
        to end on its own; a run nested in it stops at its next step (``_ABANDONED``)."""
        box: dict[str, Any] = {}
        abandoned = threading.Event()

        def target() -> None:
            _ABANDONED.set((*_ABANDONED.get(), abandoned))
            try:
                box["result"] = call(text)
            except BaseException as exc:
                box["error"] = exc

        # In this query's context: the correlation id goes with its agent calls.
        worker = threading.Thread(target=contextvars.copy_context().run, args=(target,),
                                  name=f"command-{name}", daemon=True)
        worker.start()
        wait = self.limits.seconds_left(self.limits.command_timeout)
        worker.join(wait)
        if worker.is_alive():
            abandoned.set()
            # Permanent: the call may still be running (its thread goes on), so calling
            # again could run it twice.
            if wait < self.limits.command_timeout:
                raise CallTimeout("this query's time ran out while waiting for a reply")
            raise CallTimeout(f"no reply within {wait:g}s; {COMMAND_TIMEOUT_SETTING} sets "
                              "how long")
        if "error" in box:
            raise box["error"]
        result: CommandResult | str = box["result"]
        return result

    def _trace(self, step: TraceStep) -> None:
        # Each step is stored as one item (DynamoDB: 400 KB): a step too large to store
        # would fail the query's reply with it, so none is.
        self._sink(dataclasses.replace(step, text=cap_bytes(step.text)))

    def _emit(self, step: Step) -> None:
        target = step.label
        self._trace(TraceStep(_TRACE_TYPES[step.kind], step.text, target))

    def _stop(self, run: _Run, code: str, message: str) -> Outcome:
        self._trace(TraceStep(MessageType.ERROR, message, error_code=code))
        return self._outcome(Status.ERROR, message, run, error_code=code)

    def _outcome(
        self, status: Status, text: str, run: _Run, error_code: str | None = None,
        flags: tuple[str, ...] = (),
    ) -> Outcome:
        state = run.to_state() if status is Status.AWAITING_INPUT else None
        return Outcome(
            status,
            cap_bytes(text),
            state,
            dict(run.embeds),
            error_code,
            run.steps,
            run.input_tokens,
            run.output_tokens,
            flags,
        )

"""Extension points: an agent is a list of components, each implementing some protocols.

Order-independent protocols (base prompt, directives, commands) are merged wherever the
components sit in the list; order-dependent ones (messages, after-parse, execution
failure, after-execute) run in list order, so earlier components see things first.
"""

from __future__ import annotations

import inspect
import json
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import (
    Any,
    Literal,
    Protocol,
    Union,
    get_args,
    get_origin,
    get_type_hints,
    overload,
    runtime_checkable,
)

from codeshot.engine.fewshot import Step
from codeshot.errors import InvalidInput
from codeshot.llm.base import ChatMessage

EmbedLink = dict[str, str]  # {"content_type": ..., "uri": ...}


@dataclass(frozen=True)
class CommandResult:
    """What a command returns: text for the says line, embeds, or a request for input."""

    text: str
    embeds: dict[str, EmbedLink] = field(default_factory=dict)
    needs_input: bool = False
    question: str | None = None
    # With needs_input: where the command itself stopped (a nested agent's paused run);
    # the user's answer then goes back to the command's ``resume``, not to this LLM.
    state: dict[str, Any] | None = None
    # With needs_input: the user acts outside the conversation (authorizes an agent), and
    # their answer calls the command again as first asked, as if it had never paused.
    repeat_on_answer: bool = False

    @property
    def pause_question(self) -> str:
        return self.question or self.text


def as_result(value: Any) -> CommandResult:
    """A command's return value as a CommandResult (strings as-is, the rest as JSON)."""
    if isinstance(value, CommandResult):
        return value
    if isinstance(value, str):
        return CommandResult(value)
    return CommandResult(json.dumps(value, default=str))


@dataclass(frozen=True)
class Command:
    """A tool the LLM may ask for: ``Ask Func[name]: args`` or ``Ask Agent[name]: text``."""

    name: str
    description: str
    parameters: dict[str, Any]
    call: Callable[[str], CommandResult | str]
    kind: Literal["func", "agent"] = "func"
    # (state, answer) -> result: continues a call that paused with CommandResult.state
    resume: Callable[[dict[str, Any], str], CommandResult | str] | None = None
    # The few-shots show its reply with no Ask (a clock, the user's work hours): when the
    # model starts its says line, the engine calls it with no input and writes the reply.
    unasked: bool = False


@dataclass(frozen=True)
class Failure:
    """A failed command call; ``attempt`` counts the calls made so far (1 = first)."""

    step: Step
    code: str
    message: str
    attempt: int
    permanent: bool = False  # the error says a retry cannot fix it


@dataclass(frozen=True)
class Retry:
    delay: float


@dataclass(frozen=True)
class Fallback:
    result: CommandResult


@dataclass(frozen=True)
class Explain:
    answer: str


Decision = Retry | Fallback | Explain


@runtime_checkable
class BasePromptProvider(Protocol):
    """Who the agent is: the first lines of the system prompt."""

    def base_prompt(self) -> str: ...


@runtime_checkable
class DirectiveProvider(Protocol):
    def constraints(self) -> list[str]: ...

    def resources(self) -> list[str]: ...

    def best_practices(self) -> list[str]: ...


@runtime_checkable
class CommandProvider(Protocol):
    def commands(self) -> list[Command]: ...


@runtime_checkable
class MessageProvider(Protocol):
    """Adds chat messages before the transcript: few-shots, session history, embeds."""

    def messages(self, query: str) -> list[ChatMessage]: ...


@runtime_checkable
class AfterParse(Protocol):
    """Sees each parsed LLM step before it runs; returns it or a replacement."""

    def after_parse(self, step: Step) -> Step: ...


@runtime_checkable
class ExecutionFailure(Protocol):
    """Decides what a failed command leads to; None passes to the next component."""

    def on_failure(self, failure: Failure) -> Decision | None: ...


@dataclass(frozen=True)
class AnswerFlag:
    """What a check found wrong with an answer: ``message`` goes into the trace; with a
    ``note``, the model is asked once more (the note says what to fix)."""

    message: str
    note: str | None = None


@runtime_checkable
class AnswerCheck(Protocol):
    """Looks at the model's answer before the user gets it (grounding, format)."""

    def check_answer(self, transcript: Sequence[Step], answer: str) -> AnswerFlag | None: ...


@runtime_checkable
class AfterExecute(Protocol):
    """Sees each successful command result; returns it or a replacement."""

    def after_execute(self, step: Step, result: CommandResult) -> CommandResult: ...


_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    dict: "object",
}


def json_schema(hint: Any) -> dict[str, Any]:
    """The JSON schema of a type hint (str, int, float, bool, list, dict, Literal, Optional)."""
    origin, args = get_origin(hint), get_args(hint)
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (Union, types.UnionType):
        options = [json_schema(arg) for arg in args if arg is not type(None)]
        return options[0] if len(options) == 1 else {"anyOf": options}
    if origin is list and args:
        return {"type": "array", "items": json_schema(args[0])}
    if (origin or hint) in _JSON_TYPES:
        return {"type": _JSON_TYPES[origin or hint]}
    return {}


def _coerce(value: Any, hint: Any, name: str) -> Any:
    """An argument as its parameter's type, or INVALID_INPUT naming the argument (the
    model may ask again): text from Ask lines arrives as str, a JSON object's values as
    JSON. Values are checked, not only text converted: ``{"n": {"a": 1}}`` reached an
    ``n: int`` as a dict, and a Literal allowed anything."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return value
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for option in (arg for arg in args if arg is not type(None)):
            try:
                return _coerce(value, option, name)
            except InvalidInput:
                continue
        raise InvalidInput(f"argument {name} must be {_kind(hint)}, got {value!r}")
    if origin is Literal:
        for option in args:
            if value == option or (isinstance(value, str) and value.strip() == str(option)):
                return option
        raise InvalidInput(f"argument {name} must be one of {list(args)}, got {value!r}")
    kind = (origin or hint)
    try:
        if kind in (list, dict):
            if isinstance(value, str):
                value = json.loads(value)
            if not isinstance(value, kind):
                raise ValueError(value)
            if kind is list and args:
                return [_coerce(item, args[0], f"{name}[{n}]") for n, item in enumerate(value)]
            return value
        if (isinstance(value, bool) and kind is not bool) or isinstance(value, list | dict):
            raise ValueError(value)
        if kind is str:
            return value if isinstance(value, str) else str(value)
        text = value.strip().lower() if isinstance(value, str) else value
        if kind is bool:
            if text in (True, "true", "yes", "1"):
                return True
            if text in (False, "false", "no", "0"):
                return False
            raise ValueError(value)
        if kind is int:
            if isinstance(text, float) and not text.is_integer():
                raise ValueError(value)
            return int(text)
        if kind is float:
            return float(text)
    except (ValueError, TypeError, OverflowError):
        raise InvalidInput(f"argument {name} must be {_kind(hint)}, got {value!r}") from None
    return value


def _kind(hint: Any) -> str:
    """What a hint takes, in JSON schema's words."""
    schema = json_schema(hint)
    return str(schema.get("type") or schema.get("enum") or schema.get("anyOf") or hint)


def type_hints(fn: Callable[..., Any], name: str) -> dict[str, Any]:
    """``fn``'s type hints; a TypeError naming the Func and the fix for a name they use
    that is not there at run time (an import under ``if TYPE_CHECKING:``)."""
    try:
        return get_type_hints(fn)
    except NameError as exc:
        raise TypeError(f"Func {name}: the type hint {exc.name!r} cannot be resolved; "
                        "import it at the module's top level (not under TYPE_CHECKING)"
                        ) from exc


def check_hint(hint: Any, where: str) -> None:
    """TypeError (at registration) for a hint Funcs cannot be given: the model writes
    text or JSON, so only what JSON holds (a date, a dataclass or an Enum arrived as text
    or a dict, whatever the hint said)."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any or hint in _JSON_TYPES:
        return
    if origin is Literal and all(isinstance(a, str | int | float | bool) for a in args):
        return
    if origin in (Union, types.UnionType, list, dict):
        for arg in args:
            if arg is not type(None) and not (origin is dict and arg in (str, Any)):
                check_hint(arg, where)
        return
    raise TypeError(f"{where} has type {hint!r}; Funcs take str, int, float, bool, list, "
                    "dict, Literal and Optional of them (what a model can write as JSON)")


def _positional(text: str, least: int, most: int) -> list[str]:
    """An Ask line's positional arguments, split on commas, else on spaces when that fits."""
    if not text:
        return []
    parts = [part.strip() for part in text.split(",")]
    words = text.split()
    if len(parts) == 1 and len(words) > 1 and least <= len(words) <= most:
        return words
    return parts


def _adapter(
    fn: Callable[..., Any], name: str
) -> tuple[Callable[[str], CommandResult], dict[str, Any]]:
    """A text-in caller for ``fn`` and its parameters' JSON schema.

    The Ask line's text is a JSON object of named arguments, the whole text for a
    one-parameter function, or positional arguments: comma-separated, or without commas
    space-separated when that gives as many values as the function takes ("6 2").
    """
    hints = type_hints(fn, name)
    params = list(inspect.signature(fn).parameters.values())
    for param in params:
        check_hint(hints.get(param.name, str), f"Func {name}: parameter {param.name}")
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {p.name: json_schema(hints.get(p.name, str)) for p in params},
        "required": [p.name for p in params if p.default is inspect.Parameter.empty],
    }

    def call(text: str) -> CommandResult:
        stripped = text.strip()
        if stripped.startswith("{"):
            try:
                kwargs = json.loads(stripped)
            except ValueError:
                raise InvalidInput(f"{name}: arguments are not valid JSON") from None
        elif not params:
            kwargs = {}
        elif len(params) == 1:
            kwargs = {params[0].name: text}
        else:
            values = _positional(stripped, len(schema["required"]), len(params))
            if not len(schema["required"]) <= len(values) <= len(params):
                names = ", ".join(p.name for p in params)
                raise InvalidInput(f"{name} expects ({names}), got {text!r}")
            kwargs = {p.name: v for p, v in zip(params, values)}
        unknown = set(kwargs) - {p.name for p in params}
        if unknown:
            raise InvalidInput(f"{name} has no argument {min(unknown)!r}")
        args = {k: _coerce(v, hints.get(k, str), k) for k, v in kwargs.items()}
        return as_result(fn(**args))

    return call, schema


@overload
def command(fn: Callable[..., Any], *, name: str | None = None) -> Command: ...
@overload
def command(fn: None = None, *, name: str | None = None
            ) -> Callable[[Callable[..., Any]], Command]: ...
def command(fn: Callable[..., Any] | None = None, *, name: str | None = None
            ) -> Command | Callable[[Callable[..., Any]], Command]:
    """Make a function a Func command: description from its docstring, schema from its hints.

    Use as ``@command`` or ``@command(name="other")``.
    """

    def wrap(f: Callable[..., Any]) -> Command:
        call, schema = _adapter(f, name or f.__name__)
        return Command(name or f.__name__, inspect.getdoc(f) or "", schema, call)

    return wrap(fn) if fn is not None else wrap

"""An agent directory: ``agent.yaml`` (who the agent is, its tests) and the code it names.

``agent.yaml`` takes Fixie 1.0's fields (handle, name, description, more_info_url,
public, entry_point, deployment_url, tests) and codeshot's (published, sample_queries).
Used by ``codeshot serve`` and ``codeshot agent register``/``test``, the deploy tooling
and test fixtures.
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
import sys
import traceback
from pathlib import Path
from types import ModuleType

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from codeshot.errors import CodeshotError, InvalidInput
from codeshot.models import check_sample_query, validate_handle
from codeshot.sdk.agent import AgentBase
from codeshot.sdk.oauth import MissingOAuthSetting

CONFIG_FILE = "agent.yaml"
# A Fixie test's `expected` is a sentence about the response, for a language model to judge.
JUDGE_SENTENCE = re.compile(r"^\s*the (response|answer) should\b", re.IGNORECASE)


class AgentTest(BaseModel):
    """One check of the agent's answer to ``query``.

    ``expected``: a sentence about the response ("The response should mention dinosaurs",
    as Fixie's tests are written), judged by the configured language model; any other
    text must appear in the answer (any case). ``regex``: must match the answer.
    """

    model_config = ConfigDict(extra="forbid")

    query: str
    expected: str | None = None
    regex: str | None = None

    @model_validator(mode="after")
    def _one_check(self) -> AgentTest:
        if (self.expected is None) == (self.regex is None):
            raise ValueError(f"test {self.query!r} needs exactly one of expected or regex")
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as exc:
                raise ValueError(f"test {self.query!r}: bad regex: {exc}") from None
        return self

    @property
    def judged(self) -> bool:
        """Whether a language model decides (an ``expected`` sentence about the response)."""
        return self.expected is not None and bool(JUDGE_SENTENCE.match(self.expected))


class AgentConfig(BaseModel):
    # Unknown keys are refused, not ignored: a misspelt one (`descripton:`) would leave its
    # field empty unnoticed. Fixie 1.0's agent.yaml holds only fields named here.
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    handle: str
    name: str = ""
    description: str = ""
    more_info_url: str = ""
    published: bool = Field(default=False, alias="public")
    deployment_url: str | None = None
    sample_queries: list[str] = Field(default_factory=list)
    tests: list[AgentTest] = Field(default_factory=list)
    entry_point: str = "agent:agent"

    @model_validator(mode="before")
    @classmethod
    def _published(cls, values: object) -> object:
        # codeshot's `published` and Fixie's `public` say the same; null means no. Only
        # YAML's booleans count: the quoted "false" is a string, and truthy.
        if isinstance(values, dict):
            values = dict(values)
            flags = {name: values.pop(name, None) for name in ("public", "published")}
            for name, flag in flags.items():
                if flag is not None and not isinstance(flag, bool):
                    raise ValueError(f"{name} must be true or false (unquoted), got {flag!r}")
            values["public"] = any(flags.values())
        return values

    @field_validator("handle")
    @classmethod
    def _handle(cls, value: str) -> str:
        return validate_handle(value)

    @field_validator("sample_queries")
    @classmethod
    def _sample_queries(cls, values: list[str]) -> list[str]:
        try:  # refused here, naming agent.yaml, rather than when registered
            return [check_sample_query(query) for query in values]
        except InvalidInput as exc:
            raise ValueError(exc.message) from None

    @field_validator("name", "description", "more_info_url", mode="before")
    @classmethod
    def _null_is_empty(cls, value: object) -> object:
        return "" if value is None else value

    @field_validator("entry_point")
    @classmethod
    def _entry_point(cls, value: str) -> str:
        module, _, attr = value.partition(":")
        attr = attr or "agent"  # Fixie 1.0: "main" means main:agent
        if not all(part.isidentifier() for part in module.split(".")) or not attr.isidentifier():
            raise ValueError(f"entry_point must be 'module:attribute', got {value!r}")
        return f"{module}:{attr}"


def read_config(agent_dir: Path) -> AgentConfig:
    if not agent_dir.exists():
        raise InvalidInput(f"{agent_dir} does not exist")
    if not agent_dir.is_dir():
        raise InvalidInput(f"{agent_dir} is a file: give the agent's directory (with "
                           f"{CONFIG_FILE} and its code)")
    path = agent_dir / CONFIG_FILE
    try:
        # A SafeLoader: builds only plain YAML types.
        values = yaml.load(path.read_text(encoding="utf-8"), _UniqueKeyLoader) or {}  # noqa: S506
        if isinstance(values, dict) and "entry_point" not in values \
                and not (agent_dir / "agent.py").is_file():
            values["entry_point"] = "main:agent"  # Fixie 1.0's default
        return AgentConfig.model_validate(values)
    except FileNotFoundError:
        raise InvalidInput(
            f"{agent_dir} is not an agent directory: it has no {CONFIG_FILE}"
        ) from None
    except IsADirectoryError:
        raise InvalidInput(f"{path} is a directory, not the agent's configuration") from None
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path} is not UTF-8 text: {exc}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" line {mark.line + 1}" if mark else ""
        raise InvalidInput(f"{path}{where}: not valid YAML: {exc.problem or exc.context}"
                           ) from None
    except yaml.YAMLError as exc:
        raise InvalidInput(f"{path} is not valid YAML: {exc}") from None
    except ValidationError as exc:
        raise InvalidInput("\n".join(f"{path}: {problem}" for problem in _problems(exc))
                           ) from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML keeps the last of a key written twice; agent.yaml refuses it (which was meant?)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False
                          ) -> dict[object, object]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # "<<": keys an explicit one overrides
                continue
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _fields(model: type[BaseModel]) -> list[str]:
    """The keys the model reads: each field's alias (else its name), then aliased names."""
    return [field.alias or name for name, field in model.model_fields.items()] + [
        name for name, field in model.model_fields.items() if field.alias]


def _problems(exc: ValidationError) -> list[str]:
    """One ``field path: message`` per problem, without pydantic's input dump and URL."""
    return [_problem(error) for error in exc.errors(include_url=False, include_input=False)]


def _problem(error: ErrorDetails) -> str:
    loc = error["loc"]
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)
    where = where.removeprefix(".")
    if error["type"] == "extra_forbidden":
        known = _fields(AgentTest if "tests" in loc[:1] else AgentConfig)
        near = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else f" (known: {', '.join(known)})"
        return f"{where}: unknown field {loc[-1]!r}{hint}"
    message = error["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


# The agent directories this process has loaded from (resolved).
_ROOTS: set[str] = set()


def _module_files(module: object) -> list[str]:
    """Where a module was loaded from: its file, or a package's directories."""
    file = getattr(module, "__file__", None)
    return [file] if file else [str(p) for p in getattr(module, "__path__", None) or ()]


def _forget_other_agents(root: str, entry_module: str) -> None:
    """Drop what other agent directories put in sys.modules and sys.path: agent
    directories all call their module ``agent`` (or ``main``), often beside a
    ``helpers`` or ``utils`` of their own, and one process may load several (the local
    stack, tests)."""
    mine = root + os.sep
    others = tuple(r + os.sep for r in _ROOTS if r != root)
    for name, module in list(sys.modules.items()):
        files = _module_files(module)
        if any(f.startswith(others) and not f.startswith(mine) for f in files) \
                or (name == entry_module and not any(f.startswith(mine) for f in files)):
            del sys.modules[name]
    sys.path[:] = [p for p in sys.path if p == root or p not in _ROOTS]


def _import_entry(module_name: str, root: Path) -> ModuleType:
    """Import the agent's entry module; its code failing to import is one line naming the
    agent's own file and line where it failed (not a traceback through the CLI)."""
    try:
        return importlib.import_module(module_name)
    except Exception as exc:
        where = _failed_at(exc, root)
        if where is None:
            raise
        if isinstance(exc, InvalidInput):  # the SDK's own refusal: its message says what
            raise InvalidInput(f"{where}: {exc.message}", **exc.details) from exc
        said = exc.msg if isinstance(exc, SyntaxError) else exc  # (its str names the line)
        raise InvalidInput(f"{where}: {type(exc).__name__}: {said}") from exc


# Frames that raise on the agent code's behalf: importlib's not finding a module the agent
# imports, and codeshot's refusing what the agent wrote (the SDK a Func name or a
# parameter's type, the engine a few-shot's grammar, OAuthParams a missing setting). The
# agent's line is the one to name; any other error raised in codeshot is a bug of ours,
# whose traceback is what to read.
_CODESHOT = Path(__file__).resolve().parents[1]
_IMPORTLIB = Path(importlib.__file__).resolve().parent
_REFUSALS = (CodeshotError, TypeError, ValueError, MissingOAuthSetting)


def _within(path: Path, root: Path, package: Path) -> bool:
    # Also codeshot installed inside the agent's directory (a bundle); but the examples
    # shipped inside the package are the agent's own code.
    return path.is_relative_to(package) and not root.is_relative_to(package)


def _failed_at(exc: Exception, root: Path) -> str | None:
    """``file line N`` where ``exc`` was raised, if that is the agent's own code (under
    ``root``, not a package installed there): the innermost frame in a real file other
    than codeshot's and importlib's, or the file a SyntaxError names. None for an error
    raised elsewhere (a library, or codeshot's own bug: not one of its refusals), whose
    traceback is what to read."""
    frames = [(Path(frame.filename).resolve(), frame.lineno)
              for frame in traceback.extract_tb(exc.__traceback__)
              if not frame.filename.startswith("<")]  # "<frozen importlib._bootstrap>"
    if frames and _within(frames[-1][0], root, _CODESHOT) and not isinstance(exc, _REFUSALS):
        return None
    places: list[tuple[str | Path, int | None]] = [
        (path, line) for path, line in frames
        if not _within(path, root, _IMPORTLIB) and not _within(path, root, _CODESHOT)]
    if isinstance(exc, SyntaxError) and exc.filename:
        places.append((exc.filename, exc.lineno))
    if not places:
        return None
    filename, line = places[-1]
    path = Path(filename).resolve()
    if not path.is_relative_to(root) or \
            {"site-packages", "dist-packages"} & set(path.relative_to(root).parts):
        return None
    return f"{path.relative_to(root)} line {line}"


def load_agent(agent_dir: Path, config: AgentConfig) -> AgentBase:
    """Import the entry point from ``agent_dir`` (put first on sys.path), with its own
    modules, not those of another agent directory loaded before (nor a same-named entry
    module from elsewhere)."""
    module_name, _, attr = config.entry_point.partition(":")
    root = str(agent_dir.resolve())
    _forget_other_agents(root, module_name)
    _ROOTS.add(root)
    if root in sys.path:
        sys.path.remove(root)
    sys.path.insert(0, root)  # first, so its modules win over installed ones
    module = _import_entry(module_name, Path(root))
    agent = getattr(module, attr, None)
    if not isinstance(agent, AgentBase):
        raise InvalidInput(f"{config.entry_point} in {agent_dir} must be a CodeShotAgent or "
                           f"StandaloneAgent, got {type(agent).__name__}")
    try:  # now that its Funcs are registered, not once it is served
        agent.validate()
    except InvalidInput as exc:
        file = Path(module.__file__ or module_name).resolve()
        where = file.relative_to(root) if file.is_relative_to(root) else file
        raise InvalidInput(f"{where}: {exc.message}", **exc.details) from None
    return agent

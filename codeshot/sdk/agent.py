"""The agent classes authors instantiate: ``CodeShotAgent`` and ``StandaloneAgent``.

Same constructors and decorators as the Fixie 1.0 SDK. A Code Shot agent's few-shots
are checked with the engine's grammar when it is built, so a malformed example fails at
import with the few-shot and line number, not later on the platform.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

from codeshot.engine.fewshot import FewShotError, func_names, parse_few_shots, validate_base_prompt
from codeshot.sdk.funcs import Func, make_func
from codeshot.settings import Settings, get_settings

FUNC_NAME = re.compile(r"\w+")


class AgentBase:
    """Funcs, the HTTP app (``app()``), Lambda (``handler``) and a local server (``serve``)."""

    def __init__(self) -> None:
        self._funcs: dict[str, Func] = {}
        self._lambda: Callable[[Any, Any], Any] | None = None

    @property
    def funcs(self) -> dict[str, Func]:
        return dict(self._funcs)

    @property
    def query_func(self) -> Func | None:
        """What answers queries at ``POST /`` (standalone agents); None: Funcs only."""
        return None

    def register_func(
        self, func: Callable[..., Any] | None = None, *, func_name: str | None = None
    ) -> Any:
        """Decorator: ``@agent.register_func`` or ``@agent.register_func(func_name="x")``.

        Returns the function unchanged.
        """
        if func is None:
            return functools.partial(self.register_func, func_name=func_name)
        name = func_name or func.__name__
        if not FUNC_NAME.fullmatch(name):
            raise ValueError(f"Func names are letters, digits and _, got {name!r}")
        if name in self._funcs:
            raise ValueError(f"Func[{name}] is already registered with this agent")
        self._funcs[name] = make_func(func, name)
        return func

    def metadata(self) -> dict[str, Any]:
        """The handshake document (``GET /``)."""
        raise NotImplementedError

    def validate(self) -> None:
        """Checks that need every Func registered; run when the app is built."""

    def app(self, settings: Settings | None = None) -> Any:
        """The FastAPI app serving this agent; ``settings`` default to the environment."""
        from codeshot.sdk.app import build_app

        self.validate()
        return build_app(self, settings or get_settings())

    def handler(self, event: Any, context: Any) -> Any:
        """The Lambda entry point (``agent.handler``); the app is built on the first call."""
        if self._lambda is None:
            from mangum import Mangum

            self._lambda = Mangum(self.app(), lifespan="off")
        return self._lambda(event, context)

    def serve(self, port: int = 8181, host: str = "127.0.0.1") -> None:
        """Serve on uvicorn until stopped (loopback by default: put a proxy in front)."""
        import uvicorn

        uvicorn.run(self.app(), host=host, port=port)


def _strip_lines(text: str) -> str:
    """Fixie agents write prompts in indented triple-quoted strings; it strips every line."""
    return "\n".join(line.strip() for line in text.strip().splitlines())


class CodeShotAgent(AgentBase):
    def __init__(
        self,
        base_prompt: str,
        few_shots: str | list[str],
        corpora: list[Any] | None = None,
        conversational: bool = False,
        response_model: Any = None,
    ) -> None:
        super().__init__()
        self.base_prompt = validate_base_prompt(_strip_lines(base_prompt))
        source = _strip_lines(few_shots) if isinstance(few_shots, str) else [
            _strip_lines(shot) for shot in few_shots]
        self.parsed_few_shots = parse_few_shots(source, conversational=conversational)
        self.few_shots = [shot.render() for shot in self.parsed_few_shots]
        self.corpora = corpora
        self.conversational = conversational
        self.response_model = response_model

    def metadata(self) -> dict[str, Any]:
        return {
            "type": "code_shot",
            "base_prompt": self.base_prompt,
            "few_shots": self.few_shots,
            "corpora": self.corpora,
            "conversational": self.conversational,
            "response_model": self.response_model,
            "funcs": [
                {"name": f.name, "description": f.description, "parameters": f.parameters}
                for f in self._funcs.values()
            ],
        }

    def validate(self) -> None:
        missing = [n for n in func_names(self.parsed_few_shots) if n not in self._funcs]
        if missing:
            raise FewShotError(
                "the few-shots ask " + ", ".join(f"Func[{n}]" for n in missing)
                + ", which no @agent.register_func defines"
            )


class StandaloneAgent(AgentBase):
    """An agent that answers queries itself: ``handle_message`` gets each ``POST /``.

    It may return a str, Message or AgentResponse, or yield several (streamed).
    """

    def __init__(
        self, handle_message: Callable[..., Any], sample_queries: list[str] | None = None
    ) -> None:
        super().__init__()
        self.handle_message = make_func(handle_message, "handle_message")
        self.sample_queries = list(sample_queries or [])

    @property
    def query_func(self) -> Func:
        return self.handle_message

    def metadata(self) -> dict[str, Any]:
        return {"type": "standalone", "sample_queries": self.sample_queries}

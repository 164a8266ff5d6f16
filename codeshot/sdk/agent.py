"""The agent classes authors instantiate: ``CodeShotAgent`` and ``StandaloneAgent``.

Same constructors, arguments and decorators as the Fixie 1.0 SDK (fixieai 1.0.4). A Code
Shot agent's few-shots are checked with the engine's grammar when it is built, so a
malformed example fails at import with the few-shot and line number, not later on the
platform.
"""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Callable, Iterator
from typing import Any

from codeshot.engine.fewshot import (
    FewShotError,
    Kind,
    Step,
    lines_of,
    parse_few_shots,
    parse_line,
    validate_base_prompt,
)
from codeshot.errors import InvalidInput
from codeshot.models import (
    FUNC_NAME_RE,
    MAX_FUNC_NAME,
    MAX_FUNCS,
    PLATFORM_FUNC_NAMES,
    check_prompts,
)
from codeshot.sdk.corpora import CustomCorpus, UrlDocumentCorpus
from codeshot.sdk.funcs import Func, make_func
from codeshot.sdk.llm_settings import LlmSettings
from codeshot.sdk.oauth import OAuthHandler, OAuthParams
from codeshot.sdk.wire import Message
from codeshot.settings import Settings, get_settings


class AgentBase:
    """Funcs, the HTTP app (``app()``), Lambda (``handler``) and a local server (``serve``)."""

    def __init__(self, oauth_params: OAuthParams | None = None) -> None:
        self.oauth_params = oauth_params
        self._funcs: dict[str, Func] = {}
        self._corpus_funcs: dict[str, Callable[..., Any]] = {}
        self._lambda: Callable[[Any, Any], Any] | None = None
        if oauth_params is not None:
            self.register_func(_oauth)

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
        name = self._new_name(func, func_name, self._funcs)
        self._funcs[name] = make_func(func, name, self.oauth_params)
        return func

    def register_corpus_func(
        self, func: Callable[..., Any] | None = None, *, func_name: str | None = None
    ) -> Any:
        """Decorator: a Func loading a custom document corpus (Fixie 1.0). It is declared in
        the handshake's ``corpora``; the platform does not read custom corpora yet."""
        if func is None:
            return functools.partial(self.register_corpus_func, func_name=func_name)
        self._corpus_funcs[self._new_name(func, func_name, self._corpus_funcs)] = func
        return func

    @staticmethod
    def _new_name(func: Callable[..., Any], func_name: str | None, taken: dict[str, Any]) -> str:
        name = str(func_name or getattr(func, "__name__", ""))
        if not FUNC_NAME_RE.fullmatch(name) or len(name) > MAX_FUNC_NAME:
            raise ValueError(f"Func names are 1-{MAX_FUNC_NAME} letters, digits and _, got "
                             f"{name[:MAX_FUNC_NAME]!r}")
        if name in taken:
            raise ValueError(f"Func[{name}] is already registered with this agent")
        if len(taken) >= MAX_FUNCS:  # the platform refused it only at registration
            raise ValueError(f"an agent has at most {MAX_FUNCS} Funcs")
        return name

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

    def serve(self, host: str = "127.0.0.1", port: int = 8181) -> None:
        """Serve on uvicorn until stopped (Fixie's arguments; loopback by default: put a
        proxy in front)."""
        import uvicorn

        uvicorn.run(self.app(), host=host, port=port)


def _strip_lines(text: str) -> str:
    """Fixie agents write prompts in indented triple-quoted strings; it strips every line."""
    return "\n".join(line.strip() for line in text.strip().splitlines())


class CodeShotAgent(AgentBase):
    """An agent made of a base prompt and few-shots; the platform runs them with its LLM.

    ``few_shots`` may be empty: the agent is then a plain LLM agent with its base prompt.
    ``conversational``: the session's earlier turns with this agent go into its prompt.
    ``llm_settings``: model, temperature and token limit for the platform's provider.
    ``corpora``: URL corpora the platform reads and ``Func[fixie_query_corpus]`` searches.
    ``oauth_params``: the agent's OAuth client, for Funcs taking an ``oauth_handler``
    (:mod:`codeshot.sdk.oauth`).
    """

    def __init__(
        self,
        base_prompt: str,
        few_shots: str | list[str],
        corpora: list[UrlDocumentCorpus] | None = None,
        conversational: bool = False,
        oauth_params: OAuthParams | None = None,
        llm_settings: LlmSettings | None = None,
    ) -> None:
        super().__init__(oauth_params)
        if not isinstance(base_prompt, str):
            raise TypeError(f"base_prompt must be a str, got {type(base_prompt).__name__}")
        if not isinstance(few_shots, str) and not (isinstance(few_shots, list) and all(
                isinstance(shot, str) for shot in few_shots)):
            raise TypeError("few_shots must be a str or a list of str, got "
                            f"{type(few_shots).__name__}")
        self.base_prompt = validate_base_prompt(_strip_lines(base_prompt))
        source = _strip_lines(few_shots) if isinstance(few_shots, str) else [
            _strip_lines(shot) for shot in few_shots]
        self.parsed_few_shots = parse_few_shots(source, conversational=conversational)
        self.few_shots = [shot.render() for shot in self.parsed_few_shots]
        check_prompts(self.base_prompt, self.few_shots)  # else refused only at registration
        self.url_corpora = list(corpora or [])
        self.conversational = conversational
        self.llm_settings = llm_settings

    @property
    def corpora(self) -> list[UrlDocumentCorpus | CustomCorpus] | None:
        """The URL corpora, then one per corpus Func; None when there are none (Fixie)."""
        corpora: list[UrlDocumentCorpus | CustomCorpus] = [
            *self.url_corpora, *(CustomCorpus(n) for n in self._corpus_funcs)]
        return corpora or None

    def metadata(self) -> dict[str, Any]:
        return {
            "type": "code_shot",
            "base_prompt": self.base_prompt,
            "few_shots": self.few_shots,
            "corpora": [c.to_wire() for c in self.corpora or []] or None,
            "conversational": self.conversational,
            "response_model": self.llm_settings.to_wire() if self.llm_settings else None,
            "funcs": [
                {"name": f.name, "description": f.description, "parameters": f.parameters}
                for f in self._funcs.values()
            ],
        }

    def validate(self) -> None:
        """Each Func the few-shots use is the agent's or the platform's (PLATFORM_FUNC_NAMES,
        which few-shots ask without defining, as in Fixie 1.0), and each Ask's arguments
        are ones its typed parameters read: else the model, copying the example, would
        fail the same way on every query."""
        for number, line, step in self._func_steps():
            where = f"few-shot {number}, line {line}"
            name = step.target or ""
            func = self._funcs.get(name)
            if func is None and name not in PLATFORM_FUNC_NAMES:
                near = difflib.get_close_matches(name, [*self._funcs, *PLATFORM_FUNC_NAMES], 1)
                defined = sorted(f for f in self._funcs if not f.startswith("_"))  # not _oauth
                raise FewShotError(
                    f"{where}: the few-shots ask Func[{name}], which no "
                    "@agent.register_func defines"
                    + (f" (did you mean Func[{near[0]}]?)" if near else "")
                    + f"; defined: {', '.join(defined) or 'none'}",
                    few_shot=number, line=line)
            if func is not None and func.arguments is not None and step.kind is Kind.ASK_FUNC:
                try:
                    func.arguments.call(step.text)
                except InvalidInput as exc:
                    raise FewShotError(f"{where}: {exc.message}, so Func[{name}]'s typed "
                                       "parameters cannot read this example's arguments",
                                       few_shot=number, line=line) from None

    def _func_steps(self) -> Iterator[tuple[int, int, Step]]:
        """(few-shot number, line number, step) of each Ask Func and Func says line."""
        for number, text in enumerate(self.few_shots, start=1):
            for line, source in enumerate(lines_of(text), start=1):
                step = parse_line(source)
                if step is not None and step.kind in (Kind.ASK_FUNC, Kind.FUNC_SAYS):
                    yield number, line, step


class StandaloneAgent(AgentBase):
    """An agent that answers queries itself: ``handle_message`` gets each ``POST /``.

    It may return a str, Message or AgentResponse, or yield several (streamed).
    """

    def __init__(
        self, handle_message: Callable[..., Any], sample_queries: list[str] | None = None,
        oauth_params: OAuthParams | None = None,
    ) -> None:
        super().__init__(oauth_params)
        self.handle_message = make_func(handle_message, "handle_message", oauth_params)
        self.sample_queries = list(sample_queries or [])

    @property
    def query_func(self) -> Func:
        return self.handle_message

    def metadata(self) -> dict[str, Any]:
        return {"type": "standalone", "sample_queries": self.sample_queries}


def _oauth(query: Message, oauth_handler: OAuthHandler) -> str:
    """The Func Fixie 1.0 registers for agents with ``oauth_params``: the platform's OAuth
    callback calls it with ``{"state", "code", "code_verifier", "redirect_uri"}`` to
    complete the flow."""
    request = json.loads(query.text)
    oauth_handler.authorize(request["state"], request["code"])
    return "Authorization successful!"

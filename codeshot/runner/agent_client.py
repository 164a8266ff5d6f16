"""Calls from the platform to agents over HTTP: the handshake, Funcs, standalone queries.

Every call carries a fresh agent-call JWT; every reply is size-capped and parsed
defensively, and failures map to AGENT_UNAVAILABLE (could not reach it, or the
connection broke mid-call), AGENT_ERROR (it answered badly) or TIMEOUT. Only a call that
surely did not run is retried: a Func's side effects never repeat. The handshake, read
at registration, is in :mod:`codeshot.runner.handshake`, so the runner never imports
pydantic.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import httpx

from codeshot import observability
from codeshot.errors import (
    ERR_FUNC_NOT_DEFINED,
    AgentBusy,
    AgentCallDropped,
    AgentFailed,
    AgentUnavailable,
    CallTimeout,
    CodeshotError,
    InvalidInput,
    ReplyTooLarge,
)
from codeshot.net.addresses import (
    RefusedAddress,
    check_public_url,
    why_unreachable,
    without_address,
)
from codeshot.net.http import CompressedReply, public_client, retry_after
from codeshot.text import MAX_REPLY_TEXT_BYTES, as_one_line

if TYPE_CHECKING:
    from codeshot.auth.service import CallTokens

log = logging.getLogger("codeshot.runner")

MAX_REPLY_BYTES = 2 * 1024 * 1024


def _read_capped(response: httpx.Response) -> bytes:
    body = b""
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > MAX_REPLY_BYTES:
            raise AgentFailed(f"agent reply exceeds {MAX_REPLY_BYTES} bytes")
    return body


# When the call being made in this thread must be over (time.monotonic()): httpx's
# timeout is per read, and a reply dripping a byte a second would hold a runner until
# the whole cap arrived. The agent client's connections read it at each step.
_CALL_ENDS: ContextVar[float] = ContextVar("call_ends", default=float("inf"))


class Reply(NamedTuple):
    status: int
    headers: httpx.Headers
    body: bytes  # capped

    @property
    def content_type(self) -> str:
        return str(self.headers.get("content-type", ""))


def request(
    method: str,
    url: str,
    token: str,
    *,
    timeout: float,
    json_body: Any = None,
    accept: str = "application/json",
    client: httpx.Client,
    who: str | None = None,
) -> Reply:
    """One call through ``client`` (a :func:`~codeshot.net.http.public_client`: a refused
    address raises INVALID_INPUT; a host that does not resolve is unreachable). ``who``
    names the agent in errors (default: "agent at ``url``"); nothing else in them names
    its URL or host."""
    who = who or f"agent at {url}"
    headers = {"Authorization": f"Bearer {token}", "Accept": accept} | observability.headers()
    try:
        with client.stream(method, url, headers=headers, json=json_body,
                         timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0))) as r:
            return Reply(r.status_code, r.headers, _read_capped(r))
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # the call never left
        raise AgentUnavailable(f"{who} is unreachable: {why_unreachable(exc, url)}") from exc
    except httpx.TimeoutException as exc:
        raise CallTimeout(f"{who} did not answer within {timeout:g}s (or the "
                          "query's time ran out)") from exc
    except httpx.HTTPError as exc:
        raise AgentCallDropped(f"{who} dropped the call before answering: "
                               f"{exc.__class__.__name__}") from exc
    except CompressedReply as exc:  # raised by the transport, which names the URL
        raise CompressedReply(who, exc.problem) from exc
    except RefusedAddress as exc:  # its host resolved to an address the platform never calls
        raise refused(who, url, exc) from exc


def refused(who: str, url: str, exc: RefusedAddress) -> RefusedAddress:
    """``exc`` naming the agent as ``who``, not by its URL or host."""
    return RefusedAddress(f"{who}: {without_address(exc.message, url)}")


# Statuses that say the call was not run (throttled, not started), but only with a
# Retry-After: a gateway may answer 503 on its own after it forwarded the call, and the
# agent ran it. A 500 is the agent's own code failing, and a 502 or 504 from a gateway
# may come after the agent ran: calling again would repeat its side effects.
RETRYABLE_STATUS = frozenset({429, 503})
# The longest Retry-After waited for: a query waits for its answer.
MAX_RETRY_AFTER_SECONDS = 5.0


def _retry_delay(reply: Reply) -> float | None:
    """Seconds to wait before calling again, if ``reply`` says the call was not run and
    when to come back, soon enough; else None."""
    if reply.status not in RETRYABLE_STATUS:
        return None
    delay = retry_after(reply.headers.get("retry-after"))
    return delay if delay is not None and delay <= MAX_RETRY_AFTER_SECONDS else None


class AgentClient:
    """Calls agents for the runner: a fresh JWT per call, bounded retries only when the
    call was surely not run (no connection; 429 or 503 with a short Retry-After). Its
    HTTP client (one per query, closed with it, so no abandoned call outlives the query)
    connects only to addresses it checked at that moment, follows no redirect and keeps
    no cookie."""

    def __init__(
        self,
        # (agent id, its registration if known, the call's seconds) -> a JWT for this user
        # and session, valid as long as the call may last
        mint_token: CallTokens,
        *,
        timeout: float,
        allow_loopback: bool,
        retries: int = 2,
        backoff: float = 0.2,
        deadline: float | None = None,
        timeout_set_by: str | None = None,
    ) -> None:
        """``timeout``: seconds a Func call may take, its reply included, which
        ``timeout_set_by`` (a setting's variable) sets, named in TIMEOUT; ``deadline``
        (time.monotonic()): when the query's time is up, for every call."""
        self.mint_token = mint_token
        self.timeout, self.timeout_set_by = timeout, timeout_set_by
        self.deadline = deadline
        self.allow_loopback = allow_loopback
        self.retries = retries
        self.backoff = backoff
        # Nothing a call sends or reads, headers included, outlives its end (_post sets
        # it: the call's time, within the query's).
        self.http = public_client(allow_loopback=allow_loopback, deadline=_CALL_ENDS.get)

    def close(self) -> None:
        self.http.close()

    def _post(self, agent_id: str, url: str, body: dict[str, Any], registration: int | None,
              seconds: float | None, who: str) -> tuple[bytes, str]:
        """(reply body, its content type) of a 2xx reply, after bounded retries, within
        ``seconds`` (None: the query's time) and the query's deadline; ``who`` names the
        agent in errors."""
        try:
            check_public_url(url, allow_loopback=self.allow_loopback, resolve=False)
        except RefusedAddress as exc:  # one stored before a rule it breaks
            raise refused(who, url, exc) from exc
        now = time.monotonic()
        query_ends = self.deadline if self.deadline is not None else now + self.timeout
        ends = query_ends if seconds is None else min(now + seconds, query_ends)
        ends_here = _CALL_ENDS.set(ends)
        try:
            return self._post_until(agent_id, url, body, registration, ends, who)
        finally:
            _CALL_ENDS.reset(ends_here)

    def _post_until(self, agent_id: str, url: str, body: dict[str, Any],
                    registration: int | None, ends: float, who: str) -> tuple[bytes, str]:
        attempt = 0
        while True:
            token = self.mint_token(agent_id, registration, ends - time.monotonic())
            try:
                reply = request(
                    "POST", url, token, timeout=self.timeout,
                    json_body={**body, "access_token": token}, client=self.http,
                    accept="application/json, application/x-ndjson", who=who,
                )
            except CallTimeout as exc:
                if self.timeout_set_by is None:
                    raise
                raise CallTimeout(f"{exc.message}; {self.timeout_set_by} sets how long"
                                  ) from exc
            except AgentUnavailable as exc:
                wait = self.backoff * 2 ** attempt
                # Not again: it may have run, or there is no time left to (unavailable).
                if attempt >= self.retries or exc.permanent or time.monotonic() + wait >= ends:
                    raise
            else:
                delay = _retry_delay(reply)
                if delay is None or attempt >= self.retries or time.monotonic() + delay >= ends:
                    return _checked(who, reply), reply.content_type  # busy: AgentBusy
                wait = delay  # as long as the agent asked
            attempt += 1
            time.sleep(wait)

    def call_func(self, agent_id: str, func_url: str, func: str, text: str,
                  embeds: dict[str, Any] | None = None, *,
                  registration: int | None = None) -> FuncReply:
        """``registration``: the agent's (:attr:`codeshot.models.Agent.registration`) whose
        URL this is, for its call token; None for an agent not registered."""
        url = func_url.rstrip("/") + "/" + func
        who = f"agent {agent_id}'s Func[{func}]"
        with _logged(url):
            data, _ = self._post(agent_id, url, {"message": {"text": text,
                                                             "embeds": embeds or {}}},
                                 registration, self.timeout, who)
            return FuncReply.parse(who, data)

    def query_standalone(self, agent_id: str, query_url: str, text: str,
                         embeds: dict[str, Any] | None = None, *,
                         registration: int | None = None) -> FuncReply:
        """POST the query; the reply streams newline-delimited AgentResponse objects and
        the last one is the answer (as the Fixie SDK reads it). It may stream as long as
        the query's time lasts (``timeout`` bounds each read)."""
        url, who = query_url.rstrip("/") + "/", f"agent {agent_id}"
        with _logged(url):
            data, _ = self._post(agent_id, url, {"message": {"text": text,
                                                             "embeds": embeds or {}}},
                                 registration, None, who)
            lines = [line for line in data.decode("utf-8", "replace").splitlines()
                     if line.strip()]
            if not lines:
                raise AgentFailed(f"{who} sent an empty reply")
            return FuncReply.parse(who, lines[-1].encode())


@contextlib.contextmanager
def _logged(url: str) -> Iterator[None]:
    """A failed call's URL in the log: its error, which users read in the chat, names the
    agent by its id, not by the address the platform reaches it at."""
    try:
        yield
    except CodeshotError as exc:
        log.info("agent call to %s failed (%s): %s%s", url, exc.code, exc.message,
                 f" ({exc.__cause__})" if exc.__cause__ else "")
        raise


class FuncNotDefined(AgentFailed):
    """The agent has no Func of that name (HTTP 404, ERR_FUNC_NOT_DEFINED)."""


def _checked(who: str, reply: Reply) -> bytes:
    """The body of a 2xx reply; any other status is the agent's failure, with its own
    error message when it sent one (Fixie agents send {"error": {"code", "message"}})."""
    status, data = reply.status, reply.body
    if 200 <= status < 300:
        return data
    code, detail, said = None, "", ""
    try:
        error = json.loads(data).get("error") or {}
        code, said = error.get("code"), _said(error.get("message"))
        detail = f": {_said(code, 64)} {said}".rstrip()
    except (ValueError, AttributeError, RecursionError):
        pass  # not an agent's error reply: what it was stays unsaid (a page, a service)
    if status == 400 and code == InvalidInput.code and said:
        # The Func refused its input: the model may ask again (as with in-process Funcs),
        # rather than the call being retried as the agent's failure.
        raise InvalidInput(said)
    if status in RETRYABLE_STATUS:  # busy or throttled, and not called (again)
        wait = reply.headers.get("retry-after")
        raise AgentBusy(f"{who} is unavailable: it answered HTTP {status}{detail}"
                        + (f" (Retry-After: {as_one_line(wait, 40)})" if wait else ""))
    failure = FuncNotDefined if status == 404 and code == ERR_FUNC_NOT_DEFINED else AgentFailed
    raise failure(f"{who} answered HTTP {status}{detail}")


def _said(value: Any, limit: int = 300) -> str:
    """An agent's own error text, as one short line (an agent's words, not a page)."""
    return as_one_line(value, limit) if isinstance(value, str) else ""


@dataclass
class FuncReply:
    """An agent's answer: ``{"message": {"text", "embeds"}, "error", "needs_input",
    "question", "repeat_on_answer"}``; ``needs_input`` asks the platform to pause for the
    user; ``repeat_on_answer``: the user's answer calls the Func again as first asked."""

    text: str = ""
    embeds: dict[str, Any] = field(default_factory=dict)
    needs_input: bool = False
    question: str | None = None
    repeat_on_answer: bool = False

    @classmethod
    def parse(cls, who: str, data: bytes) -> FuncReply:
        """``who``: the agent as its errors name it."""
        try:
            body = json.loads(data)
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except (ValueError, UnicodeDecodeError) as exc:
            raise AgentFailed(f"{who} sent invalid JSON") from exc
        except RecursionError as exc:  # deeper than json's recursion: the agent's fault
            raise AgentFailed(f"{who} sent JSON nested too deeply") from exc
        error = body.get("error")
        if error:
            message = error.get("message") if isinstance(error, dict) else error
            raise AgentFailed(f"{who} reported an error: {_said(message)}")
        message = body.get("message") or {}
        question = body.get("question")
        if question is not None and not isinstance(question, str):
            raise AgentFailed(f"{who} sent a question that is not text")
        # A pause may say its question alone; any other reply is its message's text ({} or
        # {"ok": true}, a gateway's, was an empty answer).
        asks = bool(body.get("needs_input")) and bool(question)
        if not isinstance(message, dict) or not isinstance(
                message.get("text", "" if asks else None), str):
            raise AgentFailed(f"{who} sent a reply without message.text")
        for what, text in (("reply text", message.get("text", "")), ("question", question)):
            if len((text or "").encode("utf-8", "surrogatepass")) > MAX_REPLY_TEXT_BYTES:
                raise ReplyTooLarge(f"{who} sent a {what} over {MAX_REPLY_TEXT_BYTES} "
                                    "bytes (send large content as an embed)")
        embeds = message.get("embeds") or {}
        return cls(text=message.get("text", ""),
                   embeds=embeds if isinstance(embeds, dict) else {},
                   needs_input=bool(body.get("needs_input")),
                   question=question,
                   repeat_on_answer=bool(body.get("repeat_on_answer")))

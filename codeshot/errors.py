"""Every error code of the platform, each defined once (docs/errors.md lists them).

Every layer raises these; the API turns them into GraphQL ``extensions.code`` or REST
``{"error": {"code", "message"}}`` without knowing where they came from. Code that needs
a code as text (a stored message's ``error_code``) reads it from the class:
``AgentFailed.code``.
"""

from __future__ import annotations

from typing import Any, ClassVar

INTERNAL_MESSAGE = "internal error"  # all a user learns of an unexpected failure


class CodeshotError(Exception):
    """Anything unexpected: INTERNAL, shown without details."""

    code: ClassVar[str] = "INTERNAL"
    http_status: ClassVar[int] = 500
    permanent: ClassVar[bool] = False  # a retry cannot fix it (the engine never retries)

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            body["details"] = self.details
        return body


class Unauthenticated(CodeshotError):
    code = "UNAUTHENTICATED"
    http_status = 401


class Forbidden(CodeshotError):
    code = "FORBIDDEN"
    http_status = 403


class NotFound(CodeshotError):
    code = "NOT_FOUND"
    http_status = 404


class InvalidInput(CodeshotError):
    code = "INVALID_INPUT"
    http_status = 400


class LastApiKey(InvalidInput):
    """Revoking a user's last API key, which would lock them out."""


class Conflict(InvalidInput):
    """Input that collides with what exists (a taken handle); still INVALID_INPUT."""


class Changed(Conflict):
    """A write that held only while its session was as a check read it: it changed (a
    post, a reply) between the check and the write, which wrote nothing."""


class RateLimited(CodeshotError):
    code = "RATE_LIMITED"
    http_status = 429


# AWS's error codes for a call throttled (DynamoDB, SQS, S3, Cognito, ...).
THROTTLING = frozenset({
    "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded",
    "Throttling", "TooManyRequestsException", "SlowDown",
})


class Throttled(RateLimited):
    """AWS throttling that outlasted botocore's retries: nothing wrong with the request
    and no limit of the user's reached, so a retry (a queue's redelivery) goes on."""


def throttled(exc: BaseException | None) -> Throttled | None:
    """RATE_LIMITED for ``exc`` if it is AWS throttling (which outlasted botocore's retries
    with backoff, or it would not be raised), else None. Read from the ``response`` dict
    botocore's errors carry, so this module imports no botocore."""
    response = getattr(exc, "response", None)
    error = response.get("Error") if isinstance(response, dict) else None
    if isinstance(error, dict) and error.get("Code") in THROTTLING:
        return Throttled("the platform is busy right now; retry in a moment")
    return None


class BudgetExceeded(RateLimited):
    """A user's or an agent's LLM token budget is spent: the query ends here, whichever
    program or nested agent was running (no failure handler retries or explains it)."""


class AgentUnavailable(CodeshotError):
    """An agent could not be reached (or the platform could not queue work for it)."""

    code = "AGENT_UNAVAILABLE"
    http_status = 502


class AgentCallDropped(AgentUnavailable):
    """The connection to an agent broke after the call was sent: the agent may have run
    it, so it is not called again (its side effects would repeat)."""

    permanent = True


class AgentBusy(AgentUnavailable):
    """An agent answered 429 or 503 and is not called again: without a Retry-After (a
    gateway may answer 503 after the agent ran the call), with one longer than a query
    waits, or still after the retries it allowed."""

    permanent = True


class AgentFailed(CodeshotError):
    """An agent answered with an error or a reply that breaks the protocol, or a run
    failed (step or token budget used up). The agent ran the call: calling it again would
    repeat what it did (its side effects), so nothing retries it."""

    code = "AGENT_ERROR"
    http_status = 502
    permanent = True


class ReplyTooLarge(AgentFailed):
    """An agent's reply text or question is larger than the platform stores."""


class AgentRunFailed(AgentFailed):
    """A nested agent's whole run failed (step limit, no usable reply, a failed Func): it
    already retried what it could."""


class LLMError(CodeshotError):
    code = "LLM_ERROR"
    http_status = 502


class Timeout(CodeshotError):
    code = "TIMEOUT"
    http_status = 504


class CallTimeout(Timeout):
    """An agent (or any command the engine runs) did not answer a call in time: it may
    still be running it, so it is not called again."""

    permanent = True


class Interrupted(CodeshotError):
    """A query's run stopped mid-way (its runner crashed or timed out) and was delivered
    again: it is not run twice, so no agent repeats what it may already have done."""

    code = "INTERRUPTED"
    http_status = 503


class Canceled(CodeshotError):
    """The user turned down a question an agent asked (A2A tasks/cancel, a declined MCP
    elicitation), or a task that is not
    waiting for input was asked to cancel."""

    code = "CANCELED"
    http_status = 409


class CallbackFailed(CodeshotError):
    """An Agent Protocol task's callback_url could not be used to ask the user the agent's
    question: unreachable, a refused (private) address, an error status, or a reply that
    breaks the RFC's prompt exchange. The question ends with this error."""

    code = "CALLBACK_FAILED"
    http_status = 502


class Unavailable(CodeshotError):
    """A part the platform (or an agent) depends on cannot be read right now: the signing
    keys in Secrets Manager, the platform's JWKS."""

    code = "UNAVAILABLE"
    http_status = 503


class OAuthStateInvalid(InvalidInput):
    """An OAuth callback whose ``state`` the platform did not issue, or issued for a flow
    that is already over (used once, or expired): nothing is exchanged or stored."""

    code = "OAUTH_STATE_INVALID"
    http_status = 400
    permanent = True


class OAuthBrowserMismatch(Forbidden):
    """An OAuth link or callback in another browser than the one that continued from the
    link's page first (its cookie is missing, not that one, or doubled), or the page's
    form posted from another origin: a leaked link, or a callback an attacker made
    someone else's browser open (RFC 6749, 10.12). Nothing is written."""

    code = "OAUTH_BROWSER_MISMATCH"
    http_status = 403
    permanent = True


class OAuthFailed(CodeshotError):
    """The user's authorization did not produce a token: the authorization server
    refused (the user denied access) or the agent's code exchange failed."""

    code = "OAUTH_FAILED"
    http_status = 502
    permanent = True


class PortInUse(CodeshotError):
    """A port a command would listen on is taken; the message names that command's flag."""

    code = "PORT_IN_USE"
    http_status = 409


class StackRunning(CodeshotError):
    """``codeshot local up`` in a directory whose ``.codeshot/local.json`` belongs to a
    local stack that is still running: a second one would take that file over."""

    code = "STACK_RUNNING"
    http_status = 409


class NotSupported(CodeshotError):
    """A platform Func an agent cannot use: ``Func[fixie_query_corpus]`` from an agent
    that declares no document corpus to search."""

    code = "NOT_SUPPORTED"
    http_status = 501


class UserDeleted(CodeshotError):
    """An operator's command, a deploy's owner or a new API key for a user who has been
    deleted: what is left of them is a tombstone, being erased, never used again."""

    code = "USER_DELETED"
    http_status = 410
    permanent = True


# The codes of an agent's error replies on the Fixie wire (``{"error": {"code", ...}}``),
# named as the Fixie 1.0 SDK names them. Agents send these; the platform reports such a
# reply as AGENT_ERROR with the agent's code in the message.
ERR_FUNC_NOT_DEFINED = "ERR_FUNC_NOT_DEFINED"  # POST /{func} for a Func it does not have
ERR_NO_RESPONSE = "ERR_NO_RESPONSE"  # the Func returned nothing
ERR_AGENT_UNHANDLED_EXCEPTION = "ERR_AGENT_UNHANDLED_EXCEPTION"  # the Func raised
ERR_USERSTORAGE_REQUIRES_USER = "ERR_USERSTORAGE_REQUIRES_USER"  # anonymous token
ERR_USERSTORAGE = "ERR_USERSTORAGE"  # the platform's storage answered without an error body


def error_for(code: str | None, message: str) -> CodeshotError:
    """An error of the class whose code is ``code`` (AGENT_ERROR for an unknown one)."""
    classes = {cls.code: cls for cls in (Unauthenticated, Forbidden, NotFound, InvalidInput,
                                         RateLimited, AgentUnavailable, AgentFailed, LLMError,
                                         Timeout, Unavailable, NotSupported)}
    return classes.get(code or "", AgentFailed)(message)


def install_hint(extra: str) -> str:
    """How to install one of codeshot-kit's extras, which is not on PyPI: from the checkout
    this codeshot runs from (an editable install's), else from wherever the user keeps it."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    where = root if (root / "pyproject.toml").is_file() else "/path/to/codeshot"
    # torch's CPU build: PyPI's pulls GBs of CUDA
    index = " --extra-index-url https://download.pytorch.org/whl/cpu" \
        if extra == "embeddings" else ""
    return f"pip install -e '{where}[{extra}]'{index}"

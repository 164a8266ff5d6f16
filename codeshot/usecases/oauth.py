"""OAuth for agents: an agent's Func asks for a user's authorization, the user's browser
comes back to the platform's callback, and the paused query resumes.

1. The agent (its Func, with the agent token the platform sent it) asks for an
   authorization URL: the platform starts a flow bound to that token's user, agent and
   session, with a PKCE verifier it keeps, builds the provider's URL with authlib, and
   answers with its own link to it (``/api/oauth/start?state=...``).
2. The Func's reply asks the user to open it (``needs_input``, ``repeat_on_answer``): the
   session awaits input with the link as its question.
3. The link opens a page naming the account, the agent and the provider; its Continue
   binds the flow to the first browser that continues (a cookie whose hash the flow
   keeps) and redirects to the provider. The provider redirects the browser to
   ``/api/oauth/callback``: the flow is taken (once, unexpired, by the browser with that
   cookie: RFC 6749 10.12's CSRF protection), the code and verifier go to the agent's
   ``Func[_oauth]``, which exchanges
   them with its client secret and hands the token back (``PUT /api/oauth/token``), and,
   if the session's question is this link, a message from the user resumes the session,
   which calls the Func again.
4. The agent reads the token with ``GET /api/oauth/token`` (refreshing it itself when it
   has expired); the user lists and revokes tokens (GraphQL, CLI, console).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, urlencode, urlsplit, urlunsplit

from codeshot.auth.service import check_active
from codeshot.errors import (
    CodeshotError,
    Forbidden,
    InvalidInput,
    NotFound,
    OAuthFailed,
    RateLimited,
    Unavailable,
)
from codeshot.models import Agent, MessageType, Principal, SessionStatus
from codeshot.services import Services
from codeshot.settings import API_CALL_SECONDS
from codeshot.store.oauth import Flow, Grant, check_token
from codeshot.text import as_one_line
from codeshot.usecases.messaging import Messaging
from codeshot.usecases.users import principal_of, user_id_of

log = logging.getLogger("codeshot.api")

CALLBACK_PATH = "/api/oauth/callback"
START_PATH = "/api/oauth/start"
OAUTH_FUNC = "_oauth"  # the Func Fixie 1.0's SDK registers for agents with oauth_params
MAX_SCOPES = 50
MAX_CLIENT_ID_BYTES = 500  # providers' are far shorter; a claim's sort key holds 1,024
DEFAULT_PORTS = {"https": 443, "http": 80}
MAX_SCOPE_CHARS = 200
RECENT_MESSAGES = 10  # a paused question is the session's newest terminal message


def _acting_for(services: Services, caller: Principal) -> tuple[str, str, Agent]:
    """(user, agent id, agent) of an agent token issued for a user to the agent now
    registered: not to a deleted one of the same id (a call still in flight when its
    owner deleted it and registered another), whose token would reach the new agent's
    users."""
    if not caller.user_id or not caller.agent_id:
        raise Forbidden("OAuth needs an agent token issued for a user")
    agent = services.registry.get(caller.agent_id)  # NotFound once it is deleted
    if not caller.issued_to(agent.registration):
        raise NotFound(f"agent {caller.agent_id} not found: this call's token was issued "
                       "to a deleted agent of that id")
    return caller.user_id, caller.agent_id, agent


def _charge(services: Services, user_id: str, agent_id: str) -> None:
    """One call against the per-minute limit of this user and agent (after the input's
    checks: refused input writes nothing, the counter included)."""
    services.usage.charge("oauth", f"{user_id}#{agent_id}",
                          services.settings.storage_rate_limit, window="minute")


def redirect_uri(services: Services) -> str:
    return services.settings.api_url.rstrip("/") + CALLBACK_PATH


def authorization_url(services: Services, caller: Principal, auth_uri: str, client_id: str,
                      scopes: list[str]) -> str:
    """The platform's link where the user authorizes the calling agent; the flow is bound
    to the token's user, agent and session (a query's session: that is what resumes)."""
    from authlib.integrations.httpx_client import OAuth2Client

    user_id, agent_id, agent = _acting_for(services, caller)
    if not caller.session_id:
        raise Forbidden("OAuth needs an agent token issued for a session")
    client_id = client_id.strip()  # " id" and "id" are one client to its provider
    auth_uri, host = _check_client(services, auth_uri, client_id, scopes)
    services.oauth.claim_client(host, client_id, agent.owner)  # refused: nothing written
    _charge(services, user_id, agent_id)
    flow = Flow.new(user_id, agent_id, caller.session_id, redirect_uri(services))
    with OAuth2Client(client_id, scope=" ".join(scopes), redirect_uri=flow.redirect_uri,
                      code_challenge_method="S256") as client:  # builds the URL; no request
        url, _ = client.create_authorization_url(auth_uri, state=flow.state,
                                                 code_verifier=flow.code_verifier)
    services.oauth.start_flow(flow, str(url))
    return services.settings.api_url.rstrip("/") + START_PATH + "?" + urlencode(
        {"state": flow.state})


@dataclass(frozen=True)
class LinkPage:
    """What the link's page tells the user before anything is bound: whose codeshot
    account the authorization will serve, which agent, and where the browser goes."""

    username: str
    agent_id: str
    provider_host: str


def describe_link(services: Services, state: str, browser: str | None) -> LinkPage:
    pending = services.oauth.peek_flow(state, browser)
    user = services.users.get(pending.user_id)
    check_active(user)  # a flow opened before the deletion (flows outlast its wait)
    return LinkPage(user.username, pending.agent_id,
                    urlsplit(pending.authorize_url).hostname or "")


def open_link(services: Services, state: str, browser: str) -> str:
    """The user's browser continues from the link's page (``browser``: its cookie): the
    provider's URL, once the flow is bound to that browser (OAUTH_BROWSER_MISMATCH if
    another has it)."""
    return services.oauth.open_flow(state, browser)


def _check_client(services: Services, auth_uri: str, client_id: str, scopes: list[str]
                  ) -> tuple[str, str]:
    """The authorization URL with its host spelt as :func:`_client_host` spells it, and
    that host, once the request is well formed."""
    parts = urlsplit(auth_uri)
    allowed = ("https", "http") if services.settings.local_mode else ("https",)
    if parts.scheme not in allowed or not parts.hostname:
        raise InvalidInput(f"authUri must be an {' or '.join(allowed)} URL")
    if "@" in parts.netloc:  # a browser would go to the host after it, whatever it says
        raise InvalidInput("authUri must not carry a user name or password")
    words = all(isinstance(s, str) and 0 < len(s) <= MAX_SCOPE_CHARS
                and not any(c.isspace() for c in s) for s in scopes)
    if not client_id or len(client_id.encode()) > MAX_CLIENT_ID_BYTES \
            or len(scopes) > MAX_SCOPES or not words:
        raise InvalidInput(f"clientId must be set (at most {MAX_CLIENT_ID_BYTES} bytes) and "
                           f"scopes must be words (at most {MAX_SCOPES}, of at most "
                           f"{MAX_SCOPE_CHARS} characters)")
    host = _client_host(parts)
    return urlunsplit(parts._replace(netloc=host)), host


_ASCII_HOST = re.compile(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*")


def _client_host(parts: SplitResult) -> str:
    """The host an OAuth client is claimed at, one spelling for every way of writing it
    (accounts.google.com, ACCOUNTS.google.com., accounts.google.com:443 are one server):
    lowercase, non-ASCII names in IDNA (UTS 46, as browsers resolve them), no trailing
    dot, and the port only when it is not the scheme's own."""
    import idna

    try:
        port = parts.port
    except ValueError:
        raise InvalidInput("authUri has an invalid port") from None
    name = (parts.hostname or "").rstrip(".")
    try:
        address = ipaddress.ip_address(name)
        host = f"[{address.compressed}]" if address.version == 6 else address.compressed
    except ValueError:
        if name.isascii():  # as written: IDNA's rules refuse names browsers resolve (a_b)
            host = name.lower()
            if not _ASCII_HOST.fullmatch(host):
                raise InvalidInput("authUri's host is not a valid host name") from None
        else:
            try:
                host = idna.encode(name, uts46=True).decode()
            except idna.IDNAError:
                raise InvalidInput("authUri's host is not a valid host name") from None
    return host if port in (None, DEFAULT_PORTS[parts.scheme]) else f"{host}:{port}"


def get_token(services: Services, caller: Principal) -> dict[str, Any]:
    """The user's token for the calling agent. Refused for a deleted user (one read per
    fetch, not per query): a query of theirs still queued runs after the deletion, and the
    erasure drops OAuth tokens only after their agents and sessions, maybe hours later."""
    user_id, agent_id, agent = _acting_for(services, caller)
    services.auth.refuse_inactive(user_id, fresh=True)
    _charge(services, user_id, agent_id)
    token = services.oauth.get_token(user_id, agent_id, not_before=agent.created)
    if token is None:
        raise NotFound(f"the user has not authorized {agent_id}")
    return token


def put_token(services: Services, caller: Principal, token: Any) -> None:
    user_id, agent_id, _ = _acting_for(services, caller)
    check_token(token)
    services.auth.refuse_inactive(user_id, fresh=True)  # before the charge: writes nothing
    _charge(services, user_id, agent_id)
    services.oauth.put_token(user_id, agent_id, token)


def complete(services: Services, state: str, browser: str | None, code: str | None,
             error: str | None) -> tuple[Flow, str]:
    """The provider's redirect: take the flow (OAUTH_STATE_INVALID if it is not one the
    platform has open, OAUTH_BROWSER_MISMATCH if ``browser``, the callback's cookie, is
    not the one that opened its link), have the agent exchange the code, and resume the
    session if it is paused on this authorization; returns the flow and what the user
    should do next (:func:`_resume`)."""
    # First: a replay or another browser is refused whatever it carries.
    flow = services.oauth.take_flow(state, browser)
    if error or not code:
        raise OAuthFailed("the authorization server did not authorize the agent: "
                          + as_one_line(error or "no code", 100))
    # A flow opened before its user's deletion: no call token minted, no token kept.
    services.auth.refuse_inactive(flow.user_id, fresh=True)
    _exchange(services, flow, code)
    if services.oauth.get_token(flow.user_id, flow.agent_id) is None:
        raise OAuthFailed(f"{flow.agent_id} did not keep a token from the authorization")
    return flow, _resume(services, flow)


RESUMED = "Your conversation continues where it paused"
ASK_AGAIN = "Ask it again in your conversation"


def _resume(services: Services, flow: Flow) -> str:
    """Answer the session's question with "I authorized <agent>." (as its user), if the
    question is this flow's link: not one asked since, nor a Fixie-style agent's link
    that was part of an answer (the user asks again then); returns what the user should
    do next. A refused post is not an error (the token is stored all the same), but says
    what to do: one not confirmed (UNAVAILABLE) may have landed, its copy queued, so
    asking again could run the query twice; one over a limit waits for its reset."""
    recent = services.sessions.recent(flow.session_id, RECENT_MESSAGES)
    session = recent.session
    if session is None or session.owner != flow.user_id or \
            session.status is not SessionStatus.AWAITING_INPUT:
        return ASK_AGAIN
    question = next((m for m in recent.messages if m.type is MessageType.AWAITING_INPUT), None)
    if question is None or flow.state not in question.text:
        return ASK_AGAIN
    user = principal_of(services.users.get(flow.user_id))
    try:
        Messaging(services).post(user, flow.session_id, f"I authorized {flow.agent_id}.")
    except CodeshotError as exc:
        log.info("could not resume %s after its authorization: %s", flow.session_id, exc)
        if isinstance(exc, Unavailable):
            return ("Your conversation should continue where it paused in a moment; if it "
                    "does not, ask again")
        if isinstance(exc, RateLimited):
            when = "once it resets" if "resets_at" in exc.details else "in a moment"
            return (f"Your conversation could not continue ({exc.message}); ask it again "
                    f"in your conversation {when}")
        return ASK_AGAIN
    return RESUMED


def _exchange(services: Services, flow: Flow, code: str) -> None:
    """``Func[_oauth]`` of the flow's agent, for its user and session: the agent holds the
    client secret, so it makes the token request."""
    from codeshot.runner.agent_client import AgentClient

    agent = services.registry.get(flow.agent_id)
    url = agent.func_url or agent.query_url or ""
    client = AgentClient(
        services.auth.call_tokens(flow.user_id, flow.session_id),
        timeout=min(services.settings.agent_call_timeout_seconds, API_CALL_SECONDS),
        allow_loopback=services.settings.local_mode, retries=0)
    request = {"state": flow.state, "code": code, "code_verifier": flow.code_verifier,
               "redirect_uri": flow.redirect_uri}
    try:
        client.call_func(flow.agent_id, url, OAUTH_FUNC, json.dumps(request),
                         registration=agent.registration)
    except CodeshotError as exc:
        raise OAuthFailed(f"{flow.agent_id} could not complete the authorization: "
                          f"{exc.message}") from exc
    finally:
        client.close()


def grants(services: Services, principal: Principal) -> list[Grant]:
    return services.oauth.grants(user_id_of(principal))


def revoke(services: Services, principal: Principal, agent_id: str) -> None:
    """Forget the caller's token for ``agent_id``: the agent must ask again."""
    if not services.oauth.delete_token(user_id_of(principal), agent_id):
        raise NotFound(f"{agent_id} holds no token of yours")

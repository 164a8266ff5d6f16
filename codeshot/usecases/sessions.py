"""Sessions: creating, reading, listing and deleting one's own, and their messages."""

from __future__ import annotations

from codeshot import ids
from codeshot.errors import InvalidInput
from codeshot.models import Embed, Message, Principal, Session
from codeshot.services import Services
from codeshot.usecases.agents import usable_agent
from codeshot.usecases.users import user_id_of

MAX_NAME = 200
MAX_DESCRIPTION = 2000
MAX_URL = 2000
LIST_PAGE = 200


def create_session(
    services: Services, principal: Principal, frontend_agent_id: str | None = None,
    name: str = "", description: str = "", callback_url: str | None = None,
    prompt_url: str | None = None, task_input: str | None = None,
    task_additional_input: str | None = None,
) -> Session:
    """A new session of the caller's, talking to ``frontend_agent_id`` (default: the
    planner); ``callback_url`` receives its signed terminal events, ``prompt_url`` its
    questions as Agent Protocol prompts (see :mod:`codeshot.usecases.prompts`)."""
    user_id = user_id_of(principal)
    for url in (callback_url, prompt_url):
        if url:
            check_callback_url(services, url)
    if frontend_agent_id:
        usable_agent(services, principal, frontend_agent_id)
    if len(name) > MAX_NAME or len(description) > MAX_DESCRIPTION:
        raise InvalidInput("session name or description is too long")
    return services.sessions.create(Session(
        session_id=ids.handle(), owner=user_id, owner_name=principal.username,
        frontend_agent_id=frontend_agent_id,
        name=name, description=description, callback_url=callback_url,
        prompt_url=prompt_url, task_input=task_input,
        task_additional_input=task_additional_input,
    ))


def check_callback_url(services: Services, url: str) -> str:
    """``url`` if the platform may call it back (http(s), a public address; loopback too
    in local mode), else INVALID_INPUT. Checked again whenever it is called."""
    from codeshot.runner.agent_urls import check_agent_url

    if len(url) > MAX_URL:
        raise InvalidInput(f"callback URL is longer than {MAX_URL} characters")
    return check_agent_url(url, allow_loopback=services.settings.local_mode)


def get_session(services: Services, principal: Principal, session_id: str) -> Session:
    """One of the caller's sessions (others' are NOT_FOUND)."""
    return services.sessions.get(session_id, owner=user_id_of(principal))


def list_sessions(services: Services, principal: Principal) -> list[Session]:
    """Every session of the caller's, newest first."""
    user_id = user_id_of(principal)
    sessions: list[Session] = []
    token = None
    while True:
        page = services.sessions.list_by_owner(user_id, LIST_PAGE, token)
        sessions += page.items
        if not (token := page.next_token):
            return sessions


def delete_session(services: Services, principal: Principal, session_id: str) -> Session:
    return services.sessions.delete(session_id, owner=user_id_of(principal))


def session_for_agent(
    services: Services, principal: Principal, agent_id: str, session_id: str | None
) -> str:
    """The session a query to ``agent_id`` goes to: the given one, which must talk to that
    agent (or to the planner), or a new one."""
    if not session_id:
        return create_session(services, principal, agent_id).session_id
    session = get_session(services, principal, session_id)
    if session.frontend_agent_id not in (None, agent_id):
        raise InvalidInput(f"session {session_id} talks to {session.frontend_agent_id}")
    return session_id


def list_messages(
    services: Services, session: Session, after: str | None = None, limit: int | None = None
) -> list[Message]:
    """A session's messages in time order (``after``: only newer than that id); the
    session comes from :func:`get_session`, which checked the caller owns it."""
    if limit is None and after is None:
        return services.sessions.all_messages(session.session_id)
    return services.sessions.list_messages(session.session_id, limit=limit, after=after).items


def list_embeds(services: Services, session: Session) -> list[Embed]:
    """A session's embeds (the session as :func:`get_session` returned it)."""
    return services.sessions.list_embeds(session.session_id)

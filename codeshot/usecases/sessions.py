"""Sessions: creating, reading, listing and deleting one's own, and their messages."""

from __future__ import annotations

from codeshot import ids
from codeshot.errors import InvalidInput, NotFound
from codeshot.models import (
    EMBED_KEY_RE,
    MAX_URL,
    Agent,
    Embed,
    EmbedRef,
    Message,
    Principal,
    Session,
)
from codeshot.services import Services
from codeshot.store.queue import Work
from codeshot.text import check_text
from codeshot.usecases import paging
from codeshot.usecases.agents import usable_agent
from codeshot.usecases.users import user_id_of

MAX_NAME = 200
MAX_DESCRIPTION = 2000
TEXT_PREVIEW_BYTES = 64 * 1024  # text embeds up to this size can be shown in a page


def create_session(
    services: Services, principal: Principal, frontend_agent_id: str | Agent | None = None,
    name: str = "", description: str = "", callback_url: str | None = None,
    callback_format: str | None = None, once: str | None = None,
) -> Session:
    """A new session of the caller's, talking to ``frontend_agent_id`` (default: the
    planner); ``callback_url`` receives its signed terminal events (in
    ``callback_format``, see :class:`Session`). With ``once`` (a client's key for the
    request, such as A2A's messageId), a retry gets the session the key made before:
    created, charged and keyed in one transaction, so even a retry racing the first. An
    agent already read (:func:`usable_agent`) is not read again."""
    user_id = user_id_of(principal)
    check_text(name, "name", MAX_NAME, one_line=True)
    check_text(description, "description", MAX_DESCRIPTION)
    if callback_url:
        check_callback_url(services, callback_url)
    if isinstance(frontend_agent_id, Agent):
        frontend_agent_id = frontend_agent_id.agent_id
    elif frontend_agent_id:  # its full id ("dice" is the caller's own "<you>/dice")
        frontend_agent_id = usable_agent(services, principal, frontend_agent_id).agent_id
    session = Session(
        session_id=ids.handle(), owner=user_id, owner_name=principal.username,
        frontend_agent_id=frontend_agent_id,
        name=name, description=description, callback_url=callback_url,
        callback_format=callback_format if callback_url else None,
    )
    limit = services.settings.daily_session_limit
    if once is None:
        services.usage.charge("session", user_id, limit)
        return services.sessions.create(session)
    made = services.sessions.create_once(
        session, once, services.usage.charge_request("session", user_id, limit))
    if made is None:
        raise services.usage.rate_limited("session", limit, "day")
    return session if made == session.session_id else get_session(services, principal, made)


def check_callback_url(services: Services, url: str) -> str:
    """``url`` if the platform may call it back (http(s), a public address; loopback too
    in local mode), else INVALID_INPUT. Checked again whenever it is called."""
    from codeshot.net.addresses import check_public_url

    check_text(url, "callbackUrl", MAX_URL, one_line=True)
    return check_public_url(url, allow_loopback=services.settings.local_mode)


def get_session(services: Services, principal: Principal, session_id: str) -> Session:
    """One of the caller's sessions (others' are NOT_FOUND)."""
    return services.sessions.get(session_id, owner=user_id_of(principal))


def list_sessions(services: Services, principal: Principal, after: str | None = None,
                  limit: int | None = None) -> list[Session]:
    """A page of the caller's sessions, newest first; ``after``: older than that one,
    which may have been deleted since it was listed (in the last week)."""
    user_id = user_id_of(principal)
    start = None
    if after:
        try:
            start = services.sessions.place(after, owner=user_id)
        except NotFound as exc:  # a page token, not a lookup: bad input either way
            raise InvalidInput("after must be the handle of one of your sessions (or one "
                               "deleted in the last week)") from exc
    return services.sessions.list_by_owner(user_id, paging.SESSIONS.of(limit),
                                           after=start).items


def delete_session(services: Services, principal: Principal, session_id: str) -> Session:
    return services.sessions.delete(
        session_id, owner=user_id_of(principal),
        purge_later=lambda: services.queue.enqueue(Work.purge(session_id)))


def session_for_agent(
    services: Services, principal: Principal, agent_id: str | None, session_id: str | None
) -> str | None:
    """The session a query to ``agent_id`` goes to, checked and nothing written: the given
    one, which must talk to that agent (or to the planner), or None for a new one (the
    agent checked; :func:`create_session` makes it). No agent (None) is the planner for a
    new session and whoever the session talks to for a given one (fixieai's ``Session`` of
    an existing session knows no agent)."""
    if not session_id:
        if agent_id is not None:
            usable_agent(services, principal, agent_id)
        return None
    session = get_session(services, principal, session_id)
    if agent_id is not None and session.frontend_agent_id not in (None, agent_id):
        raise InvalidInput(f"session {session_id} talks to {session.frontend_agent_id}")
    return session_id


def list_messages(
    services: Services, session: Session, after: str | None = None, limit: int | None = None
) -> list[Message]:
    """A page of a session's messages in time order: the oldest ``limit`` newer than the
    id ``after``, or without it the newest ``limit`` (Fixie 1.0 clients read the last one
    as the reply, however long the log). The session comes from :func:`get_session`,
    which checked the caller owns it."""
    size = paging.MESSAGES.of(limit)
    if after is None:
        return services.sessions.newest_messages(session.session_id, size)
    if not ids.is_ulid(after):
        raise InvalidInput("after must be a message id")
    return services.sessions.list_messages(session.session_id, limit=size, after=after).items


def list_embeds(services: Services, session: Session, after: str | None = None,
                limit: int | None = None) -> list[Embed]:
    """A page of a session's embeds by key (the session as :func:`get_session` returned
    it); ``after``: keys after that one."""
    if after and not EMBED_KEY_RE.fullmatch(after):
        raise InvalidInput("after must be an embed key")
    return services.sessions.list_embeds(session.session_id, after=after,
                                         limit=paging.EMBEDS.of(limit))


def message_embed(services: Services, principal: Principal, session_id: str, message_id: str,
                  key: str) -> EmbedRef:
    """The embed ``key`` of a message in one of the caller's sessions."""
    get_session(services, principal, session_id)
    if not ids.is_ulid(message_id):
        raise NotFound(f"message {message_id} not found")
    ref = services.sessions.get_message(session_id, message_id).embeds.get(key)
    if ref is None:
        raise NotFound(f"embed {key} not found")
    return ref


def embed_text(services: Services, principal: Principal, session_id: str, message_id: str,
               key: str) -> str:
    """A small text embed's content, to show in place (larger ones are downloaded)."""
    ref = message_embed(services, principal, session_id, message_id, key)
    if not ref.content_type.startswith("text/") or ref.size > TEXT_PREVIEW_BYTES:
        raise InvalidInput(f"embed {key} is not text of at most {TEXT_PREVIEW_BYTES} bytes")
    return services.embeds.read(ref.content_hash).decode("utf-8", errors="replace")


def embed_url(services: Services, ref: EmbedRef) -> str:
    """A presigned URL to read an embed's bytes (the embed as a caller's message has it)."""
    return services.embeds.get_url(ref.content_hash, ref.content_type)

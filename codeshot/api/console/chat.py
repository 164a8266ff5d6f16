"""Chat pages: the caller's sessions, starting one, a session's turns as they arrive,
answering a question in place, deleting a session.

A turn is a query and everything stored in reply to it: the steps (thoughts, calls to
Funcs and agents, their results) folded as a trace under the answer, and the terminal
message (response, error or a question for the user). New messages reach an open page by
long polling (``usecases.messaging.next_messages``): the page asks for messages newer than
the last one it shows, and each answer adds what arrived where it belongs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from codeshot import ids
from codeshot.api.console.web import (
    ConsoleRoute,
    caller,
    form,
    html,
    page_request,
    services_of,
    templates,
)
from codeshot.errors import InvalidInput
from codeshot.models import Message, MessageType, Principal
from codeshot.services import Services
from codeshot.usecases import agents, paging, sessions
from codeshot.usecases.messaging import TERMINAL, Messaging
from codeshot.usecases.threads import blocking

router = APIRouter(route_class=ConsoleRoute)


@dataclass
class Turn:
    query: Message
    steps: list[Message] = field(default_factory=list)
    reply: Message | None = None

    @property
    def pending(self) -> bool:
        return self.reply is None


def turns_of(messages: list[Message]) -> tuple[list[Turn], list[Message]]:
    """Messages grouped into turns, and the replies to queries not among them."""
    turns: dict[str, Turn] = {}
    orphans = []
    for message in messages:
        if message.type is MessageType.QUERY:
            turns[message.message_id] = Turn(message)
        elif message.in_reply_to in turns:
            turn = turns[message.in_reply_to]
            if message.type in TERMINAL:
                turn.reply = message
            else:
                turn.steps.append(message)
        else:
            orphans.append(message)
    return list(turns.values()), orphans


@dataclass
class Finished:
    """A turn the page shows that now has its reply; ``steps`` counts its whole trace."""

    query_id: str
    steps: int
    reply: Message


@dataclass
class Updates:
    """What a page showing messages up to ``after`` lacks: new turns, steps and replies
    for turns it shows, and whether to keep asking."""

    new_turns: list[Turn]
    steps: dict[str, list[Message]]  # query id -> steps to append to its trace
    finished: list[Finished]
    after: str | None
    waiting_for: str | None  # the newest query still without a reply: poll while set
    asking: str | None  # the query whose answer is a question, with its form open
    closed: str | None = None  # a question whose form goes: the user has answered


def _updates(messaging: Messaging, session_id: str, after: str | None,
             waiting_for: str | None, asking: str | None, found: list[Message]) -> Updates:
    new_turns, orphans = turns_of(found)
    steps: dict[str, list[Message]] = {}
    finished = []
    ended = [m.in_reply_to or "" for m in orphans if m.type in TERMINAL]
    # The traces of turns that ended: their steps among the new messages, and before
    # them, one page read from the oldest one's query (a read per turn: 200 of them read
    # 180,000 items for one request). A trace longer than that page is counted short.
    traced = Counter(m.in_reply_to for m in found if m.type not in TERMINAL)
    if ended:
        traced.update(m.in_reply_to for m in messaging.newer(session_id, min(ended))
                      if m.message_id < found[0].message_id and m.type not in TERMINAL)
    for message in orphans:
        query_id = message.in_reply_to or ""
        if message.type in TERMINAL:
            finished.append(Finished(query_id, traced[query_id], message))
        else:
            steps.setdefault(query_id, []).append(message)
    if new_turns:
        waiting_for = new_turns[-1].query.message_id
    answered = {t.query.message_id for t in new_turns if not t.pending} \
        | {f.query_id for f in finished}
    questions = [f.query_id for f in finished if f.reply.type is MessageType.AWAITING_INPUT] \
        + [t.query.message_id for t in new_turns
           if t.reply and t.reply.type is MessageType.AWAITING_INPUT]
    return Updates(new_turns, steps, finished, found[-1].message_id if found else after,
                   None if waiting_for in answered else waiting_for,
                   questions[-1] if questions else asking)


def _message_id(value: str | None, what: str) -> str | None:
    """An optional message id from the page (it names elements and reads): checked."""
    if value and not ids.is_ulid(value):
        raise InvalidInput(f"{what} must be a message id")
    return value or None


def _sessions_page(services: Services, user: Principal, chosen: str = "",
                   notice: str | None = None, after: str | None = None) -> str:
    """A page of the caller's sessions, newest first (``older``: where the next page
    starts, if there is one), and every agent they can start one with."""
    names = {a.agent_id: a.name or a.agent_id
             for a in agents.all_visible_agents(services, user)}
    page = paging.SESSIONS.of(None)
    found = sessions.list_sessions(services, user, after=after, limit=page + 1)
    return templates.render("chat/sessions.html", sessions=found[:page], agent_names=names,
                            chosen=chosen, notice=notice,
                            older=found[page - 1].session_id if len(found) > page else None)


@router.get("/console/", dependencies=[Depends(page_request)])
async def sessions_page(request: Request, agent: str = "", after: str | None = None,
                        user: Principal = Depends(caller)) -> HTMLResponse:
    return html(await blocking(_sessions_page, services_of(request), user, agent, None, after))


def _render(services: Services, template: str, **context: Any) -> str:
    """A chat template, with presigned URLs for the embeds it shows."""
    return templates.render(template, embed_url=partial(sessions.embed_url, services),
                            **context)


def _session_page(services: Services, user: Principal, session_id: str) -> str:
    session = sessions.get_session(services, user, session_id)
    messages = sessions.list_messages(services, session)
    turns, _ = turns_of(messages)
    last = turns[-1] if turns else None
    waiting = last.query.message_id if last and last.pending else None
    asking = last.query.message_id if last and last.reply \
        and last.reply.type is MessageType.AWAITING_INPUT else None
    return _render(services, "chat/session.html", session=session, turns=turns,
                   after=messages[-1].message_id if messages else None, waiting_for=waiting,
                   asking=asking, max_length=services.settings.max_message_length)


@router.get("/console/sessions/{session_id}", dependencies=[Depends(page_request)])
async def session_page(request: Request, session_id: str,
                       user: Principal = Depends(caller)) -> HTMLResponse:
    return html(await blocking(_session_page, services_of(request), user, session_id))


@router.post("/console/sessions")
async def start_session(request: Request, user: Principal = Depends(caller)) -> HTMLResponse:
    services = services_of(request)
    fields = await form(request)
    agent_id = fields.get("agent_id") or None
    session = await blocking(sessions.create_session, services, user, agent_id,
                             fields.get("name", "").strip())
    return html(await blocking(_session_page, services, user, session.session_id),
                headers={"HX-Push-Url": f"/console/sessions/{session.session_id}"})


@router.delete("/console/sessions/{session_id}")
async def delete_session(request: Request, session_id: str,
                         user: Principal = Depends(caller)) -> HTMLResponse:
    services = services_of(request)
    deleted = await blocking(sessions.delete_session, services, user, session_id)
    notice = f"Deleted session {deleted.name or deleted.session_id}."
    return html(await blocking(_sessions_page, services, user, "", notice),
                headers={"HX-Push-Url": "/console/"})


def _render_updates(services: Services, session_id: str, updates: Updates) -> HTMLResponse:
    return html(_render(services, "chat/updates.html", updates=updates, session_id=session_id))


@router.post("/console/sessions/{session_id}/messages")
async def post_message(request: Request, session_id: str,
                       user: Principal = Depends(caller)) -> HTMLResponse:
    """Store the message (an idempotency key makes a resent form harmless) and answer with
    everything newer than what the page shows, the message's turn included."""
    services = services_of(request)
    fields = await form(request)
    messaging = Messaging(services)
    after = _message_id(fields.get("after"), "after")
    asking = _message_id(fields.get("asking"), "asking")
    message, _ = await blocking(messaging.post, user, session_id, fields.get("text", ""),
                                None, fields.get("idempotency_key") or None)
    found = await blocking(messaging.since, session_id, after)
    updates = await blocking(_updates, messaging, session_id, after, message.message_id, None,
                             found)
    updates.closed = asking  # any message answers the open question
    return _render_updates(services, session_id, updates)


@router.get("/console/sessions/{session_id}/updates")
async def session_updates(request: Request, session_id: str, after: str | None = None,
                          waiting_for: str | None = None, asking: str | None = None,
                          user: Principal = Depends(caller)) -> HTMLResponse:
    services = services_of(request)
    await blocking(sessions.get_session, services, user, session_id)  # the caller's own
    messaging = Messaging(services)
    after = _message_id(after, "after")
    # No waiting here: the page asks again a second later while a reply is due, so no API
    # function is paid to sit waiting for the runner (benchmarks/cost.py).
    found = await blocking(messaging.since, session_id, after)
    updates = await blocking(_updates, messaging, session_id, after,
                             _message_id(waiting_for, "waiting_for"),
                             _message_id(asking, "asking"), found)
    return _render_updates(services, session_id, updates)


@router.get("/console/sessions/{session_id}/messages/{message_id}/embeds/{key}")
async def embed_text(request: Request, session_id: str, message_id: str, key: str,
                     user: Principal = Depends(caller)) -> HTMLResponse:
    services = services_of(request)
    text = await blocking(sessions.embed_text, services, user, session_id, message_id, key)
    return html(templates.render("chat/embed_text.html", text=text))

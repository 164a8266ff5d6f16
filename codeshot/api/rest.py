"""REST routes: user storage (agent JWT), agent refresh and the streaming agent query
(API key), with the Fixie 1.0 SDK's paths and shapes (docs/fixie-wire-contract.md)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Header, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field

from codeshot.auth.tokens import bearer
from codeshot.errors import Timeout
from codeshot.models import Agent, Message, Principal
from codeshot.services import Services
from codeshot.usecases import user_storage
from codeshot.usecases.messaging import TERMINAL, Messaging, follow
from codeshot.usecases.sessions import create_session, session_for_agent
from codeshot.usecases.threads import blocking
from codeshot.usecases.waits import new_slot

router = APIRouter()


def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def agent_caller(
    authorization: str | None = Header(None), services: Services = Depends(get_services)
) -> Principal:
    return services.auth.principal_for_agent_token(bearer(authorization))


def api_user(
    authorization: str | None = Header(None), services: Services = Depends(get_services)
) -> Principal:
    return services.auth.user_for_api_key(bearer(authorization))


class StorageValue(BaseModel):
    data: Any


STORAGE = "/api/userstorage/{owner}/{handle}"


@router.get(STORAGE)
def list_storage(owner: str, handle: str, caller: Principal = Depends(agent_caller),
                 services: Services = Depends(get_services)) -> list[dict[str, str]]:
    keys = user_storage.list_keys(services, caller, Agent.make_id(owner, handle))
    return [{"key": k} for k in keys]


@router.post(STORAGE + "/{key:path}")
def put_storage(owner: str, handle: str, key: str, body: StorageValue,
                caller: Principal = Depends(agent_caller),
                services: Services = Depends(get_services)) -> dict[str, str]:
    user_storage.put_value(services, caller, Agent.make_id(owner, handle), key, body.data)
    return {"key": key}


@router.get(STORAGE + "/{key:path}")
def get_storage(owner: str, handle: str, key: str, caller: Principal = Depends(agent_caller),
                services: Services = Depends(get_services)) -> dict[str, str]:
    return {"data": user_storage.get_value(services, caller, Agent.make_id(owner, handle), key)}


@router.head(STORAGE + "/{key:path}")
def head_storage(owner: str, handle: str, key: str, caller: Principal = Depends(agent_caller),
                 services: Services = Depends(get_services)) -> Response:
    user_storage.get_value(services, caller, Agent.make_id(owner, handle), key)
    return Response(status_code=200)


@router.delete(STORAGE + "/{key:path}")
def delete_storage(owner: str, handle: str, key: str, caller: Principal = Depends(agent_caller),
                   services: Services = Depends(get_services)) -> dict[str, str]:
    user_storage.delete_value(services, caller, Agent.make_id(owner, handle), key)
    return {"key": key}


@router.post("/api/refresh/{owner}/{handle}")
def refresh_agent(owner: str, handle: str, user: Principal = Depends(api_user),
                  services: Services = Depends(get_services)) -> dict[str, Any]:
    from codeshot.usecases.registration import (  # rare and heavy
        AgentRegistration,
        daily_agent_change,
    )

    agent = AgentRegistration(services, charge=daily_agent_change).refresh(user, owner, handle)
    return {"agentId": agent.agent_id, "kind": agent.kind.value,
            "modified": agent.modified.isoformat()}


class QueryMessage(BaseModel):
    text: str = ""


class AgentQueryBody(BaseModel):
    session: str | None = None
    message: QueryMessage = Field(default_factory=QueryMessage)
    stream: bool = True


def _wire(message: Message) -> dict[str, Any]:
    return {
        "id": message.message_id,
        "type": message.type.value,
        "sentBy": message.sent_by,
        "message": {"text": message.text, "embeds": {
            k: {"content_type": e.content_type, "content_hash": e.content_hash}
            for k, e in message.embeds.items()}},
        **({"errorCode": message.error_code} if message.error_code else {}),
    }


@router.post("/api/agents/{owner}/{handle}")
async def query_agent(owner: str, handle: str, body: AgentQueryBody,
                      user: Principal = Depends(api_user),
                      services: Services = Depends(get_services)) -> Response:
    return await _query(Agent.make_id(owner, handle), body, user, services)


# fixieai 1.0.4 posts a session without an agent (`fixie query "..."`, `fixieai.query`,
# `fixie console`) to /api/agents/None: Fixie's default agent, here the planner.
DEFAULT_AGENT_NAMES = ("None", "null")


@router.post("/api/agents")
@router.post("/api/agents/")
@router.post("/api/agents/{handle}")
async def query_default_or_own_agent(body: AgentQueryBody, handle: str = "",
                                     user: Principal = Depends(api_user),
                                     services: Services = Depends(get_services)) -> Response:
    """The planner for no agent; ``dice`` is the caller's own ``<username>/dice``, as
    ``fixie query --agent dice`` meant on Fixie."""
    if handle in ("", *DEFAULT_AGENT_NAMES):
        return await _query(None, body, user, services)
    return await _query(Agent.make_id(user.username or "", handle), body, user, services)


async def _query(agent_id: str | None, body: AgentQueryBody, user: Principal,
                 services: Services) -> Response:
    messaging = Messaging(services)
    # The input checked (bad input gets its own error), then a waiting slot taken before
    # a session is made (refused, none is made and nothing posted), or by the post to one
    # there already; given back once the reply is read: after this returns when it streams.
    await blocking(messaging.precheck, user, body.message.text)
    session_id = await blocking(session_for_agent, services, user, agent_id, body.session)
    slot = new_slot(services, user)
    try:
        if session_id is None:
            await blocking(slot.take)
            session_id = (await blocking(create_session, services, user, agent_id)).session_id
        query, _ = await blocking(messaging.post, user, session_id, body.message.text,
                                  slot=slot)
    except BaseException:
        await slot.release()
        raise
    timeout = max(services.settings.reply_wait_seconds, 1.0)

    async def replies() -> AsyncIterator[Message]:
        # The terminal reply only: `fixie console` prints each streamed text from where
        # the previous one ended, so a step's text before the answer garbles it (the
        # steps are the session's trace, in GraphQL).
        try:
            async for message in follow(messaging, query, timeout):
                if message.in_reply_to == query.message_id and message.type in TERMINAL:
                    yield message
        finally:
            await slot.release()

    # A query may run past the reply wait (to CODESHOT_QUERY_TIME_BUDGET_SECONDS), but the
    # API cannot follow it that long (API Gateway ends a request at 30 s and buffers the
    # stream). So the caller gets TIMEOUT naming the session, to read the reply there:
    # an empty answer would read as "" to fixieai, and its retry would charge a new query.
    late = Timeout(f"no reply within {timeout:g} s; the query is still running: read "
                   f"session {session_id} for its reply rather than asking again")

    if not body.stream:
        reply = None
        async for message in replies():
            reply = message
        if reply is None:
            raise late
        return JSONResponse(_wire(reply))

    async def lines() -> AsyncIterator[bytes]:
        reply = None
        async for reply in replies():
            yield (json.dumps(_wire(reply)) + "\n").encode()
        if reply is None:  # the last line is what fixieai takes as the answer
            yield (json.dumps({"type": "error", "sentBy": "platform", "session": session_id,
                               "message": {"text": str(late), "embeds": {}},
                               "errorCode": late.code}) + "\n").encode()

    return StreamingResponse(lines(), media_type="application/x-ndjson",
                             headers={"X-Codeshot-Session": session_id})

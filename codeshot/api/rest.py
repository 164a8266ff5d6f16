"""REST routes: user storage (agent JWT), agent refresh and the streaming agent query
(API key), with the Fixie 1.0 SDK's paths and shapes (FIXIE_COMPAT.md)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Header, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field

from codeshot.api.graphql import blocking, create_session
from codeshot.api.messaging import TERMINAL, Messaging
from codeshot.auth.tokens import bearer
from codeshot.errors import Forbidden, InvalidInput
from codeshot.models import Message, Principal
from codeshot.services import Services

router = APIRouter()


def get_services(request: Request) -> Services:
    return request.app.state.services


def agent_caller(
    authorization: str | None = Header(None), services: Services = Depends(get_services)
) -> Principal:
    return services.auth.principal_for_agent_token(bearer(authorization))


def api_user(
    authorization: str | None = Header(None), services: Services = Depends(get_services)
) -> Principal:
    return services.auth.user_for_api_key(bearer(authorization))


def storage_scope(
    owner: str, handle: str, caller: Principal, services: Services
) -> tuple[str, str]:
    """(user, agent) from the token's claims: the URL only has to agree with them."""
    agent_id = f"{owner}/{handle}"
    if caller.agent_id != agent_id:
        raise Forbidden(f"this token is for agent {caller.agent_id}, not {agent_id}")
    if not caller.user_id:
        raise Forbidden("user storage needs a token issued for a user")
    services.usage.charge("storage", f"{caller.user_id}#{agent_id}",
                          services.settings.storage_rate_limit, window="minute")
    return caller.user_id, agent_id


class StorageValue(BaseModel):
    data: Any


STORAGE = "/api/userstorage/{owner}/{handle}"


@router.get(STORAGE)
def list_storage(owner: str, handle: str, caller: Principal = Depends(agent_caller),
                 services: Services = Depends(get_services)) -> list[dict[str, str]]:
    user, agent = storage_scope(owner, handle, caller, services)
    keys: list[str] = []
    token = None
    while True:
        page = services.storage.list_keys(user, agent, token=token)
        keys += page.items
        if not (token := page.next_token):
            return [{"key": k} for k in keys]


@router.post(STORAGE + "/{key:path}")
def put_storage(owner: str, handle: str, key: str, body: StorageValue,
                caller: Principal = Depends(agent_caller),
                services: Services = Depends(get_services)) -> dict[str, str]:
    user, agent = storage_scope(owner, handle, caller, services)
    data = body.data if isinstance(body.data, str) else json.dumps(body.data)
    services.storage.put(user, agent, key, data)
    return {"key": key}


@router.get(STORAGE + "/{key:path}")
def get_storage(owner: str, handle: str, key: str, caller: Principal = Depends(agent_caller),
                services: Services = Depends(get_services)) -> dict[str, str]:
    user, agent = storage_scope(owner, handle, caller, services)
    return {"data": services.storage.get(user, agent, key)}


@router.head(STORAGE + "/{key:path}")
def head_storage(owner: str, handle: str, key: str, caller: Principal = Depends(agent_caller),
                 services: Services = Depends(get_services)) -> Response:
    user, agent = storage_scope(owner, handle, caller, services)
    services.storage.get(user, agent, key)
    return Response(status_code=200)


@router.delete(STORAGE + "/{key:path}")
def delete_storage(owner: str, handle: str, key: str, caller: Principal = Depends(agent_caller),
                   services: Services = Depends(get_services)) -> dict[str, str]:
    user, agent = storage_scope(owner, handle, caller, services)
    services.storage.delete(user, agent, key)
    return {"key": key}


@router.post("/api/refresh/{owner}/{handle}")
def refresh_agent(owner: str, handle: str, user: Principal = Depends(api_user),
                  services: Services = Depends(get_services)) -> dict[str, Any]:
    from codeshot.api.agents import AgentRegistration  # rare and heavy: imported on use

    agent = AgentRegistration(services).refresh(user, owner, handle)
    return {"agentId": agent.agent_id, "kind": agent.kind.value,
            "modified": agent.modified.isoformat()}


class QueryMessage(BaseModel):
    text: str = ""


class AgentQuery(BaseModel):
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


async def follow(messaging: Messaging, query: Message, timeout: float) -> AsyncIterator[Message]:
    """Yield each message stored after ``query`` until its terminal reply (or timeout)."""
    deadline = time.monotonic() + timeout
    last = query.message_id
    while time.monotonic() < deadline:
        for message in await blocking(messaging.newer, query.session_id, last):
            last = message.message_id
            yield message
            if message.in_reply_to == query.message_id and message.type in TERMINAL:
                return
        await asyncio.sleep(0.1)


@router.post("/api/agents/{owner}/{handle}")
async def query_agent(owner: str, handle: str, body: AgentQuery,
                      user: Principal = Depends(api_user),
                      services: Services = Depends(get_services)) -> Response:
    agent_id = f"{owner}/{handle}"
    session_id = body.session
    if session_id:
        session = await blocking(services.sessions.get, session_id, user.user_id)
        if session.frontend_agent_id not in (None, agent_id):
            raise InvalidInput(f"session {session_id} talks to {session.frontend_agent_id}")
    else:
        session_id = (await blocking(create_session, services, user, agent_id)).session_id
    messaging = Messaging(services)
    query, _ = await blocking(messaging.post, user, session_id, body.message.text)
    timeout = max(services.settings.reply_wait_seconds, 1.0)
    if not body.stream:
        reply = None
        async for message in follow(messaging, query, timeout):
            reply = message
        return JSONResponse(_wire(reply) if reply else {"message": None, "session": session_id})

    async def lines() -> AsyncIterator[bytes]:
        async for message in follow(messaging, query, timeout):
            yield (json.dumps(_wire(message)) + "\n").encode()

    return StreamingResponse(lines(), media_type="application/x-ndjson",
                             headers={"X-Codeshot-Session": session_id})

"""An agent's storage for one user, as the agent reaches it with the token it was given.

The token's claims decide whose storage it is and for which agent; the agent id the
caller names (the URL, for REST) only has to agree with them. Every call whose input
passes its checks counts against the per-minute limit of that user and agent. A call of
a deleted agent still in flight (its token lives minutes) cannot reach the storage its
users keep with an agent registered at that id since: the token must be issued to the
agent as registered now, and the store keeps each registration's items apart
(codeshot/store/user_storage.py).
"""

from __future__ import annotations

import json
from typing import Any

from codeshot.errors import Forbidden, NotFound
from codeshot.models import Principal
from codeshot.services import Services
from codeshot.store.dynamo import every_page
from codeshot.store.user_storage import Holder, check_key


def storage_scope(services: Services, caller: Principal, agent_id: str,
                  key: str | None = None, data: str | None = None) -> Holder:
    """Whose storage ``caller`` (an agent token's principal) may use: its user's with the
    agent as registered now; charges one call to their rate limit once ``key`` and
    ``data`` (those given) pass their checks: refused input is not counted."""
    if caller.agent_id != agent_id:
        raise Forbidden(f"this token is for agent {caller.agent_id}, not {agent_id}")
    if not caller.user_id:
        raise Forbidden("user storage needs a token issued for a user")
    registration = _registration(services, caller, agent_id)
    if key is not None:
        check_key(key)
    if data is not None:
        services.storage.check_value(data)
    services.usage.charge("storage", f"{caller.user_id}#{agent_id}",
                          services.settings.storage_rate_limit, window="minute")
    return Holder(caller.user_id, agent_id, registration)


def _registration(services: Services, caller: Principal, agent_id: str) -> int:
    """The agent's registration now (0 for none), NOT_FOUND unless the token was issued to
    it. A token without a registration (an older platform's, or ``codeshot agent test``'s
    for an agent it serves unregistered) is checked by its issue time, if the agent is
    registered."""
    registration = services.registry.registration(agent_id)
    if registration is None and caller.registration is None:
        return 0
    if registration is None or not caller.issued_to(registration):
        raise NotFound(f"agent {agent_id} not found: this call's token was issued to a "
                       "deleted agent of that id")
    return registration


def list_keys(services: Services, caller: Principal, agent_id: str) -> list[str]:
    holder = storage_scope(services, caller, agent_id)
    return every_page(lambda token: services.storage.list_keys(holder, token=token))


def put_value(services: Services, caller: Principal, agent_id: str, key: str,
              data: Any) -> None:
    """Store ``data``: JSON text as it is (Fixie's SDK sends text), anything else as JSON."""
    text = data if isinstance(data, str) else json.dumps(data)
    if caller.user_id:  # before the rate charge: a refused write writes nothing (a token
        services.auth.refuse_inactive(caller.user_id, fresh=True)  # for none: FORBIDDEN)
    services.storage.put(storage_scope(services, caller, agent_id, key, text), key, text)


def get_value(services: Services, caller: Principal, agent_id: str, key: str) -> str:
    """The stored JSON text, or NOT_FOUND."""
    return services.storage.get(storage_scope(services, caller, agent_id, key), key)


def delete_value(services: Services, caller: Principal, agent_id: str, key: str) -> None:
    services.storage.delete(storage_scope(services, caller, agent_id, key), key)

"""An agent's storage for one user, as the agent reaches it with the token it was given.

The token's claims decide whose storage it is and for which agent; the agent id the
caller names (the URL, for REST) only has to agree with them. Every call counts against
the per-minute limit of that user and agent. A call of a deleted agent still in flight
(its token lives minutes) cannot reach the storage its users keep with an agent
registered at that id since: the token must be issued to the agent as registered now.
"""

from __future__ import annotations

import json
from typing import Any

from codeshot.errors import Forbidden, NotFound
from codeshot.models import Principal
from codeshot.services import Services
from codeshot.store.dynamo import every_page


def storage_scope(services: Services, caller: Principal, agent_id: str) -> tuple[str, str]:
    """(user, agent) whose storage ``caller`` (an agent token's principal) may use; charges
    one call to their rate limit."""
    if caller.agent_id != agent_id:
        raise Forbidden(f"this token is for agent {caller.agent_id}, not {agent_id}")
    if not caller.user_id:
        raise Forbidden("user storage needs a token issued for a user")
    _check_registration(services, caller, agent_id)
    services.usage.charge("storage", f"{caller.user_id}#{agent_id}",
                          services.settings.storage_rate_limit, window="minute")
    return caller.user_id, agent_id


def _check_registration(services: Services, caller: Principal, agent_id: str) -> None:
    """NOT_FOUND unless the token was issued to ``agent_id`` as registered now. A token
    without a registration (an older platform's, or ``codeshot agent test``'s for an agent
    it serves unregistered) is checked by its issue time, if the agent is registered."""
    registration = services.registry.registration(agent_id)
    if registration is None and caller.registration is None:
        return
    if registration is None or not caller.issued_to(registration):
        raise NotFound(f"agent {agent_id} not found: this call's token was issued to a "
                       "deleted agent of that id")


def list_keys(services: Services, caller: Principal, agent_id: str) -> list[str]:
    user, agent = storage_scope(services, caller, agent_id)
    return every_page(lambda token: services.storage.list_keys(user, agent, token=token))


def put_value(services: Services, caller: Principal, agent_id: str, key: str,
              data: Any) -> None:
    """Store ``data``: JSON text as it is (Fixie's SDK sends text), anything else as JSON."""
    user, agent = storage_scope(services, caller, agent_id)
    services.storage.put(user, agent, key, data if isinstance(data, str) else json.dumps(data))


def get_value(services: Services, caller: Principal, agent_id: str, key: str) -> str:
    """The stored JSON text, or NOT_FOUND."""
    user, agent = storage_scope(services, caller, agent_id)
    return services.storage.get(user, agent, key)


def delete_value(services: Services, caller: Principal, agent_id: str, key: str) -> None:
    user, agent = storage_scope(services, caller, agent_id)
    services.storage.delete(user, agent, key)

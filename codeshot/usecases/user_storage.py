"""An agent's storage for one user, as the agent reaches it with the token it was given.

The token's claims decide whose storage it is and for which agent; the agent id the
caller names (the URL, for REST) only has to agree with them. Every call counts against
the per-minute limit of that user and agent.
"""

from __future__ import annotations

import json
from typing import Any

from codeshot.errors import Forbidden
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
    services.usage.charge("storage", f"{caller.user_id}#{agent_id}",
                          services.settings.storage_rate_limit, window="minute")
    return caller.user_id, agent_id


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

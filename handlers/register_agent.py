"""Lambda entry point of the ``Custom::CodeshotAgentRegistration`` resource: registers a
deployed agent with the platform on create/update and unregisters it on delete, so
``cdk deploy`` is the only step. It serves the platform stack's
``Custom::CodeshotRepliesHeld`` too (codeshot.usecases.new_stack).

It goes through :class:`codeshot.usecases.registration.AgentRegistration`, exactly as a user's
``createAgent`` would (handshake, few-shot validation, embeddings), as the admin user
(created if missing). CloudFormation waits for the answer PUT to ``ResponseURL``: every
path answers, failures included, so a stack never hangs on this resource.
"""

from __future__ import annotations

import logging
import time
import urllib.request
from collections.abc import Callable
from functools import lru_cache
from typing import Any

log = logging.getLogger(__name__)
log.setLevel(logging.INFO)

# Physical id of a Create that registered nothing: deleting it (rollback) does nothing.
UNREGISTERED = "codeshot-unregistered:"
RETRY_SECONDS = 5  # a new agent API may answer 5xx for its first seconds
RESPONSE_MARGIN_MS = 15_000  # time kept to answer CloudFormation before the Lambda timeout


@lru_cache(maxsize=1)
def _services() -> Any:
    from codeshot.services import Services
    from codeshot.settings import get_settings

    return Services(get_settings())


def _truthy(value: Any) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes")


def retrying(fetch: Callable[[str, str], Any], deadline: Callable[[], bool],
             sleep: Callable[[float], None] = time.sleep) -> Callable[[str, str], Any]:
    """``fetch`` retried until it succeeds or ``deadline()`` says time is up."""

    def call(url: str, token: str) -> Any:
        while True:
            try:
                return fetch(url, token)
            except Exception as exc:
                if deadline():
                    raise
                log.info("handshake at %s failed (%s), retrying", url, exc)
                sleep(RETRY_SECONDS)

    return call


def apply(event: dict[str, Any], services: Any, fetch: Callable[[str, str], Any] | None = None,
          ) -> tuple[str, dict[str, str]]:
    """Do what the event asks; returns (physical resource id = agent id, response data)."""
    from codeshot.usecases.new_stack import RESOURCE_TYPE, hold_new_stack_replies

    if event.get("ResourceType") == RESOURCE_TYPE:
        return hold_new_stack_replies(services, event)
    from codeshot.errors import NotFound
    from codeshot.usecases.registration import AgentFields, AgentRegistration
    from codeshot.usecases.users import ensure_user, find_user, principal_of

    # The operator deploying: not counted against the admin user's daily allowance
    # (and the function's role has no access to the usage table).
    registration = AgentRegistration(services, charge=None, fetch=fetch)
    props = event["ResourceProperties"]
    if event["RequestType"] == "Delete":
        agent_id = event.get("PhysicalResourceId", "")
        if agent_id.startswith(UNREGISTERED) or "/" not in agent_id:
            return agent_id, {}
        owner, handle = agent_id.split("/", 1)
        try:
            registration.delete(principal_of(find_user(services, owner)), owner, handle)
        except NotFound:
            log.info("agent %s is already gone", agent_id)
        return agent_id, {}

    fields = AgentFields(
        name=props.get("Name") or props["Handle"],
        description=props.get("Description", ""),
        query_url=props["Url"],
        published=_truthy(props.get("Published", "true")),
        sample_queries=list(props.get("SampleQueries") or []),
    )
    owner = principal_of(ensure_user(services, props["Owner"]))
    agent = registration.deploy(owner, props["Handle"], fields)
    return agent.agent_id, {"AgentId": agent.agent_id, "Kind": agent.kind.value}


def respond(event: dict[str, Any], status: str, physical_id: str, reason: str,
            data: dict[str, str]) -> None:
    from codeshot.usecases.custom_resource import response_body

    body = response_body(event, status, physical_id, reason, data)
    # CloudFormation's presigned https ResponseURL (a loopback http one in tests).
    request = urllib.request.Request(event["ResponseURL"], data=body, method="PUT",  # noqa: S310
                                     headers={"Content-Type": ""})
    for attempt in range(3):
        try:
            with urllib.request.urlopen(request, timeout=10):  # noqa: S310 - the URL above
                return
        except OSError:
            log.exception("answering CloudFormation failed (attempt %d)", attempt + 1)
            time.sleep(2)


def handler(event: dict[str, Any], context: Any) -> None:
    log.info("%s %s %s", event.get("RequestType"), event.get("ResourceType"),
             event.get("ResourceProperties", {}).get("Handle", ""))

    def deadline() -> bool:
        remaining: int = context.get_remaining_time_in_millis()
        return remaining < RESPONSE_MARGIN_MS + 10_000

    from functools import partial

    from codeshot.runner.handshake import fetch_handshake

    try:  # every event is answered, one whose services fail too (or a delete would hang)
        services = _services()
        fetch = partial(fetch_handshake, allow_loopback=services.settings.local_mode)
        physical_id, data = apply(event, services, retrying(fetch, deadline))
        status, reason = "SUCCESS", ""
    except Exception as exc:
        log.exception("registration failed")
        status, reason, data = "FAILED", f"{type(exc).__name__}: {exc}", {}
        physical_id = event.get("PhysicalResourceId") or UNREGISTERED + event["RequestId"]
    respond(event, status, physical_id, reason, data)

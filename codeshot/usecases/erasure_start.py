"""Queueing a deleted user's erasure (codeshot/usecases/erasure.py runs it), apart from
the erasure's steps: the API queues it, only the eraser function runs them."""

from __future__ import annotations

import math

from codeshot.models import User
from codeshot.services import Services
from codeshot.settings import RUNNER_RECORD_MARGIN_SECONDS, Settings, runner_record_seconds
from codeshot.store.queue import ErasureWork

WINDOW_MARGIN_SECONDS = 60  # clock skew and the writes a query makes after its budget


def window_seconds(settings: Settings) -> int:
    """How long after a deletion something may still be written for the user: through a
    key a warm API still caches, a query started then and the call tokens it minted, or a
    presigned upload URL one of those requests handed out (an upload of theirs)."""
    return math.ceil(settings.api_key_cache_seconds + max(
        settings.query_time_budget_seconds + settings.agent_token_ttl_seconds,
        settings.embed_url_ttl_seconds) + WINDOW_MARGIN_SECONDS)


def recheck_seconds(settings: Settings) -> int:
    """The longest a writer may take from finding an embed's object (its bytes stored or
    found stored) to naming it in its session (an EMBED# or HELD# item, seen by the
    by_content index): a runner's record (a query storing an agent's embed, then its
    reply), the API's requests being shorter."""
    return math.ceil(runner_record_seconds(settings.query_time_budget_seconds) +
                     RUNNER_RECORD_MARGIN_SECONDS + WINDOW_MARGIN_SECONDS)


def start_erasure(services: Services, user: User) -> None:
    """Queue the user's erasure, to start once :func:`window_seconds` are over. Again for
    a user being erased, it goes on from the part the tombstone awaits, where the last
    part counted left off: a chain still under way and this one merge at the next part,
    as only one copy of a part is counted (the other does nothing more)."""
    services.erasure_queue.send(ErasureWork(user.user_id, part=user.erasure_part),
                                window_seconds(services.settings))

"""Lambda entry point of the session runner: SQS FIFO batches -> answered sessions, with
Powertools' Logger and Tracer (built on the first batch)."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from codeshot.observability import lambda_handler
from codeshot.runner.batch import process_batch

if TYPE_CHECKING:
    from codeshot.runner.session_runner import SessionRunner


@lru_cache(maxsize=1)
def _runner() -> SessionRunner:
    # Built on the first invocation, not at import: nothing touches AWS during init.
    from codeshot.runner.session_runner import SessionRunner
    from codeshot.services import Services
    from codeshot.settings import get_settings

    return SessionRunner(Services(get_settings()))


@lambda_handler("codeshot-runner")
def handler(event: dict[str, Any], context: Any) -> dict[str, list[dict[str, str]]]:
    return process_batch(event, _runner().handle, context.get_remaining_time_in_millis)

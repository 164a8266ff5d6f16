"""Lambda entry point of the session runner: SQS FIFO batches -> answered sessions, and the
prompt queue's batches -> Agent Protocol callbacks asked and polled; with Powertools'
Logger and Tracer (built on the first batch)."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from codeshot.observability import lambda_handler
from codeshot.runner.batch import Invocation, process_batch, source_queue
from codeshot.settings import runner_record_seconds

if TYPE_CHECKING:
    from codeshot.runner.session_runner import SessionRunner
    from codeshot.usecases.prompts import Prompts


@lru_cache(maxsize=1)
def _runner() -> SessionRunner:
    # Built on the first invocation, not at import: nothing touches AWS during init.
    from codeshot.runner.session_runner import SessionRunner
    from codeshot.services import Services
    from codeshot.settings import get_settings

    return SessionRunner(Services(get_settings()))


@lru_cache(maxsize=1)
def _prompts() -> Prompts:
    from codeshot.usecases.prompts import Prompts

    return Prompts(_runner().s)


@lambda_handler("codeshot-runner")
def handler(event: dict[str, Any], context: Any) -> dict[str, list[dict[str, str]]]:
    if source_queue(event) == _runner().s.settings.prompt_queue_name:
        # Imported only here: the session queue's cold start never pays for it.
        from codeshot.usecases.prompts import process_prompts

        return process_prompts(event, _prompts(), context.get_remaining_time_in_millis)
    runner = _runner()
    invocation = Invocation(context.get_remaining_time_in_millis,
                            runner_record_seconds(runner.s.settings.query_time_budget_seconds))
    return process_batch(event, runner.handle, invocation, queue=runner.s.queue,
                         give_up=runner.give_up)

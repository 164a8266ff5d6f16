"""Lambda entry point of the session runner: SQS FIFO batches -> answered sessions."""

from functools import lru_cache

from codeshot.runner.batch import process_batch


@lru_cache(maxsize=1)
def _runner():
    # Built on the first invocation, not at import: nothing touches AWS during init.
    from codeshot.runner.session_runner import SessionRunner
    from codeshot.services import Services
    from codeshot.settings import get_settings

    return SessionRunner(Services(get_settings()))


def handler(event, context):
    return process_batch(event, _runner().handle)

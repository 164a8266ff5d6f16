"""The correlation id one query carries from the API through SQS to the runner and each
agent call, and Powertools' Logger, Metrics and Tracer around the Lambda handlers.

The id comes from the caller's ``X-Correlation-Id`` header (if it looks like an id) or is
made by the API; it rides in the queued work item, the runner binds it while it handles
that item, and every agent call sends it in the same header. Log records of the
``codeshot`` loggers carry it as ``correlation_id``.

Powertools is imported only by :func:`lambda_handler`, on a handler's first invocation:
the local stack, the CLI and the agents never load it, and a Lambda's init stays as it was.
:func:`lambda_init` keeps the garbage collector out of a handler module's init.
"""

from __future__ import annotations

import contextvars
import gc
import logging
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from typing import Any

from codeshot import ids

HEADER = "X-Correlation-Id"
LOG_KEY = "correlation_id"
_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_current: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "codeshot_correlation_id", default=None)


def correlation_id() -> str | None:
    """The id of the query being served here, if any."""
    return _current.get()


def accepted(value: str | None) -> str:
    """A caller's id if it is a plain id (it is logged and sent on), else a new one."""
    return value if value and _ID.fullmatch(value) else ids.ulid()


@contextmanager
def correlated(value: str | None) -> Iterator[str]:
    """Bind ``value`` (or a new id) as the correlation id for the block."""
    bound = accepted(value)
    token = _current.set(bound)
    try:
        yield bound
    finally:
        _current.reset(token)


def headers() -> dict[str, str]:
    """The header that passes the current id on to an agent (none outside a query)."""
    current = _current.get()
    return {HEADER: current} if current else {}


class CorrelationFilter(logging.Filter):
    """Adds the current correlation id to each record (``None`` outside a query)."""

    def filter(self, record: logging.LogRecord) -> bool:
        setattr(record, LOG_KEY, _current.get())
        return True


Handler = Callable[[Any, Any], Any]


@contextmanager
def lambda_init() -> Iterator[None]:
    """Around a Lambda handler module's init (its imports, building its app): the cyclic
    garbage collector waits until the end (the init makes some 100,000 objects that live
    as long as the process, and hardly any garbage), and what the init made is then
    frozen out of later collections, so that the first request does not pay a full
    collection over all of it (benchmarks/cold_start.py). Outside Lambda, nothing changes."""
    if not os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
        yield
        return
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
        gc.freeze()
    finally:
        if was_enabled:
            gc.enable()


def lambda_handler(service: str) -> Callable[[Handler], Handler]:
    """Wrap a Lambda handler with Powertools, built on its first invocation in Lambda: a
    JSON Logger that the ``codeshot`` loggers write through (with the correlation id and
    the Lambda context in each line) and the handler traced (X-Ray; AWS and agent calls
    as subsegments). Metrics are Powertools' too (``codeshot.runner.metrics``). Called
    outside Lambda (tests, a script), the handler runs as it is: the logging set-up is
    process-wide and belongs to a Lambda's process only."""

    def decorate(handler: Handler) -> Handler:
        wrapped: list[Handler] = []

        @wraps(handler)
        def invoke(event: Any, context: Any) -> Any:
            if not os.environ.get("AWS_LAMBDA_FUNCTION_NAME"):
                return handler(event, context)
            if not wrapped:
                wrapped.append(_powertools(handler, service))
            return wrapped[0](event, context)

        return invoke

    return decorate


# What the tracer records calls of (as subsegments): AWS, and agents over HTTP. Patching
# everything X-Ray supports would import every such library installed (cold start).
TRACED_MODULES = ("botocore", "httpx")


def _powertools(handler: Handler, service: str) -> Handler:
    from aws_lambda_powertools import Tracer

    logger = configure_logging(service)
    tracer = Tracer(service=service, patch_modules=TRACED_MODULES)

    def call(event: Any, context: Any) -> Any:  # a function: Mangum's handler is an object
        return handler(event, context)

    # Not the response: Powertools would keep it in the trace, API keys and replies too.
    traced: Handler = logger.inject_lambda_context(
        tracer.capture_lambda_handler(call, capture_response=False))
    return traced


def configure_logging(service: str) -> Any:
    """A Powertools Logger for ``service``, and the ``codeshot`` loggers writing through
    its JSON handler, each line with the correlation id."""
    from aws_lambda_powertools import Logger
    from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

    logger = Logger(service=service)
    logging.getLogger("codeshot")  # registered, so that its config can be copied
    copy_config_to_registered_loggers(source_logger=logger, include={"codeshot"})
    for target in (logger.registered_handler, *logging.getLogger("codeshot").handlers):
        target.addFilter(CorrelationFilter())
    return logger

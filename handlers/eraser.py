"""Lambda entry point of the eraser: the erasure queue's batches -> deleted users' data
erased, a part a record (codeshot/usecases/erasure.py); a failed record is reported, so
SQS delivers it again and, after its last delivery, moves it to the dead-letter queue."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from codeshot.observability import lambda_handler

if TYPE_CHECKING:
    from codeshot.services import Services


@lru_cache(maxsize=1)
def _services() -> Services:
    # Built on the first invocation, not at import: nothing touches AWS during init.
    from codeshot.services import Services
    from codeshot.settings import get_settings

    return Services(get_settings())


@lambda_handler("codeshot-eraser")
def handler(event: dict[str, Any], context: Any) -> dict[str, list[dict[str, str]]]:
    from codeshot.usecases.erasure import erase_batch

    return erase_batch(_services(), event)

"""The answer a CloudFormation custom resource PUTs to its ``ResponseURL``."""

from __future__ import annotations

import json
from typing import Any

# CloudFormation refuses a longer answer ("Response object is too long") and the stack
# then shows that instead of the resource's reason.
MAX_BODY_BYTES = 4096
CUT = "…"  # ends a reason cut to fit


def response_body(event: dict[str, Any], status: str, physical_id: str, reason: str,
                  data: dict[str, str]) -> bytes:
    """The answer's JSON, UTF-8, at most ``MAX_BODY_BYTES``: a reason too long for it is
    cut (by characters, so never inside one) to the longest start that fits."""
    def body(text: str) -> bytes:
        return json.dumps({
            "Status": status, "Reason": text or status, "PhysicalResourceId": physical_id,
            "StackId": event["StackId"], "RequestId": event["RequestId"],
            "LogicalResourceId": event["LogicalResourceId"], "Data": data,
        }, ensure_ascii=False).encode(errors="backslashreplace")  # a lone surrogate too

    whole = body(reason)
    if len(whole) <= MAX_BODY_BYTES:
        return whole
    # An escaped character takes 1 to 6 bytes: search the longest start that fits.
    low, high = 0, len(reason) - 1
    while low < high:
        middle = (low + high + 1) // 2
        if len(body(reason[:middle] + CUT)) <= MAX_BODY_BYTES:
            low = middle
        else:
            high = middle - 1
    return body(reason[:low] + CUT)

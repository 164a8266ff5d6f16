"""CloudWatch metrics from the runner, in the Embedded Metric Format: one JSON log line
per data point, which CloudWatch turns into a metric (no API call, no client to build).

Namespace and dimension are what ``infra/components/alarms.py`` watches.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TextIO

NAMESPACE = "codeshot"
QUEUE_DIMENSION = "QueueName"
QUERIES_GIVEN_UP = "QueriesGivenUp"  # answered with an error after the last attempt failed


def emit(name: str, queue_name: str, value: float = 1, out: TextIO | None = None) -> None:
    """Write one EMF data point (Count) for ``name`` on the session queue ``queue_name``."""
    record = {
        "_aws": {"Timestamp": int(time.time() * 1000), "CloudWatchMetrics": [{
            "Namespace": NAMESPACE, "Dimensions": [[QUEUE_DIMENSION]],
            "Metrics": [{"Name": name, "Unit": "Count"}]}]},
        QUEUE_DIMENSION: queue_name,
        name: value,
    }
    print(json.dumps(record, separators=(",", ":")), file=out or sys.stdout, flush=True)

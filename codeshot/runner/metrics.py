"""CloudWatch metrics from the runner, in the Embedded Metric Format (Powertools Metrics):
one JSON log line per data point, which CloudWatch turns into a metric (no API call, no
client to build).

Namespace and dimension are what ``infra/components/alarms.py`` watches.
"""

from __future__ import annotations

NAMESPACE = "codeshot"
QUEUE_DIMENSION = "QueueName"
# Answered with an error: the last attempt failed, or the last delivery never ran.
QUERIES_GIVEN_UP = "QueriesGivenUp"


def emit(name: str, queue_name: str, value: float = 1) -> None:
    """Write one EMF data point (Count) for ``name`` on the session queue ``queue_name``,
    through Powertools Metrics (imported here: it is rare, and the runner's init stays
    small). No service dimension: the alarm watches exactly [QueueName]."""
    from aws_lambda_powertools.metrics import MetricUnit, single_metric

    with single_metric(name=name, unit=MetricUnit.Count, value=value, namespace=NAMESPACE,
                       default_dimensions={QUEUE_DIMENSION: queue_name}):
        pass

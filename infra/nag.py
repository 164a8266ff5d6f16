"""cdk-nag: AwsSolutions checks on every stack, and the few findings accepted on purpose.

Each suppression names the rule, what it flags here and why that is right for codeshot.
Tests synthesize with these checks and fail on any unsuppressed error.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Aspects, Stack
from cdk_nag import AwsSolutionsChecks, NagPackSuppression, NagSuppressions, RegexAppliesTo
from constructs import IConstruct

X_RAY_REASON = ("X-Ray's PutTraceSegments/PutTelemetryRecords support no resource-level "
                "permissions; Lambda's active tracing adds them with Resource '*'.")


def apply_checks(scope: IConstruct) -> None:
    Aspects.of(scope).add(AwsSolutionsChecks(verbose=True))


def suppress(scope: IConstruct, rule: str, reason: str,
             applies_to: Sequence[str | RegexAppliesTo] | None = None) -> None:
    NagSuppressions.add_resource_suppressions(
        scope, [NagPackSuppression(id=rule, reason=reason, applies_to=applies_to)],
        apply_to_children=True)


def suppress_stack(stack: Stack, rule: str, reason: str,
                   applies_to: Sequence[str | RegexAppliesTo] | None = None) -> None:
    NagSuppressions.add_stack_suppressions(
        stack, [NagPackSuppression(id=rule, reason=reason, applies_to=applies_to)])

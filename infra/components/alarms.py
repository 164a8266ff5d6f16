"""CloudWatch alarms for what needs a human: a function erroring, work dead-lettered.

The alarms carry no actions (who to page differs per account): add an SNS action with
``alarm.add_alarm_action`` or in the console. A DLQ message means a query was given up on.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

AT_LEAST = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD


class PlatformAlarms(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        functions: dict[str, lambda_.IFunction],
        dead_letter_queue: sqs.IQueue,
    ) -> None:
        super().__init__(scope, id)
        self.alarms: list[cloudwatch.Alarm] = []
        for name, function in functions.items():
            self.alarms.append(cloudwatch.Alarm(
                self, f"{name}Errors",
                alarm_description=f"codeshot {name} Lambda reported errors",
                metric=function.metric_errors(period=Duration.minutes(5), statistic="Sum"),
                threshold=1,
                evaluation_periods=1,
                comparison_operator=AT_LEAST,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            ))
        self.alarms.append(cloudwatch.Alarm(
            self, "DeadLetters",
            alarm_description="codeshot session work reached the dead-letter queue",
            metric=dead_letter_queue.metric_approximate_number_of_messages_visible(
                period=Duration.minutes(5), statistic="Maximum"),
            threshold=1,
            evaluation_periods=1,
            comparison_operator=AT_LEAST,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        ))

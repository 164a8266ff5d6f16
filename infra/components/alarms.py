"""CloudWatch alarms for what needs a human, sent to an SNS topic (an email subscribed to
it when ``codeshot:alarmEmail`` is set; add other subscribers as your team pages).

They watch: a function erroring or being throttled; a query waiting in the queue for
minutes (the runner is down or starved); work dead-lettered; a query the runner gave up
on (answered with an error after its last attempt: ``codeshot.runner.metrics``). A
dashboard shows each alarm's metric, and each function's invocations and p99 duration.

The topic is encrypted with a key of its own, not SNS's AWS-managed key (alias/aws/sns):
CloudWatch publishes an alarm only if it may use the topic's key (kms:GenerateDataKey*,
kms:Decrypt), and an AWS-managed key's policy cannot be changed to let it, so every alarm
action would fail ("Enable compatibility between event sources from AWS services and
encrypted topics", Amazon SNS Developer Guide).
"""

from __future__ import annotations

from aws_cdk import Aws, Duration, RemovalPolicy
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from codeshot.runner import metrics

AT_LEAST = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
PERIOD = Duration.minutes(5)
OLDEST_MESSAGE_SECONDS = 300  # a query waiting this long in the queue is not being run
CLOUDWATCH = iam.ServicePrincipal("cloudwatch.amazonaws.com")
# What CloudWatch needs of the topic's key to publish to it.
KEY_ACTIONS = ("kms:GenerateDataKey*", "kms:Decrypt")


class PlatformAlarms(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        functions: dict[str, lambda_.IFunction],
        queue: sqs.IQueue,
        dead_letter_queues: dict[str, sqs.IQueue],
        email: str = "",
    ) -> None:
        super().__init__(scope, id)
        # It holds only alarm messages in flight: it goes with the stack.
        self.key = kms.Key(self, "TopicKey", description="codeshot alarms' SNS topic",
                           enable_key_rotation=True, removal_policy=RemovalPolicy.DESTROY)
        self.topic = sns.Topic(self, "Topic", display_name="codeshot alarms",
                               enforce_ssl=True, master_key=self.key)
        # CloudWatch may use the key, and publish to the topic, only for this account's
        # alarms in this region (no other account's alarm can make it a confused deputy).
        from_our_alarms = {
            "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
            "ArnLike": {"aws:SourceArn": f"arn:{Aws.PARTITION}:cloudwatch:{Aws.REGION}:"
                                         f"{Aws.ACCOUNT_ID}:alarm:*"}}
        self.key.add_to_resource_policy(iam.PolicyStatement(
            principals=[CLOUDWATCH], actions=list(KEY_ACTIONS), resources=["*"],
            conditions=from_our_alarms))
        self.topic.add_to_resource_policy(iam.PolicyStatement(
            principals=[CLOUDWATCH], actions=["sns:Publish"],
            resources=[self.topic.topic_arn], conditions=from_our_alarms))
        if email:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
        self.alarms: list[cloudwatch.Alarm] = []
        self.thresholds: list[tuple[cloudwatch.Alarm, float]] = []
        for name, function in functions.items():
            self._alarm(f"{name}Errors", f"codeshot {name} Lambda reported errors",
                        function.metric_errors(period=PERIOD, statistic="Sum"), 1)
            self._alarm(f"{name}Throttles", f"codeshot {name} Lambda was throttled",
                        function.metric_throttles(period=PERIOD, statistic="Sum"), 1)
        self._alarm("QueueBacklog", "codeshot queries waited minutes in the session queue",
                    queue.metric_approximate_age_of_oldest_message(
                        period=PERIOD, statistic="Maximum"), OLDEST_MESSAGE_SECONDS)
        for name, dlq in dead_letter_queues.items():  # id prefix -> a queue's DLQ
            self._alarm(f"{name}DeadLetters", f"codeshot {name} work reached its dead-letter "
                        "queue", dlq.metric_approximate_number_of_messages_visible(
                            period=PERIOD, statistic="Maximum"), 1)
        self._alarm("QueriesGivenUp", "the codeshot runner gave up on queries",
                    cloudwatch.Metric(
                        namespace=metrics.NAMESPACE, metric_name=metrics.QUERIES_GIVEN_UP,
                        dimensions_map={metrics.QUEUE_DIMENSION: queue.queue_name},
                        period=PERIOD, statistic="Sum"), 1)
        self.dashboard = cloudwatch.Dashboard(self, "Dashboard")
        self.dashboard.add_widgets(*[
            cloudwatch.GraphWidget(title=f"{name}: invocations and p99 duration (ms)",
                                   left=[function.metric_invocations(period=PERIOD)],
                                   right=[function.metric_duration(period=PERIOD,
                                                                   statistic="p99")])
            for name, function in functions.items()])
        # Each alarm's metric with its threshold (a graph, not an AlarmWidget: that one
        # names the alarm by ARN, which the rehearsal's local CloudFormation does not make).
        self.dashboard.add_widgets(*[
            cloudwatch.GraphWidget(title=alarm.node.id, left=[alarm.metric],
                                   left_annotations=[cloudwatch.HorizontalAnnotation(
                                       value=threshold, label="alarm")])
            for alarm, threshold in self.thresholds])

    def _alarm(self, id: str, description: str, metric: cloudwatch.IMetric,
               threshold: float) -> None:
        alarm = cloudwatch.Alarm(
            self, id, alarm_description=description, metric=metric, threshold=threshold,
            evaluation_periods=1, comparison_operator=AT_LEAST,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING)
        alarm.add_alarm_action(actions.SnsAction(self.topic))
        self.alarms.append(alarm)
        self.thresholds.append((alarm, threshold))

"""One CloudWatch dashboard per cluster, and the alarms, notifying an encrypted SNS topic.

Every custom metric on the dashboard is a :class:`MetricName` under :data:`NAMESPACE`, with the
``service`` dimension Powertools adds and the ``ClusterName`` the handlers bind; dimensioned metrics
(NodeClaims by State, ...) are drawn with SEARCH so that new dimension values appear without a deploy.
tests/infra checks the names against the code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct
from serverless_karpenter.observability import CLUSTER_DIMENSION, NAMESPACE, SERVICE, MetricName

GRAPH_PERIOD = Duration.minutes(1)
ALARM_PERIOD = Duration.minutes(5)
LAUNCH_ERROR_RATE_PERCENT = 25
WIDE = 24
HALF = 12
THIRD = 8
HEIGHT = 6


class ClusterMetrics:
    """The cluster's custom metrics: every one carries ``service`` and ``ClusterName`` (see
    :func:`serverless_karpenter.observability.bind_cluster`), so stacks of two clusters in one account and
    region draw and alarm on their own cluster's figures only."""

    def __init__(self, cluster_name: str) -> None:
        self.cluster_name = cluster_name
        self.dimensions = {"service": SERVICE, CLUSTER_DIMENSION: cluster_name}

    def metric(
        self,
        name: MetricName,
        statistic: str = "Sum",
        label: str | None = None,
        period: Duration = GRAPH_PERIOD,
    ) -> cw.Metric:
        return cw.Metric(
            namespace=NAMESPACE,
            metric_name=name.value,
            dimensions_map=self.dimensions,
            statistic=statistic,
            label=label,  # None in alarms: a labelled metric would render as a metric-math alarm
            period=period,
        )

    def by_dimension(self, name: MetricName, dimension: str, statistic: str = "Sum") -> cw.MathExpression:
        """One line per value of ``dimension``, whatever values the code emits."""
        schema = f"{{{NAMESPACE},{CLUSTER_DIMENSION},{dimension},service}}"
        query = (
            f'{schema} MetricName="{name.value}" service="{SERVICE}" '
            f'{CLUSTER_DIMENSION}="{self.cluster_name}"'
        )
        return cw.MathExpression(
            expression=f"SEARCH('{query}', '{statistic}', {int(GRAPH_PERIOD.to_seconds())})",
            label=f"${{PROP('Dim.{dimension}')}}",
            period=GRAPH_PERIOD,
            using_metrics={},
        )


def filled_with_zero(metric: cw.Metric, label: str) -> cw.MathExpression:
    """A metric published only while non-zero (PendingPods, ManagedCostPerHour), drawn with 0 in its gaps."""
    return cw.MathExpression(
        expression="FILL(m, 0)", using_metrics={"m": metric}, label=label, period=GRAPH_PERIOD
    )


def graph(
    title: str,
    left: Sequence[cw.IMetric],
    right: Sequence[cw.IMetric] = (),
    width: int = HALF,
    left_label: str | None = None,
    right_label: str | None = None,
    stacked: bool = False,
) -> cw.GraphWidget:
    return cw.GraphWidget(
        title=title,
        left=list(left),
        right=list(right),
        width=width,
        height=HEIGHT,
        stacked=stacked,
        left_y_axis=cw.YAxisProps(label=left_label, show_units=False, min=0) if left_label else None,
        right_y_axis=cw.YAxisProps(label=right_label, show_units=False, min=0) if right_label else None,
    )


class Monitoring(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        functions: Mapping[str, lambda_.IFunction],
        interruption_queue: sqs.IQueue,
        dead_letter_queues: Mapping[str, sqs.IQueue],
        alarm_email: str | None,
        dashboard: bool = True,
    ) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        prefix = f"serverless-karpenter-{cluster_name}"

        # CloudWatch cannot publish to a topic encrypted with the AWS-managed SNS key (alias/aws/sns: its key
        # policy admits no service principal, and it cannot be edited), hence our own key, $1 a month.
        self.alarm_topic_key = kms.Key(
            self,
            "AlarmTopicKey",
            description=f"{prefix} alarm notifications",
            enable_key_rotation=True,
            pending_window=Duration.days(7),
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.alarm_topic_key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowCloudWatchAlarmsToUseTheKey",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy, "*" is this key
            )
        )
        self.alarm_topic = sns.Topic(
            self,
            "AlarmTopic",
            display_name=f"{prefix} alarms",
            master_key=self.alarm_topic_key,
            enforce_ssl=True,
        )
        self.alarm_topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowCloudWatchAlarmsInAccount",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["sns:Publish"],
                resources=[self.alarm_topic.topic_arn],
                conditions={"StringEquals": {"aws:SourceAccount": stack.account}},
            )
        )
        if alarm_email:
            self.alarm_topic.add_subscription(subscriptions.EmailSubscription(alarm_email))

        self.metrics = ClusterMetrics(cluster_name)
        self.alarms: list[cw.Alarm] = []
        self._add_alarms(prefix, functions, dead_letter_queues)
        self.dashboard: cw.Dashboard | None = (
            self._dashboard(cluster_name, functions, interruption_queue, dead_letter_queues)
            if dashboard
            else None
        )

    # -- alarms --------------------------------------------------------------------------------------

    def _alarm(self, construct_id: str, **props: object) -> cw.Alarm:
        alarm = cw.Alarm(self, construct_id, **props)  # type: ignore[arg-type]
        alarm.add_alarm_action(cw_actions.SnsAction(self.alarm_topic))
        alarm.add_ok_action(cw_actions.SnsAction(self.alarm_topic))
        self.alarms.append(alarm)
        return alarm

    def _add_alarms(
        self,
        prefix: str,
        functions: Mapping[str, lambda_.IFunction],
        dead_letter_queues: Mapping[str, sqs.IQueue],
    ) -> None:
        for name, queue in dead_letter_queues.items():
            self._alarm(
                f"{name.capitalize()}DeadLetterQueueAlarm",
                alarm_name=f"{prefix}-{name}-dlq-not-empty",
                alarm_description=f"Messages in the {name} DLQ: inspect them, then redrive or purge.",
                metric=queue.metric_approximate_number_of_messages_visible(
                    period=ALARM_PERIOD, statistic="Maximum"
                ),
                threshold=0,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                evaluation_periods=1,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            )
        for name, function in functions.items():
            self._alarm(
                f"{name.capitalize()}ErrorsAlarm",
                alarm_name=f"{prefix}-{name}-errors",
                alarm_description=f"The {name} function failed; its log group has the stack trace.",
                metric=function.metric_errors(period=ALARM_PERIOD, statistic="Sum"),
                threshold=1,
                comparison_operator=cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                evaluation_periods=1,
                treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
            )
        self._alarm(
            "ProvisionerStalledAlarm",
            alarm_name=f"{prefix}-provisioner-stalled",
            alarm_description=(
                "The provisioner was not invoked for 5 minutes (its schedule or the watcher's invoke is "
                "broken): pending pods are not provisioned."
            ),
            # Lambda's own Invocations metric, free, rather than a heartbeat metric of ours ($0.30 a month):
            # an invocation that fails is the errors alarm's; one that never happens is this one's.
            metric=functions["provisioner"].metric_invocations(period=ALARM_PERIOD, statistic="Sum"),
            threshold=1,
            comparison_operator=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cw.TreatMissingData.BREACHING,
        )
        self._alarm(
            "LaunchErrorRateAlarm",
            alarm_name=f"{prefix}-launch-error-rate",
            alarm_description=(
                f"More than {LAUNCH_ERROR_RATE_PERCENT}% of launches failed in two of the last three "
                "5-minute periods: check capacity errors, quotas and the EC2NodeClass."
            ),
            metric=cw.MathExpression(
                expression="IF(errors + launched > 0, 100 * errors / (errors + launched), 0)",
                using_metrics={
                    "errors": cw.MathExpression(
                        expression="FILL(e, 0)",
                        using_metrics={
                            "e": self.metrics.metric(MetricName.LAUNCH_ERRORS, period=ALARM_PERIOD)
                        },
                        period=ALARM_PERIOD,
                    ),
                    "launched": cw.MathExpression(
                        expression="FILL(l, 0)",
                        using_metrics={
                            "l": self.metrics.metric(MetricName.NODECLAIMS_LAUNCHED, period=ALARM_PERIOD)
                        },
                        period=ALARM_PERIOD,
                    ),
                },
                label="launch error rate (%)",
                period=ALARM_PERIOD,
            ),
            threshold=LAUNCH_ERROR_RATE_PERCENT,
            comparison_operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=3,
            datapoints_to_alarm=2,
            treat_missing_data=cw.TreatMissingData.NOT_BREACHING,
        )

    # -- dashboard -----------------------------------------------------------------------------------

    def _dashboard(
        self,
        cluster_name: str,
        functions: Mapping[str, lambda_.IFunction],
        interruption_queue: sqs.IQueue,
        dead_letter_queues: Mapping[str, sqs.IQueue],
    ) -> cw.Dashboard:
        def per_function(kind: str) -> list[cw.IMetric]:
            out: list[cw.IMetric] = []
            for name, function in functions.items():
                if kind == "errors":
                    out.append(function.metric_errors(period=GRAPH_PERIOD, statistic="Sum", label=name))
                elif kind == "throttles":
                    out.append(function.metric_throttles(period=GRAPH_PERIOD, statistic="Sum", label=name))
                else:
                    out.append(
                        function.metric_duration(period=GRAPH_PERIOD, statistic="p90", label=f"{name} p90")
                    )
            return out

        dashboard = cw.Dashboard(
            self,
            "Dashboard",
            dashboard_name=f"ServerlessKarpenter-{cluster_name}",
            default_interval=Duration.hours(3),
        )
        dashboard.add_widgets(
            cw.TextWidget(
                markdown=(
                    f"# serverless-karpenter: {cluster_name}\n"
                    f"Custom metrics: namespace `{NAMESPACE}`, dimensions `service={SERVICE}`, "
                    f"`{CLUSTER_DIMENSION}={cluster_name}`."
                ),
                width=WIDE,
                height=2,
            )
        )
        dashboard.add_widgets(
            graph(
                "Pending pods",
                [
                    filled_with_zero(self.metrics.metric(MetricName.PENDING_PODS, "Maximum"), "pending"),
                    self.metrics.metric(MetricName.PODS_UNSCHEDULABLE, "Sum", "unschedulable"),
                    self.metrics.metric(MetricName.PODS_SCHEDULED, "Sum", "scheduled"),
                ],
                width=THIRD,
            ),
            graph(
                "NodeClaims by state",
                [self.metrics.by_dimension(MetricName.NODECLAIMS_BY_STATE, "State", "Maximum")],
                width=THIRD,
            ),
            graph(
                "Provisioner",
                [
                    functions["provisioner"].metric_invocations(
                        period=GRAPH_PERIOD, statistic="Sum", label="runs"
                    )
                ],
                [self.metrics.metric(MetricName.SOLVE_DURATION, "p90", "solve p90")],
                width=THIRD,
            ),
        )
        dashboard.add_widgets(
            graph(
                "Launches",
                [
                    self.metrics.metric(MetricName.NODECLAIMS_CREATED, label="created"),
                    self.metrics.metric(MetricName.NODECLAIMS_LAUNCHED, label="launched"),
                    self.metrics.metric(MetricName.NODECLAIMS_REGISTERED, label="registered"),
                    self.metrics.metric(MetricName.NODECLAIMS_INITIALIZED, label="initialized"),
                    self.metrics.metric(MetricName.NODECLAIMS_TERMINATED, label="terminated"),
                ],
            ),
            graph(
                "Launch latency (pending → launched → initialized)",
                [
                    self.metrics.metric(MetricName.LAUNCH_LATENCY, "p50", "pending → launched p50"),
                    self.metrics.metric(MetricName.LAUNCH_LATENCY, "p90", "pending → launched p90"),
                    self.metrics.metric(
                        MetricName.INITIALIZATION_LATENCY, "p50", "launched → initialized p50"
                    ),
                    self.metrics.metric(
                        MetricName.INITIALIZATION_LATENCY, "p90", "launched → initialized p90"
                    ),
                ],
                left_label="seconds",
            ),
        )
        dashboard.add_widgets(
            graph(
                "Interruption messages by kind",
                [
                    self.metrics.by_dimension(MetricName.INTERRUPTION_MESSAGES, "Kind"),
                    self.metrics.metric(MetricName.INTERRUPTION_MALFORMED, label="malformed"),
                    self.metrics.metric(MetricName.INTERRUPTION_FOREIGN, label="not ours"),
                ],
                width=THIRD,
            ),
            graph(
                "Interruption latency and actions",
                [self.metrics.by_dimension(MetricName.INTERRUPTION_ACTIONS, "Action")],
                [
                    self.metrics.metric(MetricName.INTERRUPTION_LATENCY, "p90", "latency p90"),
                    self.metrics.metric(MetricName.INTERRUPTION_LATENCY, "Maximum", "latency max"),
                ],
                right_label="seconds",
                width=THIRD,
            ),
            graph(
                "Drains",
                [
                    self.metrics.metric(MetricName.DRAINS_STARTED, label="started"),
                    self.metrics.metric(MetricName.DRAINS_COMPLETED, label="completed"),
                    self.metrics.metric(MetricName.PODS_EVICTED, label="pods evicted"),
                    self.metrics.metric(MetricName.PODS_FORCE_DELETED, label="pods force-deleted"),
                ],
                [self.metrics.metric(MetricName.DRAIN_DURATION, "p90", "drain duration p90")],
                right_label="seconds",
                width=THIRD,
            ),
        )
        dashboard.add_widgets(
            graph(
                "Disruption actions by method",
                [self.metrics.by_dimension(MetricName.DISRUPTION_ACTIONS, "Method")],
                [self.metrics.by_dimension(MetricName.DISRUPTION_BLOCKED, "Reason")],
                width=THIRD,
            ),
            graph(
                "Cost per hour of managed capacity",
                [filled_with_zero(self.metrics.metric(MetricName.COST_PER_HOUR, "Maximum"), "$/hour")],
                [self.metrics.metric(MetricName.SOLVE_COST_GAP, "Maximum", "gap to lower bound (%)")],
                left_label="$/hour",
                width=THIRD,
            ),
            graph(
                "Unavailable offerings and launch errors",
                [
                    self.metrics.metric(
                        MetricName.UNAVAILABLE_OFFERING_HITS, label="unavailable-offering hits"
                    ),
                    self.metrics.metric(MetricName.LAUNCH_ERRORS, label="launch errors"),
                    self.metrics.metric(
                        MetricName.GARBAGE_COLLECTED_INSTANCES, label="garbage-collected instances"
                    ),
                ],
                width=THIRD,
            ),
        )
        dashboard.add_widgets(
            graph("Lambda errors", per_function("errors"), width=THIRD),
            graph("Lambda throttles", per_function("throttles"), width=THIRD),
            graph("Lambda duration (p90)", per_function("duration"), left_label="ms", width=THIRD),
        )
        dashboard.add_widgets(
            graph(
                "Dead-letter queue depth",
                [
                    queue.metric_approximate_number_of_messages_visible(
                        period=GRAPH_PERIOD, statistic="Maximum", label=name
                    )
                    for name, queue in dead_letter_queues.items()
                ],
                [
                    interruption_queue.metric_approximate_age_of_oldest_message(
                        period=GRAPH_PERIOD, statistic="Maximum", label="oldest interruption message (s)"
                    )
                ],
            ),
            cw.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms), width=HALF, height=HEIGHT),
        )
        return dashboard

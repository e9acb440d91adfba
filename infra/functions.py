"""The five Lambda functions, their roles, log groups, schedules and SQS event sources, and the
termination-work queue.

Sizes are in :data:`FUNCTION_SPECS`, timeouts and the interruption queue's settings in
:mod:`serverless_karpenter.deployment` (which the local simulator reads too); memory can be overridden per
cluster from the context (``<name>MemoryMb``). Environment variable names come from
:class:`serverless_karpenter.config.Settings`, so a renamed setting fails the synth instead of a Lambda at
run time.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from aws_cdk import Duration, IgnoreMode
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct
from serverless_karpenter import deployment
from serverless_karpenter.config import Settings
from serverless_karpenter.observability import NAMESPACE, SERVICE

from infra.config import ClusterConfig
from infra.iam import ControllerPermissions
from infra.layers import ARCHITECTURE, BYTECODE_EXCLUDES, RUNTIME, Layers
from infra.network import FunctionNetwork
from infra.paths import FUNCTIONS_DIR

HANDLER = "handler.lambda_handler"
SCHEDULE = events.Schedule.rate(Duration.seconds(deployment.SCHEDULE_SECONDS))
SQS_BATCH_SIZE = 10
# Every scheduled or watcher-triggered run is superseded by the next one a minute later: an event that
# waited longer than that (throttled behind the single running instance) is dropped, not replayed.
ASYNC_MAX_EVENT_AGE = Duration.seconds(60)
# The lowest MaximumConcurrency an SQS event source takes. The termination function's event source runs
# at most this many batches and the function reserves as many: its queue is its only trigger (the
# one-minute schedule sends it a message rather than invoking the function), so the poller is never
# throttled. A throttled poller returns its messages to the queue, where they wait out the 30-minute
# visibility and count as receives towards the DLQ.
EVENT_SOURCE_MIN_CONCURRENCY = 2
TERMINATION_CONCURRENCY = EVENT_SOURCE_MIN_CONCURRENCY
# Receives count only when a pass raises (the handler acknowledges a batch whole otherwise).
TERMINATION_MAX_RECEIVE_COUNT = 10
TERMINATION_QUEUE_RETENTION = Duration.days(4)
# The body of the scheduled message, which the handler tells from a drain's own re-queued ones.
TERMINATION_SCHEDULE_MESSAGE = {"reason": deployment.TERMINATION_SCHEDULED_PASS}


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    description: str
    memory_mb: int
    reserved_concurrency: int | None
    scheduled: bool
    # The MaximumConcurrency of the SQS event source that triggers it (None: none does), never above the
    # reserved concurrency, so the event source is never throttled.
    event_source_concurrency: int | None = None
    # Scheduled through its SQS queue (a message every minute) rather than invoked by the schedule, so
    # that the event source is its only invoker.
    scheduled_through_queue: bool = False

    def __post_init__(self) -> None:
        concurrency = self.event_source_concurrency
        if concurrency is not None and not (
            EVENT_SOURCE_MIN_CONCURRENCY <= concurrency <= (self.reserved_concurrency or 0)
        ):
            raise ValueError(
                f"{self.name}: an SQS event source's maximum concurrency ({concurrency}) must be at least "
                f"{EVENT_SOURCE_MIN_CONCURRENCY} and at most the function's reserved concurrency "
                f"({self.reserved_concurrency}), or the poller is throttled"
            )
        if self.scheduled_through_queue and concurrency is None:
            raise ValueError(f"{self.name}: scheduled through a queue it has no event source on")

    @property
    def timeout(self) -> Duration:
        return Duration.seconds(deployment.FUNCTION_TIMEOUT_SECONDS[self.name])


FUNCTION_SPECS: tuple[FunctionSpec, ...] = (
    FunctionSpec(
        name="watcher",
        description="Polls for provisionable pods and wakes the provisioner",
        # Sized by measurement: the handler's process holds ~82 MB once imported (boto3's Lambda client
        # included), and a watch adds little. It runs ~55 s of every minute, so its memory is most of an
        # idle cluster's bill (benchmarks idle-cost): 128 MB is $4/month, 256 MB was $8. Raise it with
        # -c watcherMemoryMb=... for bursts of thousands of pending pods (their LIST is held at once).
        memory_mb=128,
        reserved_concurrency=1,
        scheduled=True,
    ),
    FunctionSpec(
        name="provisioner",
        description="Solves, launches and reconciles NodeClaims",
        memory_mb=1024,
        # With the DynamoDB lease, concurrency 1 makes it the single writer of capacity decisions.
        reserved_concurrency=1,
        scheduled=True,
    ),
    FunctionSpec(
        name="interruption",
        description="Acts on EC2 interruption events",
        memory_mb=512,
        # Reserved for the event source, its only invoker: the account's other functions cannot starve it
        # into throttling, which would count receives towards the DLQ.
        reserved_concurrency=deployment.INTERRUPTION_CONCURRENCY,
        scheduled=False,
        event_source_concurrency=deployment.INTERRUPTION_CONCURRENCY,
    ),
    FunctionSpec(
        name="disruption",
        description="Emptiness, expiration, drift and consolidation",
        memory_mb=1024,
        reserved_concurrency=1,
        scheduled=True,
    ),
    FunctionSpec(
        name="termination",
        description="Drains nodes and terminates their instances",
        memory_mb=512,
        reserved_concurrency=TERMINATION_CONCURRENCY,
        scheduled=True,
        event_source_concurrency=TERMINATION_CONCURRENCY,
        scheduled_through_queue=True,
    ),
)
SPECS_BY_NAME: dict[str, FunctionSpec] = {spec.name: spec for spec in FUNCTION_SPECS}


def setting_env(field: str) -> str:
    """The environment variable a :class:`Settings` field is read from."""
    if field not in Settings.model_fields:
        raise KeyError(f"Settings has no field {field!r}: the stack and serverless_karpenter.config disagree")
    return field.upper()


def queue_visibility(spec: FunctionSpec) -> Duration:
    return Duration.seconds(deployment.queue_visibility_timeout_seconds(spec.name))


def construct_name(function_name: str) -> str:
    return function_name.capitalize()


class TerminationWorkQueue(Construct):
    """Drains in progress: the termination function re-queues itself with delayed messages."""

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetterQueue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(14),
        )
        self.queue = sqs.Queue(
            self,
            "Queue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=TERMINATION_QUEUE_RETENTION,
            visibility_timeout=queue_visibility(SPECS_BY_NAME["termination"]),
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.dead_letter_queue, max_receive_count=TERMINATION_MAX_RECEIVE_COUNT
            ),
        )


class ControlPlaneFunctions(Construct):
    """Layers, one role and one log group per function, the functions, and what triggers them."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: ClusterConfig,
        permissions: ControllerPermissions,
        state_table_name: str,
        interruption_queue: sqs.IQueue,
        interruption_dead_letter_queue: sqs.IQueue,
        termination_queue: sqs.IQueue,
        node_role_name: str,
        network: FunctionNetwork | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self._network = network
        self.layers = Layers(self, "Layers")
        self.functions: dict[str, lambda_.Function] = {}
        self.roles: dict[str, iam.Role] = {}
        self.log_groups: dict[str, logs.LogGroup] = {}

        common_env = {
            setting_env("cluster_name"): config.cluster_name,
            setting_env("state_table_name"): state_table_name,
            setting_env("interruption_queue_url"): interruption_queue.queue_url,
            setting_env("interruption_dlq_url"): interruption_dead_letter_queue.queue_url,
            setting_env("node_role_name"): node_role_name,
            setting_env("interruption_rebalance"): config.interruption_rebalance,
            setting_env("termination_queue_url"): termination_queue.queue_url,
            "POWERTOOLS_SERVICE_NAME": SERVICE,
            "POWERTOOLS_METRICS_NAMESPACE": NAMESPACE,
            "LOG_LEVEL": config.log_level,
        }
        if not config.tracing:
            # Powertools' documented switch: the Tracer sends nothing and patches no client.
            common_env["POWERTOOLS_TRACE_DISABLED"] = "true"

        # The provisioner first: the watcher's environment and policy refer to it.
        for spec in sorted(FUNCTION_SPECS, key=lambda s: s.name != "provisioner"):
            env = dict(common_env)
            if spec.name in ("watcher", "termination", "disruption"):
                env[setting_env("provisioner_function_name")] = self.functions["provisioner"].function_name
            self._add_function(spec, config, env)
            if spec.name == "provisioner":
                permissions.set_provisioner(self.functions["provisioner"])

        for name, role in self.roles.items():
            for statement in permissions.function_statements(name):
                role.add_to_principal_policy(statement)

        for spec in FUNCTION_SPECS:
            function = self.functions[spec.name]
            if spec.scheduled and spec.scheduled_through_queue:
                self._schedule_through_queue(spec, config, termination_queue)
            elif spec.scheduled:
                # A failed run is not retried: the next scheduled run (or watcher batch) redoes the work.
                function.configure_async_invoke(max_event_age=ASYNC_MAX_EVENT_AGE, retry_attempts=0)
                events.Rule(
                    self,
                    f"{construct_name(spec.name)}Schedule",
                    description=f"serverless-karpenter {config.cluster_name}: {spec.name}, every minute",
                    schedule=SCHEDULE,
                    targets=[
                        targets.LambdaFunction(function, retry_attempts=0, max_event_age=ASYNC_MAX_EVENT_AGE)
                    ],
                )

        for name, queue in (("interruption", interruption_queue), ("termination", termination_queue)):
            self.functions[name].add_event_source(
                event_sources.SqsEventSource(
                    queue,
                    batch_size=SQS_BATCH_SIZE,
                    report_batch_item_failures=True,
                    max_concurrency=SPECS_BY_NAME[name].event_source_concurrency,
                )
            )

    def _schedule_through_queue(self, spec: FunctionSpec, config: ClusterConfig, queue: sqs.IQueue) -> None:
        # An L1 rule, and the queue-policy statement written here: the L2 SqsQueue target would also let
        # EventBridge read the queue's attributes and URL, which sending does not need.
        rule = events.CfnRule(
            self,
            f"{construct_name(spec.name)}Schedule",
            description=f"serverless-karpenter {config.cluster_name}: {spec.name}, every minute",
            schedule_expression=SCHEDULE.expression_string,
            state="ENABLED",
            targets=[
                events.CfnRule.TargetProperty(
                    id=f"{construct_name(spec.name)}Queue",
                    arn=queue.queue_arn,
                    input=json.dumps(TERMINATION_SCHEDULE_MESSAGE, separators=(",", ":")),
                    # A lost tick costs nothing: the next comes a minute later.
                    retry_policy=events.CfnRule.RetryPolicyProperty(
                        maximum_event_age_in_seconds=int(ASYNC_MAX_EVENT_AGE.to_seconds()),
                        maximum_retry_attempts=0,
                    ),
                )
            ],
        )
        queue.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowScheduleRule",
                principals=[iam.ServicePrincipal("events.amazonaws.com")],
                actions=["sqs:SendMessage"],
                resources=[queue.queue_arn],
                conditions={"ArnEquals": {"aws:SourceArn": rule.attr_arn}},
            )
        )

    def _add_function(
        self, spec: FunctionSpec, config: ClusterConfig, environment: Mapping[str, str]
    ) -> None:
        name = construct_name(spec.name)
        role = iam.Role(
            self,
            f"{name}Role",
            description=f"serverless-karpenter {spec.name} function ({config.cluster_name})",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        )
        log_group = logs.LogGroup(self, f"{name}Logs")
        # Validated against CloudWatch's allowed periods in infra.config; set on the L1 because the L2
        # only takes the RetentionDays enum.
        cfn_log_group = log_group.node.default_child
        assert isinstance(cfn_log_group, logs.CfnLogGroup)
        cfn_log_group.retention_in_days = config.log_retention_days
        log_group.grant_write(role)

        function = lambda_.Function(
            self,
            name,
            description=f"serverless-karpenter {config.cluster_name}: {spec.description}",
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=HANDLER,
            code=lambda_.Code.from_asset(
                str(FUNCTIONS_DIR / spec.name), exclude=BYTECODE_EXCLUDES, ignore_mode=IgnoreMode.GIT
            ),
            layers=self.layers.all,
            memory_size=config.memory_overrides_mb.get(spec.name, spec.memory_mb),
            timeout=spec.timeout,
            reserved_concurrent_executions=spec.reserved_concurrency,
            environment=dict(environment),
            role=role,
            log_group=log_group,
            # Off unless -c tracing=true (infra.config.ClusterConfig.tracing): no trace, no X-Ray grant.
            tracing=lambda_.Tracing.ACTIVE if config.tracing else lambda_.Tracing.DISABLED,
            # The termination function feeds its own queue with delayed messages on purpose.
            recursive_loop=lambda_.RecursiveLoop.ALLOW
            if spec.name == "termination"
            else lambda_.RecursiveLoop.TERMINATE,
            # VPC mode: every function talks to the cluster, so every one runs in its VPC.
            **(self._network.function_props() if self._network else {}),
        )
        if self._network is not None:
            self._network.attach(role, function)
        self.functions[spec.name] = function
        self.roles[spec.name] = role
        self.log_groups[spec.name] = log_group

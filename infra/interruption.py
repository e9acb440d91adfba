"""The interruption queue: EC2 and AWS Health events routed by EventBridge into an encrypted SQS queue.

Karpenter's own template is the reference for the queue (SSE-SQS; its 300 s retention is lengthened
here so that a message can be received 5 times, see ``serverless_karpenter.deployment``) and for the event
patterns, which are kept exactly as Karpenter has them so that
one queue serves the same events; the handler filters by instance.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration, Stack
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from constructs import Construct
from serverless_karpenter.deployment import (
    INTERRUPTION_RETENTION_SECONDS,
    MIN_RECEIVES_BEFORE_DEAD_LETTER,
    reaches_dead_letter_before_expiry,
)

RETENTION = Duration.seconds(INTERRUPTION_RETENTION_SECONDS)
DEAD_LETTER_RETENTION = Duration.days(14)


@dataclass(frozen=True)
class InterruptionRuleSpec:
    construct_id: str
    description: str
    pattern: dict[str, object]


# The five rules, with their patterns as CloudFormation receives them.
INTERRUPTION_RULES: tuple[InterruptionRuleSpec, ...] = (
    InterruptionRuleSpec(
        "SpotInterruptionRule",
        "EC2 spot interruption warnings",
        {"source": ["aws.ec2"], "detail-type": ["EC2 Spot Instance Interruption Warning"]},
    ),
    InterruptionRuleSpec(
        "RebalanceRule",
        "EC2 instance rebalance recommendations",
        {"source": ["aws.ec2"], "detail-type": ["EC2 Instance Rebalance Recommendation"]},
    ),
    InterruptionRuleSpec(
        "InstanceStateChangeRule",
        "EC2 instance state changes",
        {"source": ["aws.ec2"], "detail-type": ["EC2 Instance State-change Notification"]},
    ),
    InterruptionRuleSpec(
        "ScheduledChangeRule",
        "AWS Health scheduled changes for EC2",
        {
            "source": ["aws.health"],
            "detail-type": ["AWS Health Event"],
            "detail": {"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]},
        },
    ),
    InterruptionRuleSpec(
        "CapacityReservationInterruptionRule",
        "EC2 capacity reservation interruption warnings",
        {"source": ["aws.ec2"], "detail-type": ["EC2 Capacity Reservation Instance Interruption Warning"]},
    ),
)


class InterruptionQueue(Construct):
    """The queue, its dead-letter queue, its resource policy and the five EventBridge rules."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        visibility_timeout: Duration,
        max_receive_count: int,
    ) -> None:
        super().__init__(scope, construct_id)
        # A live message must survive a few failed or throttled receives before it is given up on.
        if max_receive_count < MIN_RECEIVES_BEFORE_DEAD_LETTER:
            raise ValueError(
                f"interruption messages would reach the DLQ after {max_receive_count} receives; "
                f"use at least {MIN_RECEIVES_BEFORE_DEAD_LETTER}"
            )
        # A message must reach the DLQ before it expires, or the DLQ alarm can never fire.
        visibility = int(visibility_timeout.to_seconds())
        retention = int(RETENTION.to_seconds())
        if not reaches_dead_letter_before_expiry(visibility, max_receive_count, retention):
            raise ValueError(
                f"interruption messages expire after {retention} s, before {max_receive_count} receives "
                f"of {visibility} s visibility each and one more to spare; lengthen the retention or "
                "shorten the interruption function's timeout"
            )

        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetterQueue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=DEAD_LETTER_RETENTION,
        )
        self.queue = sqs.Queue(
            self,
            "Queue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,  # the DenyInsecureTransport statement
            retention_period=RETENTION,
            visibility_timeout=visibility_timeout,
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.dead_letter_queue, max_receive_count=max_receive_count
            ),
        )

        self.rules: list[events.CfnRule] = []
        for spec in INTERRUPTION_RULES:
            # L1 rules: the L2 SqsQueue target adds one queue-policy statement per rule; we write a single
            # statement for all five below.
            rule = events.CfnRule(
                self,
                spec.construct_id,
                description=f"serverless-karpenter {cluster_name}: {spec.description}",
                event_pattern=spec.pattern,
                state="ENABLED",
                targets=[events.CfnRule.TargetProperty(id="InterruptionQueue", arn=self.queue.queue_arn)],
            )
            self.rules.append(rule)

        # Only EventBridge (from these rules) and the SQS service (as in Karpenter's template, limited to
        # this account) may send; enforce_ssl above adds the deny for non-TLS requests.
        self.queue.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowInterruptionEventRules",
                principals=[iam.ServicePrincipal("events.amazonaws.com")],
                actions=["sqs:SendMessage"],
                resources=[self.queue.queue_arn],
                conditions={"ArnEquals": {"aws:SourceArn": [rule.attr_arn for rule in self.rules]}},
            )
        )
        self.queue.add_to_resource_policy(
            iam.PolicyStatement(
                sid="AllowSqsServiceInAccount",
                principals=[iam.ServicePrincipal("sqs.amazonaws.com")],
                actions=["sqs:SendMessage"],
                resources=[self.queue.queue_arn],
                conditions={"StringEquals": {"aws:SourceAccount": Stack.of(self).account}},
            )
        )

"""`doctor`'s pure checks where the facts matter more than AWS: which of access entries and aws-auth the
cluster's authentication mode reads, how the interruption function reads its queue, and what is left
unchecked (never passed) when the stack or the cluster is missing."""

from __future__ import annotations

import pytest
from serverless_karpenter.doctor.checks import (
    AccessFacts,
    CheckId,
    EventSourceFacts,
    Facts,
    QueueConsumerFacts,
    QueueFacts,
    StackFacts,
    Status,
    check_interruption_queue,
    check_node_role,
    check_stack,
    run_checks,
)

from tests.integration.doctor_setup import CLUSTER, empty_facts

NODE_ROLE = "arn:aws:iam::123456789012:role/KarpenterNodeRole-doctor"
QUEUE_URL = "https://sqs.us-east-1.amazonaws.com/123456789012/doctor-interruption"
QUEUE_ARN = "arn:aws:sqs:us-east-1:123456789012:doctor-interruption"
FUNCTION = "ServerlessKarpenter-doctor-interruption"
CREATE_ENTRY = (
    f"aws eks create-access-entry --cluster-name {CLUSTER} --principal-arn {NODE_ROLE} --type EC2_LINUX"
)


def node_access(
    mode: str | None, entries: dict[str, str] | None, aws_auth: dict[str, list[str]] | None, reason: str = ""
) -> Facts:
    facts = empty_facts()
    facts.node_role_arn = NODE_ROLE
    facts.access = AccessFacts(
        entries=entries, authentication_mode=mode, aws_auth_roles=aws_auth, unavailable_reason=reason
    )
    return facts


NODES = {NODE_ROLE: ["system:bootstrappers", "system:nodes"]}


@pytest.mark.parametrize(
    ("mode", "entries", "aws_auth", "status", "summary"),
    [
        ("API", {NODE_ROLE: "EC2_LINUX"}, None, Status.OK, "has an EC2_LINUX access entry"),
        ("API", {}, NODES, Status.FAIL, "aws-auth is ignored: the cluster's authentication mode is API"),
        ("API_AND_CONFIG_MAP", {}, NODES, Status.OK, "is mapped to system:nodes in aws-auth"),
        ("API_AND_CONFIG_MAP", {NODE_ROLE: "EC2_LINUX"}, None, Status.OK, "EC2_LINUX access entry"),
        ("API_AND_CONFIG_MAP", {}, None, Status.FAIL, "has no access entry: its nodes cannot join"),
        ("CONFIG_MAP", {}, NODES, Status.OK, "is mapped to system:nodes in aws-auth"),
        # A CONFIG_MAP cluster reads no access entry, whatever one says.
        ("CONFIG_MAP", {NODE_ROLE: "EC2_LINUX"}, None, Status.FAIL, "authentication mode is CONFIG_MAP"),
        (None, {}, NODES, Status.OK, "is mapped to system:nodes in aws-auth"),  # an endpoint without modes
        ("API", {NODE_ROLE: "STANDARD"}, None, Status.FAIL, "has a STANDARD access entry, not EC2_LINUX"),
        # Mapped, but not as a node.
        ("API_AND_CONFIG_MAP", {}, {NODE_ROLE: ["system:masters"]}, Status.FAIL, "has no access entry"),
    ],
)
def test_node_role_by_authentication_mode(
    mode: str | None,
    entries: dict[str, str],
    aws_auth: dict[str, list[str]] | None,
    status: Status,
    summary: str,
) -> None:
    [result] = check_node_role(node_access(mode, entries, aws_auth))
    assert result.status == status and summary in result.summary, result
    assert bool(result.fix) == (status == Status.FAIL)


def test_config_map_fix_maps_the_role_or_moves_to_access_entries() -> None:
    [result] = check_node_role(node_access("CONFIG_MAP", {}, {}))
    assert f"eksctl create iamidentitymapping --cluster {CLUSTER} --arn {NODE_ROLE}" in result.fix
    assert "--group system:nodes" in result.fix
    assert (
        "--access-config authenticationMode=API_AND_CONFIG_MAP" in result.fix and CREATE_ENTRY in result.fix
    )


def test_unreadable_access_entries_are_not_a_pass_nor_a_failure() -> None:
    reason = "ListAccessEntries is not implemented by this endpoint"
    [result] = check_node_role(node_access("API", None, None, reason))
    assert result.status == Status.SKIPPED and reason in result.summary
    # aws-auth settles it when the mode reads aws-auth.
    [result] = check_node_role(node_access("API_AND_CONFIG_MAP", None, NODES, reason))
    assert result.status == Status.OK
    [result] = check_node_role(node_access("API", {}, None))
    assert result.status == Status.FAIL and result.fix == CREATE_ENTRY


def queue_with(consumer: QueueConsumerFacts) -> Facts:
    facts = empty_facts()
    policy = {
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"}, "Action": "sqs:SendMessage"}
        ]
    }
    facts.queue = QueueFacts(
        QUEUE_URL, QUEUE_ARN, {"SqsManagedSseEnabled": "true"}, policy, consumer=consumer
    )
    return facts


def consumer(
    configured: str | None = QUEUE_URL, *sources: EventSourceFacts, exists: bool = True
) -> QueueConsumerFacts:
    return QueueConsumerFacts(FUNCTION, configured, exists, list(sources))


FED = EventSourceFacts("u-1", QUEUE_ARN, "Enabled")


def test_queue_read_by_the_interruption_function_passes() -> None:
    [result] = check_interruption_queue(queue_with(consumer(QUEUE_URL, FED)))
    assert result.status == Status.OK


def test_interruption_function_configured_with_another_existing_queue() -> None:
    other = QUEUE_URL.replace("doctor-interruption", "old-interruption")
    [result] = check_interruption_queue(queue_with(consumer(other, FED)))
    assert result.status == Status.FAIL
    assert "configured with queue old-interruption (INTERRUPTION_QUEUE_URL), not doctor-interruption" in (
        result.summary
    )
    assert "which does not exist" not in result.summary
    assert f"set {FUNCTION}'s INTERRUPTION_QUEUE_URL to {QUEUE_URL}" in result.fix


def test_interruption_function_without_its_queue_setting() -> None:
    [result] = check_interruption_queue(queue_with(consumer(None, FED)))
    assert result.status == Status.FAIL and "has no INTERRUPTION_QUEUE_URL" in result.summary
    assert f"INTERRUPTION_QUEUE_URL to {QUEUE_URL}" in result.fix


@pytest.mark.parametrize(
    ("sources", "summary", "fix"),
    [
        ((), "no event source mapping feeds doctor-interruption", "aws lambda create-event-source-mapping"),
        (
            (EventSourceFacts("u-2", QUEUE_ARN, "Disabled"),),
            "event source mapping u-2 on doctor-interruption is Disabled",
            "aws lambda update-event-source-mapping --uuid u-2 --enabled",
        ),
    ],
)
def test_interruption_function_not_fed_from_the_queue(
    sources: tuple[EventSourceFacts, ...], summary: str, fix: str
) -> None:
    [result] = check_interruption_queue(queue_with(consumer(QUEUE_URL, *sources)))
    assert result.status == Status.FAIL and summary in result.summary and fix in result.fix


def test_stack_of_a_deleted_cluster() -> None:
    facts = empty_facts()
    facts.stack = StackFacts(
        name=f"ServerlessKarpenter-{CLUSTER}", status="UPDATE_COMPLETE", cluster_exists=False
    )
    [result] = check_stack(facts)
    assert result.status == Status.FAIL
    assert f"its EKS cluster {CLUSTER} does not exist in us-east-1" in result.summary
    assert f"cdk destroy -c clusterName={CLUSTER}" in result.fix


def test_unreachable_cluster_leaves_its_checks_unrun() -> None:
    facts = empty_facts()
    facts.cluster_unavailable = "there is no EKS cluster doctor in us-east-1"
    results = run_checks(facts, lambda *_: {})
    by_check = {r.check: r for r in results}
    assert len(results) == len(CheckId) == len(by_check)
    assert by_check[CheckId.STACK].status == Status.FAIL
    assert {c for c, r in by_check.items() if r.status == Status.SKIPPED} == {
        c for c in CheckId if c != CheckId.STACK
    }
    assert by_check[CheckId.NODE_ROLE].summary == f"not checked: {facts.cluster_unavailable}"

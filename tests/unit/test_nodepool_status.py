"""NodePool status as Karpenter's nodepool controllers write it (issue 21): resources and nodes as the
counter sums them, nodeClassObservedGeneration, and the conditions ValidationSucceeded, NodeClassReady and
their root Ready (issue 17's validation conditions are part of it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from serverless_karpenter.api import conditions
from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.lifecycle.nodepool_status import desired_status, unchanged, usage_by_nodepool
from serverless_karpenter.provisioning.nodepool_validation import split_usable
from serverless_karpenter.scheduling import resources

from tests.builders import node
from tests.crd_cases import NODEPOOL, merge

NOW = datetime(2026, 1, 1, tzinfo=UTC)
GI = 1 << 30
CAPACITY = {"cpu": 4000, "memory": 16 * GI, "pods": 58, "ephemeral-storage": 20 * GI}


def pool(status: dict[str, Any] | None = None, generation: int = 1, **changes: Any) -> dict[str, Any]:
    out = merge(NODEPOOL, {"metadata": {"generation": generation}, **changes})
    if status is not None:
        out["status"] = status
    return out


def ready_class(status: str = "True", generation: int = 3, **meta: Any) -> dict[str, Any]:
    condition = {
        "type": "Ready",
        "status": status,
        "reason": "Ready" if status == "True" else "UnhealthyDependents",
    }
    if status == "False":
        condition["message"] = "SubnetsReady=False, ValidationSucceeded=False"
    return {
        "metadata": {"name": "default", "generation": generation, **meta},
        "status": {"conditions": [condition]},
    }


def by_type(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def record(name: str, state: NodeClaimState, pool_name: str = "default", **fields: Any) -> NodeClaimRecord:
    launched = state != NodeClaimState.PENDING
    return NodeClaimRecord(
        name=name,
        nodepool=pool_name,
        nodeclass="default",
        state=state,
        created_at=NOW,
        capacity=dict(CAPACITY) if launched else {},
        provider_id=f"aws:///us-west-2a/i-{name}" if launched else None,
        **fields,
    )


def kube_node(name: str, capacity: dict[str, str], **labels: str) -> dict[str, Any]:
    out = node(name, labels=labels, provider_id=f"aws:///us-west-2a/i-{name}")
    out["status"]["capacity"] = capacity
    return out


def test_an_invalid_nodepool_gets_validation_and_ready_false_once() -> None:
    status = desired_status(pool(), {}, ready_class(), NOW)
    assert "ValidationSucceeded" in by_type(status)
    invalid = pool(spec={"weight": 500})
    written = desired_status(invalid, {}, ready_class(), NOW)
    validation, ready = by_type(written)["ValidationSucceeded"], by_type(written)["Ready"]
    assert (validation["status"], validation["reason"]) == ("False", "NodePoolValidationFailed")
    assert "weight" in validation["message"] and validation["observedGeneration"] == 1
    assert validation["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "UnhealthyDependents",
        "ValidationSucceeded=False",
    )
    # The next pass, with the same problem, has nothing to write.
    again = pool(written, spec={"weight": 500})
    assert unchanged(written, desired_status(again, {}, ready_class(), NOW + timedelta(minutes=1)))
    # A new generation is said again, keeping the time of the transition.
    newer = desired_status(
        pool(written, 2, spec={"weight": 500}), {}, ready_class(), NOW + timedelta(hours=1)
    )
    assert by_type(newer)["ValidationSucceeded"]["observedGeneration"] == 2
    assert by_type(newer)["ValidationSucceeded"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    # Fixed: both True, Ready from the time it was fixed.
    fixed = by_type(desired_status(pool(written), {}, ready_class(), NOW + timedelta(minutes=5)))
    assert (fixed["ValidationSucceeded"]["status"], fixed["Ready"]["status"]) == ("True", "True")
    assert (fixed["Ready"]["reason"], fixed["Ready"]["message"]) == ("Ready", "")
    assert fixed["Ready"]["lastTransitionTime"] == "2026-01-01T00:05:00Z"


def test_a_long_problem_fits_the_crds_message_limit() -> None:
    invalid = pool(spec={"template": {"metadata": {"labels": {"x" * 40_000: "y"}}}})
    written = by_type(desired_status(invalid, {}, ready_class(), NOW))
    assert written["ValidationSucceeded"]["status"] == "False"
    assert len(written["ValidationSucceeded"]["message"]) <= conditions.MAX_MESSAGE


def test_nodeclass_ready_follows_the_referenced_class_as_karpenters_readiness_controller() -> None:
    def node_class_ready(nodeclass: dict[str, Any] | None) -> tuple[str, str, str]:
        c = by_type(desired_status(pool(), {}, nodeclass, NOW))["NodeClassReady"]
        return c["status"], c["reason"], c["message"]

    assert node_class_ready(ready_class()) == ("True", "NodeClassReady", "")
    assert node_class_ready(None) == ("False", "NodeClassNotFound", "NodeClass not found on cluster")
    terminating = ready_class(deletionTimestamp="2026-01-01T00:00:00Z")
    assert node_class_ready(terminating) == ("False", "NodeClassTerminating", "NodeClass is Terminating")
    assert node_class_ready({"metadata": {"name": "default"}}) == (
        "False",
        "NodeClassReadinessUnknown",
        "Node Class Readiness Unknown",
    )
    assert node_class_ready(ready_class("False")) == (
        "False",
        "UnhealthyDependents",
        "SubnetsReady=False, ValidationSucceeded=False",
    )
    ready = by_type(desired_status(pool(), {}, None, NOW))["Ready"]
    assert (ready["status"], ready["message"]) == ("False", "NodeClassReady=False")


def test_status_carries_resources_nodes_and_the_class_generation_and_keeps_other_conditions() -> None:
    registration = {
        "type": "NodeRegistrationHealthy",
        "status": "True",
        "reason": "NodeRegistrationHealthy",
        "message": "",
        "lastTransitionTime": "2025-12-01T00:00:00Z",
        "observedGeneration": 1,
    }
    usage = {"cpu": 8000, "memory": 32 * GI, "pods": 116, "ephemeral-storage": 40 * GI, "nodes": 2}
    status = desired_status(pool({"conditions": [registration]}), usage, ready_class(generation=7), NOW)
    assert status["resources"] == {
        "cpu": "8",
        "memory": "32Gi",
        "pods": "116",
        "ephemeral-storage": "40Gi",
        "nodes": "2",
    }
    assert status["nodes"] == 2 and status["nodeClassObservedGeneration"] == 7
    assert by_type(status)["NodeRegistrationHealthy"] == registration
    assert [c["type"] for c in status["conditions"]] == sorted(c["type"] for c in status["conditions"])
    empty = desired_status(pool(), {}, ready_class(), NOW)
    assert empty["resources"] == {
        "cpu": "0",
        "memory": "0",
        "pods": "0",
        "ephemeral-storage": "0",
        "nodes": "0",
    }
    assert empty["nodes"] == 0


def test_usage_counts_launched_claims_until_marked_for_deletion_and_foreign_pool_nodes() -> None:
    capacity = {"cpu": "4", "memory": "16Gi", "pods": "58", "ephemeral-storage": "20Gi"}
    records = [
        record("pending", NodeClaimState.PENDING),
        record("launched", NodeClaimState.LAUNCHED),  # no Node yet: the claim's capacity
        record("registered", NodeClaimState.REGISTERED),  # its Node reports no ephemeral storage yet
        record("initialized", NodeClaimState.INITIALIZED),  # its Node's capacity, whatever the claim said
        record("draining", NodeClaimState.DRAINING),
        record("deleted-node", NodeClaimState.INITIALIZED),
        record("other", NodeClaimState.INITIALIZED, pool_name="other"),
    ]
    deleting = kube_node("deleted-node", capacity)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    nodes = {
        n["spec"]["providerID"]: n
        for n in [
            kube_node("registered", {**capacity, "ephemeral-storage": "0"}),
            kube_node("initialized", {**capacity, "memory": "15Gi"}),
            kube_node("draining", capacity),
            deleting,
            kube_node("other", capacity),
            # Labelled with the pool, known to no claim: counted, as Karpenter's cluster state does.
            kube_node("foreign", {**capacity, "cpu": "2"}, **{wk.NODEPOOL: "default"}),
            # The Node of a claim closed this pass: known, so not foreign.
            kube_node("closed", capacity, **{wk.NODEPOOL: "default"}),
            kube_node("unlabelled", capacity),
        ]
    }
    usage = usage_by_nodepool(records, nodes, {"aws:///us-west-2a/i-closed"})
    assert usage["default"] == {
        "cpu": 4000 + 4000 + 4000 + 2000,
        "memory": 16 * GI + 16 * GI + 15 * GI + 16 * GI,
        "pods": 4 * 58,
        "ephemeral-storage": 4 * 20 * GI,
        resources.NODES: 4,
    }
    assert usage["other"][resources.NODES] == 1


def test_split_usable_keeps_the_valid_and_names_the_problem_of_the_others() -> None:
    bad = merge(NODEPOOL, {"metadata": {"name": "bad"}, "spec": {"weight": 500}})
    usable, invalid = split_usable([NODEPOOL, bad])
    assert usable == [NODEPOOL]
    assert [i.name for i in invalid] == ["bad"] and "weight" in invalid[0].problem

"""The NodeClaim object a record renders to (lifecycle.nodeclaim_objects): Karpenter's fields, an object
Karpenter's CRD schema accepts, and conditions whose lastTransitionTime moves only with their status."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.model import InstanceTypeOption, NodeClaimRecord, NodeClaimState
from serverless_karpenter.lifecycle.nodeclaim_objects import merged_conditions, render

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CRD = Path(__file__).resolve().parents[2] / "deploy" / "crds" / "karpenter.sh_nodeclaims.yaml"
GIB = 1 << 30


def launched(**fields: Any) -> NodeClaimRecord:
    values: dict[str, Any] = {
        "name": "default-abcde",
        "nodepool": "default",
        "nodeclass": "default",
        "state": NodeClaimState.LAUNCHED,
        "requirements": [
            {"key": wk.NODEPOOL, "operator": "In", "values": ["default"]},
            {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand", "spot"]},
            {"key": wk.HOSTNAME, "operator": "In", "values": ["pinned"]},
            {"key": wk.REGISTERED, "operator": "In", "values": ["true"]},
            {"key": wk.INSTANCE_FAMILY, "operator": "In", "values": ["m5"], "minValues": 1},
        ],
        "instance_type_options": [
            InstanceTypeOption(
                name="m5.large",
                arch="amd64",
                offerings=[("us-east-1a", "on-demand", 0.096)],
                allocatable={"cpu": 1930, "memory": 7 * GIB, "pods": 29},
                capacity={"cpu": 2000, "memory": 8 * GIB, "pods": 29},
            )
        ],
        "requests": {"cpu": 1500, "memory": 3 * GIB, "pods": 3},
        "labels": {wk.INSTANCE_TYPE: "m5.large", wk.ZONE: "us-east-1a", wk.CAPACITY_TYPE: "on-demand"},
        "annotations": {wk.NODEPOOL_HASH: "123", "serverless-karpenter.io/replace-first-until": "x"},
        "taints": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}],
        "startup_taints": [{"key": "cni", "effect": "NoExecute"}],
        "expire_after_seconds": 720 * 3600,
        "termination_grace_period_seconds": 3600,
        "instance_id": "i-1",
        "instance_type": "m5.large",
        "zone": "us-east-1a",
        "capacity_type": "on-demand",
        "provider_id": "aws:///us-east-1a/i-1",
        "image_id": "ami-1",
        "created_at": NOW,
        "launched_at": NOW + timedelta(seconds=2),
    }
    values.update(fields)
    return NodeClaimRecord(**values)


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in obj["status"]["conditions"]}


def test_a_launched_claim_renders_as_karpenter_writes_it_and_its_crd_accepts_it() -> None:
    obj = render(launched(), nodepool_uid="pool-uid", type_labels={wk.INSTANCE_CPU: "2", "team": "x"})
    meta, spec, status = obj["metadata"], obj["spec"], obj["status"]
    assert (obj["apiVersion"], obj["kind"], meta["name"]) == ("karpenter.sh/v1", "NodeClaim", "default-abcde")
    assert meta["labels"] == {
        wk.NODEPOOL: "default",
        wk.EC2NODECLASS: "default",
        wk.INSTANCE_TYPE: "m5.large",
        wk.ZONE: "us-east-1a",
        wk.CAPACITY_TYPE: "on-demand",
        wk.ARCH: "amd64",
        wk.INSTANCE_CPU: "2",  # the catalog's well-known labels only
    }
    assert meta["annotations"] == {wk.NODEPOOL_HASH: "123"}  # ours stay in the record
    assert meta["finalizers"] == [wk.TERMINATION_FINALIZER]
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodePool",
            "name": "default",
            "uid": "pool-uid",
            "blockOwnerDeletion": True,
        }
    ]
    assert spec["nodeClassRef"] == {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
    # The hostname and karpenter.sh's own keys but nodepool and capacity-type are refused by the CRD.
    assert [r["key"] for r in spec["requirements"]] == [
        wk.NODEPOOL,
        wk.CAPACITY_TYPE,
        wk.INSTANCE_FAMILY,
        wk.INSTANCE_TYPE,
    ]
    assert spec["requirements"][-1] == {"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["m5.large"]}
    assert spec["resources"] == {"requests": {"cpu": "1500m", "memory": "3Gi", "pods": "3"}}
    assert (spec["expireAfter"], spec["terminationGracePeriod"]) == ("720h0m0s", "1h0m0s")
    assert spec["taints"] == [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}]
    assert spec["startupTaints"] == [{"key": "cni", "effect": "NoExecute"}]
    assert status["providerID"] == "aws:///us-east-1a/i-1" and status["imageID"] == "ami-1"
    assert status["capacity"] == {"cpu": "2", "memory": "8Gi", "pods": "29"}
    assert status["allocatable"] == {"cpu": "1930m", "memory": "7Gi", "pods": "29"}
    schema = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    jsonschema.Draft7Validator(schema).validate(obj)


def test_conditions_follow_the_lifecycle_with_ready_as_their_root() -> None:
    cond = conditions(render(launched()))
    assert (cond["Launched"]["status"], cond["Launched"]["reason"]) == ("True", "Launched")
    assert cond["Launched"]["lastTransitionTime"] == "2026-03-01T12:00:02Z"
    assert (cond["Registered"]["status"], cond["Registered"]["reason"]) == (
        "Unknown",
        "AwaitingReconciliation",
    )
    assert cond["Ready"]["status"] == "Unknown" and cond["Ready"]["reason"] == "UnhealthyDependents"
    assert cond["Ready"]["message"] == "Registered=Unknown, Initialized=Unknown"
    ready = launched(
        state=NodeClaimState.INITIALIZED,
        node_name="ip-10-0-0-1.ec2.internal",
        registered_at=NOW + timedelta(seconds=30),
        initialized_at=NOW + timedelta(seconds=40),
    )
    obj = render(ready, drift="AMIDrift: ami-1 is no longer a resolved AMI (ami-2)", consolidatable_since=NOW)
    cond = conditions(obj)
    assert obj["status"]["nodeName"] == "ip-10-0-0-1.ec2.internal"
    assert {k: c["status"] for k, c in cond.items()} == {
        "Launched": "True",
        "Registered": "True",
        "Initialized": "True",
        "Ready": "True",
        "Drifted": "True",
        "Consolidatable": "True",
    }
    assert cond["Ready"]["lastTransitionTime"] == "2026-03-01T12:00:40Z"
    assert (cond["Drifted"]["reason"], cond["Drifted"]["message"]) == (
        "AMIDrift",
        "ami-1 is no longer a resolved AMI (ami-2)",
    )
    deleting = ready.model_copy(
        update={
            "state": NodeClaimState.TERMINATING,
            "disruption_reason": "NodeClaimDeleted",
            "deletion_requested_at": NOW + timedelta(minutes=5),
        }
    )
    cond = conditions(render(deleting))
    assert (cond["DisruptionReason"]["status"], cond["DisruptionReason"]["reason"]) == (
        "True",
        "NodeClaimDeleted",
    )
    assert cond["InstanceTerminating"]["status"] == "True"
    # A reason the CRD would refuse (spaces) is made CamelCase.
    spaced = deleting.model_copy(update={"disruption_reason": "spot interrupted"})
    assert conditions(render(spaced))["DisruptionReason"]["reason"] == "SpotInterrupted"


def test_last_transition_time_changes_only_with_the_status() -> None:
    earlier = "2026-03-01T11:00:00Z"
    current = [
        {
            "type": "Consolidatable",
            "status": "True",
            "reason": "Consolidatable",
            "lastTransitionTime": earlier,
        },
        {
            "type": "Ready",
            "status": "Unknown",
            "reason": "UnhealthyDependents",
            "lastTransitionTime": earlier,
        },
    ]
    ready = launched(
        state=NodeClaimState.INITIALIZED,
        node_name="n",
        registered_at=NOW,
        initialized_at=NOW + timedelta(seconds=40),
    )
    # Consolidatable since a later time by this pass's reckoning: still True, so its time is kept.
    desired = render(ready, consolidatable_since=NOW)["status"]["conditions"]
    merged = {c["type"]: c for c in merged_conditions(current, desired, NOW + timedelta(minutes=1))}
    assert merged["Consolidatable"]["lastTransitionTime"] == earlier
    # Ready went Unknown -> True: its time is the transition's (the record's initialization).
    assert merged["Ready"]["lastTransitionTime"] == "2026-03-01T12:00:40Z"
    again = merged_conditions(list(merged.values()), desired, NOW + timedelta(minutes=2))
    assert again == list(merged.values())  # converged: nothing to write


def test_a_launched_record_keeps_the_types_it_could_launch_as_by_name_only() -> None:
    # From launch on a record carries the launched type's option alone (the others' offerings were 20 KB
    # of every record at 1,000 nodes); its NodeClaim still says every type it could have launched as.
    trimmed = launched(instance_type_names=["m5.2xlarge", "m5.large", "m5.xlarge"])
    assert [o.name for o in trimmed.instance_type_options] == ["m5.large"]
    assert trimmed.option_names() == ["m5.2xlarge", "m5.large", "m5.xlarge"]
    spec = render(trimmed, nodepool_uid="pool-uid", type_labels={})["spec"]
    assert spec["requirements"][-1] == {
        "key": wk.INSTANCE_TYPE,
        "operator": "In",
        "values": ["m5.2xlarge", "m5.large", "m5.xlarge"],
    }

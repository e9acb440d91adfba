"""Which Warnings a provisioning pass records on NodePools: pure, from the ClusterState and the result."""

from __future__ import annotations

from typing import Any

from serverless_karpenter.adapters.ec2 import ResolvedNodeClass
from serverless_karpenter.provisioning.provisioner import (
    LIMITS_EXCEEDED,
    NODECLASS_NOT_FOUND,
    NODECLASS_NOT_READY,
    ClusterState,
    nodepool_warnings,
)


def pool(name: str, nodeclass: str) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {"template": {"spec": {"nodeClassRef": {"name": nodeclass}}}},
    }


def state(*pools: dict[str, Any]) -> ClusterState:
    resolved = ResolvedNodeClass(
        name="ready", subnets=[], security_group_ids=[], amis={}, ami_family="AL2023", instance_profile=None
    )
    return ClusterState(
        nodepools=pools,
        nodeclass_specs={"ready": {}, "broken": {}},
        resolved={"ready": resolved},
        nodeclass_errors={"broken": 'EC2NodeClass "broken": spec.subnetSelectorTerms: no subnet matches'},
    )


LIMITS = (
    'nodepool "capped" limits: remaining cpu=0; the smallest instance type that fits (c5.large) has cpu=2'
)


def test_one_limits_warning_per_nodepool_however_many_pods() -> None:
    unschedulable = {
        f"default/web-{i}": {"capped": LIMITS, "picky": 'nodepool "picky": no instance type has 64 cpu'}
        for i in range(5)
    }
    warnings = nodepool_warnings(state(pool("capped", "ready"), pool("picky", "ready")), unschedulable)
    assert [(w.nodepool["metadata"]["uid"], w.reason) for w in warnings] == [("uid-capped", LIMITS_EXCEEDED)]
    assert warnings[0].message == (
        "all available instance types exceed limits for nodepool: 5 pod(s) not placed "
        "(remaining cpu=0; the smallest instance type that fits (c5.large) has cpu=2)"
    )


def test_nodepools_whose_ec2nodeclass_is_missing_or_not_ready() -> None:
    warnings = nodepool_warnings(
        state(pool("ok", "ready"), pool("gone", "absent"), pool("bad", "broken")), unschedulable={}
    )
    assert [(w.nodepool["metadata"]["name"], w.reason, w.message) for w in warnings] == [
        ("gone", NODECLASS_NOT_FOUND, 'EC2NodeClass "absent" not found on cluster'),
        (
            "bad",
            NODECLASS_NOT_READY,
            'EC2NodeClass "broken" is not ready: spec.subnetSelectorTerms: no subnet matches',
        ),
    ]


def test_no_warning_when_every_pod_was_placed() -> None:
    assert nodepool_warnings(state(pool("capped", "ready")), unschedulable={}) == []

"""Which Warnings a provisioning pass records on NodePools: pure, from the ClusterState and the result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from serverless_karpenter.adapters.providers.model import ResolvedNodeClass
from serverless_karpenter.api import labels as wk
from serverless_karpenter.catalog import Offering
from serverless_karpenter.provisioning.provisioner import (
    LIMITS_EXCEEDED,
    NO_COMPATIBLE_INSTANCE_TYPES,
    NODECLASS_NOT_FOUND,
    NODECLASS_NOT_READY,
    ClusterState,
    nodepool_warnings,
)


def pool(name: str, nodeclass: str, *requirements: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": nodeclass},
                    "requirements": list(requirements),
                }
            }
        },
    }


@dataclass(frozen=True)
class FakeType:
    name: str
    arch: str = "amd64"
    offerings: list[Offering] = field(
        default_factory=lambda: [Offering("us-east-1a", "on-demand", 0.1, True)]
    )

    @property
    def labels(self) -> dict[str, str]:
        return {wk.INSTANCE_TYPE: self.name, wk.ARCH: self.arch, wk.OS: "linux"}

    @property
    def allocatable(self) -> dict[str, int]:
        return {"cpu": 1900, "memory": 7 << 30, "pods": 29}

    @property
    def capacity(self) -> dict[str, int]:
        return {"cpu": 2000, "memory": 8 << 30, "pods": 29}


TYPES = {"ready": [FakeType("m5.large"), FakeType("m6g.large", arch="arm64")]}


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


def requirement(key: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": "In", "values": list(values)}


def test_a_nodepool_whose_requirements_leave_no_instance_type_gets_one_warning() -> None:
    pools = (
        pool("ok", "ready", requirement(wk.ARCH, "arm64")),
        pool("no-type", "ready", requirement(wk.INSTANCE_TYPE, "p5.48xlarge")),
        pool("no-offering", "ready", requirement(wk.CAPACITY_TYPE, "spot")),  # on-demand offerings only
        pool("no-zone", "ready", requirement(wk.ZONE, "us-east-1b")),
    )
    # Pods kept off by limits too: still one Warning for the NodePool, the more fundamental one.
    unschedulable = {"default/web": {"no-type": LIMITS.replace("capped", "no-type")}}
    warnings = nodepool_warnings(state(*pools), unschedulable, TYPES)
    assert [(w.nodepool["metadata"]["name"], w.reason) for w in warnings] == [
        ("no-type", NO_COMPATIBLE_INSTANCE_TYPES),
        ("no-offering", NO_COMPATIBLE_INSTANCE_TYPES),
        ("no-zone", NO_COMPATIBLE_INSTANCE_TYPES),
    ]
    assert {w.message for w in warnings} == {
        "NodePool requirements filtered out all compatible available instance types"
    }


def test_instance_types_are_checked_only_for_the_classes_given() -> None:
    picky = pool("picky", "ready", requirement(wk.INSTANCE_TYPE, "p5.48xlarge"))
    assert nodepool_warnings(state(picky), unschedulable={}) == []
    assert nodepool_warnings(state(picky), unschedulable={}, instance_types={}) == []
    # A class with no usable instance type at all (no AMI for any architecture, say) fits nothing.
    warnings = nodepool_warnings(state(pool("any", "ready")), {}, {"ready": []})
    assert [w.reason for w in warnings] == [NO_COMPATIBLE_INSTANCE_TYPES]

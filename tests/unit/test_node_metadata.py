"""The labels and annotations a registering Node gets from its NodeClaim, as Karpenter sets them
(issue 21), whatever the kubelet registered it with."""

from __future__ import annotations

from datetime import UTC, datetime

from serverless_karpenter.adapters.providers.model import ResolvedNodeClass, Subnet
from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.lifecycle.node_metadata import initialized_patch
from serverless_karpenter.lifecycle.phases.registration import registration_patch

from tests.builders import node

TYPE_LABELS = {
    wk.INSTANCE_TYPE: "m5.large",
    wk.ARCH: "amd64",
    wk.OS: "linux",
    wk.REGION: "us-east-1",
    wk.INSTANCE_FAMILY: "m5",
    wk.INSTANCE_CPU: "2",
    wk.INSTANCE_MEMORY: "8192",
}


def launched() -> NodeClaimRecord:
    return NodeClaimRecord(
        name="default-abcde",
        nodepool="default",
        nodeclass="general",
        state=NodeClaimState.LAUNCHED,
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        labels={"team": "ml", wk.CAPACITY_TYPE: "spot"},
        annotations={
            wk.NODEPOOL_HASH: "1",
            wk.NODEPOOL_HASH_VERSION: "sk-v1",
            wk.EC2NODECLASS_HASH: "2",
            wk.EC2NODECLASS_HASH_VERSION: "sk-v1",
            "example.com/owner": "ml",
            "serverless-karpenter.io/pod-set": "abc",
        },
        instance_type="m5.large",
        zone="us-east-1a",
        capacity_type="spot",
    )


def nodeclass() -> ResolvedNodeClass:
    return ResolvedNodeClass(
        name="general",
        subnets=[
            Subnet("subnet-1", "us-east-1a", "use1-az1", 100),
            Subnet("subnet-2", "us-east-1b", "use1-az2", 100),
        ],
        security_group_ids=["sg-1"],
        amis={"amd64": "ami-1"},
        ami_family="AL2023",
        instance_profile="cluster_123",
    )


def test_registration_labels_and_annotates_the_node_as_karpenter() -> None:
    bare = node("ip-10-0-0-1", labels={"kubernetes.io/os": "linux"})
    bare["metadata"]["resourceVersion"] = "7"
    meta = registration_patch(launched(), bare, TYPE_LABELS, nodeclass())["metadata"]
    assert meta["labels"] == {
        **TYPE_LABELS,
        "team": "ml",
        wk.NODEPOOL: "default",
        wk.EC2NODECLASS: "general",
        wk.ZONE: "us-east-1a",
        wk.ZONE_ID: "use1-az1",
        wk.CAPACITY_TYPE: "spot",
        wk.REGISTERED: "true",
    }
    assert meta["annotations"] == {
        wk.NODEPOOL_HASH: "1",
        wk.NODEPOOL_HASH_VERSION: "sk-v1",
        wk.EC2NODECLASS_HASH: "2",
        wk.EC2NODECLASS_HASH_VERSION: "sk-v1",
        "example.com/owner": "ml",
        "karpenter.k8s.aws/instance-profile-name": "cluster_123",
    }
    assert meta["resourceVersion"] == "7" and meta["finalizers"] == [wk.TERMINATION_FINALIZER]


def test_an_initialized_node_is_labelled_once() -> None:
    bare = node("ip-10-0-0-1")
    assert initialized_patch(bare) == {"metadata": {"labels": {wk.INITIALIZED: "true"}}}
    labelled = node("ip-10-0-0-1", labels={wk.INITIALIZED: "true"})
    assert initialized_patch(labelled) is None

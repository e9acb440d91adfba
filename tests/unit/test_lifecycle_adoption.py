"""The record a NodeClaim object with no record becomes (lifecycle/adoption_records.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from serverless_karpenter.adapters.providers.model import Instance
from serverless_karpenter.api import labels as wk
from serverless_karpenter.api.nodeclaim import NodeClaim
from serverless_karpenter.api.nodepool import NODEPOOL_HASH_VERSION, NodePool
from serverless_karpenter.lifecycle.adoption_records import (
    adopted_hash,
    adopted_record,
    instance_id_of,
    launch_options,
    option_for,
    state_of,
    user_record,
)
from serverless_karpenter.lifecycle.model import NodeClaimState

from tests.builders import nodepool

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
CREATED = "2026-01-01T00:00:00Z"
PROVIDER_ID = "aws:///us-west-2b/i-0abc"


def claim(
    conditions: tuple[str, ...] = ("Launched", "Registered", "Initialized"), **status: Any
) -> NodeClaim:
    labels = {
        wk.NODEPOOL: "default",
        wk.INSTANCE_TYPE: "m5.large",
        wk.ZONE: "us-west-2b",
        wk.CAPACITY_TYPE: "spot",
    }
    return NodeClaim.from_manifest(
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "name": "default-abcde",
                "labels": labels,
                "annotations": {wk.NODEPOOL_HASH: "111", wk.NODEPOOL_HASH_VERSION: "v3", "keep": "me"},
                "creationTimestamp": CREATED,
            },
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]}
                ],
                "resources": {"requests": {"cpu": "1500m", "memory": "1Gi"}},
                "expireAfter": "24h",
                "terminationGracePeriod": "1h",
                "taints": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}],
            },
            "status": {
                "providerID": PROVIDER_ID,
                "nodeName": "ip-10-0-0-1.ec2.internal",
                "imageID": "ami-0karpenter",
                "capacity": {"cpu": "2", "memory": "8Gi", "pods": "29"},
                "allocatable": {"cpu": "1930m", "memory": "7Gi", "pods": "29"},
                "conditions": [
                    {"type": c, "status": "True", "reason": c, "lastTransitionTime": "2026-01-01T00:01:00Z"}
                    for c in conditions
                ],
                **status,
            },
        }
    )


def instance(**tags: str) -> Instance:
    return Instance(
        id="i-0abc",
        instance_type="m5.large",
        zone="us-west-2b",
        state="running",
        capacity_type="spot",
        launch_time=datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC),
        tags=dict(tags),
        private_dns_name="ip-10-0-0-1.ec2.internal",
        image_id="ami-0karpenter",
    )


@dataclass(frozen=True)
class Offer:
    zone: str
    capacity_type: str
    price: float
    available: bool = True
    reservation_id: str | None = None


@dataclass
class Type:
    name: str
    allocatable: dict[str, int]
    offerings: list[Offer]
    capacity: dict[str, int] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)


def catalog() -> list[Type]:
    return [
        Type(
            "m5.large",
            {"cpu": 1930, "memory": 7 << 30, "pods": 29},
            [Offer("us-west-2b", "spot", 0.04), Offer("us-west-2b", "on-demand", 0.096)],
            labels={wk.INSTANCE_TYPE: "m5.large", wk.ARCH: "amd64"},
        ),
        Type(
            "m5.xlarge",
            {"cpu": 3920, "memory": 14 << 30, "pods": 58},
            [Offer("us-west-2a", "on-demand", 0.192), Offer("us-west-2b", "spot", 0.08, available=False)],
            labels={wk.INSTANCE_TYPE: "m5.xlarge", wk.ARCH: "amd64"},
        ),
        Type(
            "t3.micro",
            {"cpu": 1930, "memory": 500 << 20, "pods": 4},
            [Offer("us-west-2a", "on-demand", 0.01)],
            labels={wk.INSTANCE_TYPE: "t3.micro", wk.ARCH: "amd64"},
        ),
    ]


def test_instance_id_from_provider_id() -> None:
    assert instance_id_of(PROVIDER_ID) == "i-0abc"
    assert instance_id_of(None) is None
    assert instance_id_of("kind://docker/kind/node") is None


def test_state_follows_karpenters_conditions() -> None:
    assert state_of(claim()) == NodeClaimState.INITIALIZED
    assert state_of(claim(("Launched", "Registered"))) == NodeClaimState.REGISTERED
    assert state_of(claim(("Launched",))) == NodeClaimState.LAUNCHED
    assert state_of(claim(())) == NodeClaimState.LAUNCHED  # a providerID is a launch


def test_adopted_hash_is_ours_unless_karpenter_saw_the_claim_drifted() -> None:
    key, version = wk.NODEPOOL_HASH, wk.NODEPOOL_HASH_VERSION
    same = {key: "1", version: "v3"}
    assert adopted_hash(same, same, key, version, "ours") == "ours"
    # Karpenter drifted it: the claim keeps its own hash, which never equals ours.
    assert adopted_hash(same, {key: "2", version: "v3"}, key, version, "ours") == "1"
    # A hash version change re-stamps rather than drifts, in Karpenter as here.
    assert adopted_hash(same, {key: "2", version: "v4"}, key, version, "ours") == "ours"
    assert adopted_hash({}, same, key, version, "ours") == "ours"
    assert adopted_hash(same, {}, key, version, "ours") == "ours"


def test_a_karpenter_claim_becomes_a_record_with_its_instance_spec_and_times() -> None:
    pool = NodePool.from_manifest(nodepool())
    annotations = {wk.NODEPOOL_HASH: "111", wk.NODEPOOL_HASH_VERSION: "v3"}
    option = option_for(catalog(), instance())
    record = adopted_record(
        claim(),
        instance(),
        node_name=None,
        option=option,
        nodepool=pool,
        nodepool_annotations=annotations,
        nodeclass=None,
        nodeclass_annotations={},
        now=NOW,
    )
    assert record.name == "default-abcde"
    assert (record.nodepool, record.nodeclass) == ("default", "default")
    assert record.state == NodeClaimState.INITIALIZED
    assert (record.instance_id, record.provider_id, record.image_id) == (
        "i-0abc",
        PROVIDER_ID,
        "ami-0karpenter",
    )
    assert (record.instance_type, record.zone, record.capacity_type) == ("m5.large", "us-west-2b", "spot")
    assert record.price_per_hour == 0.04  # the spot offering it runs on
    assert record.node_name == "ip-10-0-0-1.ec2.internal"
    assert record.requests == {"cpu": 1500, "memory": 1 << 30}
    assert record.allocatable["cpu"] == 1930 and record.capacity["pods"] == 29
    assert record.requirements == [
        {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["spot", "on-demand"]}
    ]
    assert record.taints == [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}]
    assert (record.expire_after_seconds, record.termination_grace_period_seconds) == (86400, 3600)
    assert record.created_at == datetime(2026, 1, 1, tzinfo=UTC)
    assert (
        record.launched_at
        == record.registered_at
        == record.initialized_at
        == datetime(2026, 1, 1, 0, 1, tzinfo=UTC)
    )
    assert record.annotations[wk.NODEPOOL_HASH] == pool.template_hash()
    assert record.annotations[wk.NODEPOOL_HASH_VERSION] == NODEPOOL_HASH_VERSION  # ours from now on
    assert record.annotations["keep"] == "me"
    assert record.instance_type_options == [option]


def test_a_claim_without_labels_takes_its_instances_facts() -> None:
    bare = claim()
    bare.metadata.labels = {wk.NODEPOOL: "default"}
    record = adopted_record(
        bare,
        instance(),
        node_name="from-the-node",
        option=None,
        nodepool=None,
        nodepool_annotations={},
        nodeclass=None,
        nodeclass_annotations={},
        now=NOW,
    )
    assert (record.instance_type, record.zone, record.capacity_type) == ("m5.large", "us-west-2b", "spot")
    assert record.labels[wk.INSTANCE_TYPE] == "m5.large"
    assert record.price_per_hour is None  # unknown type: consolidation prices it as dearest
    assert record.node_name == "ip-10-0-0-1.ec2.internal"  # status.nodeName first


def test_a_users_claim_is_offered_the_types_that_meet_it_cheapest_first() -> None:
    users = claim(())
    users.status.provider_id = None
    options = launch_options(users, catalog())
    # t3.micro lacks the memory; m5.xlarge's spot offering is unavailable but on-demand is allowed.
    assert [o.name for o in options] == ["m5.large", "m5.xlarge"]
    assert options[0].offerings == [("us-west-2b", "spot", 0.04), ("us-west-2b", "on-demand", 0.096)]
    assert options[1].offerings == [("us-west-2a", "on-demand", 0.192)]
    record = user_record(users, options, NodePool.from_manifest(nodepool()), None, NOW)
    assert record.state == NodeClaimState.PENDING
    assert record.created_at == NOW
    assert record.labels[wk.NODEPOOL] == "default"
    assert record.expire_after_seconds == 86400
    assert wk.NODEPOOL_HASH in record.annotations

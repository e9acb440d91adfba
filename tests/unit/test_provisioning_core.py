"""The pure parts of provisioning: pod requests, batching, and the scheduling simulation."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from serverless_karpenter.api import labels as wk
from serverless_karpenter.catalog import Offering
from serverless_karpenter.provisioning.batcher import PendingPodBatcher
from serverless_karpenter.provisioning.provisioner import explain
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.requirements import Requirements
from serverless_karpenter.scheduling.scheduler import (
    ExistingCapacity,
    NodePoolTemplate,
    Scheduler,
    choose_offering,
    nodepool_requirements,
)
from serverless_karpenter.scheduling.taints import Taint

from tests import builders

GI = 1 << 30


def pod(name: str, cpu: str = "1", memory: str = "1Gi", **fields: Any) -> dict[str, Any]:
    """A pending pod the scheduler marked unschedulable, as the watcher finds it."""
    return builders.pod(name, cpu, memory, unschedulable=True, **fields)


@dataclass(frozen=True)
class FakeType:
    name: str
    cpu: int
    memory_gi: int
    price: float
    arch: str = "amd64"
    zones: tuple[str, ...] = ("zone-a", "zone-b")
    spot: bool = True
    extra_labels: dict[str, str] = field(default_factory=dict)

    @property
    def capacity(self) -> dict[str, int]:
        return {"cpu": self.cpu * 1000, "memory": self.memory_gi * GI, "pods": 110}

    @property
    def allocatable(self) -> dict[str, int]:
        return {"cpu": self.cpu * 1000 - 100, "memory": self.memory_gi * GI - GI // 2, "pods": 110}

    @property
    def labels(self) -> dict[str, str]:
        family = self.name.split(".")[0]
        return {
            wk.INSTANCE_TYPE: self.name,
            wk.ARCH: self.arch,
            wk.OS: "linux",
            wk.INSTANCE_FAMILY: family,
            **self.extra_labels,
        }

    @property
    def offerings(self) -> list[Offering]:
        out = [Offering(z, "on-demand", self.price, True) for z in self.zones]
        if self.spot:
            out += [Offering(z, "spot", round(self.price * 0.35, 4), True) for z in self.zones]
        return out


TYPES = [
    FakeType("small.large", 2, 4, 0.05),
    FakeType("medium.xlarge", 4, 16, 0.12),
    FakeType("big.4xlarge", 16, 64, 0.50),
    FakeType("arm.xlarge", 4, 8, 0.09, arch="arm64"),
]


def template(
    name: str = "default",
    requirements: list[dict] | None = None,
    weight: int = 0,
    taints: tuple[Taint, ...] = (),
    remaining: dict[str, int] | None = None,
    overhead: dict[str, int] | None = None,
) -> NodePoolTemplate:
    manifest = {
        "metadata": {"name": name},
        "spec": {
            "template": {"spec": {"requirements": requirements or [], "nodeClassRef": {"name": "default"}}}
        },
    }
    reqs, labels, _ = nodepool_requirements(manifest)
    return NodePoolTemplate(name, "default", weight, reqs, labels, taints, TYPES, overhead or {}, remaining)


def test_requests_follow_the_kube_scheduler_with_init_sidecars_and_overhead() -> None:
    p = {
        "spec": {
            "containers": [
                {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                {"resources": {"limits": {"cpu": "250m"}}},
            ],
            "initContainers": [
                {"resources": {"requests": {"cpu": "2", "memory": "100Mi"}}},
                {"restartPolicy": "Always", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}},
            ],
            "overhead": {"cpu": "50m"},
        }
    }
    r = podlib.requests(p)
    # max(750m + 100m sidecar, 2 cpu init) + 50m overhead; memory 1Gi + 64Mi sidecar; one pod slot.
    assert r == {"cpu": 2050, "memory": GI + 64 * (1 << 20), "pods": 1}


def test_provisionable_means_unbound_unschedulable_and_not_a_daemonset_pod() -> None:
    assert podlib.is_provisionable(pod("a"))
    assert not podlib.is_provisionable({**pod("b"), "spec": {"nodeName": "n1"}})
    ds = pod("c")
    ds["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "controller": True, "name": "x"}]
    assert not podlib.is_provisionable(ds)
    fresh = pod("d")
    fresh["status"]["conditions"] = []
    assert not podlib.is_provisionable(fresh)


def test_batcher_waits_for_an_idle_second_and_caps_the_window_at_ten() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    b = PendingPodBatcher(idle_seconds=1, max_seconds=10, retry_seconds=30)
    assert not b.observe(frozenset({"a"}), t0)
    assert not b.observe(frozenset({"a", "b"}), t0 + timedelta(seconds=0.5))
    assert b.observe(frozenset({"a", "b"}), t0 + timedelta(seconds=1.5))
    # The same pods, still pending: not again until the retry interval.
    assert not b.observe(frozenset({"a", "b"}), t0 + timedelta(seconds=5))
    assert b.observe(frozenset({"a", "b"}), t0 + timedelta(seconds=32))
    # A steady trickle of new pods still fires at the ten-second cap.
    b2 = PendingPodBatcher(idle_seconds=1, max_seconds=10)
    fired = [
        b2.observe(frozenset(f"p{i}" for i in range(s + 1)), t0 + timedelta(seconds=s * 0.5))
        for s in range(25)
    ]
    assert fired.index(True) == 20


def test_pods_pack_onto_the_cheapest_type_that_fits_them_all() -> None:
    result = Scheduler([template()]).solve([pod(f"p{i}", cpu="1", memory="1Gi") for i in range(3)])
    assert len(result.new_nodeclaims) == 1
    claim = result.new_nodeclaims[0]
    assert len(claim.pods) == 3
    chosen = choose_offering(claim)
    assert chosen is not None
    # 3 cpu does not fit small.large (1.9 allocatable); arm.xlarge (0.09) is cheapest that fits; spot first.
    assert (chosen.instance_type, chosen.capacity_type) == ("arm.xlarge", "spot")
    assert [it.name for it in claim.instance_types] == ["arm.xlarge", "medium.xlarge", "big.4xlarge"]


def test_node_selector_narrows_the_types_and_sets_the_claim_requirements() -> None:
    result = Scheduler([template()]).solve([pod("p", nodeSelector={wk.ARCH: "amd64"})])
    claim = result.new_nodeclaims[0]
    assert all(it.labels[wk.ARCH] == "amd64" for it in claim.instance_types)
    assert claim.requirements.get(wk.ARCH).has("amd64") and not claim.requirements.get(wk.ARCH).has("arm64")


def test_existing_nodes_and_in_flight_claims_come_before_new_capacity() -> None:
    node = ExistingCapacity("node-1", {wk.ARCH: "amd64"}, (), {"cpu": 1500, "memory": 4 * GI, "pods": 10})
    in_flight = ExistingCapacity(
        "nodeclaim/x",
        {},
        (),
        {"cpu": 3000, "memory": 8 * GI, "pods": 10},
        in_flight=True,
        requirements=Requirements.from_labels({wk.ARCH: "amd64"}),
    )
    result = Scheduler([template()], [node, in_flight]).solve([pod(f"p{i}") for i in range(5)])
    assert len(result.existing["node-1"]) == 1
    assert len(result.existing["nodeclaim/x"]) == 3
    assert sum(len(c.pods) for c in result.new_nodeclaims) == 1


def test_heavier_nodepool_first_and_taints_must_be_tolerated() -> None:
    gpu = template("tainted", weight=50, taints=(Taint("dedicated", "gpu", "NoSchedule"),))
    plain = template("plain", weight=10)
    result = Scheduler([plain, gpu]).solve([pod("p")])
    assert result.new_nodeclaims[0].nodepool == "plain"
    tolerant = pod(
        "q", tolerations=[{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    )
    assert Scheduler([plain, gpu]).solve([tolerant]).new_nodeclaims[0].nodepool == "tainted"


def test_unschedulable_pods_get_a_reason_per_nodepool_that_names_the_constraint() -> None:
    pools = [
        template("arm-only", requirements=[{"key": wk.ARCH, "operator": "In", "values": ["arm64"]}]),
        template("tainted", taints=(Taint("dedicated", "gpu", "NoSchedule"),)),
        template("small", remaining={"cpu": 1000}),
    ]
    huge = pod("huge", cpu="64", nodeSelector={wk.ARCH: "amd64"})
    result = Scheduler(pools).solve([huge])
    assert not result.new_nodeclaims
    reasons = result.unschedulable["default/huge"]
    assert "kubernetes.io/arch" in reasons["arm-only"]
    assert reasons["tainted"] == "did not tolerate taint dedicated=gpu:NoSchedule"
    assert "cpu" in reasons["small"] and "enough" in reasons["small"]
    line = explain(reasons)
    assert 'nodepool "arm-only"' in line and 'nodepool "tainted"' in line


def test_limits_are_never_overshot() -> None:
    # 8 cpu of room: the first claim reserves its largest option, so a second one cannot exceed the limit.
    pool = template(
        "limited",
        remaining={"cpu": 8000},
        requirements=[{"key": wk.INSTANCE_FAMILY, "operator": "In", "values": ["medium"]}],
    )
    result = Scheduler([pool]).solve([pod(f"p{i}", cpu="3") for i in range(4)])
    assert len(result.new_nodeclaims) == 2
    assert "default/p3" in result.unschedulable or sum(len(c.pods) for c in result.new_nodeclaims) <= 2 + 2


def test_daemonset_overhead_counts_against_every_new_node() -> None:
    pool = template(overhead={"cpu": 1500, "memory": GI, "pods": 1})
    result = Scheduler([pool]).solve([pod("p", cpu="1")])
    claim = result.new_nodeclaims[0]
    assert "small.large" not in [it.name for it in claim.instance_types]
    assert claim.requests["cpu"] == 2500


@pytest.mark.parametrize("quantity, expected", [("1.5Gi", 3 * (1 << 29)), ("100m", 1), ("2", 2)])
def test_quantities_parse_with_the_kubernetes_parser(quantity: str, expected: int) -> None:
    assert resources.parse("memory", quantity) == expected

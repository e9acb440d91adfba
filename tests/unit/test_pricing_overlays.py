"""NodeOverlay prices reach placement: the scheduler plans on overlay-adjusted catalogs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from serverless_karpenter.adapters.providers.model import ResolvedNodeClass, Subnet
from serverless_karpenter.api import labels as wk
from serverless_karpenter.catalog.offerings import Offering
from serverless_karpenter.catalog.overlays import Overlays
from serverless_karpenter.clock import ManualClock
from serverless_karpenter.runtime import CatalogInstanceTypes
from serverless_karpenter.scheduling.scheduler import (
    NodePoolTemplate,
    Scheduler,
    choose_offering,
    nodepool_requirements,
)
from serverless_karpenter.solver import improve

NODECLASS = ResolvedNodeClass(
    name="default",
    subnets=[Subnet("subnet-a", "us-east-1a", None, 100)],
    security_group_ids=["sg-1"],
    amis={"amd64": "ami-1"},
    ami_family="AL2023",
    instance_profile="profile",
)


def overlay(
    name: str, requirements: list[dict[str, Any]], weight: int | None = None, **price: str
) -> dict[str, Any]:
    spec: dict[str, Any] = {"requirements": requirements, **price}
    if weight is not None:
        spec["weight"] = weight
    return {
        "apiVersion": "karpenter.sh/v1alpha1",
        "kind": "NodeOverlay",
        "metadata": {"name": name},
        "spec": spec,
    }


M5_MINUS_40 = overlay(
    "savings-plan-m5",
    [{"key": wk.INSTANCE_FAMILY, "operator": "In", "values": ["m5"]}],
    priceAdjustment="-40%",
)


def plan(overlays: list[dict[str, Any]], cpu: str, memory: str) -> str:
    """The instance type the scheduler's claim would launch as, for one pod."""
    provider = CatalogInstanceTypes(
        "us-east-1", ManualClock(datetime(2026, 1, 1, tzinfo=UTC)), overlays=lambda: overlays
    )
    nodepool = {
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [
                        {"key": wk.INSTANCE_FAMILY, "operator": "In", "values": ["c6i", "m5"]},
                        {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
                    ]
                }
            }
        },
    }
    requirements, labels, taints = nodepool_requirements(nodepool)
    template = NodePoolTemplate(
        name="default",
        nodeclass="default",
        weight=0,
        requirements=requirements,
        labels=labels,
        taints=taints,
        instance_types=provider.instance_types(NODECLASS, {}),
    )
    pod = {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
    }
    # The provisioner's own pipeline: first fit, then the cost solver, both on the overlaid prices.
    result, _ = improve(Scheduler([template]).solve([pod]), [template], 1.0, [pod])
    assert not result.unschedulable
    chosen = choose_offering(result.new_nodeclaims[0])
    assert chosen is not None
    return chosen.instance_type


def test_a_40_percent_m5_overlay_turns_a_c6i_plan_into_m5() -> None:
    assert plan([], "1", "2Gi") == "c6i.large"
    assert plan([M5_MINUS_40], "1", "2Gi") == "m5.large"


def test_the_overlay_changes_nothing_where_m5_does_not_fit() -> None:
    # 100 cpus: only c6i.32xlarge (128 vCPU) holds it; m5 tops out at 96.
    assert plan([M5_MINUS_40], "100", "8Gi") == "c6i.32xlarge"


def test_the_heaviest_matching_overlay_wins_and_overlays_do_not_stack() -> None:
    m5 = [{"key": wk.INSTANCE_FAMILY, "operator": "In", "values": ["m5"]}]
    overlays = Overlays.from_manifests(
        [
            overlay("light", m5, weight=1, priceAdjustment="-90%"),
            overlay("heavy", m5, weight=50, price="0.05"),
            overlay(
                "other",
                [{"key": wk.INSTANCE_FAMILY, "operator": "In", "values": ["c6i"]}],
                weight=99,
                price="9",
            ),
        ]
    )
    labels = {wk.INSTANCE_FAMILY: "m5", wk.INSTANCE_TYPE: "m5.large"}
    priced = overlays.offerings(labels, [Offering("us-east-1a", "on-demand", 0.096, True)])
    assert priced[0].price == 0.05


def test_an_overlay_can_select_a_capacity_type() -> None:
    spot_only = Overlays.from_manifests(
        [
            overlay(
                "spot-discount",
                [{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["spot"]}],
                priceAdjustment="+0.01",
            )
        ]
    )
    offerings = [Offering("us-east-1a", "on-demand", 0.1, True), Offering("us-east-1a", "spot", 0.04, True)]
    priced = spot_only.offerings({wk.INSTANCE_TYPE: "m5.large"}, offerings)
    assert [o.price for o in priced] == [0.1, 0.05]


def test_capacity_overlays_add_extended_resources() -> None:
    gpu = overlay("slices", [{"key": wk.INSTANCE_TYPE, "operator": "In", "values": ["m5.large"]}])
    gpu["spec"]["capacity"] = {"example.com/slice": "4"}
    provider = CatalogInstanceTypes(
        "us-east-1", ManualClock(datetime(2026, 1, 1, tzinfo=UTC)), overlays=lambda: [gpu]
    )
    types = {it.name: it for it in provider.instance_types(NODECLASS, {})}
    assert types["m5.large"].allocatable["example.com/slice"] == 4
    assert "example.com/slice" not in types["m5.xlarge"].allocatable

"""The solver's repacking: never dearer than first-fit, every pod placed once, every constraint kept."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest
from serverless_karpenter.api import labels as wk
from serverless_karpenter.catalog import load_bundled_catalog
from serverless_karpenter.runtime import SchedulableInstanceType
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.scheduler import (
    MAX_INSTANCE_TYPES,
    NewNodeClaim,
    NodePoolTemplate,
    Scheduler,
    SchedulingResult,
    cheapest_offering,
    nodepool_requirements,
)
from serverless_karpenter.solver import SolveReport, claim_cost, improve

from tests.builders import pod

ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
FAMILIES = {"c6a", "m6a", "r6a", "c7i", "m7i", "r7i"}


def types() -> list[SchedulableInstanceType]:
    catalog = load_bundled_catalog("us-east-1", ZONES)
    return [
        SchedulableInstanceType(
            it.name, it.allocatable, it.capacity, it.labels, catalog.available_offerings(it)
        )
        for it in catalog
        if it.family in FAMILIES and not it.bare_metal
    ]


def template(
    overhead: resources.ResourceList | None = None, remaining: resources.ResourceList | None = None
) -> NodePoolTemplate:
    requirements, labels, taints = nodepool_requirements(
        {
            "metadata": {"name": "default"},
            "spec": {
                "template": {
                    "spec": {
                        "requirements": [{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}]
                    }
                }
            },
        }
    )
    return NodePoolTemplate(
        name="default",
        nodeclass="default",
        weight=0,
        requirements=requirements,
        labels=labels,
        taints=taints,
        instance_types=types(),
        daemon_overhead=overhead or {},
        remaining=remaining,
    )


def heterogeneous(count: int, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    shapes = [
        ("2", "1Gi"),
        ("3500m", "2Gi"),
        ("250m", "6Gi"),
        ("500m", "12Gi"),
        ("1", "4Gi"),
        ("100m", "128Mi"),
    ]
    return [pod(f"p{i}", *rng.choice(shapes)) for i in range(count)]


def solve(
    pending: list[dict[str, Any]], tpl: NodePoolTemplate | None = None
) -> tuple[SchedulingResult, SchedulingResult, SolveReport]:
    tpl = tpl or template()
    first_fit = Scheduler([tpl]).solve(pending)
    ffd_claims = list(first_fit.new_nodeclaims)
    ffd = SchedulingResult(ffd_claims, first_fit.existing, first_fit.unschedulable)
    improved, report = improve(first_fit, [tpl], 5.0, pending)
    return ffd, improved, report


def assert_valid(improved: SchedulingResult, ffd: SchedulingResult, pending: list[dict[str, Any]]) -> None:
    placed = Counter(k for c in improved.new_nodeclaims for k in c.pods)
    assert placed == Counter(k for c in ffd.new_nodeclaims for k in c.pods)
    assert set(placed.values()) == {1}
    by_key = {podlib.key(p): p for p in pending}
    for claim in improved.new_nodeclaims:
        total = resources.merge(*(podlib.requests(by_key[k]) for k in claim.pods), claim.daemon_overhead)
        assert claim.requests == total
        assert claim.instance_types and len(claim.instance_types) <= MAX_INSTANCE_TYPES
        assert all(resources.fits(total, it.allocatable) for it in claim.instance_types)
        offerings = [cheapest_offering(claim.requirements, it) for it in claim.instance_types]
        prices = [o.price for o in offerings if o is not None]
        assert len(prices) == len(offerings)
        assert prices == sorted(prices)  # cheapest first, as CreateFleet gets them


def test_heterogeneous_pods_cost_at_least_5_percent_less_than_first_fit() -> None:
    pending = heterogeneous(400)
    ffd, improved, report = solve(pending)
    assert_valid(improved, ffd, pending)
    ffd_cost = sum(claim_cost(c) for c in ffd.new_nodeclaims)
    assert report.ffd_cost == pytest.approx(ffd_cost)
    assert report.cost == pytest.approx(sum(claim_cost(c) for c in improved.new_nodeclaims))
    assert report.cost <= 0.95 * ffd_cost
    assert report.lower_bound <= report.cost * (1 + 1e-9)
    assert report.gap == pytest.approx(report.cost / report.lower_bound - 1)


def test_never_dearer_than_first_fit_even_when_first_fit_is_optimal() -> None:
    pending = [pod("only", "1", "1Gi")]
    ffd, improved, report = solve(pending)
    assert_valid(improved, ffd, pending)
    assert report.cost <= report.ffd_cost
    assert report.lower_bound <= report.cost * (1 + 1e-9)


def test_daemonset_overhead_is_room_the_pods_cannot_use() -> None:
    overhead = {resources.CPU: 500, resources.MEMORY: 512 * 1024 * 1024}
    pending = heterogeneous(120, seed=3)
    ffd, improved, _ = solve(pending, template(overhead=overhead))
    assert_valid(improved, ffd, pending)
    assert all(c.daemon_overhead == overhead for c in improved.new_nodeclaims)


def test_hostname_anti_affinity_keeps_matching_pods_apart() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": wk.HOSTNAME}
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    pending = [pod(f"db{i}", "250m", "256Mi", labels={"app": "db"}, affinity=anti) for i in range(12)]
    pending += [pod(f"web{i}", "500m", "1Gi", labels={"app": "web"}) for i in range(30)]
    ffd, improved, _ = solve(pending)
    assert_valid(improved, ffd, pending)
    for claim in improved.new_nodeclaims:
        assert sum(k.startswith("default/db") for k in claim.pods) <= 1
    assert len(improved.new_nodeclaims) >= 12


def test_hostname_spread_puts_at_most_max_skew_matching_pods_on_a_node() -> None:
    spread = {
        "maxSkew": 2,
        "topologyKey": wk.HOSTNAME,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "api"}},
    }
    pending = [
        pod(f"api{i}", "100m", "128Mi", labels={"app": "api"}, topologySpreadConstraints=[spread])
        for i in range(10)
    ]
    pending += [pod(f"batch{i}", "1", "2Gi") for i in range(20)]
    ffd, improved, _ = solve(pending)
    assert_valid(improved, ffd, pending)
    for claim in improved.new_nodeclaims:
        assert sum(k.startswith("default/api") for k in claim.pods) <= 2


def test_claims_with_constraints_the_solver_cannot_keep_stay_as_first_fit_made_them() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": wk.HOSTNAME}
    together = {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    pending = [pod(f"cache{i}", "1", "1Gi", labels={"app": "cache"}, affinity=together) for i in range(3)]
    ffd, improved, report = solve(pending)
    assert improved.new_nodeclaims == ffd.new_nodeclaims
    assert report.pinned_claims == len(ffd.new_nodeclaims)


def test_pods_keep_the_zone_their_claim_had() -> None:
    pending = [pod(f"a{i}", "1", "2Gi", nodeSelector={wk.ZONE: "us-east-1a"}) for i in range(40)]
    pending += [pod(f"b{i}", "250m", "6Gi", nodeSelector={wk.ZONE: "us-east-1b"}) for i in range(40)]
    ffd, improved, _ = solve(pending)
    assert_valid(improved, ffd, pending)
    for claim in improved.new_nodeclaims:
        zones = claim.requirements.get(wk.ZONE)
        expected = "us-east-1a" if claim.pods[0].startswith("default/a") else "us-east-1b"
        assert zones.has(expected) and zones.len() == 1
        assert all(k.startswith(claim.pods[0][:9]) for k in claim.pods)


def test_nodepools_with_limits_are_left_to_first_fit() -> None:
    pending = heterogeneous(50)
    tpl = template(remaining={resources.CPU: 10_000_000})
    ffd, improved, report = solve(pending, tpl)
    assert improved.new_nodeclaims == ffd.new_nodeclaims
    assert report.cost == pytest.approx(report.ffd_cost)


def _zones_of(claim: NewNodeClaim) -> frozenset[str]:
    requirement = claim.requirements.get(wk.ZONE)
    return frozenset(ZONES) if requirement.operator() == "Exists" else frozenset(requirement.values())


def _zonal_spread(app: str) -> list[dict[str, Any]]:
    return [
        {
            "maxSkew": 1,
            "topologyKey": wk.ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": app}},
        }
    ]


def _anti(app: str) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": wk.HOSTNAME}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


def test_pods_free_of_zones_share_nodes_with_pods_pinned_to_any_zone() -> None:
    # Thirty pods that each need a node of their own, and ninety zonally spread ones: the cheapest
    # placement puts three spread pods beside each lone pod, in the spread pods' zone.
    pending = [
        pod(f"solo{i}", "400m", "512Mi", labels={"app": "solo"}, affinity=_anti("solo")) for i in range(30)
    ]
    pending += [
        pod(f"web{i}", "400m", "512Mi", labels={"app": "web"}, topologySpreadConstraints=_zonal_spread("web"))
        for i in range(90)
    ]
    ffd, improved, report = solve(pending)
    assert_valid(improved, ffd, pending)
    first_fit_zones = {k: _zones_of(c) for c in ffd.new_nodeclaims for k in c.pods}
    per_zone: Counter[str] = Counter()
    for claim in improved.new_nodeclaims:
        zones = _zones_of(claim)
        assert sum(k.startswith("default/solo") for k in claim.pods) <= 1
        for k in claim.pods:
            if k.startswith("default/web"):
                assert zones <= first_fit_zones[k]  # the spread the scheduler chose is kept
                per_zone[next(iter(first_fit_zones[k]))] += 1
    assert sorted(per_zone.values()) == [30, 30, 30]
    assert len(improved.new_nodeclaims) == 30  # every spread pod rides on a node the lone pods force
    assert report.cost <= report.ffd_cost
    assert report.lower_bound <= report.cost * (1 + 1e-9)


def test_pods_a_zonal_term_selects_keep_their_zone() -> None:
    # The plain "web" pods carry no constraint, but the spread pods count them per zone: moving them
    # to another zone would change the skew the scheduler checked, so they stay where they were put.
    pending = [pod(f"plain{i}", "400m", "512Mi", labels={"app": "web"}) for i in range(30)]
    pending += [
        pod(
            f"spread{i}",
            "400m",
            "512Mi",
            labels={"app": "web"},
            topologySpreadConstraints=_zonal_spread("web"),
        )
        for i in range(30)
    ]
    pending += [
        pod(f"solo{i}", "400m", "512Mi", labels={"app": "solo"}, affinity=_anti("solo")) for i in range(12)
    ]
    ffd, improved, _ = solve(pending)
    assert_valid(improved, ffd, pending)
    first_fit_zones = {k: _zones_of(c) for c in ffd.new_nodeclaims for k in c.pods}
    for claim in improved.new_nodeclaims:
        for k in claim.pods:
            if not k.startswith("default/solo"):
                assert _zones_of(claim) <= first_fit_zones[k]


def test_room_a_pod_cannot_use_is_not_counted_in_the_bound() -> None:
    # Every pod asks for 500m, so of a c6a.large's 1930m they can use 1500m: the bound counts that.
    tpl = template()
    tpl.instance_types = [it for it in tpl.instance_types if it.name == "c6a.large"]
    (large,) = tpl.instance_types
    price = min(o.price for o in large.offerings if o.capacity_type == wk.CAPACITY_TYPE_ON_DEMAND)
    assert large.allocatable[resources.CPU] == 1930
    pending = [pod(f"p{i}", "500m", "256Mi") for i in range(30)]
    _, improved, report = solve(pending, tpl)
    assert len(improved.new_nodeclaims) == 10
    # 15,000m at 1,500m a node is 10 nodes; at 1,930m it would be under 7.8.
    assert report.lower_bound == pytest.approx(10 * price, rel=1e-3)
    assert report.gap == pytest.approx(0.0, abs=1e-3)


def _cheapest_node_for(tpl: NodePoolTemplate, one: dict[str, Any]) -> float:
    """$/h of the cheapest node of the pool that holds ``one`` pod."""
    requests = podlib.requests(one)
    return min(
        o.price
        for it in tpl.instance_types
        if resources.fits(requests, it.allocatable)
        for o in it.offerings
        if o.capacity_type == wk.CAPACITY_TYPE_ON_DEMAND
    )


def test_anti_affinity_owners_their_selector_does_not_match_share_nodes_and_force_none() -> None:
    # Web pods repel app=db, not each other: they may all share a node, so the bound must not count a
    # node for each (it would then exceed the optimum), and first fit's shared nodes are no breach.
    tpl = template()
    pending = [
        pod(f"web{i}", "250m", "256Mi", labels={"app": "web"}, affinity=_anti("db")) for i in range(12)
    ]
    pending += [pod(f"db{i}", "250m", "256Mi", labels={"app": "db"}) for i in range(4)]
    ffd, improved, report = solve(pending, tpl)
    assert_valid(improved, ffd, pending)
    for claim in improved.new_nodeclaims:
        apps = {k.split("/")[1].rstrip("0123456789") for k in claim.pods}
        assert apps != {"web", "db"}, "a web pod shares a node with a db pod it repels"
    assert max(sum(k.startswith("default/web") for k in c.pods) for c in improved.new_nodeclaims) > 1
    assert report.lower_bound <= report.cost * (1 + 1e-9)
    one_each = 12 * _cheapest_node_for(tpl, pending[0])
    assert report.lower_bound < 0.25 * one_each
    assert report.cost < one_each


def test_self_selecting_anti_affinity_still_forces_a_node_per_owner_in_the_bound() -> None:
    tpl = template()
    owners = [pod(f"db{i}", "250m", "256Mi", labels={"app": "db"}, affinity=_anti("db")) for i in range(12)]
    # Owners that are no members add no node of their own to the bound, and never join a db pod.
    others = [pod(f"web{i}", "250m", "256Mi", labels={"app": "web"}, affinity=_anti("db")) for i in range(12)]
    for pending, forced in ((owners, 12), (owners + others, 12)):
        ffd, improved, report = solve(pending, tpl)
        assert_valid(improved, ffd, pending)
        cheapest = _cheapest_node_for(tpl, owners[0])
        assert report.lower_bound >= forced * cheapest * (1 - 1e-3)
        assert report.lower_bound <= report.cost * (1 + 1e-9)
        for claim in improved.new_nodeclaims:
            dbs = sum(k.startswith("default/db") for k in claim.pods)
            assert dbs <= 1 and (dbs == 0 or len(claim.pods) == 1)

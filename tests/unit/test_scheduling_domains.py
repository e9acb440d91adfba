"""Which domains a topology counts, which types a claim launches, and zonal anti-affinity in one batch.

Karpenter's behaviour (``topology.go``/``topologygroup.go`` in kubernetes-sigs/karpenter, the exotic
instance filter of karpenter-provider-aws), in our own tests: each was a deviation of ours.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from serverless_karpenter import solver
from serverless_karpenter.api import labels as wk
from serverless_karpenter.catalog.offerings import Offering
from serverless_karpenter.runtime import SchedulableInstanceType
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.scheduler import (
    Scheduler,
    choose_offering,
    is_exotic,
    truncate_instance_types,
)
from serverless_karpenter_cli.main import main

from tests.builders import deployment, nodeclass, nodepool
from tests.unit.test_scheduling_constraints import GI, ZONES, node, pod, pool, solve, zone_of
from tests.unit.test_scheduling_topology import APP, pods_per_zone, spread, spread_pods


def fake_type(
    name: str,
    zones: Sequence[str],
    price: float,
    *,
    cpu: int = 4000,
    memory: int = 16 * GI,
    labels: dict[str, str] | None = None,
    gpus: int = 0,
) -> SchedulableInstanceType:
    family, _, size = name.partition(".")
    allocatable = {"cpu": cpu, "memory": memory, "pods": 110}
    if gpus:
        allocatable[resources.NVIDIA_GPU] = gpus
    return SchedulableInstanceType(
        name,
        allocatable,
        dict(allocatable),
        {
            wk.INSTANCE_TYPE: name,
            wk.ARCH: "amd64",
            wk.OS: "linux",
            wk.INSTANCE_FAMILY: family,
            wk.INSTANCE_SIZE: size,
            **(labels or {}),
        },
        [Offering(zone, "on-demand", price, True) for zone in zones],
    )


# -- the domains a spread counts ---------------------------------------------------------------------


def test_preferred_node_affinity_does_not_shrink_the_zones_a_spread_counts() -> None:
    # Karpenter counts a spread's domains and minimum from the pod's strict requirements: the
    # preference for a and b holds for 2 pods each, then c is the minimum and the preference is relaxed.
    preferred = {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {
                    "weight": 10,
                    "preference": {
                        "matchExpressions": [
                            {"key": wk.ZONE, "operator": "In", "values": ["us-east-1a", "us-east-1b"]}
                        ]
                    },
                }
            ]
        }
    }
    pods = [
        pod(f"web-{i}", cpu="1", labels=dict(APP), topologySpreadConstraints=[spread()], affinity=preferred)
        for i in range(6)
    ]
    result = solve(pods)
    assert not result.unschedulable
    assert pods_per_zone(result) == Counter({zone: 2 for zone in ZONES})


def test_node_affinity_policy_honor_ignores_domains_of_nodes_the_pod_cannot_use() -> None:
    # A node in us-east-1d without the pod's team label is not counted by a Honor spread (the default),
    # so its empty zone does not hold the minimum at zero.
    team = {"example.com/team": "blue"}
    stranger = node("other-team", "us-east-1d", labels={"example.com/team": "red"})
    result = solve(spread_pods(4, spread(), node_selector=team), [pool(labels=team)], existing=[stranger])
    assert not result.unschedulable
    assert sorted(pods_per_zone(result).values()) == [1, 1, 2]


def test_node_affinity_policy_ignore_counts_every_node() -> None:
    team = {"example.com/team": "blue"}
    stranger = node("other-team", "us-east-1d", labels={"example.com/team": "red"})
    result = solve(
        spread_pods(4, spread(nodeAffinityPolicy="Ignore"), node_selector=team),
        [pool(labels=team)],
        existing=[stranger],
    )
    # us-east-1d counts (and stays at 0), so a fourth pod would exceed maxSkew 1 anywhere.
    assert sorted(pods_per_zone(result).values()) == [1, 1, 1]
    assert len(result.unschedulable) == 1


def test_spread_zones_come_from_the_types_the_nodepool_allows() -> None:
    # m5 is offered in three zones; only an excluded family (t2) is offered in us-east-1e. The NodePool
    # allows only m5, so us-east-1e is no domain of the spread (kubernetes-sigs/karpenter#3272).
    types = [
        fake_type("m5.xlarge", ZONES, 0.192),
        fake_type("t2.xlarge", (*ZONES, "us-east-1e"), 0.18),
    ]
    np = pool(
        "m5-only",
        [
            {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
            {"key": wk.INSTANCE_FAMILY, "operator": "In", "values": ["m5"]},
        ],
        types=types,
    )
    result = solve(spread_pods(6, spread()), [np])
    assert not result.unschedulable
    assert pods_per_zone(result) == Counter({zone: 2 for zone in ZONES})


def test_a_zone_the_allowed_types_are_offered_in_still_counts() -> None:
    # The other side: when an allowed type is offered in us-east-1e, the spread fills it too.
    types = [fake_type("m5.xlarge", ZONES, 0.192), fake_type("m5.2xlarge", ("us-east-1e",), 0.384)]
    result = solve(spread_pods(8, spread()), [pool(types=types)])
    assert not result.unschedulable
    assert pods_per_zone(result) == Counter({zone: 2 for zone in (*ZONES, "us-east-1e")})


# -- exotic instance types ---------------------------------------------------------------------------


def test_a_cpu_pod_never_launches_on_a_cheaper_gpu_type() -> None:
    types = [
        fake_type("g4dn.xlarge", ZONES, 0.10, gpus=1),
        fake_type("m5.xlarge", ZONES, 0.192),
        fake_type("m5.metal", ZONES, 0.05, cpu=96000, memory=384 * GI),
    ]
    result = truncate_instance_types(solve([pod("web", cpu="1")], [pool(types=types)]))
    claim = result.new_nodeclaims[0]
    assert [it.name for it in claim.instance_types] == ["m5.xlarge"]
    chosen = choose_offering(claim)
    assert chosen is not None and chosen.instance_type == "m5.xlarge"


def test_a_gpu_pod_gets_the_gpu_type() -> None:
    types = [fake_type("g4dn.xlarge", ZONES, 0.526, gpus=1), fake_type("m5.xlarge", ZONES, 0.192)]
    result = truncate_instance_types(
        solve([pod("trainer", extended={resources.NVIDIA_GPU: "1"})], [pool(types=types)])
    )
    assert [it.name for it in result.new_nodeclaims[0].instance_types] == ["g4dn.xlarge"]


def test_a_pod_that_asks_for_a_metal_size_gets_it() -> None:
    types = [
        fake_type("m5.metal", ZONES, 4.6, cpu=96000, memory=384 * GI),
        fake_type("m5.xlarge", ZONES, 0.192),
    ]
    metal = pod("bare", cpu="1", nodeSelector={wk.INSTANCE_SIZE: "metal"})
    result = truncate_instance_types(solve([metal], [pool(types=types)]))
    assert [it.name for it in result.new_nodeclaims[0].instance_types] == ["m5.metal"]


def test_bundled_catalog_cpu_pods_get_no_gpu_or_metal_type() -> None:
    result = truncate_instance_types(solve([pod(f"web-{i}", cpu="3") for i in range(5)]))
    for claim in result.new_nodeclaims:
        for it in claim.instance_types:
            assert not it.capacity.get(resources.NVIDIA_GPU), it.name
            assert "metal" not in it.labels.get(wk.INSTANCE_SIZE, ""), it.name


# -- zonal anti-affinity in one batch ----------------------------------------------------------------


def zonal_anti_affine(count: int) -> list[dict[str, Any]]:
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": APP}, "topologyKey": wk.ZONE}
            ]
        }
    }
    return [pod(f"web-{i}", cpu="1", labels=dict(APP), affinity=anti) for i in range(count)]


def test_self_zonal_anti_affinity_places_three_pods_in_one_batch() -> None:
    # Karpenter needs one batch per zone; our claims commit to a zone, so all three go at once.
    result = solve(zonal_anti_affine(3))
    assert not result.unschedulable
    assert sorted(zone_of(c) for c in result.new_nodeclaims) == sorted(ZONES)


def test_self_zonal_anti_affinity_still_refuses_a_fourth_pod() -> None:
    result = solve(zonal_anti_affine(4))
    assert len(result.new_nodeclaims) == 3
    assert len(result.unschedulable) == 1


def test_zonal_anti_affinity_commits_to_the_cheapest_zone() -> None:
    types = [
        fake_type("m5.xlarge", ("us-east-1a",), 0.30),
        fake_type("m5.2xlarge", ("us-east-1b",), 0.20),
        fake_type("c5.xlarge", ("us-east-1c",), 0.25),
    ]
    result = solve(zonal_anti_affine(1), [pool(types=types)])
    assert zone_of(result.new_nodeclaims[0]) == "us-east-1b"


def test_plan_spreads_500_pods_over_the_zones_the_nodepool_can_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The probe's realistic mix: current-generation c/m/r on-demand, 500 zone-spread pods, the bundled
    # us-east-1 catalog where us-east-1e offers none of those types. Before: 496 unschedulable.
    pools = nodepool()
    pools["spec"].pop("limits", None)
    pools["spec"]["template"]["spec"]["requirements"] = [
        {"key": wk.INSTANCE_CATEGORY, "operator": "In", "values": ["c", "m", "r"]},
        {"key": wk.INSTANCE_GENERATION, "operator": "Gt", "values": ["5"]},
        {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
    ]
    web = deployment("web", 500, cpu="500m", memory="1Gi")
    web["spec"]["template"]["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": wk.ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all([pools, nodeclass(), web]))
    assert main(["plan", "-f", str(tmp_path), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["unschedulable"] == []
    per_zone: Counter[str] = Counter()
    for claim in out["nodeclaims"]:
        per_zone[claim["zone"]] += len(claim["pods"])
    assert "us-east-1e" not in per_zone
    assert max(per_zone.values()) - min(per_zone.values()) <= 1
    assert sum(per_zone.values()) == 500


def test_the_solver_prices_cpu_pods_as_they_launch_never_on_gpu_or_metal() -> None:
    # Cheap GPU and metal types beside dearer generic ones: first fit, the solver's repacking and the
    # launch filter agree, so what the solver reports is what CreateFleet will be given.
    types = [
        fake_type("g4dn.xlarge", ZONES, 0.05, gpus=1),
        fake_type("m5.metal", ZONES, 0.05, cpu=96000, memory=384 * GI),
        fake_type("m5.xlarge", ZONES, 0.192),
        fake_type("m5.2xlarge", ZONES, 0.384, cpu=8000, memory=32 * GI),
        fake_type("c5.large", ZONES, 0.085, cpu=2000, memory=4 * GI),
    ]
    templates = [pool(types=types)]
    pods = [pod(f"web-{i}", cpu="700m", memory="1Gi") for i in range(9)]
    first_fit = Scheduler(templates).solve(pods)
    improved, report = solver.improve(first_fit, templates, 0.5, pods)
    final = truncate_instance_types(improved)
    assert sum(len(c.pods) for c in final.new_nodeclaims) == 9
    total = 0.0
    for claim in final.new_nodeclaims:
        assert all(not is_exotic(it) for it in claim.instance_types), [it.name for it in claim.instance_types]
        chosen = choose_offering(claim)
        assert chosen is not None
        total += chosen.price
    assert round(total, 6) == round(report.cost, 6)

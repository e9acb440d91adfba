"""A property of the cost solver, over 1,000 random small mixes (seeded, deterministic): whatever it
returns the scheduler's own predicates accept wherever they accept first fit's placement, it never costs
more than first fit, and every pod is placed exactly once (or is unschedulable, as in first fit).

The mixes carry host ports, preferences (preferred node affinity, preferred pod anti-affinity on hostname
and zone), topology spreads (DoNotSchedule and ScheduleAnyway, hostname and zone), required hostname
anti-affinity, a tainted second NodePool and DaemonSets, some with node affinity (by zone, architecture
or instance family, so per instance type) and some binding a host port the pods may want too."""

from __future__ import annotations

import os
import random
from collections import Counter
from collections.abc import Sequence
from functools import cache
from typing import Any

import pytest
from serverless_karpenter.adapters.providers.model import ResolvedNodeClass
from serverless_karpenter.api import labels as wk
from serverless_karpenter.catalog import load_bundled_catalog
from serverless_karpenter.provisioning.provisioner import build_templates
from serverless_karpenter.runtime import SchedulableInstanceType
from serverless_karpenter.scheduling.scheduler import NodePoolTemplate, Scheduler, SchedulingResult
from serverless_karpenter.scheduling.validate import Replay
from serverless_karpenter.solver import claim_cost, improve

from tests.builders import container, pod

# The issue asks for 1,000; SOLVER_MIXES=10000 runs a longer search by hand.
MIXES = int(os.environ.get("SOLVER_MIXES", "1000"))
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
CPUS = ("100m", "250m", "500m", "1", "2")
MEMORIES = ("128Mi", "512Mi", "1Gi", "2Gi", "4Gi")
FAMILIES = frozenset({"c6a", "m6a", "r6a", "c7i", "m7i", "r7i", "c6g", "m6g"})


@cache
def catalog_types() -> tuple[SchedulableInstanceType, ...]:
    catalog = load_bundled_catalog("us-east-1", ZONES)
    return tuple(
        SchedulableInstanceType(
            it.name, it.allocatable, it.capacity, it.labels, catalog.available_offerings(it)
        )
        for it in catalog
        if it.family in FAMILIES and not it.bare_metal
    )


class _Provider:
    def __init__(self, types: Sequence[SchedulableInstanceType]) -> None:
        self.types = list(types)

    def instance_types(self, nodeclass: Any, spec: Any) -> list[SchedulableInstanceType]:
        return self.types


class _Types:
    def __init__(self, types: Sequence[SchedulableInstanceType]) -> None:
        self._provider = _Provider(types)

    @property
    def instance_types(self) -> Any:
        return self._provider


def _nodepool(name: str, *, taint: bool, weight: int, zones: Sequence[str]) -> dict[str, Any]:
    requirements = [
        {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]},
        {"key": wk.ZONE, "operator": "In", "values": list(zones)},
    ]
    spec: dict[str, Any] = {"requirements": requirements, "nodeClassRef": {"name": "default"}}
    if taint:
        spec["taints"] = [{"key": "dedicated", "value": name, "effect": "NoSchedule"}]
    return {
        "metadata": {"name": name},
        "spec": {"weight": weight, "template": {"metadata": {"labels": {"pool": name}}, "spec": spec}},
    }


def _daemonset(rng: random.Random, index: int) -> dict[str, Any]:
    ports = [9100] if rng.random() < 0.3 else []
    cpu = rng.choice(("50m", "100m", "200m"))
    spec: dict[str, Any] = {"containers": [container(cpu, "128Mi", host_ports=ports)]}
    roll = rng.random()
    if roll < 0.2:
        spec["affinity"] = _node_affinity(wk.ZONE, [rng.choice(ZONES)])
    elif roll < 0.4:
        spec["affinity"] = _node_affinity(wk.ARCH, ["amd64"])
    elif roll < 0.6:
        # Per instance type: only some of a NodePool's types run it.
        spec["affinity"] = _node_affinity(
            "karpenter.k8s.aws/instance-family", rng.sample(sorted(FAMILIES), 3)
        )
    elif roll < 0.7:
        spec["nodeSelector"] = {"pool": "b"}
    if rng.random() < 0.5:
        spec["tolerations"] = [{"operator": "Exists"}]
    return {"metadata": {"name": f"ds{index}"}, "spec": {"template": {"metadata": {}, "spec": spec}}}


def _node_affinity(key: str, values: list[str]) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def _workload(rng: random.Random, group: int, groups: int, mix: int) -> list[dict[str, Any]]:
    app = f"g{group}"
    labels = {"app": app, "tier": rng.choice(("web", "db"))}
    spec: dict[str, Any] = {}
    affinity: dict[str, Any] = {}
    if rng.random() < 0.2:
        key, values = rng.choice(((wk.ZONE, [rng.choice(ZONES)]), (wk.ARCH, ["arm64"]), ("pool", ["b"])))
        preference = {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}
        affinity["nodeAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50, "preference": preference}]
        }
    target = {"matchLabels": {"app": f"g{rng.randrange(groups)}" if rng.random() < 0.3 else app}}
    if rng.random() < 0.25:
        term = {"labelSelector": target, "topologyKey": rng.choice((wk.HOSTNAME, wk.HOSTNAME, wk.ZONE))}
        affinity["podAntiAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]
        }
    elif rng.random() < 0.1:
        term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": wk.HOSTNAME}
        affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    if affinity:
        spec["affinity"] = affinity
    if rng.random() < 0.35:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": rng.choice((1, 1, 2)),
                "topologyKey": rng.choice((wk.HOSTNAME, wk.ZONE)),
                "whenUnsatisfiable": rng.choice(("DoNotSchedule", "ScheduleAnyway")),
                "labelSelector": {"matchLabels": {"app": app}},
            }
        ]
    if rng.random() < 0.3:
        spec["tolerations"] = [
            {"key": "dedicated", "operator": "Equal", "value": "b", "effect": "NoSchedule"}
        ]
    if rng.random() < 0.1:
        spec["nodeSelector"] = {wk.ZONE: rng.choice(ZONES)}
    ports = [rng.choice((8080, 9090, 9100))] if rng.random() < 0.15 else []
    cpu, memory = rng.choice(CPUS), rng.choice(MEMORIES)
    return [
        pod(f"m{mix}-{app}-{i}", labels=labels, containers=[container(cpu, memory, host_ports=ports)], **spec)
        for i in range(rng.randint(1, 8))
    ]


def _mix(seed: int) -> tuple[list[NodePoolTemplate], list[dict[str, Any]]]:
    rng = random.Random(seed)
    types = catalog_types()
    subset = rng.sample(types, rng.randint(20, 40))
    nodepools = [_nodepool("a", taint=False, weight=rng.choice((0, 10)), zones=ZONES)]
    if rng.random() < 0.5:
        nodepools.append(_nodepool("b", taint=True, weight=rng.choice((0, 20)), zones=rng.sample(ZONES, 2)))
    daemonsets = [_daemonset(rng, i) for i in range(rng.randint(0, 3))]
    groups = rng.randint(1, 5)
    pending: list[dict[str, Any]] = []
    for group in range(groups):
        pending += _workload(rng, group, groups, seed)
    pending = pending[:30] if len(pending) > 30 else pending
    if len(pending) < 2:
        pending += _workload(rng, groups, groups + 1, seed)[:1] or []
    resolved = {"default": ResolvedNodeClass("default", [], [], {}, "AL2023", None)}
    templates, problems = build_templates(
        nodepools, resolved, {"default": {}}, _Types(subset), daemonsets, {}
    )
    assert not problems
    return templates, pending


def _check(seed: int) -> tuple[int, int]:
    """Check one mix; (first fit's violations of its own scheduler, repacked claims) for the summary."""
    templates, pending = _mix(seed)
    first = Scheduler(templates).solve(pending)
    ffd = SchedulingResult(
        list(first.new_nodeclaims), first.existing, first.unschedulable, first.order, first.states
    )
    ffd_cost = sum(claim_cost(c) for c in ffd.new_nodeclaims)
    improved, report = improve(first, templates, 0.01, pending)

    placed = Counter(k for c in improved.new_nodeclaims for k in c.pods)
    assert placed == Counter(k for c in ffd.new_nodeclaims for k in c.pods), seed
    assert set(placed.values()) <= {1}, seed
    assert improved.unschedulable == ffd.unschedulable, seed
    cost = sum(claim_cost(c) for c in improved.new_nodeclaims)
    assert cost <= ffd_cost + 1e-9, seed
    assert report.cost == pytest.approx(cost), seed

    replay = Replay(pending, templates, states=first.states)
    own = replay.violations(ffd)  # first fit under its own scheduler's predicates
    everywhere = range(len(improved.new_nodeclaims))
    after = replay.violations(improved, fixed=everywhere)
    before = {(v.pod, v.rule) for v in replay.violations(ffd, fixed=range(len(ffd.new_nodeclaims)))}
    broken = [v for v in after if not v.pod or (v.pod, v.rule) not in before]
    assert not broken, (seed, broken)
    return len(own), report.repacked_claims


def test_the_solver_stays_inside_the_schedulers_predicates_on_random_mixes() -> None:
    own_violations = 0
    repacked = 0
    for seed in range(MIXES):
        own, moved = _check(seed)
        own_violations += own
        repacked += moved
    # The replay agrees with the scheduler on the scheduler's own placements, and the property is not
    # vacuous: the solver does repack in many mixes.
    assert own_violations == 0
    assert repacked > MIXES // 4

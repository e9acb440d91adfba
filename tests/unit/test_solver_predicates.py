"""The cost solver stays inside the scheduler's rules, as ``plan`` (the provisioner's own simulation:
first fit, then the solver) shows them: host ports, and preferences the scheduler did not relax."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from serverless_karpenter.api import labels as wk
from serverless_karpenter.scheduling.scheduler import Scheduler, SchedulingResult
from serverless_karpenter.scheduling.validate import Replay
from serverless_karpenter_cli.main import main

from tests.builders import container, deployment, nodeclass, nodepool, pod
from tests.unit.test_solver_improve import template


def plan(tmp_path: Path, capsys: pytest.CaptureFixture[str], *workloads: dict[str, Any]) -> dict[str, Any]:
    pool = nodepool()
    pool["spec"].pop("limits", None)  # the solver leaves NodePools with limits to first fit
    path = tmp_path / "manifests.yaml"
    path.write_text(yaml.safe_dump_all([pool, nodeclass(), *workloads], sort_keys=False))
    assert main(["plan", "-f", str(path), "-o", "json"]) == 0
    planned: dict[str, Any] = json.loads(capsys.readouterr().out)
    assert planned["unschedulable"] == []
    return planned


def per_node(planned: dict[str, Any], app: str) -> list[int]:
    """How many pods of ``app`` each planned NodeClaim holds (pods are named after their Deployment)."""
    return [sum(p.split("/", 1)[1].startswith(f"{app}-") for p in c["pods"]) for c in planned["nodeclaims"]]


def test_two_pods_with_the_same_host_port_get_a_node_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # First fit opens a node for the second pod (the port is taken on the first); merging the two small
    # nodes would be cheaper, but the kube-scheduler could never bind the second pod there.
    agent = deployment("agent", 2, cpu="250m", memory="256Mi")
    agent["spec"]["template"]["spec"]["containers"] = [container("250m", "256Mi", host_ports=[8080])]
    planned = plan(tmp_path, capsys, agent)
    counts = per_node(planned, "agent")
    assert sorted(c for c in counts if c) == [1, 1]


def test_a_satisfiable_schedule_anyway_hostname_spread_is_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spread = {
        "maxSkew": 1,
        "topologyKey": wk.HOSTNAME,
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
    planned = plan(
        tmp_path, capsys, deployment("web", 3, cpu="250m", memory="256Mi", topologySpreadConstraints=[spread])
    )
    assert sorted(c for c in per_node(planned, "web") if c) == [1, 1, 1]


def test_a_preferred_hostname_anti_affinity_is_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    term = {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": wk.HOSTNAME}
    anti = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]
        }
    }
    planned = plan(tmp_path, capsys, deployment("cache", 3, cpu="250m", memory="256Mi", affinity=anti))
    assert sorted(c for c in per_node(planned, "cache") if c) == [1, 1, 1]


def test_a_preferred_zonal_anti_affinity_keeps_the_zones_first_fit_gave(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": wk.ZONE}
    anti = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": term}]
        }
    }
    planned = plan(tmp_path, capsys, deployment("db", 3, cpu="250m", memory="256Mi", affinity=anti))
    zones = Counter(
        c["zone"]
        for c, n in zip(planned["nodeclaims"], per_node(planned, "db"), strict=True)
        for _ in range(n)
    )
    assert sorted(zones.values()) == [1, 1, 1]


def test_the_replay_accepts_first_fit_and_names_what_a_merged_placement_breaks() -> None:
    term = {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": wk.HOSTNAME}
    anti = {
        "podAntiAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": term}]
        }
    }
    pending = [
        pod("agent-0", "250m", "256Mi", host_ports=[8080]),
        pod("agent-1", "250m", "256Mi", host_ports=[8080]),
        pod("cache-0", "100m", "128Mi", labels={"app": "cache"}, affinity=anti),
        pod("cache-1", "100m", "128Mi", labels={"app": "cache"}, affinity=anti),
    ]
    tpl = template()
    first = Scheduler([tpl]).solve(pending)
    assert len(first.new_nodeclaims) == 2
    replay = Replay(pending, [tpl], states=first.states)
    assert replay.violations(first) == []
    # Every pod on the first claim (its types are large enough): the second agent's port is taken, and the
    # second cache pod lands beside the first.
    merged = first.new_nodeclaims[0]
    merged.pods = [k for c in first.new_nodeclaims for k in c.pods]
    merged.instance_types = [it for it in tpl.instance_types if it.allocatable.get("cpu", 0) >= 4000]
    broken = replay.violations(SchedulingResult([merged], {}, {}, first.order, first.states))
    assert {(v.pod, v.rule) for v in broken} == {
        ("default/agent-1", "host ports"),
        ("default/cache-1", "pod anti-affinity on kubernetes.io/hostname with pods app=cache"),
    }

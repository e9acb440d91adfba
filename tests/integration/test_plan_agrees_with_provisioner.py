"""`plan` and the live provisioner share one code path: the same manifests give the same NodeClaims.

The live side is the real provisioner Lambda on the simulated cluster (moto + simulated API server); the
plan side is the CLI on the same manifests. NodeClaim and pod names differ (controllers name pods at
random), so claims are compared by NodePool, zone, instance type options and how many pods of each
workload they hold.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from serverless_karpenter.api import labels as wk
from serverless_karpenter.scheduling.requirements import Requirements
from serverless_karpenter_cli.main import main

from tests.builders import deployment, nodeclass, nodepool
from tests.integration.simulate import simulation

pytestmark = pytest.mark.integration

SIM_ZONES = ["us-east-1a", "us-east-1b", "us-east-1c"]


def manifests() -> list[dict[str, Any]]:
    pool = nodepool()
    pool["spec"] = json.loads(json.dumps(pool["spec"]))
    # The simulated VPC has subnets in three zones; offline, plan knows every zone of the region.
    pool["spec"]["template"]["spec"]["requirements"].append(
        {"key": wk.ZONE, "operator": "In", "values": SIM_ZONES}
    )
    spread = {
        "maxSkew": 1,
        "topologyKey": wk.ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "solo"}}, "topologyKey": wk.HOSTNAME}
            ]
        }
    }
    return [
        pool,
        nodeclass(),
        deployment("web", 7, cpu="1", memory="1Gi", topologySpreadConstraints=[spread]),
        deployment("solo", 3, cpu="2", memory="2Gi", affinity=anti),
        deployment("plain", 4, cpu="500m", memory="512Mi"),
    ]


def _workload(pod_key: str) -> str:
    return pod_key.split("/", 1)[1].split("-", 1)[0]


def _signature(nodepool: str, options: list[str], pods: list[str]) -> tuple[Any, ...]:
    return (nodepool, tuple(options), tuple(sorted(Counter(map(_workload, pods)).items())))


def _web_per_zone(claims: list[tuple[list[str], list[str]]]) -> Counter[str]:
    """Spread pods per zone, from (zones the claim allows, its pods): every claim with one must be pinned."""
    counts: Counter[str] = Counter()
    for zones, pods in claims:
        web = sum(1 for p in pods if _workload(p) == "web")
        if web:
            assert len(zones) == 1, zones
            counts[zones[0]] += web
    return counts


def test_plan_and_the_live_provisioner_agree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    docs = manifests()
    path = tmp_path / "manifests.yaml"
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    assert main(["plan", "-f", str(path), "-o", "json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["unschedulable"] == []
    offline = [
        _signature(c["nodepool"], c["instance_type_options"], c["pods"]) for c in planned["nodeclaims"]
    ]
    offline_zones = _web_per_zone([([c["zone"]], c["pods"]) for c in planned["nodeclaims"]])

    sim = simulation(tmp_path, {"name": "agree", "manifests": docs, "steps": []})
    records = []
    try:
        sim.start()
        for _ in range(30):
            sim.run_for(2)
            records = sim.plane.store.list()
            if records:
                break
    finally:
        sim.stop()
    live = [_signature(r.nodepool, r.option_names(), r.pods) for r in records]
    live_zones = _web_per_zone(
        [
            (
                sorted(Requirements.from_node_selector_requirements(r.requirements).get(wk.ZONE).values()),
                r.pods,
            )
            for r in records
        ]
    )
    assert sum(len(r.pods) for r in records) == 14
    assert sorted(live) == sorted(offline)
    assert live_zones == offline_zones and sorted(live_zones.values()) == [2, 2, 3]

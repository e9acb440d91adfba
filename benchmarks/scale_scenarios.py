"""The scale scenarios (issue 22), after Karpenter's scale and performance suites.

Each is sized by a node count: ``python -m benchmarks scale`` runs them at 500 nodes (and the long run at
1,000 nodes and 10,000 pods), the integration tests at 50. Shapes, after
``test/suites/scale/{provisioning,deprovisioning}_test.go`` (karpenter-provider-aws) and
``test/suites/performance/wide_deployments_test.go`` (kubernetes-sigs/karpenter):

- ``burst``: one Deployment of one pod per node (hostname anti-affinity, 10m CPU), all pending at once;
- ``spread``: 20 pods per node over 4 Deployments, every one spread across zones, one across hostnames;
- ``emptiness``: the burst, then the Deployment scaled to 0: every node goes as empty;
- ``consolidation``: two pods per 4-vCPU node, then half the pods removed: nodes merge;
- ``drift``: the burst, then the NodePool's template changed: every node is replaced;
- ``hold``: 10 pods per 4-vCPU node over 4 zonally spread Deployments, held for 30 virtual minutes.
"""

from __future__ import annotations

import copy
from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter_sim.scenario import Scenario, load_scenario

Obj = dict[str, Any]
APP = "app"


def nodepool(
    *,
    cpu: tuple[int, int] | None = None,
    policy: str = "WhenEmptyOrUnderutilized",
    consolidate_after: str = "30s",
    budget: str = "10%",
) -> Obj:
    """The default scenario's NodePool, on-demand, with instance types of ``cpu`` = (more than, less than)
    vCPUs, and a disruption budget of ``budget`` nodes."""
    pool: Obj = copy.deepcopy(load_scenario("default").manifests[0])
    spec = pool["spec"]
    if cpu is not None:
        spec["template"]["spec"]["requirements"] += [
            {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": [str(cpu[0])]},
            {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Lt", "values": [str(cpu[1])]},
        ]
    spec["limits"] = {"cpu": 100_000}
    spec["disruption"] = {
        "consolidationPolicy": policy,
        "consolidateAfter": consolidate_after,
        "budgets": [{"nodes": budget}],
    }
    return pool


def deployment(
    name: str,
    replicas: int,
    cpu: str,
    memory: str,
    *,
    anti_affinity: bool = False,
    zone_spread: bool = False,
    hostname_spread: bool = False,
) -> Obj:
    labels = {APP: name}
    spec: Obj = {
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {"name": "app", "image": "pause", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
        ],
    }
    if anti_affinity:
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": labels}, "topologyKey": wk.HOSTNAME}
                ]
            }
        }
    spreads = [key for key, on in ((wk.ZONE, zone_spread), (wk.HOSTNAME, hostname_spread)) if on]
    if spreads:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": key,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": labels},
            }
            for key in spreads
        ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def _scenario(name: str, manifests: list[Obj]) -> Scenario:
    default = load_scenario("default")
    return Scenario(
        name=f"scale-{name}",
        cluster_name=default.cluster_name,
        manifests=[manifests[0], default.manifests[1], *manifests[1:]],
        steps=[],
        settle_seconds=0.0,
    )


def burst(nodes: int, *, policy: str = "WhenEmptyOrUnderutilized", budget: str = "10%") -> Scenario:
    """One pod per node: ``nodes`` pods that hostname anti-affinity keeps apart, all pending at once."""
    pool = nodepool(policy=policy, consolidate_after="30s", budget=budget)
    return _scenario("burst", [pool, deployment("burst", nodes, "10m", "16Mi", anti_affinity=True)])


SPREAD_SHAPES = (("small", "100m", "128Mi"), ("medium", "250m", "256Mi"), ("large", "500m", "512Mi"))


def spread(nodes: int) -> Scenario:
    """20 pods per node over 4 Deployments on 2-vCPU nodes, each spread across zones; one also across
    hostnames (the shape of Karpenter's wide-deployments test, at its density)."""
    pods = 20 * nodes
    manifests: list[Obj] = [nodepool(cpu=(1, 3), policy="WhenEmpty", consolidate_after="5m")]
    for name, cpu, memory in SPREAD_SHAPES:
        manifests.append(deployment(name, pods // 4, cpu, memory, zone_spread=True))
    rest = pods - 3 * (pods // 4)
    manifests.append(deployment("hostspread", rest, "50m", "64Mi", zone_spread=True, hostname_spread=True))
    return _scenario("spread", manifests)


def consolidation(nodes: int) -> Scenario:
    """Two 1.5-vCPU pods per 4-vCPU node; the benchmark then halves the Deployment."""
    pool = nodepool(cpu=(3, 5), consolidate_after="30s", budget="20%")
    return _scenario("consolidation", [pool, deployment("pairs", 2 * nodes, "1500m", "1Gi")])


def hold(nodes: int, pods: int) -> Scenario:
    """``pods`` over 4 zonally spread Deployments on 4-vCPU nodes, about ``pods / nodes`` to a node."""
    per_node = max(1, pods // nodes)
    cpu = f"{3800 // per_node}m"  # a 4-vCPU node has about 3.9 allocatable
    manifests: list[Obj] = [nodepool(cpu=(3, 5), policy="WhenEmpty", consolidate_after="5m")]
    for i in range(4):
        manifests.append(deployment(f"hold-{i}", pods // 4, cpu, "256Mi", zone_spread=True))
    return _scenario("hold", manifests)

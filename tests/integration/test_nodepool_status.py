"""NodePool status in the cluster (issue 21): `kubectl get nodepools` after the demo scenario shows
NODECLASS, NODES and READY with their values (acceptance 1), and status.resources equals the sum over the
NodePool's live nodes at every lifecycle pass of a scale-up and scale-down (acceptance 4)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.model import DELETING_STATES, NodeClaimState
from serverless_karpenter.lifecycle.reconciler import LifecycleReconciler, LifecycleResult
from serverless_karpenter.scheduling import resources
from serverless_karpenter_sim.kubeapi.kubeconfig import write_kubeconfig
from serverless_karpenter_sim.scenario import load_scenario
from serverless_karpenter_sim.simulation import Simulation

from tests.builders import deployment, nodeclass, nodepool
from tests.integration.simulate import write_scenario
from tests.integration.test_kubectl import header, kubectl, rows

pytestmark = pytest.mark.integration


def live_usage(sim: Simulation, pool: str) -> dict[str, int]:
    """What Karpenter's counter would sum for ``pool`` now, read afresh from the API server and the store:
    each Node of a launched claim not marked for deletion, with the Node's capacity, and each launched
    claim without a Node yet, with the claim's; ``nodes`` counts them."""
    nodes = {
        n["spec"].get("providerID"): n
        for n in sim.kube.list_nodes()
        if not n["metadata"].get("deletionTimestamp")
    }
    total: dict[str, int] = {}
    for record in sim.plane.store.list_live():
        if record.nodepool != pool or not record.provider_id or record.state in DELETING_STATES:
            continue
        if record.state == NodeClaimState.PENDING:
            continue
        node = nodes.get(record.provider_id)
        if node is None and record.state != NodeClaimState.LAUNCHED:
            continue  # its Node is being deleted
        capacity = resources.parse_list(node["status"]["capacity"]) if node else record.expected_capacity()
        for name, value in {**capacity, resources.NODES: 1}.items():
            total[name] = total.get(name, 0) + value
    return total


def pool_status(sim: Simulation, pool: str) -> dict[str, Any]:
    [found] = [p for p in sim.kube.list_nodepools() if p["metadata"]["name"] == pool]
    return dict(found.get("status") or {})


def test_after_the_demo_kubectl_get_nodepools_shows_nodeclass_nodes_and_ready(tmp_path: Path) -> None:
    sim = Simulation(load_scenario("default"), log=io.StringIO())
    try:
        sim.start()
        sim.run()
        kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", sim.kube_server, sim.cluster_name)
        nodes = [n for n in sim.kube.list_nodes() if n["metadata"]["labels"].get(wk.NODEPOOL) == "default"]
        assert nodes, "the demo launches nodes"

        listed = kubectl(kubeconfig, "get", "nodepools").stdout
        assert header(listed) == ["NAME", "NODECLASS", "NODES", "READY", "AGE"]
        assert rows(listed)["default"][1:4] == ["default", str(len(nodes)), "True"]

        wide = kubectl(kubeconfig, "get", "nodepools", "-o", "wide").stdout
        assert header(wide) == ["NAME", "NODECLASS", "NODES", "READY", "AGE", "WEIGHT", "CPU", "MEMORY"]
        usage = live_usage(sim, "default")
        cpu, memory = rows(wide)["default"][-2:]
        assert resources.parse("cpu", cpu) == usage["cpu"]
        assert resources.parse("memory", memory) == usage["memory"]

        classes = kubectl(kubeconfig, "get", "ec2nodeclasses").stdout
        assert header(classes) == ["NAME", "READY", "AGE"] and rows(classes)["default"][1] == "True"

        # The nodes carry Karpenter's labels and annotations; these the kubelet never sets.
        for node in nodes:
            labels, annotations = node["metadata"]["labels"], node["metadata"].get("annotations") or {}
            assert labels[wk.EC2NODECLASS] == "default"
            assert labels[wk.REGISTERED] == labels[wk.INITIALIZED] == "true"
            assert labels[wk.ZONE_ID].startswith("use1-az")
            assert (
                annotations[wk.NODEPOOL_HASH_VERSION] == annotations[wk.EC2NODECLASS_HASH_VERSION] == "sk-v1"
            )
            assert annotations[wk.NODEPOOL_HASH] and annotations[wk.EC2NODECLASS_HASH]
            assert annotations["karpenter.k8s.aws/instance-profile-name"]
    finally:
        sim.stop()


def test_status_resources_equal_the_live_nodes_at_every_pass_of_a_scale_up_and_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    passes: list[dict[str, int]] = []
    reconcile = LifecycleReconciler.reconcile

    def checked(self: LifecycleReconciler) -> LifecycleResult:
        result = reconcile(self)
        # Right after the pass: what it wrote against the world read afresh.
        wanted = live_usage(sim, "web")
        status = pool_status(sim, "web")
        written = resources.parse_list(status["resources"])
        expected = {name: 0 for name in ("cpu", "memory", "pods", "ephemeral-storage", "nodes")} | wanted
        assert written == expected, f"pass {len(passes)}"
        assert status["nodes"] == expected["nodes"]
        passes.append(expected)
        return result

    def between_passes(sim: Simulation) -> None:
        # At every tick the status is the last pass's.
        if passes:
            written = resources.parse_list(pool_status(sim, "web")["resources"])
            assert written == passes[-1]

    monkeypatch.setattr(LifecycleReconciler, "reconcile", checked)
    scenario = {
        "name": "nodepool-status",
        "manifests": [nodepool("web"), nodeclass(), deployment("inflate", 12)],
        "steps": [
            {"wait": "4m"},
            {"scale": {"deployment": "default/inflate", "replicas": 2}},
            {"wait": "8m"},
        ],
        "settleSeconds": 600,
    }
    path = write_scenario(tmp_path, scenario)
    sim = Simulation(load_scenario(str(path)), log=io.StringIO(), on_tick=between_passes)
    try:
        sim.start()
        sim.run()
    finally:
        sim.stop()
    counts = [p["nodes"] for p in passes]
    peak = max(counts)
    assert len(passes) >= 10
    assert peak >= 2 and counts[-1] < peak, counts  # it scaled up, then down
    assert counts[0] == 0 and counts.index(peak) < len(counts) - 1
    print(f"nodes at each of {len(passes)} passes: {counts}")

"""Rebalance recommendations under INTERRUPTION_REBALANCE=replace: launch the replacement, then drain."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from serverless_karpenter import crashpoints
from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter_sim.scenario import load_scenario
from serverless_karpenter_sim.simulation import Schedule, Simulation

pytestmark = pytest.mark.integration
FAST = Schedule(provisioner_every=15.0, boot_delay=10.0, ready_delay=5.0)


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch) -> Iterator[Simulation]:
    crashpoints.disarm_all()
    monkeypatch.setenv("INTERRUPTION_REBALANCE", "replace")
    scenario = load_scenario("spot-interruption").model_copy(update={"steps": []})
    # Quicker machines and provisioner passes than the defaults: these tests are about order, not speed.
    simulation = Simulation(scenario, schedule=FAST, log=io.StringIO())
    simulation.start()
    try:
        simulation.run_for(45)
        assert sum(r.state == NodeClaimState.INITIALIZED for r in simulation.plane.store.list()) == 3
        yield simulation
    finally:
        simulation.stop()


def test_replacement_is_initialized_before_any_eviction(sim: Simulation) -> None:
    assert sim.settings.interruption_rebalance == "replace"
    originals = {r.name for r in sim.plane.store.list()}
    victim = sim.plane.store.get(sim.launch_order[0])
    assert victim is not None and victim.instance_id and victim.node_name
    pods_before = {podlib.key(p) for p in sim.kube.list_pods_on_node(victim.node_name)}
    sim.put_event(
        {
            "version": "0",
            "source": "aws.ec2",
            "detail-type": "EC2 Instance Rebalance Recommendation",
            "detail": {"instance-id": victim.instance_id},
        }
    )
    start = sim.elapsed
    initialized_at = evicted_at = None
    for _ in range(400):
        sim.tick()
        if sim.events_handled == 1 and sim.elapsed - start <= 3:
            node = sim.kube.get_node(victim.node_name)
            assert node is not None
            assert any(t["key"] == wk.DISRUPTED_TAINT_KEY for t in node["spec"].get("taints") or [])
        replacements = [r for r in sim.plane.store.list() if r.name not in originals]
        if initialized_at is None and any(r.state == NodeClaimState.INITIALIZED for r in replacements):
            initialized_at = sim.elapsed
        remaining = {podlib.key(p) for p in sim.kube.list_pods_on_node(victim.node_name)}
        if evicted_at is None and pods_before - remaining:
            evicted_at = sim.elapsed
        if evicted_at is not None and sim.settled():
            break
    assert initialized_at is not None and evicted_at is not None
    assert evicted_at >= initialized_at  # nothing left the node before its replacement was ready
    assert sim.settled()
    assert sim.kube_server.audit.pdb_violations == 0
    closed = sim.plane.store.get(victim.name)
    assert closed is not None and closed.state == NodeClaimState.TERMINATED
    assert closed.disruption_reason == "RebalanceRecommendation"
    running = [p for p in sim.kube.list_pods() if (p.get("status") or {}).get("phase") == "Running"]
    assert len(running) == 3

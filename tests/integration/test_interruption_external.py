"""Acceptance 4 of issue 6: an instance terminated outside our control, its state-change event arriving
after it is gone, leaves no Node, no open NodeClaim and no finalizer behind; its pods run elsewhere."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from serverless_karpenter import crashpoints
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter_sim.scenario import load_scenario
from serverless_karpenter_sim.simulation import Schedule, Simulation

pytestmark = pytest.mark.integration
FAST = Schedule(provisioner_every=15.0, boot_delay=10.0, ready_delay=5.0)


@pytest.fixture
def sim() -> Iterator[Simulation]:
    crashpoints.disarm_all()
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


def test_instance_terminated_outside_our_control(sim: Simulation) -> None:
    victim = sim.plane.store.get(sim.launch_order[0])
    assert victim is not None and victim.instance_id and victim.node_name
    pods_before = {p["metadata"]["name"] for p in sim.kube.list_pods_on_node(victim.node_name)}
    assert pods_before

    sim.ec2.terminate_instances(InstanceIds=[victim.instance_id])
    sim.put_event(
        {
            "version": "0",
            "source": "aws.ec2",
            "detail-type": "EC2 Instance State-change Notification",
            "detail": {"instance-id": victim.instance_id, "state": "terminated"},
        }
    )

    def recovered() -> bool:
        nodes = {n["metadata"]["name"] for n in sim.kube.list_nodes()}
        pods = sim.kube.list_pods()
        return (
            sim.events_handled == 1
            and sim.settled()
            and len(pods) == 3
            and all(p["spec"].get("nodeName") in nodes for p in pods)
        )

    for _ in range(300):
        sim.tick()
        if recovered():
            break
    assert recovered()
    assert sim.events_handled == 1
    assert sim.kube.get_node(victim.node_name) is None  # no Node, so no finalizer left either
    closed = sim.plane.store.get(victim.name)
    assert closed is not None and closed.state == NodeClaimState.TERMINATED and closed.terminated_at
    assert not [r for r in sim.plane.store.list() if r.is_deleting]
    assert sim.settled()
    running = [p for p in sim.kube.list_pods() if (p.get("status") or {}).get("phase") == "Running"]
    assert len(running) == 3
    assert not pods_before & {p["metadata"]["name"] for p in running}  # recreated elsewhere
    assert all(p["spec"]["nodeName"] != victim.node_name for p in running)

"""Garbage collection and liveness in the simulator: an instance with no NodeClaim record is terminated
after the grace period; a NodeClaim whose node never registers is deleted after 15 virtual minutes and
its instance terminated, and its pods get new capacity."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter_sim.scenario import load_scenario
from serverless_karpenter_sim.simulation import Schedule, Simulation

from tests.builders import deployment, nodeclass, nodepool
from tests.integration.simulate import run_claimed_instance, write_scenario

pytestmark = pytest.mark.integration

# The watcher only matters to start things; the schedule-driven provisioner does the rest.
FAST = {"tick_seconds": 10.0, "watcher_every": 60.0, "termination_every": 10.0}


def make(tmp_path: Path, scenario: dict[str, Any], **schedule: float) -> Simulation:
    return Simulation(
        load_scenario(str(write_scenario(tmp_path, scenario))), schedule=Schedule(**{**FAST, **schedule})
    )


def state(sim: Simulation, instance_id: str) -> str:
    reservations = sim.ec2.describe_instances(InstanceIds=[instance_id])["Reservations"]
    return str(reservations[0]["Instances"][0]["State"]["Name"])


def test_instance_without_a_nodeclaim_is_terminated_after_the_grace(tmp_path: Path) -> None:
    sim = make(tmp_path, {"name": "gc-orphan", "manifests": [nodepool(), nodeclass()]})
    try:
        sim.start()
        resources = sim.resources
        assert resources is not None
        # What a provisioner that died between CreateFleet and its record would leave behind.
        leaked = run_claimed_instance(sim, "default-leaked")["InstanceId"]
        # Somebody else's instance in the account is never ours to collect.
        foreign = sim.ec2.run_instances(ImageId=resources.amis["amd64"], MinCount=1, MaxCount=1)["Instances"][
            0
        ]["InstanceId"]
        sim.run_for(240)
        assert state(sim, leaked) == "running"  # within the 5-minute grace
        sim.run_for(180)
        assert state(sim, leaked) in ("shutting-down", "terminated")
        assert state(sim, foreign) == "running"
        assert sim.plane.store.get("default-leaked") is None
    finally:
        sim.stop()


def test_nodeclaim_whose_node_never_registers_is_deleted_after_fifteen_minutes(tmp_path: Path) -> None:
    scenario = {"name": "never-registers", "manifests": [nodepool(), nodeclass(), deployment("web", 2)]}
    # The kubelets never boot: no Node ever joins for any instance.
    sim = make(tmp_path, scenario, boot_delay=10**7)
    try:
        sim.start()
        sim.run_for(60)
        [first] = [r for r in sim.plane.store.list() if r.state == NodeClaimState.LAUNCHED]
        assert first.instance_id and first.launched_at
        launched_at = first.launched_at
        sim.run_for(14 * 60 - (sim.clock.now() - launched_at).total_seconds())
        still = sim.plane.store.get(first.name)
        assert still is not None and still.state == NodeClaimState.LAUNCHED
        assert state(sim, first.instance_id) == "running"
        sim.run_for(2 * 60 + 10)
        gone = sim.plane.store.get(first.name)
        assert gone is not None and gone.state == NodeClaimState.TERMINATED
        assert gone.terminated_at is not None
        waited = (gone.terminated_at - launched_at).total_seconds()
        assert 15 * 60 <= waited <= 17 * 60
        assert state(sim, first.instance_id) in ("shutting-down", "terminated")
        # The pods are still pending, so a new claim takes over.
        replacements = [r for r in sim.plane.store.list() if r.name != first.name and r.is_active]
        assert replacements
    finally:
        sim.stop()

"""Acceptance 1 of issue 6: a spot interruption warning on one of three nodes, through the simulator."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
from serverless_karpenter import crashpoints
from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter_sim.scenario import load_scenario
from serverless_karpenter_sim.simulation import Simulation

pytestmark = pytest.mark.integration


@pytest.fixture
def sim() -> Iterator[Simulation]:
    crashpoints.disarm_all()
    simulation = Simulation(load_scenario("spot-interruption"), log=io.StringIO())
    simulation.start()
    try:
        yield simulation
    finally:
        simulation.stop()


def _running_pods(sim: Simulation) -> list[dict[str, Any]]:
    return [p for p in sim.kube.list_pods() if (p.get("status") or {}).get("phase") == "Running"]


def test_spot_interruption_taints_replaces_drains_and_terminates_within_the_warning(sim: Simulation) -> None:
    wait, event, *_ = sim.scenario.steps
    sim.run_step(wait)
    originals = {r.name: r for r in sim.plane.store.list()}
    assert len(originals) == 3 and len({p["spec"]["nodeName"] for p in _running_pods(sim)}) == 3
    victim = sim.plane.store.get(sim.launch_order[0])
    assert victim is not None and victim.node_name and victim.instance_id
    assert victim.capacity_type == wk.CAPACITY_TYPE_SPOT

    sim.run_step(event)
    sent_at = sim.elapsed
    delivered_at = tainted_at = replacement_at = drained_at = terminated_at = None
    min_running = 3
    while sim.elapsed - sent_at < 240:
        handled = sim.events_handled
        sim.tick()
        now = sim.elapsed - 1  # what the tick just did happened at the time before its advance
        if delivered_at is None and sim.events_handled > handled:
            delivered_at = now
        node = sim.kube.get_node(victim.node_name)
        taints = (node or {}).get("spec", {}).get("taints") or []
        if (
            tainted_at is None
            and node is not None
            and any(t.get("key") == wk.DISRUPTED_TAINT_KEY for t in taints)
        ):
            assert node["metadata"]["labels"].get(wk.EXCLUDE_FROM_LB)
            tainted_at = now
        if replacement_at is None and any(
            r.name not in originals and r.instance_id for r in sim.plane.store.list()
        ):
            replacement_at = now
        on_victim = [
            p
            for p in sim.kube.list_pods_on_node(victim.node_name)
            if not podlib.is_terminal(p) and not podlib.is_daemonset_pod(p)
        ]
        if drained_at is None and tainted_at is not None and not on_victim:
            drained_at = now
        instance = sim.plane.launcher.describe(victim.instance_id)
        if terminated_at is None and (instance is None or instance.state in ("shutting-down", "terminated")):
            terminated_at = now
        min_running = min(min_running, len(_running_pods(sim)))
        if terminated_at is not None and sim.settled():
            break

    assert delivered_at is not None and tainted_at is not None
    assert tainted_at - delivered_at <= 5
    assert replacement_at is not None and drained_at is not None and replacement_at < drained_at
    assert terminated_at is not None and terminated_at - sent_at <= 120
    assert sim.kube_server.audit.pdb_violations == 0
    assert min_running >= 2  # minAvailable 2 held throughout
    assert sim.settled()
    assert len(_running_pods(sim)) == 3
    closed = sim.plane.store.get(victim.name)
    assert closed is not None and closed.state == NodeClaimState.TERMINATED
    assert sim.kube.get_node(victim.node_name) is None
    # The warned offering was marked unavailable: the replacement went elsewhere.
    replacement = next(r for r in sim.plane.store.list() if r.name not in originals)
    assert (replacement.instance_type, replacement.zone) != (victim.instance_type, victim.zone)
    print(
        f"delivered +{delivered_at - sent_at:.0f}s tainted +{tainted_at - sent_at:.0f}s "
        f"replacement +{replacement_at - sent_at:.0f}s drained +{drained_at - sent_at:.0f}s "
        f"terminated +{terminated_at - sent_at:.0f}s"
    )

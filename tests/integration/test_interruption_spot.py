"""Acceptance 1 of issue 6: a spot interruption warning on one of three nodes, through the simulator."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter_sim.simulation import Simulation

from tests.integration.disruption_helpers import pods_by_node, running_pods
from tests.integration.interruption_helpers import SpotInterruption, spot_interruption_simulation

pytestmark = pytest.mark.integration


@pytest.fixture
def sim() -> Iterator[Simulation]:
    with spot_interruption_simulation() as simulation:
        yield simulation


def test_spot_interruption_taints_replaces_drains_and_terminates_within_the_warning(sim: Simulation) -> None:
    run = SpotInterruption.prepare(sim)
    victim = run.victim
    assert victim.node_name
    originals = {r.name: r for r in sim.plane.store.list()}
    assert len(originals) == 3 and len([n for n, pods in pods_by_node(sim).items() if pods]) == 3

    run.send()
    tainted_at = replacement_at = None
    for now, _ in run.follow():
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

    sent_at, delivered_at, drained_at, terminated_at = (
        run.sent_at,
        run.acted_at,
        run.drained_at,
        run.terminated_at,
    )
    assert delivered_at is not None and tainted_at is not None
    assert tainted_at - delivered_at <= 5
    assert replacement_at is not None and drained_at is not None and replacement_at < drained_at
    assert terminated_at is not None and terminated_at - sent_at <= 120
    assert sim.kube_server.audit.pdb_violations == 0
    assert run.min_running >= 2  # minAvailable 2 held throughout
    assert sim.settled()
    assert running_pods(sim) == 3
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

"""A spot interruption warning whose first attempt fails for a transient reason (a Kubernetes 5xx,
DynamoDB throttling, a lost write race) is reported as a batch item failure; the handler shortens the
message's visibility, so SQS delivers it again within seconds instead of after the queue's 120 s
visibility timeout, and the node is still drained, respecting its PDB, inside the two minutes."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import pytest
from serverless_karpenter import crashpoints
from serverless_karpenter.api import labels as wk
from serverless_karpenter.interruption.actions import SPOT_WARNING
from serverless_karpenter.interruption.usecases import RETRY_FIRST_DELAY_SECONDS
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter_sim.scenario import load_scenario
from serverless_karpenter_sim.simulation import Simulation

pytestmark = pytest.mark.integration

TRANSIENT_FAULTS: dict[str, dict[str, Any]] = {
    "kubernetes-5xx": {
        "kube": {"verb": "delete", "resource": "nodes", "status": 503},
        "function": "interruption",
    },
    "dynamodb-throttled": {"dynamodb": "throttle", "operation": "Query", "function": "interruption"},
    # The first conditional PutItem is Powertools' INPROGRESS record; the next is the NodeClaim's save.
    "dynamodb-race": {
        "dynamodb": "conditional-check-failed",
        "operation": "PutItem",
        "function": "interruption",
        "skip": 1,
    },
}


@pytest.fixture
def sim() -> Iterator[Simulation]:
    crashpoints.disarm_all()
    simulation = Simulation(load_scenario("spot-interruption"), log=io.StringIO())
    simulation.start()
    try:
        yield simulation
    finally:
        simulation.stop()
        crashpoints.disarm_all()


def _running_pods(sim: Simulation) -> list[dict[str, Any]]:
    return [p for p in sim.kube.list_pods() if (p.get("status") or {}).get("phase") == "Running"]


@pytest.mark.parametrize("fault", list(TRANSIENT_FAULTS.values()), ids=list(TRANSIENT_FAULTS))
def test_a_failed_spot_warning_is_retried_within_seconds_and_drains_in_time(
    sim: Simulation, fault: dict[str, Any]
) -> None:
    wait, event, *_ = sim.scenario.steps
    sim.run_step(wait)
    victim = sim.plane.store.get(sim.launch_order[0])
    assert victim is not None and victim.node_name and victim.instance_id
    assert victim.capacity_type == wk.CAPACITY_TYPE_SPOT
    tick = sim.schedule.tick_seconds

    sim.fault(fault)
    sim.run_step(event)
    sent_at = sim.elapsed
    failed_at = acted_at = drained_at = terminated_at = None
    min_running = len(_running_pods(sim))
    while sim.elapsed - sent_at < 240:
        handled = sim.events_handled
        sim.tick()
        now = sim.elapsed - tick  # what the tick just did happened at the time before its advance
        if failed_at is None and sim.faults.total_injected:
            assert sim.events_handled == handled, "the faulted attempt must fail, not be acknowledged"
            failed_at = now
        if acted_at is None and sim.events_handled > handled:
            acted_at = now
        on_victim = [
            p
            for p in sim.kube.list_pods_on_node(victim.node_name)
            if not podlib.is_terminal(p) and not podlib.is_daemonset_pod(p)
        ]
        if drained_at is None and acted_at is not None and not on_victim:
            drained_at = now
        instance = sim.plane.launcher.describe(victim.instance_id)
        if terminated_at is None and (instance is None or instance.state in ("shutting-down", "terminated")):
            terminated_at = now
        min_running = min(min_running, len(_running_pods(sim)))
        if terminated_at is not None and sim.settled():
            break

    # Failed on the first delivery, then delivered again after the shortened visibility: seconds, not the
    # queue's visibility timeout.
    assert failed_at is not None and acted_at is not None
    assert RETRY_FIRST_DELAY_SECONDS <= acted_at - failed_at <= RETRY_FIRST_DELAY_SECONDS + 2 * tick
    assert acted_at - failed_at < sim.interruption_visibility_timeout
    # Drained by evictions (no PDB ever broken, minAvailable 2 held) and terminated within the warning.
    warning = SPOT_WARNING.total_seconds()
    assert drained_at is not None and drained_at - sent_at < warning
    assert terminated_at is not None and terminated_at - sent_at <= warning
    assert sim.kube_server.audit.pdb_violations == 0
    assert min_running >= 2
    closed = sim.plane.store.get(victim.name)
    assert closed is not None and closed.state == NodeClaimState.TERMINATED
    assert closed.disruption_reason == "SpotInterrupted"
    assert sim.kube.get_node(victim.node_name) is None
    assert sim.settled() and len(_running_pods(sim)) == 3
    # One message, received twice, acted on once; nothing dead-lettered, no handler error.
    final = sim.check_invariants(final=True)
    assert final.ok, final.violations()
    assert final.messages_received == final.messages_acted_on == 1
    assert final.lost_messages == [] and final.messages_parked == 0
    assert sim.lambdas.errors.get("interruption", 0) == 0

"""A spot interruption warning whose first attempt fails for a transient reason (a Kubernetes 5xx,
DynamoDB throttling, a lost write race) is reported as a batch item failure; the handler shortens the
message's visibility, so SQS delivers it again within seconds instead of after the queue's 120 s
visibility timeout, and the node is still drained, respecting its PDB, inside the two minutes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from serverless_karpenter.deployment import INTERRUPTION_MAX_RECEIVE_COUNT
from serverless_karpenter.interruption.actions import SPOT_WARNING
from serverless_karpenter.interruption.usecases import RETRY_FIRST_DELAY_SECONDS
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter_sim.simulation import Simulation

from tests.integration.disruption_helpers import running_pods
from tests.integration.interruption_helpers import SpotInterruption, spot_interruption_simulation

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
    with spot_interruption_simulation() as simulation:
        yield simulation


@pytest.mark.parametrize("fault", list(TRANSIENT_FAULTS.values()), ids=list(TRANSIENT_FAULTS))
def test_a_failed_spot_warning_is_retried_within_seconds_and_drains_in_time(
    sim: Simulation, fault: dict[str, Any]
) -> None:
    run = SpotInterruption.prepare(sim)
    victim = run.victim
    tick = sim.schedule.tick_seconds

    sim.fault(fault)
    run.send()
    failed_at = None
    for now, acted in run.follow():
        if failed_at is None and sim.faults.total_injected:
            assert not acted, "the faulted attempt must fail, not be acknowledged"
            failed_at = now

    # Failed on the first delivery, then delivered again after the shortened visibility: seconds, not the
    # queue's visibility timeout.
    assert failed_at is not None and run.acted_at is not None
    assert RETRY_FIRST_DELAY_SECONDS <= run.acted_at - failed_at <= RETRY_FIRST_DELAY_SECONDS + 2 * tick
    assert run.acted_at - failed_at < sim.interruption_visibility_timeout
    # Drained by evictions (no PDB ever broken, minAvailable 2 held) and terminated within the warning.
    warning = SPOT_WARNING.total_seconds()
    assert run.drained_at is not None and run.drained_at - run.sent_at < warning
    assert run.terminated_at is not None and run.terminated_at - run.sent_at <= warning
    assert sim.kube_server.audit.pdb_violations == 0
    assert run.min_running >= 2
    closed = sim.plane.store.get(victim.name)
    assert closed is not None and closed.state == NodeClaimState.TERMINATED
    assert closed.disruption_reason == "SpotInterrupted"
    assert sim.kube.get_node(victim.node_name) is None
    assert sim.settled() and running_pods(sim) == 3
    # One message, received twice, acted on once; nothing dead-lettered, no handler error.
    final = sim.check_invariants(final=True)
    assert final.ok, final.violations()
    assert final.messages_received == final.messages_acted_on == 1
    assert final.lost_messages == [] and final.messages_parked == 0
    assert sim.lambdas.errors.get("interruption", 0) == 0


def test_a_kubernetes_blip_of_four_failed_receives_does_not_dead_letter_the_warning(sim: Simulation) -> None:
    # With the queue's old redrive (2 receives), a blip longer than the first 2 s retry sent the warning
    # to the DLQ and the node was never drained ahead of the reclaim. Now 4 failed receives (2 + 4 + 8 +
    # 16 s of back-off, about half a minute of API-server trouble) still leave the fifth to act.
    failing = 4
    assert failing < INTERRUPTION_MAX_RECEIVE_COUNT
    run = SpotInterruption.prepare(sim)
    sim.fault(
        {
            "kube": {"verb": "delete", "resource": "nodes", "status": 503},
            "function": "interruption",
            "times": failing,
        }
    )
    run.send()
    for _ in run.follow():
        pass

    assert sim.faults.total_injected == failing
    assert run.acted_at is not None and run.acted_at - run.sent_at < SPOT_WARNING.total_seconds()
    assert run.terminated_at is not None and run.terminated_at - run.sent_at <= SPOT_WARNING.total_seconds()
    assert sim.kube_server.audit.pdb_violations == 0
    final = sim.check_invariants(final=True)
    assert final.ok, final.violations()
    assert final.messages_received == final.messages_acted_on == 1
    assert final.lost_messages == [] and final.messages_parked == 0
    assert sim.lambdas.errors.get("interruption", 0) == 0

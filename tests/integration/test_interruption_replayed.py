"""A spot interruption warning delivered long after its ``time`` (replayed, or redriven from a DLQ)
drains its node by evictions that respect the pods' PDB, as a fresh one does: its two minutes count from
receipt, so no pod is deleted past its budget at once."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import timedelta

import pytest
from serverless_karpenter.clock import to_rfc3339
from serverless_karpenter.interruption.actions import SPOT_WARNING
from serverless_karpenter.interruption.rules import MessageKind
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter_sim.simulation import Simulation

from tests.integration.interruption_helpers import packed_web_scenario, spot_interruption_simulation

pytestmark = pytest.mark.integration
GRACE = timedelta(seconds=30)  # the pods' default terminationGracePeriodSeconds


@pytest.fixture
def sim() -> Iterator[Simulation]:
    # Four pods of half a CPU: two to each of two m5.large nodes.
    with spot_interruption_simulation(packed_web_scenario(replicas=4, cpu="500m"), 90) as simulation:
        yield simulation


def web_pods_on(sim: Simulation, node: str) -> list[str]:
    return [
        podlib.key(p)
        for p in sim.kube.list_pods_on_node(node)
        if not podlib.is_terminal(p) and (p["metadata"].get("labels") or {}).get("app") == "web"
    ]


def test_a_spot_warning_replayed_an_hour_late_does_not_bypass_the_pdb(sim: Simulation) -> None:
    victim = sim.plane.store.get(sim.launch_order[0])
    assert victim is not None and victim.instance_id and victim.node_name
    victims_pods = web_pods_on(sim, victim.node_name)
    assert len(victims_pods) == 2  # two of four under maxUnavailable 1: one at a time
    received = sim.clock.now()
    sim.send_raw(
        json.dumps(
            {
                "version": "0",
                "id": str(uuid.uuid4()),
                "detail-type": MessageKind.SPOT_INTERRUPTION.value,
                "source": "aws.ec2",
                "account": "123456789012",
                "time": to_rfc3339(received - timedelta(hours=1)),
                "region": "us-east-1",
                "resources": [f"arn:aws:ec2:us-east-1:123456789012:instance/{victim.instance_id}"],
                "detail": {"instance-id": victim.instance_id, "instance-action": "terminate"},
            }
        )
    )
    for _ in range(300):
        sim.tick()
        closed = sim.plane.store.get(victim.name)
        if closed is not None and closed.state == NodeClaimState.TERMINATED and sim.settled():
            break

    assert sim.events_handled == 1
    audit = sim.kube_server.audit
    # Both pods left through the eviction API, the second once the first's replacement was Ready (the
    # budget refused it until then); none was deleted past the budget.
    evicted = {f"{e.namespace}/{e.pod}" for e in audit.evictions if e.allowed and e.node == victim.node_name}
    assert evicted == set(victims_pods)
    assert audit.evictions_refused >= 1
    assert audit.pdb_violations == 0, audit.violations
    # Nothing was deleted past its budget before receipt plus its grace period (nothing at all, here).
    assert all(v.at >= received + GRACE for v in audit.violations)
    record = sim.plane.store.get(victim.name)
    assert record is not None and record.state == NodeClaimState.TERMINATED
    assert record.drain_deadline is not None and record.drain_deadline >= received + SPOT_WARNING
    assert sim.settled() and len([p for p in sim.kube.list_pods() if podlib.node_name(p)]) == 4
    final = sim.check_invariants(final=True)
    assert final.ok, final.violations()

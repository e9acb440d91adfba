"""The interruption Lambda dies right after Powertools' idempotency layer wrote its INPROGRESS record.

As in AWS, SQS keeps the message hidden for the queue's visibility timeout; when it is delivered again
the record's in-progress window (the crashed invocation's remaining time) has passed, so the event is
acted on rather than refused as "already in progress" until the redrive policy drops it in the DLQ.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from serverless_karpenter import state_schema
from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter_sim.scenario import load_scenario
from serverless_karpenter_sim.simulation import Simulation

from tests.integration.simulate import write_scenario

pytestmark = pytest.mark.integration

SPOT_WARNING: dict[str, Any] = {
    "event": {
        "version": "0",
        "source": "aws.ec2",
        "detail-type": "EC2 Spot Instance Interruption Warning",
        "detail": {"instance-id": "${instance:0}", "instance-action": "terminate"},
    }
}


def idempotency_records(sim: Simulation) -> list[dict[str, Any]]:
    """The Powertools records of the interruption handler's ``act_once`` in the state table."""
    assert sim.resources is not None
    items = sim.cloud.client("dynamodb").scan(TableName=sim.resources.table_name)["Items"]
    return [i for i in items if ".act_once#" in i[state_schema.SORT_KEY]["S"]]


def test_crash_after_the_inprogress_record_is_retried_after_the_visibility_timeout(tmp_path: Path) -> None:
    base = load_scenario("spot-interruption")
    scenario = {
        "name": "faults-interruption-inprogress",
        "manifests": base.manifests,
        "steps": [
            {"wait": "90s"},
            # The first PutItem of an interruption invocation is Powertools' INPROGRESS record.
            {"fault": {"lambda": "crash", "after": "dynamodb.PutItem", "function": "interruption"}},
            SPOT_WARNING,
        ],
        "settleSeconds": 600,
    }
    sim = Simulation(load_scenario(str(write_scenario(tmp_path, scenario))))
    try:
        sim.start()
        for step in sim.scenario.steps:
            sim.run_step(step)
            assert sim.check_invariants().ok
        victim = sim.plane.store.get(sim.launch_order[0])
        assert victim is not None and victim.node_name and victim.instance_id
        visibility = sim.interruption_visibility_timeout
        assert visibility > sim.lambdas.timeout_seconds("interruption")

        crashed_at = acted_at = tainted_at = None
        inprogress_after_crash: list[str] = []
        while sim.elapsed < 600:
            handled = sim.events_handled
            sim.tick()
            now = sim.elapsed - sim.schedule.tick_seconds  # the tick's work happened before its advance
            if crashed_at is None and sim.faults.injected["lambda/crash"]:
                crashed_at = now
                inprogress_after_crash = [i["status"]["S"] for i in idempotency_records(sim)]
            if acted_at is None and sim.events_handled > handled:
                acted_at = now
            node = sim.kube.get_node(victim.node_name)
            taints = ((node or {}).get("spec") or {}).get("taints") or []
            if tainted_at is None and any(t.get("key") == wk.DISRUPTED_TAINT_KEY for t in taints):
                tainted_at = now
            if int(now) % 10 == 0:
                assert sim.check_invariants().ok
            closed = sim.plane.store.get(victim.name)
            terminated = closed is not None and closed.state == NodeClaimState.TERMINATED
            if acted_at is not None and terminated and sim.settled():
                break

        # The crash left the record INPROGRESS, and the message hidden: nothing acted on it meanwhile.
        assert crashed_at is not None and inprogress_after_crash == ["INPROGRESS"]
        assert acted_at is not None and tainted_at is not None
        assert acted_at - crashed_at >= visibility
        assert tainted_at >= acted_at
        # Then the interruption was carried through: drained, the instance terminated, the claim closed.
        closed = sim.plane.store.get(victim.name)
        assert closed is not None and closed.state == NodeClaimState.TERMINATED
        instance = sim.plane.launcher.describe(victim.instance_id)
        assert instance is None or instance.state in ("shutting-down", "terminated")
        assert sim.kube.get_node(victim.node_name) is None
        assert [i["status"]["S"] for i in idempotency_records(sim)] == ["COMPLETED"]
        final = sim.check_invariants(final=True)
        assert final.ok, final.violations()
        assert final.messages_received == final.messages_acted_on == 1
        assert final.lost_messages == [] and final.messages_parked == 0
        assert sim.kube_server.audit.pdb_violations == 0
        assert sim.lambdas.errors.get("interruption", 0) == 0  # an injected crash, not a handler error
    finally:
        sim.stop()

"""SQS faults: the interruption queue delivers messages twice and out of order. Every message is acted
on once (or parked in the DLQ with a reason); every armed fault fires, and the invariants hold after
every step and at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from serverless_karpenter.api import labels as wk
from serverless_karpenter_sim.scenario import load_scenario
from serverless_karpenter_sim.simulation import Schedule, Simulation

from tests.builders import deployment, nodeclass, nodepool
from tests.integration.simulate import run_checked, write_scenario

pytestmark = pytest.mark.integration


def spot_pool() -> dict[str, Any]:
    pool = nodepool()
    template = pool["spec"]["template"]
    requirements = [
        r if r["key"] != wk.CAPACITY_TYPE else {**r, "values": ["spot"]}
        for r in template["spec"]["requirements"]
    ]
    pool["spec"]["template"] = {**template, "spec": {**template["spec"], "requirements": requirements}}
    return pool


def event(detail_type: str, instance: str, **detail: str) -> dict[str, Any]:
    return {
        "event": {
            "version": "0",
            "source": "aws.ec2",
            "detail-type": detail_type,
            "detail": {"instance-id": instance, **detail},
        }
    }


def test_duplicate_and_out_of_order_delivery_act_once(tmp_path: Path) -> None:
    scenario = {
        "name": "faults-sqs",
        "manifests": [spot_pool(), nodeclass(), deployment("web", 4)],
        "steps": [
            {"wait": "90s"},
            {"scale": {"deployment": "web", "replicas": 14}},
            {"wait": "120s"},
            {"fault": {"sqs": "duplicate", "times": 3}},
            {"fault": {"sqs": "reorder", "times": 2}},
            # One batch, delivered out of order: the state change may arrive before the warnings.
            event("EC2 Spot Instance Interruption Warning", "${instance:0}", **{"instance-action": "stop"}),
            event("EC2 Instance Rebalance Recommendation", "${instance:0}"),
            event("EC2 Instance State-change Notification", "${instance:1}", state="stopping"),
            {"sqs": "not json"},
            {"wait": "200s"},
        ],
    }
    sim = Simulation(
        load_scenario(str(write_scenario(tmp_path, scenario))),
        schedule=Schedule(tick_seconds=2.0, watcher_every=2.0),
    )
    interrupted: list[str] = []

    def inspect(sim: Simulation) -> None:
        records = sim.plane.store.list()
        interrupted.extend(
            sorted(
                r.name for r in records if r.disruption_reason in ("SpotInterrupted", "InstanceStateChange")
            )
        )

    report = run_checked(sim, inspect)
    assert not sim.faults.unfired(), sim.faults.armed_faults()
    assert sim.faults.injected["sqs/duplicate"] == 3
    assert sim.faults.injected["sqs/reorder"] >= 1
    ledger = sim.faults.sqs
    assert ledger.duplicates_sent >= 3
    final = sim.invariants.reports[-1]
    # Every delivery, duplicates included, was acknowledged; the malformed one (and its copy) went to
    # the DLQ with a reason, the rest were acted on.
    assert final.messages_received == final.messages_acted_on == 4 + ledger.duplicates_sent
    assert final.messages_parked >= 1 and report["dlq_messages"] == final.messages_parked
    # Acting twice on a duplicate would have drained a replacement too: exactly the two interrupted
    # instances were deleted for an interruption, and both are gone.
    assert sorted(sim.launch_order[:2]) == interrupted
    states = {c["name"]: c["state"] for c in report["nodeclaims"]}
    assert all(states[name] == "Terminated" for name in interrupted)
    assert report["pods"] == {"total": 14, "running": 14, "pending": 0}

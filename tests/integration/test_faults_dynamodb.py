"""DynamoDB faults: conditional writes that lose a race (ConditionalCheckFailed) and throttling
(ProvisionedThroughputExceeded) on the state table, each on an operation the control plane calls
while it is armed (leases: UpdateItem and a conditional DeleteItem every pass; records: PutItem, Query,
and GetItem while a node is drained). Every armed fault fires, and the invariants hold after every step
and at the end."""

from __future__ import annotations

from pathlib import Path

import pytest
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter_sim.scenario import load_scenario
from serverless_karpenter_sim.simulation import Schedule, Simulation

from tests.builders import deployment, nodeclass, nodepool
from tests.integration.simulate import run_checked, write_scenario

pytestmark = pytest.mark.integration


def test_dynamodb_races_and_throttling_converge(tmp_path: Path) -> None:
    scenario = {
        "name": "faults-dynamodb",
        "manifests": [nodepool(), nodeclass(), deployment("web", 6)],
        "steps": [
            {"fault": {"dynamodb": "throttle", "operation": "Query", "times": 3}},
            {"fault": {"dynamodb": "conditional-check-failed", "operation": "PutItem", "times": 3}},
            {"fault": {"dynamodb": "conditional-check-failed", "operation": "UpdateItem", "times": 1}},
            {"wait": "200s"},
            {"fault": {"dynamodb": "throttle", "operation": "PutItem", "times": 2}},
            {"fault": {"dynamodb": "throttle", "operation": "GetItem", "times": 2}},
            {"fault": {"dynamodb": "conditional-check-failed", "operation": "DeleteItem", "times": 1}},
            {"scale": {"deployment": "web", "replicas": 16}},
            {"wait": "120s"},
            {"delete": {"kind": "Node", "name": "${node:0}"}},
            {"wait": "150s"},
        ],
    }
    sim = Simulation(
        load_scenario(str(write_scenario(tmp_path, scenario))),
        schedule=Schedule(tick_seconds=2.0, watcher_every=2.0),
    )

    def inspect(sim: Simulation) -> None:
        records = sim.plane.store.list()
        assert any(r.state == NodeClaimState.TERMINATED for r in records)
        # No record was applied twice or lost: every live record has exactly the instance it names.
        for record in records:
            if record.state != NodeClaimState.TERMINATED:
                assert record.instance_id and sim.plane.launcher.describe(record.instance_id) is not None

    report = run_checked(sim, inspect)
    assert not sim.faults.unfired(), sim.faults.armed_faults()
    assert sim.faults.injected["dynamodb/throttle"] >= 3
    assert sim.faults.injected["dynamodb/conditional-check-failed"] >= 3
    assert report["pods"] == {"total": 16, "running": 16, "pending": 0}

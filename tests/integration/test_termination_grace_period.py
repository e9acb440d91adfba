"""A NodePool's terminationGracePeriod bounds how long a node may drain: the NodeClaim carries it from
creation, a drain that pods block (here `karpenter.sh/do-not-disrupt`) waits until that deadline, then the
pods are deleted, the instance terminated and the node removed, as Karpenter does."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter_sim.simulation import Simulation

from tests.builders import deployment, nodeclass, nodepool
from tests.integration.simulate import run_checked, simulation

pytestmark = pytest.mark.integration

GRACE_SECONDS = 300


def test_termination_grace_period_bounds_a_drain_that_do_not_disrupt_pods_block(tmp_path: Path) -> None:
    pool = nodepool()
    pool["spec"]["template"] = copy.deepcopy(pool["spec"]["template"])
    pool["spec"]["template"]["spec"]["terminationGracePeriod"] = "5m"
    web = deployment("web", 2)
    web["spec"]["template"]["metadata"]["annotations"] = {wk.DO_NOT_DISRUPT: "true"}
    sim = simulation(
        tmp_path,
        {
            "name": "termination-grace-period",
            "manifests": [pool, nodeclass(), web],
            "steps": [
                {"wait": "90s"},
                {"delete": {"kind": "Node", "name": "${node:0}"}},
                {"wait": "480s"},
            ],
        },
    )

    def inspect(sim: Simulation) -> None:
        records = sim.plane.store.list()
        assert records and all(r.termination_grace_period_seconds == GRACE_SECONDS for r in records)
        [gone] = [r for r in records if r.state == NodeClaimState.TERMINATED]
        assert gone.deletion_requested_at is not None and gone.terminated_at is not None
        drained_for = (gone.terminated_at - gone.deletion_requested_at).total_seconds()
        # Nothing evicts a do-not-disrupt pod: only the deadline ends the drain, and it does end it.
        assert GRACE_SECONDS <= drained_for <= GRACE_SECONDS + 60, drained_for
        expiring = sim.kube.core.list_event_for_all_namespaces(
            field_selector="reason=TerminationGracePeriodExpiring"
        ).items
        assert [e.involved_object.name for e in expiring] == [gone.node_name]

    report = run_checked(sim, inspect)
    assert report["pods"] == {"total": 2, "running": 2, "pending": 0}
    assert report["instances"]["terminated"] == 1

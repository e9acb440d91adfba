"""Issue 22's scale scenarios at 50 nodes: deprovisioning by consolidation and by drift (emptiness is in
``test_scale_provisioning``). Behaviour only: nodes removed or replaced, pods placed, invariants holding."""

from __future__ import annotations

import math

from benchmarks.scale import run_scenario

NODES = 50


def test_halving_a_deployment_of_pairs_consolidates_its_nodes() -> None:
    result = run_scenario("consolidation", NODES, 0, 0, tick=5.0)
    assert result["running_at"] is not None and result["running_nodeclaims"] >= NODES, result
    assert result["consolidated_after"] is not None, result
    assert result["nodeclaims_after"] <= math.ceil(NODES / 2 * 1.1)
    assert result["invariant_violations"] == [] and result["lambda_failures"] == 0


def test_a_changed_nodepool_template_replaces_every_node() -> None:
    # Two rounds of 25 rather than the benchmark's five of 10: the same path, in less of the suite's time.
    result = run_scenario("drift", NODES, 0, 0, tick=5.0, drift_budget="50%")
    assert result["running_at"] is not None, result
    assert result["drifted_after"] is not None, result  # no node of the old template left, every pod Running
    assert result["invariant_violations"] == [] and result["lambda_failures"] == 0

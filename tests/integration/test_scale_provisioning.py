"""Issue 22's scale scenarios at 50 nodes: provisioning (``python -m benchmarks scale`` runs them at 500).

They assert behaviour only (every pod placed, nodes removed, every invariant holding), never time.
"""

from __future__ import annotations

from benchmarks.scale import run_scenario

NODES = 50


def test_a_burst_of_anti_affine_pods_gets_a_node_each_and_the_empty_nodes_all_go() -> None:
    result = run_scenario("emptiness", NODES, 0, 0, tick=5.0)
    assert result["running_at"] is not None, result  # every pod Running
    assert result["running_nodeclaims"] == NODES  # hostname anti-affinity: one node per pod
    assert result["empty_nodes_gone_after"] is not None, result  # scaled to 0: every node removed
    assert result["invariant_violations"] == [] and result["lambda_failures"] == 0
    passes = result["passes"]
    assert all(p["dynamodb_scans"] == 0 for p in passes.values())  # no pass scans the table


def test_pods_spread_over_zones_and_hosts_are_all_placed() -> None:
    result = run_scenario("spread", NODES, 0, 0, tick=5.0)
    assert result["pods"] == 20 * NODES
    assert result["running_at"] is not None, result
    assert result["invariant_violations"] == [] and result["lambda_failures"] == 0

"""Emptiness and consolidation end to end on the simulator: scale-down, merge, do-not-disrupt, budgets."""

from __future__ import annotations

import pytest
from serverless_karpenter.disruption.candidates import REPLACEMENT_FOR_ANNOTATION, pending_command
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter_sim.scenario import Scenario

from tests.integration.disruption_helpers import (
    active,
    deployment_of,
    explain,
    pods_by_node,
    pool_of,
    running,
    running_pods,
    scenario,
)

pytestmark = pytest.mark.integration

SCALE_AT = 240.0
CONSOLIDATE_AFTER = 60.0
TICK = 15.0


def test_scale_down_empty_nodes_go_after_consolidate_after(capsys: pytest.CaptureFixture[str]) -> None:
    with running(scenario("consolidation-scale-down"), tick_seconds=TICK) as (sim, watch):
        sim.run_for(SCALE_AT)
        assert {r.state for r in active(sim)} == {NodeClaimState.INITIALIZED}
        sim.scale({"deployment": "default/web", "replicas": 3})
        sim.run_for(30)
        empty = sorted(node for node, pods in pods_by_node(sim).items() if not pods)
        assert empty
        sim.run_for(12 * 60)

        remaining = pods_by_node(sim)
        assert not set(empty) & set(remaining), "every node empty after the scale-down is gone"
        assert all(remaining.values()), "no empty node remains"
        assert len(remaining) <= 3
        # Nothing went before consolidateAfter had passed since the pods left.
        assert min(watch.disrupting_at.values()) >= SCALE_AT + CONSOLIDATE_AFTER
        # The default budget (10% of at most 10 nodes, rounded up) disrupts one node at a time.
        assert watch.max_deleting == 1
        assert running_pods(sim) == 3
        assert sim.kube_server.audit.pdb_violations == 0
        assert sim.lambdas.errors.get("disruption", 0) == 0


def test_two_underused_nodes_end_on_one_cheaper_node() -> None:
    """Scaled down, the two nodes end as one cheaper node. Karpenter's order of events: the small node,
    whose pods did not change, is consolidatable as soon as its pod fits elsewhere (consolidateAfter
    counts from its own last pod event); the big one is then replaced by a cheaper one. Every replacement
    is initialized before the nodes it replaces start draining, and those carry the disrupted taint."""
    with running(scenario("consolidation-merge"), tick_seconds=TICK) as (sim, watch):
        scale_at = next(i for i, step in enumerate(sim.scenario.steps) if step.kind == "scale")
        for step in sim.scenario.steps[:scale_at]:
            sim.run_step(step)
        before = active(sim)
        assert len(before) == 2
        cost_before = sum(r.price_per_hour or 0 for r in before)
        for step in sim.scenario.steps[scale_at:]:
            sim.run_step(step)

        after = active(sim)
        assert len(after) == 1
        assert (after[0].price_per_hour or 0) < cost_before
        assert set(watch.disrupting_at) == {r.name for r in before}
        replaced_any: set[str] = set()
        for replacement in watch.replacements():
            replaced = [r for r in watch.records.values() if replaced_by(r) == replacement_of(replacement)]
            assert replaced
            up = watch.initialized_at[replacement.name]
            assert all(watch.disrupting_at[r.name] >= up for r in replaced)
            replaced_any |= {r.name for r in replaced}
        # Nothing new landed on a replaced node meanwhile: Karpenter's disrupted taint from the
        # replacement's launch (a node that went by a delete needs no replacement).
        assert watch.tainted_while_replacing == replaced_any
        assert running_pods(sim) == 2
        assert sim.kube_server.audit.pdb_violations == 0


def replacement_of(record: NodeClaimRecord) -> str:
    return record.annotations[REPLACEMENT_FOR_ANNOTATION]


def replaced_by(record: NodeClaimRecord) -> str | None:
    command = pending_command(record)
    return str(command["id"]) if command and command.get("stage") == "replacing" else None


def _protect_b(loaded: Scenario) -> None:
    template = deployment_of(loaded, "b")["spec"]["template"]
    template["metadata"]["annotations"] = {"karpenter.sh/do-not-disrupt": "true"}


def test_node_with_do_not_disrupt_pod_stays(capsys: pytest.CaptureFixture[str]) -> None:
    with running(scenario("consolidation-merge", _protect_b), tick_seconds=TICK) as (sim, _):
        for step in sim.scenario.steps[:-1]:
            sim.run_step(step)
        sim.run_for(30)
        protected = next(node for node, pods in pods_by_node(sim).items() if any("/b-" in p for p in pods))
        (claim,) = [r.name for r in active(sim) if r.node_name == protected]
        sim.run_step(sim.scenario.steps[-1])

        # The other node was consolidated; the protected one is still there, as the same NodeClaim.
        assert [r.name for r in active(sim) if r.node_name == protected] == [claim]
        assert protected in pods_by_node(sim)
        out = explain(protected, capsys)
        assert 'karpenter.sh/do-not-disrupt="true"' in out and "blocked" in out, out
        assert running_pods(sim) == 2
        assert sim.kube_server.audit.pdb_violations == 0


def _no_empty_budget(loaded: Scenario) -> None:
    disruption = pool_of(loaded)["spec"]["disruption"]
    # Emptiness alone, so that consolidation moving pods around cannot blur what the budget does.
    disruption["consolidationPolicy"] = "WhenEmpty"
    disruption["budgets"] = [{"nodes": "0", "reasons": ["Empty"]}]


def test_budget_zero_for_empty_blocks_emptiness(capsys: pytest.CaptureFixture[str]) -> None:
    with running(scenario("consolidation-scale-down", _no_empty_budget), tick_seconds=TICK) as (sim, watch):
        sim.run_for(SCALE_AT)
        nodes = len(active(sim))
        sim.scale({"deployment": "default/web", "replicas": 3})
        sim.run_for(30)
        empty = sorted(node for node, pods in pods_by_node(sim).items() if not pods)
        assert empty
        sim.run_for(6 * 60)
        assert not watch.disrupting_at, "no node was disrupted"
        assert len(active(sim)) == nodes
        assert set(empty) <= set(pods_by_node(sim))
        out = explain(empty[0], capsys)
        assert 'budget of nodepool "default" (nodes: "0"' in out and "Empty" in out, out
        # Karpenter's Event on the NodePool whose budget blocks: one Event, its count raised each pass.
        blocked = [
            e
            for e in sim.kube.core.list_event_for_all_namespaces(
                field_selector="reason=DisruptionBlocked"
            ).items
            if e.involved_object.kind == "NodePool" and e.involved_object.name == "default"
        ]
        assert len(blocked) == 1 and (blocked[0].count or 0) >= 2, blocked
        assert (blocked[0].message or "").startswith("No allowed disruptions due to blocking budget: ")
        assert sim.kube_server.audit.pdb_violations == 0

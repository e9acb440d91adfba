"""What every method computes with: the NodePools' disruption budgets (Karpenter's
BuildDisruptionBudgetMapping) and the scheduling simulation of removing candidates (its
SimulateScheduling), as Karpenter's ``helpers.go``. Pure: simulations use the provisioning Scheduler on
copies of the cluster's capacity, without the candidates."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from serverless_karpenter.disruption.budgets import BudgetVerdict, allowed_disruptions
from serverless_karpenter.disruption.candidates import (
    REPLACEMENT_FOR_ANNOTATION,
    Blocker,
    Candidate,
    Snapshot,
)
from serverless_karpenter.disruption.command import read_command
from serverless_karpenter.disruption.methods.types import BUDGET_REASON, Evaluation
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.provisioning.provisioner import existing_capacity
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter.scheduling.scheduler import (
    ExistingCapacity,
    NewNodeClaim,
    Scheduler,
    SchedulingResult,
)
from serverless_karpenter.termination.handoff import is_reschedulable

# --- budgets ----------------------------------------------------------------------------------------------


def _node_ready(node: Mapping[str, Any] | None) -> bool:
    conditions = ((node or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _commands_under_way(snapshot: Snapshot) -> set[str]:
    return {
        command.id
        for r in snapshot.records
        if r.state != NodeClaimState.TERMINATED and (command := read_command(r)) is not None
    }


def _executing(record: NodeClaimRecord) -> bool:
    """In a command past its validation: tainted while its replacements launch (Karpenter's
    MarkedForDeletion). A command still validating holds no budget, as in Karpenter; its validation
    checks the budget again, so commands validating side by side cannot together exceed it."""
    command = read_command(record)
    return command is not None and command.replacing and not record.is_deleting


def budget_for(snapshot: Snapshot, nodepool: str, reason: str) -> BudgetVerdict:
    """Karpenter's BuildDisruptionBudgetMapping for one NodePool and reason.

    The total is the NodePool's initialized nodes whose instance is not yet terminating (a launched or
    registered node takes no pods, so it must not raise a percentage). Nodes NotReady, deleting or in a
    command past its validation count against the budget. Beyond Karpenter, the initialized
    replacements of a command still under way are left out of the total: counted, a 10-node NodePool
    with two replacements up would be 12 nodes and a 20% budget would allow a third disruption while the
    first two are not yet gone.
    """
    under_way = _commands_under_way(snapshot)
    counted = [
        r
        for r in snapshot.records
        if r.nodepool == nodepool
        and r.initialized_at is not None
        and r.state not in (NodeClaimState.TERMINATING, NodeClaimState.TERMINATED)
        and r.annotations.get(REPLACEMENT_FOR_ANNOTATION) not in under_way
    ]
    disrupting = sum(
        1 for r in counted if r.is_deleting or _executing(r) or not _node_ready(snapshot.node(r.node_name))
    )
    model = snapshot.nodepools[nodepool]
    return allowed_disruptions(model.spec.disruption.budgets, reason, len(counted), disrupting, snapshot.now)


def within_budgets(
    snapshot: Snapshot, method: str, chosen: Sequence[Candidate], evaluation: Evaluation
) -> list[Candidate]:
    """The candidates budgets allow, in order; notes the rest as blocked by their budget."""
    remaining: dict[str, int] = {}
    allowed: list[Candidate] = []
    for candidate in chosen:
        pool = candidate.record.nodepool
        if pool not in remaining:
            remaining[pool] = budget_for(snapshot, pool, BUDGET_REASON[method]).allowed
        if remaining[pool] > 0:
            remaining[pool] -= 1
            allowed.append(candidate)
        else:
            verdict = budget_for(snapshot, pool, BUDGET_REASON[method])
            text = verdict.describe(pool, BUDGET_REASON[method])
            evaluation.note(candidate.name, method, f"blocked: {text}", Blocker("Budget", text))
    return allowed


# --- scheduling simulation -------------------------------------------------------------------------------


@dataclass
class Rescheduling:
    """Where the candidates' pods would go, counting everything else that needs a place."""

    result: SchedulingResult
    # Pod key -> why it would not get a place: the candidates' pods and those of nodes already leaving
    # (the pending pods' troubles are the provisioner's).
    errors: dict[str, str]
    # The new NodeClaims the candidates' pods need: the command's replacements. New NodeClaims only
    # pending pods or leaving nodes' pods need are the provisioner's to launch.
    new_nodeclaims: list[NewNodeClaim]

    @property
    def ok(self) -> bool:
        return not self.errors


def simulate(snapshot: Snapshot, removed: Sequence[Candidate]) -> Rescheduling:
    """Karpenter's SimulateScheduling: the candidates' pods, every pending pod and the pods of every
    node already leaving, onto the nodes that stay and the capacity in flight.

    A candidate's pod may not count on capacity that is not initialized yet (a NodeClaim in flight, or a
    node not yet initialized): it would be evicted before its place exists (Karpenter's
    UninitializedNodeError). The pods of leaving nodes may, as Karpenter assumes the capacity launched
    for them will come up.
    """
    leaving = snapshot.leaving()
    removed_nodes = {c.node_name for c in removed}
    # Each node's capacity is its own (its pods, its record): worked out once a snapshot for every node
    # that is not leaving, then each simulation drops its candidates' (each a copy: the scheduler
    # takes from what it places on). Issue 22: at 1,000 nodes this was half of each simulation.
    capacity = [
        dataclasses.replace(c, available=dict(c.available), pods=list(c.pods))
        for c in _staying_capacity(snapshot, leaving)
        if c.name not in removed_nodes
    ]
    candidate_pods = [p for c in removed for p in c.reschedulable]
    moving = [p for name in sorted(leaving - {c.node_name for c in removed}) for p in snapshot.pods_on(name)]
    moving = [p for p in moving if is_reschedulable(p)]
    # Karpenter simulates disruption with reserved-capacity fallback (only the provisioner is strict).
    result = Scheduler(snapshot.templates, capacity, reserved_fallback=True).solve(
        [*candidate_pods, *moving, *snapshot.pending]
    )
    ours = {podlib.key(p) for p in candidate_pods}
    must_place = ours | {podlib.key(p) for p in moving}
    errors = {
        key: "; ".join(f"{k}: {v}" if k else v for k, v in sorted(reasons.items()))
        for key, reasons in result.unschedulable.items()
        if key in must_place
    }
    initialized_nodes = {r.node_name for r in snapshot.records if r.state == NodeClaimState.INITIALIZED}
    managed_nodes = {r.node_name for r in snapshot.records if r.node_name}
    for name, keys in result.existing.items():
        uninitialized = name.startswith("nodeclaim/") or (
            name in managed_nodes and name not in initialized_nodes
        )
        if not uninitialized:
            continue
        for key in keys:
            if key in ours:
                errors[key] = (
                    f"would schedule against uninitialized {name if '/' in name else 'node/' + name}"
                )
    new = [c for c in result.new_nodeclaims if ours.intersection(c.pods)]
    return Rescheduling(result, errors, new)


def _staying_capacity(snapshot: Snapshot, leaving: set[str]) -> list[ExistingCapacity]:
    """The same picture of the cluster the provisioner schedules on: DaemonSets' room kept on nodes that
    do not run them yet, startup taints of nodes still starting, launched claims' instance labels."""
    memo: tuple[frozenset[str], list[ExistingCapacity]] | None = snapshot.memo.get("capacity")
    if memo is not None and memo[0] == leaving:
        return memo[1]
    templates = snapshot.templates
    capacity = existing_capacity(
        [n for n in snapshot.nodes if n["metadata"]["name"] not in leaving],
        [p for p in snapshot.pods if podlib.node_name(p) not in leaving],
        snapshot.records,
        nodepools=list(snapshot.nodepool_manifests.values()),
        daemon_pods=templates[0].daemonsets if templates else (),
        instance_type_labels={it.name: it.labels for t in templates for it in t.instance_types},
    )
    snapshot.memo["capacity"] = (frozenset(leaving), capacity)
    return capacity


def describe_errors(errors: Mapping[str, str]) -> str:
    pod, why = sorted(errors.items())[0]
    more = f" and {len(errors) - 1} more" if len(errors) > 1 else ""
    return f"pod {pod}{more} would not schedule: {why}"

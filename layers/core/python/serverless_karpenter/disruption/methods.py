"""Disruption methods in Karpenter's order: Emptiness, Drift, Multi-node and Single-node consolidation.

Each method looks at the candidates and returns at most one command, plus a note per candidate saying
why it did not act on it (the material of ``explain node``). Budgets cap how many candidates of each
NodePool a method may take. Pure: scheduling simulations use the provisioning Scheduler on copies of
the cluster's capacity, without the candidates.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.disruption.budgets import (
    REASON_DRIFTED,
    REASON_EMPTY,
    REASON_EXPIRED,
    REASON_UNDERUTILIZED,
    BudgetVerdict,
    allowed_disruptions,
)
from serverless_karpenter.disruption.candidates import (
    REPLACEMENT_FOR_ANNOTATION,
    Blocker,
    Candidate,
    Options,
    Snapshot,
    consolidation_blocker,
    graceful_blocker,
    no_controller_blocker,
    pending_command,
)
from serverless_karpenter.disruption.drift import record_drift
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.provisioning.provisioner import existing_capacity
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter.scheduling.requirements import Requirements
from serverless_karpenter.scheduling.scheduler import (
    ExistingCapacity,
    InstanceTypeLike,
    NewNodeClaim,
    Scheduler,
    SchedulingResult,
    cheapest_offering,
    nodepool_requirements,
)
from serverless_karpenter.termination.handoff import is_reschedulable

EMPTINESS = "emptiness"
DRIFT = "drift"
MULTI = "multi-node consolidation"
SINGLE = "single-node consolidation"
EXPIRATION = "expiration"
METHODS = (EMPTINESS, DRIFT, MULTI, SINGLE)
BUDGET_REASON = {
    EMPTINESS: REASON_EMPTY,
    DRIFT: REASON_DRIFTED,
    MULTI: REASON_UNDERUTILIZED,
    SINGLE: REASON_UNDERUTILIZED,
}
# Karpenter considers at most this many candidates in one multi-node consolidation.
MULTI_NODE_MAX = 100
# Karpenter's Unconsolidatable messages for the reasons consolidation computes here (``explain node``
# gives ours in full).
CANT_REPLACE_CHEAPER = "Can't replace with a cheaper node"
SPOT_TO_SPOT_DISABLED = "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node"


def consolidation_disabled(nodepool: str) -> str:
    return f'NodePool "{nodepool}" has consolidation disabled'


def non_empty_consolidation_disabled(nodepool: str) -> str:
    return f'NodePool "{nodepool}" has non-empty consolidation disabled'


@dataclass
class Command:
    method: str
    candidates: list[Candidate]
    replacements: list[NewNodeClaim] = field(default_factory=list)
    detail: str = ""

    @property
    def action(self) -> str:
        return "replace" if self.replacements else "delete"

    @property
    def reason(self) -> str:
        return BUDGET_REASON.get(self.method, REASON_EXPIRED)

    def names(self) -> list[str]:
        return sorted(c.name for c in self.candidates)


@dataclass
class Evaluation:
    command: Command | None = None
    # nodeclaim -> [(method, why it did not act)], in method order.
    notes: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    blockers: dict[str, Blocker] = field(default_factory=dict)  # the first blocking rule per nodeclaim
    # nodeclaim -> Karpenter's Unconsolidatable message, for the first reason it has one for.
    unconsolidatable: dict[str, str] = field(default_factory=dict)
    # A consolidation method ran out of time: the cluster is not known to be consolidated.
    timed_out: bool = False

    def note(
        self,
        name: str,
        method: str,
        text: str,
        blocker: Blocker | None = None,
        unconsolidatable: str | None = None,
    ) -> None:
        self.notes.setdefault(name, []).append((method, text))
        if blocker is not None:
            self.blockers.setdefault(name, blocker)
        if unconsolidatable is not None:
            self.unconsolidatable.setdefault(name, unconsolidatable)


# --- budgets ----------------------------------------------------------------------------------------------


def _node_ready(node: Mapping[str, Any] | None) -> bool:
    conditions = ((node or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _commands_under_way(snapshot: Snapshot) -> set[str]:
    return {
        str(command.get("id"))
        for r in snapshot.records
        if r.state != NodeClaimState.TERMINATED and (command := pending_command(r)) is not None
    }


def _executing(record: NodeClaimRecord) -> bool:
    """In a command past its validation: tainted while its replacements launch (Karpenter's
    MarkedForDeletion). A command still validating holds no budget, as in Karpenter; its validation
    checks the budget again, so commands validating side by side cannot together exceed it."""
    command = pending_command(record)
    return command is not None and command.get("stage") == "replacing" and not record.is_deleting


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


def _price(claim: NewNodeClaim, it: InstanceTypeLike) -> tuple[float, str]:
    offering = cheapest_offering(claim.requirements, it)
    if offering is None:
        return float("inf"), ""
    return float(offering.price), str(offering.capacity_type)


def _describe_errors(errors: Mapping[str, str]) -> str:
    pod, why = sorted(errors.items())[0]
    more = f" and {len(errors) - 1} more" if len(errors) > 1 else ""
    return f"pod {pod}{more} would not schedule: {why}"


def _cheaper_options(
    claim: NewNodeClaim, requirements: Requirements, below: float
) -> list[tuple[InstanceTypeLike, float, str]]:
    """The claim's instance types whose cheapest offering ``requirements`` allow costs less than
    ``below``, cheapest first: Karpenter's RemoveInstanceTypeOptionsByPriceAndMinValues."""
    priced = []
    for it in claim.instance_types:
        offering = cheapest_offering(requirements, it)
        if offering is not None and float(offering.price) < below:
            priced.append((it, float(offering.price), str(offering.capacity_type)))
    return sorted(priced, key=lambda t: (t[1], t[0].name))


def _narrowed(claim: NewNodeClaim, requirements: Requirements, names: Sequence[str]) -> NewNodeClaim:
    keep = set(names)
    return dataclasses.replace(
        claim,
        requirements=requirements,
        labels=dict(claim.labels),
        daemon_overhead=dict(claim.daemon_overhead),
        pod_requests=dict(claim.pod_requests),
        instance_types=[it for it in claim.instance_types if it.name in keep],
        pods=list(claim.pods),
    )


def _no_cheaper(removed: Sequence[Candidate], claim: NewNodeClaim, options: Options) -> str:
    current = " + ".join(c.describe() for c in removed)
    priced = sorted(
        ((it, *_price(claim, it)) for it in claim.instance_types), key=lambda t: (t[1], t[0].name)
    )
    best = f"{priced[0][0].name} ${priced[0][1]:.4f}/h" if priced else "none fits"
    rule = "a strictly cheaper replacement" + (
        f", at least {options.min_savings_percent:g}% cheaper" if options.min_savings_percent else ""
    )
    return f"no cheaper replacement: current {current}; best replacement {best} (needs {rule})"


def cheaper_replacement(
    snapshot: Snapshot, removed: Sequence[Candidate], claim: NewNodeClaim, options: Options
) -> tuple[NewNodeClaim | None, str, str]:
    """The replacement restricted to the instance types strictly cheaper than what it replaces, or why
    there is none (and Karpenter's Unconsolidatable message for it; "" with a replacement).

    Karpenter's computeConsolidation: when every candidate is spot and the replacement may be spot, only
    a spot replacement is considered and only behind the SpotToSpotConsolidation gate; a single node
    then needs 15 cheaper spot types and launches among the 15 cheapest. Otherwise a replacement that may
    be on-demand or spot is held to the capacity type that made it cheaper, so a launch cannot fall back
    to a dearer one.
    """
    current = sum(c.price for c in removed)
    below = current * (1 - options.min_savings_percent / 100.0)
    capacity_types = claim.requirements.get(wk.CAPACITY_TYPE)
    spot_only = claim.requirements.merged(Requirements.from_labels({wk.CAPACITY_TYPE: wk.CAPACITY_TYPE_SPOT}))
    all_spot = all(c.capacity_type == wk.CAPACITY_TYPE_SPOT for c in removed)
    if all_spot and capacity_types.has(wk.CAPACITY_TYPE_SPOT):
        if not options.spot_to_spot:
            return (
                None,
                "spot-to-spot consolidation is off (SPOT_TO_SPOT_CONSOLIDATION)",
                SPOT_TO_SPOT_DISABLED,
            )
        requirements = spot_only
        kept = _cheaper_options(claim, requirements, below)
        if kept and len(removed) == 1:
            if len(kept) < options.spot_to_spot_min_types:
                return (
                    None,
                    f"spot-to-spot replacement needs {options.spot_to_spot_min_types} cheaper instance "
                    f"types, found {len(kept)}",
                    f"SpotToSpotConsolidation requires {options.spot_to_spot_min_types} cheaper instance "
                    f"type options than the current candidate to consolidate, got {len(kept)}",
                )
            kept = kept[: options.spot_to_spot_min_types]
    else:
        requirements = claim.requirements
        kept = _cheaper_options(claim, requirements, below)
        if capacity_types.has(wk.CAPACITY_TYPE_SPOT) and capacity_types.has(wk.CAPACITY_TYPE_ON_DEMAND):
            spot = _cheaper_options(claim, spot_only, below)
            if spot:
                requirements, kept = spot_only, spot
            elif kept:
                requirements = claim.requirements.merged(
                    Requirements.from_labels({wk.CAPACITY_TYPE: kept[0][2]})
                )
                kept = _cheaper_options(claim, requirements, below)
    if len(removed) == 1 and not options.same_type_replacement:
        # Beyond Karpenter: the same type and capacity type again is churn for a price wobble.
        only = removed[0]
        kept = [k for k in kept if not (k[0].name == only.instance_type and k[2] == only.capacity_type)]
    if len(removed) > 1:
        # Karpenter's filterOutSameInstanceType: replacing N nodes by one of a type among them must be
        # cheaper than the cheapest of them of that type, else deleting the others does it with less churn.
        ceiling = min(
            (c.price for c in removed if any(c.instance_type == k[0].name for k in kept)), default=None
        )
        if ceiling is not None:
            kept = [k for k in kept if k[1] < ceiling]
    if not kept:
        return None, _no_cheaper(removed, claim, options), CANT_REPLACE_CHEAPER
    replacement = _narrowed(claim, requirements, [k[0].name for k in kept])
    saving = current - kept[0][1]
    return replacement, f"replace with {kept[0][0].name} ${kept[0][1]:.4f}/h, saving ${saving:.4f}/h", ""


def consolidate(
    snapshot: Snapshot, removed: Sequence[Candidate], options: Options, method: str
) -> tuple[Command | None, str, str]:
    """The command, or why there is none and Karpenter's Unconsolidatable message for it."""
    rescheduling = simulate(snapshot, removed)
    if not rescheduling.ok:
        why = _describe_errors(rescheduling.errors)
        return None, why, why  # Karpenter's is its scheduler's errors, as ours
    new = rescheduling.new_nodeclaims
    if not new:
        placed = {k for c in removed for k in map(podlib.key, c.reschedulable)}
        where = sorted(n for n, keys in rescheduling.result.existing.items() if placed.intersection(keys))
        return (
            Command(
                method,
                list(removed),
                detail=f"pods fit on existing capacity: {', '.join(where) or 'none needed'}",
            ),
            "",
            "",
        )
    if len(new) > 1:
        return (
            None,
            f"its pods would need {len(new)} new nodes",
            f"Can't remove without creating {len(new)} candidates",
        )
    replacement, why, event = cheaper_replacement(snapshot, removed, new[0], options)
    if replacement is None:
        return None, why, event
    return Command(method, list(removed), [replacement], detail=why), "", ""


# --- drift --------------------------------------------------------------------------------------------------


def drift_reason(snapshot: Snapshot, candidate: Candidate) -> str | None:
    record = candidate.record
    annotations = {**record.annotations, **(candidate.node["metadata"].get("annotations") or {})}
    resolved = snapshot.resolved.get(record.nodeclass)
    nodeclass = snapshot.nodeclasses.get(record.nodeclass)
    static = record_drift(record, annotations, candidate.nodepool, nodeclass, resolved)
    if static is not None:
        return static
    if resolved is not None:
        network = snapshot.instance_network.get(record.instance_id or "")
        subnet_ids = {getattr(s, "id", None) for s in resolved.subnets}
        if network is not None and network.subnet_id and network.subnet_id not in subnet_ids:
            return f"SubnetDrift: subnet {network.subnet_id} is no longer selected"
        if network is None and record.zone and record.zone not in resolved.zones:
            return f"SubnetDrift: no selected subnet in {record.zone}"
        groups = frozenset(resolved.security_group_ids)
        if (
            network is not None
            and network.security_group_ids
            and groups
            and network.security_group_ids != groups
        ):
            return (
                f"SecurityGroupDrift: {', '.join(sorted(network.security_group_ids))} is not the selected "
                f"{', '.join(sorted(groups))}"
            )
    manifest = snapshot.nodepool_manifests.get(record.nodepool)
    if manifest is not None:
        requirements, _, _ = nodepool_requirements(manifest)
        labels = candidate.node["metadata"].get("labels") or {}
        for key, requirement in requirements.items():
            value = labels.get(key)
            if value is not None and not requirement.has(value):
                return (
                    f'RequirementsDrifted: label "{key}"="{value}" no longer satisfies '
                    f"{requirement.describe()}"
                )
    return None


# --- the methods --------------------------------------------------------------------------------------------


def emptiness(
    snapshot: Snapshot, pool: Sequence[Candidate], options: Options, evaluation: Evaluation
) -> Command | None:
    empty: list[Candidate] = []
    for candidate in pool:
        if candidate.reschedulable:
            evaluation.note(candidate.name, EMPTINESS, f"not empty: {len(candidate.reschedulable)} pod(s)")
            continue
        annotations = candidate.node["metadata"].get("annotations") or {}
        if (annotations.get(wk.DO_NOT_DISRUPT) or "").strip().lower() == "true":
            text = f'node {candidate.node_name} has annotation {wk.DO_NOT_DISRUPT}="true"'
            evaluation.note(candidate.name, EMPTINESS, f"blocked: {text}", Blocker("DoNotDisrupt", text))
            continue
        blocker = consolidation_blocker(candidate, options, snapshot.now)
        if blocker is not None:
            evaluation.note(
                candidate.name, EMPTINESS, f"not yet: {blocker.message}", blocker, _disabled(candidate)
            )
            continue
        empty.append(candidate)
    allowed = within_budgets(snapshot, EMPTINESS, empty, evaluation)
    if not allowed:
        return None
    return Command(EMPTINESS, allowed, detail=f"{len(allowed)} empty node(s)")


def drift(
    snapshot: Snapshot, pool: Sequence[Candidate], options: Options, evaluation: Evaluation
) -> Command | None:
    drifted: list[tuple[Candidate, str]] = []
    for candidate in pool:
        reason = drift_reason(snapshot, candidate)
        if reason is None:
            evaluation.note(candidate.name, DRIFT, "not drifted")
            continue
        blocker = graceful_blocker(candidate, snapshot.pdbs, snapshot.now, eventual=True)
        if blocker is not None:
            evaluation.note(
                candidate.name, DRIFT, f"drifted ({reason}) but blocked: {blocker.message}", blocker
            )
            continue
        drifted.append((candidate, reason))
    drifted.sort(key=lambda d: d[0].disruption_cost())
    allowed = within_budgets(snapshot, DRIFT, [c for c, _ in drifted], evaluation)
    reasons = {c.name: r for c, r in drifted}
    empty = [c for c in allowed if not c.reschedulable]
    if empty:
        return Command(DRIFT, empty, detail="; ".join(f"{c.name}: {reasons[c.name]}" for c in empty))
    for candidate in allowed:
        rescheduling = simulate(snapshot, [candidate])
        if not rescheduling.ok:
            evaluation.note(candidate.name, DRIFT, f"drifted but {_describe_errors(rescheduling.errors)}")
            continue
        return Command(DRIFT, [candidate], list(rescheduling.new_nodeclaims), detail=reasons[candidate.name])
    return None


def _disabled(candidate: Candidate) -> str | None:
    """Karpenter's Unconsolidatable message for a NodePool with consolidateAfter: Never."""
    if candidate.nodepool.consolidate_after_timedelta() is None:
        return consolidation_disabled(candidate.record.nodepool)
    return None


def consolidatable(
    snapshot: Snapshot, pool: Sequence[Candidate], options: Options, evaluation: Evaluation, method: str
) -> list[Candidate]:
    out = []
    for candidate in pool:
        if not candidate.reschedulable:
            # Empty nodes are emptiness's, under the Empty budget: a budget that stops emptiness must
            # not be side-stepped by consolidation.
            evaluation.note(candidate.name, method, "empty: left to emptiness")
            continue
        if candidate.nodepool.spec.disruption.consolidation_policy != "WhenEmptyOrUnderutilized":
            text = f'nodepool "{candidate.record.nodepool}" has consolidationPolicy WhenEmpty'
            evaluation.note(
                candidate.name,
                method,
                f"blocked: {text}",
                Blocker("Policy", text),
                _disabled(candidate) or non_empty_consolidation_disabled(candidate.record.nodepool),
            )
            continue
        blocker = (
            consolidation_blocker(candidate, options, snapshot.now)
            or graceful_blocker(candidate, snapshot.pdbs, snapshot.now)
            or no_controller_blocker(candidate)
        )
        if blocker is not None:
            evaluation.note(
                candidate.name, method, f"blocked: {blocker.message}", blocker, _disabled(candidate)
            )
            continue
        out.append(candidate)
    out.sort(key=Candidate.disruption_cost)
    return within_budgets(snapshot, method, out, evaluation)


def multi_node(
    snapshot: Snapshot, pool: Sequence[Candidate], options: Options, evaluation: Evaluation
) -> Command | None:
    eligible = consolidatable(snapshot, pool, options, evaluation, MULTI)[:MULTI_NODE_MAX]
    if len(eligible) < 2:
        for c in eligible:
            evaluation.note(c.name, MULTI, "fewer than 2 consolidatable nodes")
        return None
    # Karpenter's binary search for the largest prefix that consolidates; out of time, the best found.
    deadline = time.perf_counter() + options.multi_node_timeout.total_seconds()
    low, high = 2, len(eligible)
    best: Command | None = None
    last_why = ""
    while low <= high:
        if time.perf_counter() > deadline:
            last_why = f"timed out after {options.multi_node_timeout.total_seconds():.0f}s"
            evaluation.timed_out = True
            break
        middle = (low + high) // 2
        command, why, _ = consolidate(snapshot, eligible[:middle], options, MULTI)
        if command is not None:
            best, low = command, middle + 1
        else:
            last_why, high = why, middle - 1
    if best is None:
        for c in eligible:
            evaluation.note(c.name, MULTI, f"no multi-node consolidation: {last_why}")
    return best


def single_node(
    snapshot: Snapshot, pool: Sequence[Candidate], options: Options, evaluation: Evaluation
) -> Command | None:
    deadline = time.perf_counter() + options.single_node_timeout.total_seconds()
    eligible = consolidatable(snapshot, pool, options, evaluation, SINGLE)
    for evaluated, candidate in enumerate(eligible):
        if time.perf_counter() > deadline:
            # As Karpenter: no command this pass, the rest left for a later one.
            evaluation.timed_out = True
            for rest in eligible[evaluated:]:
                evaluation.note(
                    rest.name,
                    SINGLE,
                    f"not evaluated: single-node consolidation timed out after "
                    f"{options.single_node_timeout.total_seconds():.0f}s and {evaluated} node(s)",
                )
            return None
        command, why, event = consolidate(snapshot, [candidate], options, SINGLE)
        if command is not None:
            return command
        # As Karpenter, only single-node consolidation says why a node is Unconsolidatable.
        evaluation.note(candidate.name, SINGLE, why, Blocker("NoCheaperReplacement", why), event)
    return None


MethodFn = Callable[[Snapshot, Sequence[Candidate], Options, Evaluation], Command | None]
METHOD_FUNCTIONS: dict[str, MethodFn] = {
    EMPTINESS: emptiness,
    DRIFT: drift,
    MULTI: multi_node,
    SINGLE: single_node,
}


def evaluate(
    snapshot: Snapshot,
    pool: Sequence[Candidate],
    options: Options,
    *,
    methods: Sequence[str] = METHODS,
    stop_at_first: bool = True,
) -> Evaluation:
    """Run the methods in order; the first command found is the pass's decision."""
    evaluation = Evaluation()
    for method in methods:
        command = METHOD_FUNCTIONS[method](snapshot, pool, options, evaluation)
        if command is not None and evaluation.command is None:
            evaluation.command = command
            if stop_at_first:
                break
    return evaluation

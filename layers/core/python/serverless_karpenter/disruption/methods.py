"""Disruption methods in Karpenter's order: Emptiness, Drift, Multi-node and Single-node consolidation.

Each method looks at the candidates and returns at most one command, plus a note per candidate saying
why it did not act on it (the material of ``explain node``). Budgets cap how many candidates of each
NodePool a method may take. Pure: scheduling simulations use the provisioning Scheduler on copies of
the cluster's capacity, without the candidates.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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
    Blocker,
    Candidate,
    Options,
    Snapshot,
    consolidation_blocker,
    graceful_blocker,
    in_command,
    no_controller_blocker,
)
from serverless_karpenter.lifecycle.model import NodeClaimState
from serverless_karpenter.provisioning.provisioner import existing_capacity
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.scheduler import (
    InstanceTypeLike,
    NewNodeClaim,
    Scheduler,
    SchedulingResult,
    cheapest_offering,
    nodepool_requirements,
)

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


def budget_for(snapshot: Snapshot, nodepool: str, reason: str) -> BudgetVerdict:
    owned = [
        r
        for r in snapshot.records
        if r.nodepool == nodepool and r.node_name and r.state != NodeClaimState.TERMINATED
    ]
    disrupting = sum(1 for r in owned if r.is_deleting or in_command(r))
    model = snapshot.nodepools[nodepool]
    return allowed_disruptions(model.spec.disruption.budgets, reason, len(owned), disrupting, snapshot.now)


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


def simulate(snapshot: Snapshot, removed: Sequence[Candidate]) -> SchedulingResult:
    """Where the removed candidates' pods would go: remaining nodes, in-flight claims, or new claims."""
    gone = {c.node_name for c in removed}
    # Nodes promised to other commands are going too.
    gone |= {r.node_name for r in snapshot.records if r.node_name and in_command(r)}
    nodes = [n for n in snapshot.nodes if n["metadata"]["name"] not in gone]
    bound = [p for p in snapshot.pods if podlib.node_name(p) not in gone]
    capacity = existing_capacity(nodes, bound, snapshot.records)
    pods = [p for c in removed for p in c.reschedulable]
    return Scheduler(snapshot.templates, capacity).solve(pods)


def _price(claim: NewNodeClaim, it: InstanceTypeLike) -> tuple[float, str]:
    offering = cheapest_offering(claim.requirements, it)
    if offering is None:
        return float("inf"), ""
    return float(offering.price), str(offering.capacity_type)


def _describe_unschedulable(result: SchedulingResult) -> str:
    pod, reasons = next(iter(sorted(result.unschedulable.items())))
    why = "; ".join(f"{k}: {v}" if k else v for k, v in sorted(reasons.items()))
    more = f" and {len(result.unschedulable) - 1} more" if len(result.unschedulable) > 1 else ""
    return f"pod {pod}{more} would not schedule: {why}"


def cheaper_replacement(
    snapshot: Snapshot, removed: Sequence[Candidate], claim: NewNodeClaim, options: Options
) -> tuple[NewNodeClaim | None, str, str]:
    """The replacement restricted to instance types cheap enough to be worth it, or why there is none
    (and Karpenter's Unconsolidatable message for it; "" with a replacement)."""
    current = sum(c.price for c in removed)
    priced = sorted(
        ((it, *_price(claim, it)) for it in claim.instance_types), key=lambda t: (t[1], t[0].name)
    )
    best_any = priced[0] if priced else None
    overhead = claim.daemon_overhead
    merges_daemons = (
        options.merge_for_daemon_overhead
        and len(removed) >= 2
        and (overhead.get(resources.CPU, 0) > 0 or overhead.get(resources.MEMORY, 0) > 0)
    )
    threshold = current if merges_daemons else current * (1 - options.min_savings_percent / 100.0)
    kept: list[tuple[InstanceTypeLike, float, str]] = []
    for it, price, capacity_type in priced:
        worth = price <= threshold if merges_daemons else price < threshold
        if not worth:
            continue
        if (
            not options.same_type_replacement
            and len(removed) == 1
            and it.name == removed[0].instance_type
            and capacity_type == removed[0].capacity_type
        ):
            continue  # beyond Karpenter: a same-type replacement is churn for a price wobble
        if len(removed) > 1 and any(it.name == c.instance_type for c in removed):
            # Replacing N nodes by one of their own type is deleting N-1 of them, which single-node
            # consolidation does with less churn (as Karpenter's filterOutSameType).
            continue
        kept.append((it, price, capacity_type))
    all_spot = all(c.capacity_type == wk.CAPACITY_TYPE_SPOT for c in removed)
    event = CANT_REPLACE_CHEAPER
    if all_spot:
        spot = [k for k in kept if k[2] == wk.CAPACITY_TYPE_SPOT]
        if spot:
            if not options.spot_to_spot or len(removed) > 1:
                kept = [k for k in kept if k[2] != wk.CAPACITY_TYPE_SPOT]
                if not options.spot_to_spot:
                    event = SPOT_TO_SPOT_DISABLED
            elif len(spot) < options.spot_to_spot_min_types:
                kept = []
                return (
                    None,
                    f"spot-to-spot replacement needs {options.spot_to_spot_min_types} cheaper instance "
                    f"types, found {len(spot)}",
                    f"SpotToSpotConsolidation requires {options.spot_to_spot_min_types} cheaper instance "
                    f"type options than the current candidate to consolidate, got {len(spot)}",
                )
            else:
                kept = spot[: options.spot_to_spot_min_types]
    if not kept:
        current_text = " + ".join(c.describe() for c in removed)
        best = f"{best_any[0].name} ${best_any[1]:.4f}/h" if best_any else "none fits"
        rule = (
            "equal price allowed to drop DaemonSet overhead"
            if merges_daemons
            else f"needs ≥{options.min_savings_percent:g}% saving, a different type or capacity type"
        )
        return (
            None,
            f"no cheaper replacement: current {current_text}; best replacement {best} ({rule})",
            event,
        )
    names = {it.name for it, _, _ in kept}
    replacement = NewNodeClaim(
        nodepool=claim.nodepool,
        nodeclass=claim.nodeclass,
        requirements=claim.requirements,
        labels=dict(claim.labels),
        taints=claim.taints,
        daemon_overhead=dict(claim.daemon_overhead),
        pod_requests=dict(claim.pod_requests),
        instance_types=[it for it in claim.instance_types if it.name in names],
        pods=list(claim.pods),
    )
    saving = current - kept[0][1]
    return replacement, f"replace with {kept[0][0].name} ${kept[0][1]:.4f}/h, saving ${saving:.4f}/h", ""


def consolidate(
    snapshot: Snapshot, removed: Sequence[Candidate], options: Options, method: str
) -> tuple[Command | None, str, str]:
    """The command, or why there is none and Karpenter's Unconsolidatable message for it."""
    result = simulate(snapshot, removed)
    if result.unschedulable:
        why = _describe_unschedulable(result)
        return None, why, why  # Karpenter's is its scheduler's errors, as ours
    if not result.new_nodeclaims:
        where = ", ".join(sorted(result.existing)) or "nowhere (no pods)"
        return Command(method, list(removed), detail=f"pods fit on existing capacity: {where}"), "", ""
    if len(result.new_nodeclaims) > 1:
        return (
            None,
            f"its pods would need {len(result.new_nodeclaims)} new nodes",
            f"Can't remove without creating {len(result.new_nodeclaims)} candidates",
        )
    replacement, why, event = cheaper_replacement(snapshot, removed, result.new_nodeclaims[0], options)
    if replacement is None:
        return None, why, event
    return Command(method, list(removed), [replacement], detail=why), "", ""


# --- drift --------------------------------------------------------------------------------------------------


def drift_reason(snapshot: Snapshot, candidate: Candidate) -> str | None:
    record = candidate.record
    annotations = {**record.annotations, **(candidate.node["metadata"].get("annotations") or {})}
    pool_hash = annotations.get(wk.NODEPOOL_HASH)
    if pool_hash and pool_hash != candidate.nodepool.template_hash():
        return "NodePoolDrifted: the NodePool template changed"
    nodeclass = snapshot.nodeclasses.get(record.nodeclass)
    class_hash = annotations.get(wk.EC2NODECLASS_HASH)
    if nodeclass is not None and class_hash and class_hash != nodeclass.static_hash():
        return "NodeClassDrifted: the EC2NodeClass changed"
    resolved = snapshot.resolved.get(record.nodeclass)
    if resolved is not None:
        if record.image_id and resolved.amis and record.image_id not in set(resolved.amis.values()):
            current = ", ".join(sorted(set(resolved.amis.values())))
            return f"AMIDrift: {record.image_id} is no longer a resolved AMI ({current})"
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
        blocker = graceful_blocker(candidate, snapshot.pdbs, snapshot.now)
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
        result = simulate(snapshot, [candidate])
        if result.unschedulable:
            evaluation.note(candidate.name, DRIFT, f"drifted but {_describe_unschedulable(result)}")
            continue
        return Command(DRIFT, [candidate], list(result.new_nodeclaims), detail=reasons[candidate.name])
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
    # Karpenter's binary search for the largest prefix that consolidates.
    low, high = 2, len(eligible)
    best: Command | None = None
    last_why = ""
    while low <= high:
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
    for candidate in consolidatable(snapshot, pool, options, evaluation, SINGLE):
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


def same_decision(first: Command, second: Command | None) -> bool:
    """Validation: the re-simulated command still removes the same nodes the same way."""
    return (
        second is not None
        and second.method == first.method
        and second.names() == first.names()
        and second.action == first.action
    )


def describe_pods(pods: Sequence[dict[str, Any]]) -> str:
    keys = [podlib.key(p) for p in pods]
    return ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")

"""What the consolidation methods share, as Karpenter's ``consolidation.go``: which candidates may be
consolidated at all, and the cheaper-replacement rule (``computeConsolidation``)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from serverless_karpenter.api import labels as wk
from serverless_karpenter.disruption.budgets import REASON_UNDERUTILIZED
from serverless_karpenter.disruption.candidates import (
    Blocker,
    Candidate,
    Options,
    Snapshot,
    consolidation_blocker,
    graceful_blocker,
    no_controller_blocker,
)
from serverless_karpenter.disruption.methods.helpers import describe_errors, simulate, within_budgets
from serverless_karpenter.disruption.methods.types import GRACEFUL, Command, Evaluation
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter.scheduling.requirements import Requirements
from serverless_karpenter.scheduling.scheduler import InstanceTypeLike, NewNodeClaim, cheapest_offering

# Karpenter's Unconsolidatable messages for the reasons consolidation computes here (``explain node``
# gives ours in full).
CANT_REPLACE_CHEAPER = "Can't replace with a cheaper node"
SPOT_TO_SPOT_DISABLED = "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node"


def consolidation_disabled(nodepool: str) -> str:
    return f'NodePool "{nodepool}" has consolidation disabled'


def non_empty_consolidation_disabled(nodepool: str) -> str:
    return f'NodePool "{nodepool}" has non-empty consolidation disabled'


def _price(claim: NewNodeClaim, it: InstanceTypeLike) -> tuple[float, str]:
    offering = cheapest_offering(claim.requirements, it)
    if offering is None:
        return float("inf"), ""
    return float(offering.price), str(offering.capacity_type)


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
        why = describe_errors(rescheduling.errors)
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


def disabled(candidate: Candidate) -> str | None:
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
                disabled(candidate) or non_empty_consolidation_disabled(candidate.record.nodepool),
            )
            continue
        blocker = (
            consolidation_blocker(candidate, options, snapshot.now)
            or graceful_blocker(candidate, snapshot.pdbs, snapshot.now)
            or no_controller_blocker(candidate)
        )
        if blocker is not None:
            evaluation.note(
                candidate.name, method, f"blocked: {blocker.message}", blocker, disabled(candidate)
            )
            continue
        out.append(candidate)
    out.sort(key=Candidate.disruption_cost)
    return within_budgets(snapshot, method, out, evaluation)


class Consolidation:
    """The consolidation methods' common part (Karpenter's ``consolidation`` struct): their reason and
    class, and the compute-time bound they run under (``timer``: seconds, monotonic; the simulations'
    own cost is what the bound is on, so it is a timer rather than the cluster's clock)."""

    name = ""
    reason = REASON_UNDERUTILIZED
    disruption_class = GRACEFUL
    consolidation_type = ""

    def __init__(self, timer: Callable[[], float] = time.perf_counter) -> None:
        self.timer = timer

    def should_disrupt(self, snapshot: Snapshot, candidate: Candidate) -> bool:
        """A node with pods to move, under a NodePool that consolidates underutilized nodes."""
        policy = candidate.nodepool.spec.disruption.consolidation_policy
        return bool(candidate.reschedulable) and policy == "WhenEmptyOrUnderutilized"

    def consolidatable(
        self, snapshot: Snapshot, pool: Sequence[Candidate], options: Options, evaluation: Evaluation
    ) -> list[Candidate]:
        return consolidatable(snapshot, pool, options, evaluation, self.name)

"""Disruption budgets (NodePool ``spec.disruption.budgets``): how many nodes a reason may disrupt now.

Karpenter's semantics: a budget without ``schedule`` is always active; one with ``schedule`` (cron, UTC)
and ``duration`` is active from each firing for ``duration``. A budget without ``reasons`` applies to
every reason. ``nodes`` is a count or a percentage of the NodePool's nodes, rounded up. The most
restrictive active budget wins, and nodes already being disrupted count against it. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from croniter import croniter

from serverless_karpenter.api.nodepool import Budget

REASON_EMPTY = "Empty"
REASON_DRIFTED = "Drifted"
REASON_UNDERUTILIZED = "Underutilized"
# Expiration is forceful and takes no budget, but it is a disruption reason all the same.
REASON_EXPIRED = "Expired"
# The reasons a NodeClaim is disrupted voluntarily (by the disruption controller, not an interruption or
# a user's delete): the disruption reason its record carries, as Karpenter's DisruptionReason condition.
VOLUNTARY_REASONS = frozenset({REASON_EMPTY, REASON_DRIFTED, REASON_UNDERUTILIZED, REASON_EXPIRED})


def budget_active(budget: Budget, now: datetime) -> bool:
    """Whether ``now`` lies in one of the budget's windows (always, without a schedule)."""
    if budget.schedule is None:
        return True
    duration = budget.duration_timedelta() or timedelta(0)
    # The first firing after (now - duration) starts the window that covers now, if any does.
    start = croniter(budget.schedule.strip(), now - duration).get_next(datetime)
    return start <= now


def budget_nodes(budget: Budget, total_nodes: int) -> int:
    text = budget.nodes.strip()
    if text.endswith("%"):
        return math.ceil(total_nodes * int(text[:-1]) / 100)
    return int(text)


@dataclass(frozen=True)
class BudgetVerdict:
    """How many more nodes ``reason`` may disrupt in a NodePool, and the budget that decided it."""

    allowed: int
    limit: int | None  # the binding budget's node count; None when no budget applies
    budget: Budget | None
    disrupting: int

    def describe(self, nodepool: str, reason: str) -> str:
        if self.budget is None:
            return f'nodepool "{nodepool}" has no active budget for {reason}'
        window = (
            f", schedule {self.budget.schedule!r} for {self.budget.duration}" if self.budget.schedule else ""
        )
        reasons = f", reasons {self.budget.reasons}" if self.budget.reasons is not None else ""
        return (
            f'budget of nodepool "{nodepool}" (nodes: "{self.budget.nodes}"{window}{reasons}) allows '
            f"{self.limit} disrupted node(s) for {reason}; {self.disrupting} already disrupting"
        )


def allowed_disruptions(
    budgets: Sequence[Budget], reason: str, total_nodes: int, disrupting: int, now: datetime
) -> BudgetVerdict:
    """The most restrictive active budget for ``reason``, less the nodes already being disrupted."""
    best: tuple[int, Budget] | None = None
    for budget in budgets:
        if not budget.applies_to(reason) or not budget_active(budget, now):
            continue
        limit = budget_nodes(budget, total_nodes)
        if best is None or limit < best[0]:
            best = (limit, budget)
    if best is None:
        # No active budget for this reason: Karpenter leaves it unbounded.
        return BudgetVerdict(allowed=total_nodes, limit=None, budget=None, disrupting=disrupting)
    return BudgetVerdict(
        allowed=max(0, best[0] - disrupting), limit=best[0], budget=best[1], disrupting=disrupting
    )

"""Disruption methods in Karpenter's order: Emptiness, Drift, Multi-node and Single-node consolidation.

Each method is a module implementing one ``Method`` (``types.py``, after Karpenter core's
``pkg/controllers/disruption/types.go``): it looks at the candidates and returns at most one command,
plus a note per candidate saying why it did not act on it (the material of ``explain node``). Budgets cap
how many candidates of each NodePool a method may take. Expiration (``expiration.py``) is forceful and
no method, as in Karpenter v1: the use case applies it before the methods run. Pure: no method reads the
cluster; the use case (``disruption/usecases.py``) gathers the snapshot and acts on the decision.
"""

from __future__ import annotations

from collections.abc import Sequence

from serverless_karpenter.disruption.candidates import Candidate, Options, Snapshot
from serverless_karpenter.disruption.methods.consolidation import (
    CANT_REPLACE_CHEAPER,
    SPOT_TO_SPOT_DISABLED,
    cheaper_replacement,
    consolidatable,
    consolidate,
)
from serverless_karpenter.disruption.methods.drift import Drift, drift_reason
from serverless_karpenter.disruption.methods.emptiness import Emptiness
from serverless_karpenter.disruption.methods.expiration import Expiration
from serverless_karpenter.disruption.methods.helpers import Rescheduling, budget_for, simulate, within_budgets
from serverless_karpenter.disruption.methods.multi_node import MULTI_NODE_MAX, MultiNodeConsolidation
from serverless_karpenter.disruption.methods.single_node import SingleNodeConsolidation
from serverless_karpenter.disruption.methods.types import (
    BUDGET_REASON,
    DRIFT,
    EMPTINESS,
    EVENTUAL,
    EXPIRATION,
    GRACEFUL,
    MULTI,
    SINGLE,
    Command,
    Evaluation,
    Method,
)

# Karpenter's order (its controller's methods list): the cheapest to decide and the least disruptive
# first; the first that finds a command is the pass's decision.
ORDER: tuple[Method, ...] = (Emptiness(), Drift(), MultiNodeConsolidation(), SingleNodeConsolidation())
BY_NAME: dict[str, Method] = {method.name: method for method in ORDER}
METHODS = tuple(method.name for method in ORDER)


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
    for name in methods:
        command = BY_NAME[name].compute_command(snapshot, pool, options, evaluation)
        if command is not None and evaluation.command is None:
            evaluation.command = command
            if stop_at_first:
                break
    return evaluation


__all__ = [
    "BUDGET_REASON",
    "BY_NAME",
    "CANT_REPLACE_CHEAPER",
    "DRIFT",
    "EMPTINESS",
    "EVENTUAL",
    "EXPIRATION",
    "GRACEFUL",
    "METHODS",
    "MULTI",
    "MULTI_NODE_MAX",
    "ORDER",
    "SINGLE",
    "SPOT_TO_SPOT_DISABLED",
    "Command",
    "Drift",
    "Emptiness",
    "Evaluation",
    "Expiration",
    "Method",
    "MultiNodeConsolidation",
    "Rescheduling",
    "SingleNodeConsolidation",
    "budget_for",
    "cheaper_replacement",
    "consolidatable",
    "consolidate",
    "drift_reason",
    "evaluate",
    "simulate",
    "within_budgets",
]

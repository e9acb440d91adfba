"""Emptiness, as Karpenter's ``emptiness.go``: delete nodes with no pods to move, under the Empty budget,
once their NodePool's consolidateAfter has passed. Validated like consolidation before it acts."""

from __future__ import annotations

from collections.abc import Sequence

from serverless_karpenter.api import labels as wk
from serverless_karpenter.disruption.budgets import REASON_EMPTY
from serverless_karpenter.disruption.candidates import (
    Blocker,
    Candidate,
    Options,
    Snapshot,
    consolidation_blocker,
)
from serverless_karpenter.disruption.methods.consolidation import disabled
from serverless_karpenter.disruption.methods.helpers import within_budgets
from serverless_karpenter.disruption.methods.types import EMPTINESS, GRACEFUL, Command, Evaluation


class Emptiness:
    name = EMPTINESS
    reason = REASON_EMPTY
    disruption_class = GRACEFUL
    consolidation_type = "empty"

    def should_disrupt(self, snapshot: Snapshot, candidate: Candidate) -> bool:
        return not candidate.reschedulable

    def compute_command(
        self, snapshot: Snapshot, pool: Sequence[Candidate], options: Options, evaluation: Evaluation
    ) -> Command | None:
        empty: list[Candidate] = []
        for candidate in pool:
            if not self.should_disrupt(snapshot, candidate):
                evaluation.note(
                    candidate.name, EMPTINESS, f"not empty: {len(candidate.reschedulable)} pod(s)"
                )
                continue
            annotations = candidate.node["metadata"].get("annotations") or {}
            if (annotations.get(wk.DO_NOT_DISRUPT) or "").strip().lower() == "true":
                text = f'node {candidate.node_name} has annotation {wk.DO_NOT_DISRUPT}="true"'
                evaluation.note(candidate.name, EMPTINESS, f"blocked: {text}", Blocker("DoNotDisrupt", text))
                continue
            blocker = consolidation_blocker(candidate, options, snapshot.now)
            if blocker is not None:
                evaluation.note(
                    candidate.name, EMPTINESS, f"not yet: {blocker.message}", blocker, disabled(candidate)
                )
                continue
            empty.append(candidate)
        allowed = within_budgets(snapshot, EMPTINESS, empty, evaluation)
        if not allowed:
            return None
        return Command(EMPTINESS, allowed, detail=f"{len(allowed)} empty node(s)")

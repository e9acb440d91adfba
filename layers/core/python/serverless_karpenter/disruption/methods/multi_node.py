"""Multi-node consolidation, as Karpenter's ``multinodeconsolidation.go``: the largest prefix of the
cheapest-to-disrupt candidates whose pods fit elsewhere, or on one cheaper replacement, found by binary
search within a compute-time bound (the best found so far when it runs out)."""

from __future__ import annotations

from collections.abc import Sequence

from serverless_karpenter.disruption.candidates import Candidate, Options, Snapshot
from serverless_karpenter.disruption.methods.consolidation import Consolidation, consolidate
from serverless_karpenter.disruption.methods.types import MULTI, Command, Evaluation

# Karpenter considers at most this many candidates in one multi-node consolidation.
MULTI_NODE_MAX = 100


class MultiNodeConsolidation(Consolidation):
    name = MULTI
    consolidation_type = "multi"

    def compute_command(
        self, snapshot: Snapshot, pool: Sequence[Candidate], options: Options, evaluation: Evaluation
    ) -> Command | None:
        eligible = self.consolidatable(snapshot, pool, options, evaluation)[:MULTI_NODE_MAX]
        if len(eligible) < 2:
            for c in eligible:
                evaluation.note(c.name, MULTI, "fewer than 2 consolidatable nodes")
            return None
        # Karpenter's binary search for the largest prefix that consolidates; out of time, the best found.
        deadline = self.timer() + options.multi_node_timeout.total_seconds()
        low, high = 2, len(eligible)
        best: Command | None = None
        last_why = ""
        while low <= high:
            if self.timer() > deadline:
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

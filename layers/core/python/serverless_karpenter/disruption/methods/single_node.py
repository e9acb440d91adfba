"""Single-node consolidation, as Karpenter's ``singlenodeconsolidation.go``: the cheapest-to-disrupt
candidate whose pods fit elsewhere or on one cheaper replacement, within a compute-time bound. Only this
method tells a node why it is Unconsolidatable, as Karpenter's."""

from __future__ import annotations

from collections.abc import Sequence

from serverless_karpenter.disruption.candidates import Blocker, Candidate, Options, Snapshot
from serverless_karpenter.disruption.methods.consolidation import Consolidation, consolidate
from serverless_karpenter.disruption.methods.types import SINGLE, Command, Evaluation


class SingleNodeConsolidation(Consolidation):
    name = SINGLE
    consolidation_type = "single"

    def compute_command(
        self, snapshot: Snapshot, pool: Sequence[Candidate], options: Options, evaluation: Evaluation
    ) -> Command | None:
        deadline = self.timer() + options.single_node_timeout.total_seconds()
        eligible = self.consolidatable(snapshot, pool, options, evaluation)
        for evaluated, candidate in enumerate(eligible):
            if self.timer() > deadline:
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

"""What every disruption method shares: its names, the command it computes, the notes it leaves, and the
``Method`` interface, after Karpenter core's ``pkg/controllers/disruption/types.go``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from serverless_karpenter.disruption.budgets import (
    REASON_DRIFTED,
    REASON_EMPTY,
    REASON_EXPIRED,
    REASON_UNDERUTILIZED,
)
from serverless_karpenter.disruption.candidates import Blocker, Candidate, Options, Snapshot
from serverless_karpenter.scheduling.scheduler import NewNodeClaim

# Our method names: in logs, in the Method metric dimension and in a command's persisted marker.
EMPTINESS = "emptiness"
DRIFT = "drift"
MULTI = "multi-node consolidation"
SINGLE = "single-node consolidation"
EXPIRATION = "expiration"
BUDGET_REASON = {
    EMPTINESS: REASON_EMPTY,
    DRIFT: REASON_DRIFTED,
    MULTI: REASON_UNDERUTILIZED,
    SINGLE: REASON_UNDERUTILIZED,
}

# Karpenter's disruption classes: a graceful method respects do-not-disrupt and blocking PDBs; an
# eventual one is bounded by the NodeClaim's terminationGracePeriod whatever the pods say.
GRACEFUL = "graceful"
EVENTUAL = "eventual"


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


class Method(Protocol):
    """Karpenter's ``Method``: ShouldDisrupt, ComputeCommands, Reason, Class and ConsolidationType.

    ``compute_command`` returns at most one command (the pass decides one at a time) and notes on
    ``evaluation`` why it passed over each candidate it did not take (the material of ``explain node``
    and of the DisruptionBlocked and Unconsolidatable Events). Pure: a method reads the snapshot and
    the options, never the cluster."""

    @property
    def name(self) -> str: ...

    @property
    def reason(self) -> str:
        """The budget reason it disrupts under (Karpenter's ``Reason``)."""
        ...

    @property
    def disruption_class(self) -> str:
        """``GRACEFUL`` or ``EVENTUAL`` (Karpenter's ``Class``)."""
        ...

    @property
    def consolidation_type(self) -> str:
        """ "empty", "single", "multi", or "" for a method that does not consolidate."""
        ...

    def should_disrupt(self, snapshot: Snapshot, candidate: Candidate) -> bool:
        """Whether the candidate is this method's kind of candidate at all (empty, drifted, underused),
        before blockers and budgets."""
        ...

    def compute_command(
        self, snapshot: Snapshot, pool: Sequence[Candidate], options: Options, evaluation: Evaluation
    ) -> Command | None: ...

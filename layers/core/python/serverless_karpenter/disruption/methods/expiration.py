"""Expiration: a node past its NodePool's ``expireAfter`` is deleted. Forceful, as Karpenter v1's
NodeClaim expiration controller (no longer one of its disruption methods): no budgets, no validation, no
simulation; the terminator still drains it honouring PDBs and do-not-disrupt, up to the NodeClaim's
terminationGracePeriod."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from serverless_karpenter.disruption.budgets import REASON_EXPIRED
from serverless_karpenter.disruption.candidates import Candidate, Snapshot, expired
from serverless_karpenter.disruption.methods.types import EXPIRATION

FORCEFUL = "forceful"


class Expiration:
    name = EXPIRATION
    reason = REASON_EXPIRED
    disruption_class = FORCEFUL
    consolidation_type = ""

    def should_disrupt(self, snapshot: Snapshot, candidate: Candidate) -> bool:
        return expired(candidate.record, candidate.nodepool, snapshot.now) is not None

    def due(self, snapshot: Snapshot, pool: Sequence[Candidate]) -> list[tuple[Candidate, timedelta]]:
        """The expired candidates, in pool order, each with how long ago it expired."""
        out: list[tuple[Candidate, timedelta]] = []
        for candidate in pool:
            overdue = expired(candidate.record, candidate.nodepool, snapshot.now)
            if overdue is not None:
                out.append((candidate, overdue))
        return out

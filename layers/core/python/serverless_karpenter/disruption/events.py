"""The Events a disruption pass records: why it left each node alone, as Karpenter's disruption
controller reports them."""

from __future__ import annotations

from collections.abc import Sequence

from serverless_karpenter.disruption import methods as m
from serverless_karpenter.disruption.candidates import Candidate, Snapshot
from serverless_karpenter.lifecycle.nodeclaim_writer import NodeClaimObjects
from serverless_karpenter.provisioning.context import ControlPlane

# The blockers Karpenter reports as a DisruptionBlocked Event on the Node: what it checks of the node and
# its pods before any method (do-not-disrupt, PDBs). Budgets it reports on the NodePool. Consolidation's
# own reasons it reports as Unconsolidatable on the Node, where it has words for them (NodePool policy or
# consolidateAfter: Never, no cheaper replacement, spot-to-spot, pods that would not schedule: the
# Evaluation's ``unconsolidatable``); node age and a consolidateAfter not yet elapsed give no Event.
NODE_EVENT_BLOCKERS = frozenset({"DoNotDisrupt", "PDB"})
BUDGET_BLOCKER = "Budget"
# How long the same reason on the same object is not published again, as Karpenter's disruption events
# set them (pkg/controllers/disruption/events): Unconsolidatable 15 minutes, a NodePool's budget block 1
# minute, any other DisruptionBlocked its recorder's default of 2. Each pass runs every 10 s.
DEDUPE_SECONDS = {"Unconsolidatable": 15 * 60.0, "DisruptionBlocked": 2 * 60.0}
NODEPOOL_BLOCKED_DEDUPE_SECONDS = 60.0


def record_blocked(
    plane: ControlPlane, snapshot: Snapshot, pool: Sequence[Candidate], evaluation: m.Evaluation
) -> None:
    """Karpenter's Events for what kept this pass off each node, at most one per node per pass: a
    DisruptionBlocked on a node a do-not-disrupt or PDB blocks (the evaluation keeps the first blocking
    rule per NodeClaim), else an Unconsolidatable on a node consolidation considered and turned down; and
    a DisruptionBlocked on each NodePool whose budget blocks a disruption (one per NodePool per pass)."""
    budget_blocked: dict[str, str] = {}
    # Karpenter records each on the NodeClaim too (their uids remembered, read at most once a pass).
    claims: NodeClaimObjects | None = None
    for candidate in pool:
        blocker = evaluation.blockers.get(candidate.name)
        event: tuple[str, str] | None = None
        if blocker is not None and blocker.kind in NODE_EVENT_BLOCKERS:
            # One message on both, as Karpenter's disruption events.Blocked publishes it.
            event = ("DisruptionBlocked", f"Cannot disrupt Node: {blocker.message}")
            plane.kube.record_event(candidate.node, *event, dedupe_seconds=DEDUPE_SECONDS[event[0]])
        else:
            if blocker is not None and blocker.kind == BUDGET_BLOCKER:
                budget_blocked.setdefault(candidate.record.nodepool, blocker.message)
            unconsolidatable = evaluation.unconsolidatable.get(candidate.name)
            if unconsolidatable is not None:
                plane.kube.record_event(
                    candidate.node,
                    "Unconsolidatable",
                    unconsolidatable,
                    dedupe_seconds=DEDUPE_SECONDS["Unconsolidatable"],
                )
                event = ("Unconsolidatable", unconsolidatable)
        if event is not None:
            claims = claims or NodeClaimObjects(plane.kube, plane.clock)
            claims.event(candidate.record.name, *event, dedupe_seconds=DEDUPE_SECONDS[event[0]])
    for name, message in sorted(budget_blocked.items()):
        manifest = snapshot.nodepool_manifests.get(name)
        if manifest is not None:
            plane.kube.record_event(
                manifest,
                "DisruptionBlocked",
                f"No allowed disruptions due to blocking budget: {message}",
                dedupe_seconds=NODEPOOL_BLOCKED_DEDUPE_SECONDS,
            )

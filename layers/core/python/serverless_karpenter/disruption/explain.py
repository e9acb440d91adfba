"""Why a node is, or is not, being disrupted: the material of ``serverless-karpenter explain node``.

Runs the same methods the disruption pass runs, read-only, and reports for one node which method would
act, or the rule that blocks each one (budget, PDB, annotation, no cheaper replacement...).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from serverless_karpenter.api.common import format_duration
from serverless_karpenter.disruption import methods as m
from serverless_karpenter.disruption.candidates import (
    Blocker,
    Candidate,
    Options,
    Snapshot,
    candidates,
    expired,
)
from serverless_karpenter.disruption.command import read_command
from serverless_karpenter.lifecycle.model import NodeClaimRecord


@dataclass
class NodeExplanation:
    node: str
    nodeclaim: str | None = None
    lines: list[str] = field(default_factory=list)
    acting: str | None = None  # "method: action" when a method would act now
    blocker: Blocker | None = None  # the first rule that blocks, when none would act

    @property
    def summary(self) -> str:
        if self.acting:
            return f"would act: {self.acting}"
        if self.blocker:
            return f"blocked: {self.blocker.message}"
        return self.lines[-1] if self.lines else "nothing to say"

    def render(self) -> str:
        return "\n".join([*self.lines, self.summary])


def _record_for(snapshot: Snapshot, name: str) -> NodeClaimRecord | None:
    return next((r for r in snapshot.records if name in (r.node_name, r.name)), None)


def explain_node(snapshot: Snapshot, name: str, options: Options) -> NodeExplanation:
    """Explain one node (by node or NodeClaim name) against a snapshot of the cluster."""
    record = _record_for(snapshot, name)
    out = NodeExplanation(node=name)
    if record is None:
        out.lines.append(f"node {name}: not managed by serverless-karpenter (no NodeClaim record)")
        return out
    out.nodeclaim = record.name
    price = f"${record.price_per_hour:.4f}/h" if record.price_per_hour is not None else "price unknown"
    out.lines.append(
        f"node {record.node_name or '-'} (nodeclaim {record.name}, nodepool {record.nodepool}, "
        f"{record.instance_type or '?'} {record.capacity_type or '?'} {price}, state {record.state.value})"
    )
    command = read_command(record)
    if record.is_deleting:
        out.acting = f"being deleted ({record.disruption_reason or 'unknown reason'})"
        return out
    if command is not None:
        out.acting = (
            f"{command.method}: {command.action} {', '.join(command.candidates)} "
            f"({command.stage}; {command.detail})"
        )
        return out
    pool, skipped = candidates(snapshot)
    candidate: Candidate | None = next((c for c in pool if c.name == record.name), None)
    if candidate is None:
        out.lines.append(f"  not a disruption candidate: {skipped.get(record.name, 'unknown')}")
        out.blocker = Blocker("NotCandidate", skipped.get(record.name, "not a candidate"))
        return out
    overdue = expired(record, candidate.nodepool, snapshot.now)
    expire_after = candidate.nodepool.expire_after_timedelta()
    if overdue is not None:
        out.acting = f"{m.EXPIRATION}: delete (expired {int(overdue.total_seconds())}s ago; forceful)"
        return out
    if expire_after is not None:
        out.lines.append(
            f"  {m.EXPIRATION}: expires at {(record.created_at + expire_after).isoformat()} "
            f"(expireAfter {format_duration(expire_after)})"
        )
    else:
        out.lines.append(f"  {m.EXPIRATION}: never (expireAfter Never)")
    for method in m.METHODS:
        evaluation = m.Evaluation()
        # Single-candidate methods are asked about this node alone, so another node's command cannot
        # hide it; multi-node consolidation needs the others.
        scope = pool if method == m.MULTI else [candidate]
        found = m.BY_NAME[method].compute_command(snapshot, scope, options, evaluation)
        if found is not None and record.name in found.names():
            out.acting = f"{method}: {found.action} {', '.join(found.names())} ({found.detail})"
            out.lines.append(f"  {method}: would {found.action} ({found.detail})")
            return out
        notes = [text for _, text in evaluation.notes.get(record.name, [])]
        if found is not None:
            notes.append(f"acts on other nodes: {', '.join(found.names())}")
        out.lines.append(f"  {method}: {'; '.join(notes) or 'nothing to do'}")
        if out.blocker is None and record.name in evaluation.blockers:
            out.blocker = evaluation.blockers[record.name]
    if out.blocker is None:
        out.blocker = Blocker("None", "no method would act on this node now")
    return out

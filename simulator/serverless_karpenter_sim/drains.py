"""Drains end: every node we delete is gone within its terminationGracePeriod plus a margin.

Karpenter drains a deleting node until its NodeClaim's ``terminationGracePeriod`` runs out, then deletes
what is left and terminates the instance. Without one a drain may wait on PodDisruptionBudgets; we hold
it to :data:`DEFAULT_DRAIN_SECONDS` all the same, because a node left Draining for half an hour holds
capacity, its NodePool's disruption budget and a pod or two hostage.

Two views, so that a drain that was stuck and then ended between two checks is still seen:
- the NodeClaim records, every one kept (Terminated ones too, until their retention ends): from the
  deletion's start (``deletion_requested_at``) to its close (``terminated_at``), or to now;
- the live Nodes being deleted: from their ``deletionTimestamp`` to now (a Node of ours that has no
  record, or whose record closed while the Node stayed, is held to the same bound).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from serverless_karpenter.clock import parse_rfc3339
from serverless_karpenter.lifecycle.model import NodeClaimRecord

# Karpenter's guidance for a drain without a terminationGracePeriod; the bound.
DEFAULT_DRAIN_SECONDS = 15 * 60.0
# After the grace period: force-deleting what is left (the pods' own grace, which Karpenter shortens to
# fit), TerminateInstances, and the termination pass (every 5 s) that sees the instance gone and removes
# the finalizer; two provisioner periods cover a pass lost to a crash and its retry.
DRAIN_MARGIN_SECONDS = 120.0


def drain_bound_seconds(record: NodeClaimRecord | None, margin: float) -> float:
    grace = record.termination_grace_period_seconds if record is not None else None
    return (DEFAULT_DRAIN_SECONDS if grace is None else float(grace)) + margin


def stuck_drains(
    records: Iterable[NodeClaimRecord],
    nodes: Iterable[Mapping[str, Any]],
    now: datetime,
    margin: float = DRAIN_MARGIN_SECONDS,
) -> list[str]:
    """Each deletion that has lasted, or lasted, longer than its bound, once, described."""
    out: dict[str, str] = {}
    by_provider_id: dict[str, NodeClaimRecord] = {}
    for record in records:
        if record.provider_id:
            by_provider_id[record.provider_id] = record
        if record.deletion_requested_at is None:
            continue
        end = record.terminated_at or now
        took = (end - record.deletion_requested_at).total_seconds()
        bound = drain_bound_seconds(record, margin)
        if took > bound:
            state = "took" if record.terminated_at else "has been deleting for"
            key = record.node_name or record.name
            out[key] = (
                f"nodeclaim {record.name} (node {record.node_name or '-'}, {record.disruption_reason}) "
                f"{state} {took:.0f}s, past its bound of {bound:.0f}s"
            )
    for node in nodes:
        meta = node["metadata"]
        since = meta.get("deletionTimestamp")
        if not since or meta["name"] in out:
            continue
        owner = by_provider_id.get((node.get("spec") or {}).get("providerID") or "")
        took = (now - parse_rfc3339(since)).total_seconds()
        bound = drain_bound_seconds(owner, margin)
        if took > bound:
            out[meta["name"]] = (
                f"node {meta['name']} has been deleting for {took:.0f}s, past its bound of {bound:.0f}s"
            )
    return sorted(out.values())

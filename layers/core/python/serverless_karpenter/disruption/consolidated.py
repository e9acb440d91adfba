"""Karpenter's IsConsolidated: the state a decision reads, so that a pass finding the cluster as the last
pass that decided nothing left it need not simulate again."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from serverless_karpenter.disruption import methods as m
from serverless_karpenter.disruption.candidates import Candidate, Options, Snapshot, expired
from serverless_karpenter.scheduling import pods as podlib


def _node_key(node: Mapping[str, Any]) -> tuple[Any, ...]:
    meta, spec = node["metadata"], node.get("spec") or {}
    ready = next(
        (
            c.get("status")
            for c in (node.get("status") or {}).get("conditions") or []
            if c.get("type") == "Ready"
        ),
        None,
    )
    return (
        meta["name"],
        bool(meta.get("deletionTimestamp")),
        json.dumps(meta.get("labels") or {}, sort_keys=True),
        json.dumps(meta.get("annotations") or {}, sort_keys=True),
        json.dumps(spec.get("taints") or [], sort_keys=True),
        bool(spec.get("unschedulable")),
        ready,
    )


def _pod_key(pod: Mapping[str, Any]) -> tuple[Any, ...]:
    meta = pod.get("metadata") or {}
    return (
        podlib.key(pod),
        podlib.node_name(pod),
        (pod.get("status") or {}).get("phase"),
        bool(meta.get("deletionTimestamp")),
        json.dumps(meta.get("annotations") or {}, sort_keys=True),
    )


def state_key(snapshot: Snapshot, pool: Sequence[Candidate], options: Options) -> tuple[Any, ...]:
    """Everything a decision reads, and what time changes of it: consolidateAfter and expiry per
    candidate, the budgets' allowances (cron windows)."""
    reasons = sorted(set(m.BUDGET_REASON.values()))
    return (
        options,
        tuple(sorted((r.name, r.state.value, r.version) for r in snapshot.records)),
        tuple(sorted(_node_key(n) for n in snapshot.nodes)),
        tuple(sorted(_pod_key(p) for p in [*snapshot.pods, *snapshot.pending])),
        tuple(
            sorted(
                (
                    p["metadata"].get("namespace"),
                    p["metadata"]["name"],
                    (p.get("status") or {}).get("disruptionsAllowed"),
                )
                for p in snapshot.pdbs
            )
        ),
        tuple(
            sorted(
                (n, json.dumps(mf, sort_keys=True, default=str))
                for n, mf in snapshot.nodepool_manifests.items()
            )
        ),
        tuple(sorted((n, nc.static_hash()) for n, nc in snapshot.nodeclasses.items())),
        tuple(
            sorted(
                (
                    n,
                    tuple(sorted(r.amis.items())),
                    tuple(sorted(r.security_group_ids)),
                    tuple(sorted(r.zones)),
                )
                for n, r in snapshot.resolved.items()
            )
        ),
        tuple(sorted(snapshot.instance_network.items())),
        tuple(
            (
                c.name,
                consolidation_ready(c, snapshot.now),
                expired(c.record, c.nodepool, snapshot.now) is not None,
            )
            for c in pool
        ),
        tuple(
            (n, r, m.budget_for(snapshot, n, r).allowed) for n in sorted(snapshot.nodepools) for r in reasons
        ),
    )


def consolidation_ready(candidate: Candidate, now: datetime) -> bool:
    after = candidate.nodepool.consolidate_after_timedelta()
    return after is not None and candidate.last_pod_event + after <= now

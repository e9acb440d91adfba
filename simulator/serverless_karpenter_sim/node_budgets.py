"""NodePool disruption budgets, judged from outside the control plane at every tick.

A node is voluntarily disrupted from the first sample in which its NodeClaim is deleting for a
budgeted reason (Empty, Drifted, Underutilized: expiration is forceful and takes no budget) or carries
the ``karpenter.sh/disrupted`` taint of a command whose replacements are launching. When a node becomes
disrupted, the NodePool's disrupted nodes at that sample must be within the most restrictive budget
active for its reason, with Karpenter's total: the NodePool's initialized nodes whose instance is not
yet terminating. A node already disrupted when a window closes is no breach: budgets gate the start of
a disruption, as Karpenter's do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from serverless_karpenter.api.errors import ManifestError
from serverless_karpenter.api.nodepool import NodePool
from serverless_karpenter.disruption.budgets import (
    REASON_DRIFTED,
    REASON_EMPTY,
    REASON_UNDERUTILIZED,
    allowed_disruptions,
)
from serverless_karpenter.disruption.candidates import pending_command
from serverless_karpenter.disruption.methods import BUDGET_REASON
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.termination.handoff import has_disrupted_taint

if TYPE_CHECKING:
    from serverless_karpenter_sim.invariants import InvariantReport
    from serverless_karpenter_sim.simulation import Simulation

BUDGETED_REASONS = frozenset({REASON_EMPTY, REASON_DRIFTED, REASON_UNDERUTILIZED})


@dataclass
class NodeBudgets:
    sim: Simulation
    breaches: list[str] = field(default_factory=list)
    max_disrupted: dict[str, int] = field(default_factory=dict)  # nodepool -> most disrupted at once
    _seen: set[str] = field(default_factory=set)

    def observe(self) -> None:
        records = self.sim.records.list_live()
        # The Nodes only matter for a command whose replacements are launching (its taint is looked at):
        # not read otherwise, a tick at 1,000 nodes is spared a LIST of every Node.
        replacing = any((pending_command(r) or {}).get("stage") == "replacing" for r in records)
        nodes = {n["metadata"]["name"]: n for n in self.sim.kube.list_nodes()} if replacing else {}
        disrupted: dict[str, dict[str, str]] = {}  # nodepool -> nodeclaim -> reason
        for record in records:
            reason = self._disruption(record, nodes)
            if reason is not None:
                disrupted.setdefault(record.nodepool, {})[record.name] = reason
        for pool, claims in disrupted.items():
            self.max_disrupted[pool] = max(self.max_disrupted.get(pool, 0), len(claims))
            new = {name: reason for name, reason in claims.items() if name not in self._seen}
            if not new:
                continue
            self._seen |= set(new)
            self._judge(pool, claims, new, records)

    def _disruption(self, record: NodeClaimRecord, nodes: dict[str, dict[str, Any]]) -> str | None:
        if record.state == NodeClaimState.TERMINATING:
            return None  # its instance is going: Karpenter counts it neither in the total nor against it
        if record.is_deleting:
            reason = record.disruption_reason
            return reason if reason in BUDGETED_REASONS else None
        command = pending_command(record)
        node = nodes.get(record.node_name or "")
        if command and command.get("stage") == "replacing" and node is not None and has_disrupted_taint(node):
            return BUDGET_REASON.get(str(command.get("method")))
        return None

    def _judge(
        self,
        pool: str,
        claims: dict[str, str],
        new: dict[str, str],
        records: list[NodeClaimRecord],
    ) -> None:
        manifest = next((p for p in self.sim.kube.list_nodepools() if p["metadata"]["name"] == pool), None)
        if manifest is None:
            return
        try:
            budgets = NodePool.model_validate(manifest).spec.disruption.budgets
        except (ManifestError, ValueError):
            return
        total = sum(
            1
            for r in records
            if r.nodepool == pool
            and r.initialized_at is not None
            and r.state not in (NodeClaimState.TERMINATING, NodeClaimState.TERMINATED)
        )
        now = self.sim.clock.now()
        for reason in sorted(set(new.values())):
            verdict = allowed_disruptions(budgets, reason, total, 0, now)
            if verdict.limit is not None and len(claims) > verdict.limit:
                self.breaches.append(
                    f"NodePool {pool}: {len(claims)} nodes disrupted at t={self.sim.elapsed:.0f}s "
                    f"({', '.join(sorted(claims))}), beyond its budget of {verdict.limit} for {reason} "
                    f"of {total} initialized nodes"
                )

    def report(self, report: InvariantReport) -> None:
        report.budget_breaches = list(self.breaches)

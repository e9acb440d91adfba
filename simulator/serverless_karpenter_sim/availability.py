"""Availability under voluntary disruption: what consolidation, drift, expiration and emptiness cost the
workloads they move.

A pod evicted from a node that our control plane is removing voluntarily (its NodeClaim record's
disruption reason is one of ``VOLUNTARY_REASONS``, as Karpenter's DisruptionReason condition names it;
an interruption's or a user's deletion is not voluntary) must have a Running replacement within the
bound (:data:`DISRUPTION_PENDING_BOUND_SECONDS`, or the scenario's ``invariants.disruptionPendingSeconds``).
The replacement is the first pod of the same controller (``ownerReferences`` with ``controller: true``)
created at or after the eviction. Evictions come from the API server's audit, which records the pod's
node and controller at the moment of the eviction. Pods without a controller are not replaced by anyone
(Karpenter evicts them all the same) and are not followed; a controller that makes no replacement within
:data:`REPLACEMENT_GRACE_SECONDS` was scaled down, and its evicted pod owes nothing.

While evicted pods wait for their replacements, every PodDisruptionBudget is read (with the live status
the API server computes): one that was met and is no longer is a workload running below what its budget
allows.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from serverless_karpenter.clock import parse_rfc3339
from serverless_karpenter.disruption.budgets import VOLUNTARY_REASONS
from serverless_karpenter.scheduling import pods as podlib

if TYPE_CHECKING:
    from serverless_karpenter_sim.invariants import InvariantReport
    from serverless_karpenter_sim.simulation import Simulation

# How long an evicted pod's workload may wait for a Running replacement: a replacement node's boot and
# registration (the simulator's 30 s boot and 10 s to Ready), a provisioner pass, and the scheduler.
DISRUPTION_PENDING_BOUND_SECONDS = 120.0
# Our simulated controllers create a replacement on their next step (each virtual second); a controller
# that has made none after this long was scaled down.
REPLACEMENT_GRACE_SECONDS = 5.0


@dataclass
class DisruptedPod:
    """One pod evicted by a voluntary disruption, and when its controller had a replacement Running."""

    pod: str  # namespace/name
    owner: str  # its controller's uid
    node: str
    reason: str
    at: datetime
    replacement: str | None = None  # the replacement pod's uid
    replaced_at: datetime | None = None  # first seen Running
    unreplaced: bool = False  # its controller made no replacement: scaled down

    @property
    def open(self) -> bool:
        return self.replaced_at is None and not self.unreplaced

    def pending_seconds(self, now: datetime) -> float:
        end = self.at if self.unreplaced else (self.replaced_at or now)
        return max(0.0, (end - self.at).total_seconds())


class DisruptionAvailability:
    """Follows voluntary evictions to their replacements, tick by tick (``observe``)."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.disrupted: list[DisruptedPod] = []
        self.pdb_breaches: list[str] = []
        self._evictions_read = 0
        self._matched: set[str] = set()  # uids of pods already taken as a replacement
        self._budgets_met: dict[str, bool] = {}

    @property
    def bound_seconds(self) -> float:
        return self.sim.scenario.invariants.disruption_pending_seconds

    def observe(self) -> None:
        self._read_evictions()
        if any(d.open for d in self.disrupted):
            self._match_replacements()
            self._check_budgets()
        else:  # a budget is judged from the start of each disruption, not against an earlier one
            self._budgets_met.clear()

    def _read_evictions(self) -> None:
        evictions = self.sim.kube_server.audit.evictions
        if len(evictions) < self._evictions_read:  # the audit was reset
            self._evictions_read = 0
        new = [e for e in evictions[self._evictions_read :] if e.allowed and e.owner and e.node]
        self._evictions_read = len(evictions)
        if not new:
            return
        reasons = {
            r.node_name: r.disruption_reason
            for r in self.sim.records.list_live()
            if r.node_name and r.is_deleting
        }
        for eviction in new:
            assert eviction.owner is not None and eviction.node is not None  # filtered above
            reason = reasons.get(eviction.node)
            if reason is not None and reason in VOLUNTARY_REASONS:
                pod = f"{eviction.namespace}/{eviction.pod}"
                self.disrupted.append(DisruptedPod(pod, eviction.owner, eviction.node, reason, eviction.at))

    def _match_replacements(self) -> None:
        now = self.sim.clock.now()
        by_owner: dict[str, list[dict[str, Any]]] = {}
        for pod in self.sim.kube.list_pods():
            owner = _controller_uid(pod)
            if owner and not podlib.is_terminal(pod) and not podlib.is_deleting(pod):
                by_owner.setdefault(owner, []).append(pod)
        for disrupted in sorted((d for d in self.disrupted if d.open), key=lambda d: d.at):
            candidates = sorted(
                (
                    p
                    for p in by_owner.get(disrupted.owner, [])
                    if p["metadata"].get("uid") not in self._matched
                    and _created(p) >= disrupted.at.replace(microsecond=0)
                ),
                key=_created,
            )
            running = [p for p in candidates if (p.get("status") or {}).get("phase") == "Running"]
            if running:
                disrupted.replacement = running[0]["metadata"].get("uid")
                disrupted.replaced_at = now
                self._matched.add(str(disrupted.replacement))
            elif not candidates and now - disrupted.at >= timedelta(seconds=REPLACEMENT_GRACE_SECONDS):
                disrupted.unreplaced = True

    def _check_budgets(self) -> None:
        for pdb in self.sim.kube.list_pdbs():
            meta, status = pdb["metadata"], pdb.get("status") or {}
            name = f"{meta.get('namespace', '')}/{meta['name']}"
            healthy, desired = int(status.get("currentHealthy", 0)), int(status.get("desiredHealthy", 0))
            met = healthy >= desired
            if self._budgets_met.get(name) and not met:
                self.pdb_breaches.append(
                    f"PodDisruptionBudget {name}: {healthy} healthy, below its {desired} "
                    f"at t={self.sim.elapsed:.0f}s, during a voluntary disruption"
                )
            self._budgets_met[name] = met

    def report(self, report: InvariantReport) -> None:
        now = self.sim.clock.now()
        bound = self.bound_seconds
        report.disruption_evictions = len(self.disrupted)
        report.disruption_pending_pod_seconds = round(sum(d.pending_seconds(now) for d in self.disrupted), 1)
        report.max_disruption_pending_seconds = round(
            max((d.pending_seconds(now) for d in self.disrupted), default=0.0), 1
        )
        report.disruption_pending_bound_seconds = bound
        report.pods_stranded_by_disruption = sorted(
            f"{d.pod} (evicted from {d.node}, {d.reason}) waited {d.pending_seconds(now):.0f}s"
            + ("" if d.replaced_at else " and still has no Running replacement")
            for d in self.disrupted
            if d.pending_seconds(now) > bound
        )
        report.pdb_floor_breaches = list(self.pdb_breaches)


def _controller_uid(pod: dict[str, Any]) -> str | None:
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid")) if ref.get("uid") else None
    return None


def _created(pod: dict[str, Any]) -> datetime:
    return parse_rfc3339(pod["metadata"]["creationTimestamp"])

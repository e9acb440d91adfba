"""Drift, as Karpenter's ``drift.go`` (with its static drift): replace nodes that no longer match their
NodePool or EC2NodeClass, under the Drifted budget. Eventual: it acts without validation, and a
NodeClaim with a terminationGracePeriod is not held back by its pods' PDBs or do-not-disrupt."""

from __future__ import annotations

from collections.abc import Sequence

from serverless_karpenter.disruption.budgets import REASON_DRIFTED
from serverless_karpenter.disruption.candidates import Candidate, Options, Snapshot, graceful_blocker
from serverless_karpenter.disruption.drift import record_drift
from serverless_karpenter.disruption.methods.helpers import describe_errors, simulate, within_budgets
from serverless_karpenter.disruption.methods.types import DRIFT, EVENTUAL, Command, Evaluation
from serverless_karpenter.scheduling.scheduler import nodepool_requirements


def drift_reason(snapshot: Snapshot, candidate: Candidate) -> str | None:
    record = candidate.record
    annotations = {**record.annotations, **(candidate.node["metadata"].get("annotations") or {})}
    resolved = snapshot.resolved.get(record.nodeclass)
    nodeclass = snapshot.nodeclasses.get(record.nodeclass)
    static = record_drift(record, annotations, candidate.nodepool, nodeclass, resolved)
    if static is not None:
        return static
    if resolved is not None:
        network = snapshot.instance_network.get(record.instance_id or "")
        subnet_ids = {getattr(s, "id", None) for s in resolved.subnets}
        if network is not None and network.subnet_id and network.subnet_id not in subnet_ids:
            return f"SubnetDrift: subnet {network.subnet_id} is no longer selected"
        if network is None and record.zone and record.zone not in resolved.zones:
            return f"SubnetDrift: no selected subnet in {record.zone}"
        groups = frozenset(resolved.security_group_ids)
        if (
            network is not None
            and network.security_group_ids
            and groups
            and network.security_group_ids != groups
        ):
            return (
                f"SecurityGroupDrift: {', '.join(sorted(network.security_group_ids))} is not the selected "
                f"{', '.join(sorted(groups))}"
            )
    manifest = snapshot.nodepool_manifests.get(record.nodepool)
    if manifest is not None:
        requirements, _, _ = nodepool_requirements(manifest)
        labels = candidate.node["metadata"].get("labels") or {}
        for key, requirement in requirements.items():
            value = labels.get(key)
            if value is not None and not requirement.has(value):
                return (
                    f'RequirementsDrifted: label "{key}"="{value}" no longer satisfies '
                    f"{requirement.describe()}"
                )
    return None


class Drift:
    name = DRIFT
    reason = REASON_DRIFTED
    disruption_class = EVENTUAL
    consolidation_type = ""

    def should_disrupt(self, snapshot: Snapshot, candidate: Candidate) -> bool:
        return drift_reason(snapshot, candidate) is not None

    def compute_command(
        self, snapshot: Snapshot, pool: Sequence[Candidate], options: Options, evaluation: Evaluation
    ) -> Command | None:
        drifted: list[tuple[Candidate, str]] = []
        for candidate in pool:
            reason = drift_reason(snapshot, candidate)
            if reason is None:
                evaluation.note(candidate.name, DRIFT, "not drifted")
                continue
            blocker = graceful_blocker(candidate, snapshot.pdbs, snapshot.now, eventual=True)
            if blocker is not None:
                evaluation.note(
                    candidate.name, DRIFT, f"drifted ({reason}) but blocked: {blocker.message}", blocker
                )
                continue
            drifted.append((candidate, reason))
        drifted.sort(key=lambda d: d[0].disruption_cost())
        allowed = within_budgets(snapshot, DRIFT, [c for c, _ in drifted], evaluation)
        reasons = {c.name: r for c, r in drifted}
        empty = [c for c in allowed if not c.reschedulable]
        if empty:
            return Command(DRIFT, empty, detail="; ".join(f"{c.name}: {reasons[c.name]}" for c in empty))
        for candidate in allowed:
            rescheduling = simulate(snapshot, [candidate])
            if not rescheduling.ok:
                evaluation.note(candidate.name, DRIFT, f"drifted but {describe_errors(rescheduling.errors)}")
                continue
            return Command(
                DRIFT, [candidate], list(rescheduling.new_nodeclaims), detail=reasons[candidate.name]
            )
        return None

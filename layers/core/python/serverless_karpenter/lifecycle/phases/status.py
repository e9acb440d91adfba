"""What a lifecycle pass publishes of the claims it left: the NodeClaims by state and the cost per hour
(metrics), and each NodePool's status (what it launched, registered and closed)."""

from __future__ import annotations

from serverless_karpenter.lifecycle import nodepool_status
from serverless_karpenter.lifecycle.phases.base import LifecyclePass
from serverless_karpenter.observability import MetricName, MetricUnit, emit_dimensioned, metrics


class StateCounts:
    def reconcile(self, state: LifecyclePass) -> None:
        records = state.result.records
        counts: dict[str, int] = {}
        cost = 0.0
        for record in records:
            counts[record.state.value] = counts.get(record.state.value, 0) + 1
            if record.is_active and record.price_per_hour:
                cost += record.price_per_hour
        for state_name, count in counts.items():
            emit_dimensioned(MetricName.NODECLAIMS_BY_STATE, count, {"State": state_name})
        if any(record.is_active for record in records):
            # As PendingPods: not published while there is no capacity to price (billed per hour published).
            metrics.add_metric(name=MetricName.COST_PER_HOUR, unit=MetricUnit.Count, value=round(cost, 4))


class NodePoolStatus:
    def reconcile(self, state: LifecyclePass) -> None:
        """Each NodePool's status as of the end of this pass (what it launched, registered and closed)."""
        if state.nodepools is None:
            return  # not listed: the API server would not list them
        known = {r.provider_id for r in state.records if r.provider_id}
        usage = nodepool_status.usage_by_nodepool(state.result.records, state.nodes, known)
        for nodepool, status in nodepool_status.pass_statuses(
            state.nodepools, state.nodeclasses, usage, state.plane.clock.now()
        ):
            nodepool_status.write_status(state.plane.kube, nodepool, status)

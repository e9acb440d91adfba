"""Use cases behind the watcher and provisioner handlers."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from serverless_karpenter import crashpoints
from serverless_karpenter.adapters.state_store import Lease
from serverless_karpenter.lifecycle.reconciler import LifecycleReconciler, LifecycleResult
from serverless_karpenter.observability import MetricName, MetricUnit, logger, metrics
from serverless_karpenter.provisioning.batcher import PendingPodBatcher
from serverless_karpenter.provisioning.context import ControlPlane
from serverless_karpenter.provisioning.provisioner import Provisioner, ProvisioningResult
from serverless_karpenter.scheduling import pods as podlib

LEASE_NAME = "provisioner"
# Short, and renewed before every launch: a writer that dies holds the others off for a minute at most.
LEASE_SECONDS = 60.0


@dataclass
class ProvisionerRun:
    leader: bool
    lifecycle: LifecycleResult = field(default_factory=LifecycleResult)
    provisioning: ProvisioningResult = field(default_factory=ProvisioningResult)


def run_provisioner(plane: ControlPlane, lease: Lease) -> ProvisionerRun:
    """One pass of the single writer: finish earlier launches, then provision pending pods."""
    metrics.add_metric(name=MetricName.PROVISIONER_HEARTBEAT, unit=MetricUnit.Count, value=1)
    if not lease.acquire(plane.clock.now(), LEASE_SECONDS):
        logger.info("another provisioner holds the lease; exiting", extra={"holder": lease.holder})
        return ProvisionerRun(leader=False)

    def renew() -> bool:
        return lease.acquire(plane.clock.now(), LEASE_SECONDS)

    try:
        lifecycle = LifecycleReconciler(plane).reconcile()
        provisioning = Provisioner(plane).provision(renew)
    except crashpoints.InjectedCrash:
        raise  # a killed Lambda releases nothing: the lease runs out, as it would in AWS
    except BaseException:
        lease.release()
        raise
    lease.release()
    return ProvisionerRun(leader=True, lifecycle=lifecycle, provisioning=provisioning)


def provisioner_lease(plane: ControlPlane, request_id: str) -> Lease:
    from serverless_karpenter.adapters import aws

    return Lease(
        aws.client("dynamodb", plane.settings.aws_region),
        plane.settings.state_table_name,
        LEASE_NAME,
        holder=f"{os.environ.get('AWS_LAMBDA_LOG_STREAM_NAME', 'local')}/{request_id}",
    )


def watch(
    plane: ControlPlane,
    batcher: PendingPodBatcher,
    invoke_provisioner: Callable[[dict[str, object]], None],
    poll_seconds: float,
) -> int:
    """Poll pending pods until ``poll_seconds`` have passed; invoke the provisioner per ready batch.

    ``poll_seconds`` 0 makes one poll (the simulator calls it every virtual second). Returns the number
    of provisioner invocations.
    """
    clock = plane.clock
    deadline = clock.now().timestamp() + poll_seconds
    invocations = 0
    while True:
        pending = frozenset(
            podlib.key(p) for p in plane.kube.list_pending_pods() if podlib.is_provisionable(p)
        )
        if batcher.observe(pending, clock.now()):
            invoke_provisioner({"reason": "pending-pods", "pods": len(pending)})
            invocations += 1
        if clock.now().timestamp() + plane.settings.watcher_poll_interval_seconds > deadline:
            return invocations
        clock.sleep(plane.settings.watcher_poll_interval_seconds)

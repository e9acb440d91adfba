"""Launching a NodeClaim record: idempotent, so a crash anywhere is repaired by running it again.

The record is written before CreateFleet; the fleet's ClientToken is the claim's name and the
instance is tagged with it. A second attempt first looks for the tagged instance and adopts it.
"""

from __future__ import annotations

import contextlib

from botocore.exceptions import ClientError

from serverless_karpenter import amifamily, crashpoints
from serverless_karpenter.adapters.ec2 import Instance, LaunchError, LaunchRequest, ResolvedNodeClass
from serverless_karpenter.adapters.kubernetes import KubernetesError
from serverless_karpenter.adapters.state_store import ConflictError
from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.observability import MetricName, MetricUnit, Msg, logger, metrics
from serverless_karpenter.provisioning.context import ControlPlane
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.requirements import Requirements

UNREGISTERED_TAINT = {"key": wk.UNREGISTERED_TAINT_KEY, "effect": "NoExecute"}


def capacity_type_for(plane: ControlPlane, record: NodeClaimRecord) -> str | None:
    """Spot when the claim allows it and a spot offering is available, else on-demand (Karpenter)."""
    reqs = Requirements.from_node_selector_requirements(record.requirements)
    available = {
        ct
        for option in record.instance_type_options
        for zone, ct, _ in option.offerings
        if not plane.instance_types.is_unavailable(ct, option.name, zone)
    }
    for ct in wk.CAPACITY_TYPES:
        if ct in available and reqs.get(wk.CAPACITY_TYPE).has(ct):
            return ct
    return None


def launch_request(
    plane: ControlPlane, record: NodeClaimRecord, capacity_type: str, attempt: int = 0
) -> LaunchRequest:
    overrides = sorted(
        (
            (price, option.name, zone, option.arch)
            for option in record.instance_type_options
            for zone, ct, price in option.offerings
            if ct == capacity_type and not plane.instance_types.is_unavailable(ct, option.name, zone)
        ),
    )
    labels = dict(record.labels)
    labels[wk.CAPACITY_TYPE] = capacity_type
    return LaunchRequest(
        nodeclaim=record.name,
        nodepool=record.nodepool,
        capacity_type=capacity_type,
        overrides=[(name, zone, arch) for _, name, zone, arch in overrides],
        bootstrap=amifamily.NodeBootstrap(
            labels=labels,
            taints=[UNREGISTERED_TAINT, *record.taints, *record.startup_taints],
        ),
        # The kubelet's maxPods is the pod count the scheduler assumed for the type.
        max_pods={
            o.name: o.capacity[resources.PODS]
            for o in record.instance_type_options
            if o.capacity.get(resources.PODS)
        },
        client_token=record.name if attempt == 0 else f"{record.name}-{attempt}",
    )


def with_startup_taints(plane: ControlPlane, record: NodeClaimRecord) -> NodeClaimRecord:
    """The record with its NodePool's startupTaints: the node registers with them, and the claim is not
    initialized until something on the node removes them. Saved with the launch."""
    kube = plane.kube
    if record.startup_taints or kube is None:
        return record
    try:
        nodepool = next((p for p in kube.list_nodepools() if p["metadata"]["name"] == record.nodepool), None)
    except KubernetesError as error:
        logger.warning(
            "could not read the nodepool", extra={"nodepool": record.nodepool, "error": str(error)}
        )
        return record
    template = ((nodepool or {}).get("spec") or {}).get("template") or {}
    startup = [dict(t) for t in (template.get("spec") or {}).get("startupTaints") or []]
    return record.model_copy(update={"startup_taints": startup}) if startup else record


def launch_templates_of(
    plane: ControlPlane, record: NodeClaimRecord, nodeclass: ResolvedNodeClass
) -> set[str]:
    """The launch templates a launch of this record uses, now (to keep them from the unused sweep)."""
    capacity_types = {record.capacity_type} if record.capacity_type else set(wk.CAPACITY_TYPES)
    names: set[str] = set()
    for capacity_type in capacity_types:
        names |= plane.launcher.launch_template_names(launch_request(plane, record, capacity_type), nodeclass)
    return names


def mark_launched(plane: ControlPlane, record: NodeClaimRecord, instance: Instance) -> NodeClaimRecord:
    option = next((o for o in record.instance_type_options if o.name == instance.instance_type), None)
    price = None
    if option is not None:
        price = next(
            (p for z, ct, p in option.offerings if z == instance.zone and ct == instance.capacity_type), None
        )
    now = plane.clock.now()
    labels = {
        **record.labels,
        wk.INSTANCE_TYPE: instance.instance_type,
        wk.ZONE: instance.zone,
        wk.CAPACITY_TYPE: instance.capacity_type,
    }
    updated = record.model_copy(
        update={
            "state": NodeClaimState.LAUNCHED,
            "instance_id": instance.id,
            "instance_type": instance.instance_type,
            "zone": instance.zone,
            "capacity_type": instance.capacity_type,
            "provider_id": instance.provider_id,
            "image_id": instance.image_id,
            "launch_template_name": instance.launch_template or record.launch_template_name,
            "price_per_hour": price,
            "labels": labels,
            "allocatable": dict(option.allocatable) if option else record.expected_allocatable(),
            "capacity": dict(option.capacity) if option else record.expected_capacity(),
            "launched_at": now,
            "last_error": None,
        }
    )
    saved = plane.store.save(updated)
    metrics.add_metric(name=MetricName.NODECLAIMS_LAUNCHED, unit=MetricUnit.Count, value=1)
    metrics.add_metric(
        name=MetricName.LAUNCH_LATENCY,
        unit=MetricUnit.Seconds,
        value=(now - record.created_at).total_seconds(),
    )
    logger.info(
        Msg.LAUNCHED_NODECLAIM,
        extra={
            "nodeclaim": saved.name,
            "provider-id": saved.provider_id,
            "instance-type": saved.instance_type,
            "zone": saved.zone,
            "capacity-type": saved.capacity_type,
        },
    )
    return saved


# A launch whose fleet found no capacity retries at once with the offerings that failed removed, as
# Karpenter's next launch attempt would; each retry must have removed something, so this bounds it.
MAX_LAUNCH_ATTEMPTS = 4


def launch_record(
    plane: ControlPlane, record: NodeClaimRecord, nodeclass: ResolvedNodeClass | None
) -> NodeClaimRecord:
    """Launch (or adopt) the instance for a Pending record. Offerings CreateFleet found without capacity
    go to the unavailable-offerings cache and the fleet is retried with the rest; a launch that still
    fails deletes the record so its pods are provisioned again."""
    record = with_startup_taints(plane, record)
    existing = plane.launcher.find_by_nodeclaim(record.name)
    if existing is not None:
        return mark_launched(plane, record, existing)
    error: Exception | None = None
    for attempt in range(MAX_LAUNCH_ATTEMPTS):
        capacity_type = capacity_type_for(plane, record)
        if nodeclass is None:
            error = ValueError(f'EC2NodeClass "{record.nodeclass}" is not ready')
            break
        if capacity_type is None:
            error = error or ValueError("every offering of the claim is unavailable")
            break
        try:
            instance = plane.launcher.launch(launch_request(plane, record, capacity_type, attempt), nodeclass)
        except LaunchError as launch_error:
            error = launch_error
            if not _mark_unavailable(plane, launch_error):
                break  # nothing new to avoid: another attempt would fail the same way
            logger.info(
                "retrying launch without the offerings that had no capacity",
                extra={"nodeclaim": record.name, "error": str(launch_error)},
            )
            continue
        except ClientError as client_error:
            error = client_error
            break
        crashpoints.hit(crashpoints.AFTER_CREATE_FLEET)
        return mark_launched(plane, record, instance)
    metrics.add_metric(name=MetricName.LAUNCH_ERRORS, unit=MetricUnit.Count, value=1)
    logger.error("failed launching nodeclaim", extra={"nodeclaim": record.name, "error": str(error)})
    with contextlib.suppress(ConflictError):  # somebody else already moved it on
        plane.store.delete(record)
    return record.model_copy(update={"last_error": str(error)})


def _mark_unavailable(plane: ControlPlane, error: LaunchError) -> bool:
    """Record the failed offerings; whether any was not known to be unavailable already."""
    new = False
    for failure in error.unavailable_offerings:
        if not (failure.instance_type and failure.zone):
            continue
        if not plane.instance_types.is_unavailable(
            failure.capacity_type, failure.instance_type, failure.zone
        ):
            new = True
        plane.instance_types.mark_unavailable(
            failure.capacity_type, failure.instance_type, failure.zone, failure.code
        )
    return new

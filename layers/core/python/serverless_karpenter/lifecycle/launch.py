"""Launching a NodeClaim record: idempotent, so a crash anywhere is repaired by running it again.

The record is written before CreateFleet; the fleet's ClientToken is the claim's name and the
instance is tagged with it. A second attempt first looks for the tagged instance and adopts it.

What CreateFleet is offered is cut here, as Karpenter's cloud provider cuts it: offerings known to be
unavailable are dropped, then the 60 cheapest instance types kept. If what is left no longer meets the
claim's minValues the launch is refused, never narrowed below the flexibility the NodePool asked for.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from serverless_karpenter import amifamily, crashpoints, naming
from serverless_karpenter.adapters.kubernetes import KubernetesError
from serverless_karpenter.adapters.providers.errors import CloudError
from serverless_karpenter.adapters.providers.model import (
    SPOT_SERVICE_LINKED_ROLE_ERROR,
    Instance,
    LaunchError,
    LaunchRequest,
    ResolvedNodeClass,
)
from serverless_karpenter.adapters.state_store import ConflictError
from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.model import InstanceTypeOption, NodeClaimRecord, NodeClaimState
from serverless_karpenter.lifecycle.nodeclaim_writer import NodeClaimObjects
from serverless_karpenter.observability import MetricName, MetricUnit, Msg, logger, metrics, tracer
from serverless_karpenter.provisioning.context import ControlPlane
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.requirements import Requirements
from serverless_karpenter.scheduling.scheduler import MAX_INSTANCE_TYPES

UNREGISTERED_TAINT = {"key": wk.UNREGISTERED_TAINT_KEY, "effect": "NoExecute"}


def launch_options(plane: ControlPlane, record: NodeClaimRecord) -> list[InstanceTypeOption]:
    """The instance types CreateFleet may be offered, each with its offerings not known to be
    unavailable: types left with none dropped, cheapest first, at most the 60 CreateFleet takes
    (Karpenter's ``Truncate``)."""
    priced: list[tuple[float, str, InstanceTypeOption]] = []
    for option in record.instance_type_options:
        offerings = [
            (zone, ct, price)
            for zone, ct, price in option.offerings
            if not plane.instance_types.is_unavailable(ct, option.name, zone)
        ]
        if offerings:
            cheapest = min(price for _, _, price in offerings)
            priced.append((cheapest, option.name, option.model_copy(update={"offerings": offerings})))
    priced.sort(key=lambda p: (p[0], p[1]))
    return [option for _, _, option in priced[:MAX_INSTANCE_TYPES]]


def min_values_shortfall(
    plane: ControlPlane,
    record: NodeClaimRecord,
    options: Sequence[InstanceTypeOption],
    nodeclass: ResolvedNodeClass,
) -> str | None:
    """Which of the claim's minValues ``options`` fall short of, or None when they meet them all."""
    requirements = Requirements.from_node_selector_requirements(record.requirements)
    if not requirements.has_min_values():
        return None
    # The record keeps no labels; a type's labels are facts of the type, so the catalog's serve.
    catalog = {it.name: it.labels for it in plane.instance_types.instance_types(nodeclass, {})}
    return requirements.check_min_values(
        {wk.INSTANCE_TYPE: o.name, wk.ARCH: o.arch, **catalog.get(o.name, {})} for o in options
    )


def capacity_type_for(
    plane: ControlPlane, record: NodeClaimRecord, options: Sequence[InstanceTypeOption] | None = None
) -> str | None:
    """Spot when the claim allows it and a spot offering is available, else on-demand (Karpenter)."""
    reqs = Requirements.from_node_selector_requirements(record.requirements)
    chosen = launch_options(plane, record) if options is None else options
    available = {ct for option in chosen for _, ct, _ in option.offerings}
    for ct in wk.CAPACITY_TYPES:
        if ct in available and reqs.get(wk.CAPACITY_TYPE).has(ct):
            return ct
    return None


def launch_request(
    plane: ControlPlane,
    record: NodeClaimRecord,
    capacity_type: str,
    attempt: int = 0,
    options: Sequence[InstanceTypeOption] | None = None,
) -> LaunchRequest:
    chosen = launch_options(plane, record) if options is None else options
    overrides = sorted(
        (price, option.name, zone, option.arch)
        for option in chosen
        for zone, ct, price in option.offerings
        if ct == capacity_type
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


def with_startup_taints(
    plane: ControlPlane, record: NodeClaimRecord, nodepools: Sequence[Mapping[str, Any]] | None = None
) -> NodeClaimRecord:
    """The record with its NodePool's startupTaints: the node registers with them, and the claim is not
    initialized until something on the node removes them. Saved with the launch. ``nodepools``: as the
    caller listed them this pass (else listed here)."""
    if record.startup_taints:
        return record
    if nodepools is not None:
        nodepool = next((p for p in nodepools if p["metadata"]["name"] == record.nodepool), None)
    else:
        nodepool = _nodepool(plane, record.nodepool)
    template = ((nodepool or {}).get("spec") or {}).get("template") or {}
    startup = [dict(t) for t in (template.get("spec") or {}).get("startupTaints") or []]
    return record.model_copy(update={"startup_taints": startup}) if startup else record


def _nodepool(plane: ControlPlane, name: str) -> Mapping[str, Any] | None:
    """The NodePool as the API server has it, or None (not found, no API server, or unreadable)."""
    if plane.kube is None:
        return None
    try:
        return next((p for p in plane.kube.list_nodepools() if p["metadata"]["name"] == name), None)
    except KubernetesError as error:
        logger.warning("could not read the nodepool", extra={"nodepool": name, "error": str(error)})
        return None


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
            "instance_type_options": [option] if option is not None else [],
            "instance_type_names": record.option_names(),
            "price_per_hour": price,
            "labels": labels,
            "allocatable": dict(option.allocatable) if option else record.expected_allocatable(),
            "capacity": dict(option.capacity) if option else record.expected_capacity(),
            "launched_at": now,
            "last_error": None,
        }
    )
    saved = plane.store.save(updated)
    NodeClaimObjects(plane.kube, plane.clock).create(saved)
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


# A span per launch in the X-Ray trace (free when tracing is off: see observability). The response is the
# record, not worth serializing into the trace.
@tracer.capture_method(capture_response=False)
def launch_record(
    plane: ControlPlane,
    record: NodeClaimRecord,
    nodeclass: ResolvedNodeClass | None,
    nodepools: Sequence[Mapping[str, Any]] | None = None,
    *,
    created_now: bool = False,
) -> NodeClaimRecord:
    """Launch (or adopt) the instance for a Pending record. Offerings CreateFleet found without capacity
    (or all of spot, when the spot service-linked role is missing) go to the unavailable-offerings cache
    and the fleet is retried with the rest; a launch that still fails, or whose remaining types no
    longer meet minValues, deletes the record so its pods are provisioned again."""
    record = with_startup_taints(plane, record, nodepools)
    # A record launched before and left Pending (a crash after CreateFleet) may have its instance: adopt
    # it. One the caller ``created_now`` (the provisioner, in this pass) cannot, and a DescribeInstances
    # by tag for each of 1,000 new claims is saved.
    existing = None if created_now else plane.launcher.find_by_nodeclaim(record.name)
    if existing is not None:
        return mark_launched(plane, record, existing)
    error: Exception | None = None
    for attempt in range(MAX_LAUNCH_ATTEMPTS):
        if nodeclass is None:
            error = ValueError(f'EC2NodeClass "{record.nodeclass}" is not ready')
            break
        options = launch_options(plane, record)
        capacity_type = capacity_type_for(plane, record, options)
        if capacity_type is None:
            error = error or ValueError("every offering of the claim is unavailable")
            break
        # Checked again after each failed fleet: the offerings it marked unavailable may leave too few.
        # Refused like a launch without capacity, so the pods are planned afresh.
        shortfall = min_values_shortfall(plane, record, options, nodeclass)
        if shortfall is not None:
            error = ValueError(
                f"nodeclaim {record.name}: {shortfall}, in the {len(options)} instance type(s) CreateFleet "
                f"may be offered (available, the cheapest {MAX_INSTANCE_TYPES} at most)"
            )
            break
        request = launch_request(plane, record, capacity_type, attempt, options)
        try:
            instance = plane.launcher.launch(request, nodeclass)
        except LaunchError as launch_error:
            error = launch_error
            if not _mark_unavailable(plane, record, launch_error):
                break  # nothing new to avoid: another attempt would fail the same way
            logger.info(
                "retrying launch without the offerings EC2 refused",
                extra={"nodeclaim": record.name, "error": str(launch_error)},
            )
            continue
        except CloudError as cloud_error:  # refused (UnauthorizedOperation...) or failed: not retried here
            error = cloud_error
            break
        crashpoints.hit(crashpoints.AFTER_CREATE_FLEET)
        return mark_launched(plane, record, instance)
    metrics.add_metric(name=MetricName.LAUNCH_ERRORS, unit=MetricUnit.Count, value=1)
    logger.error("failed launching nodeclaim", extra={"nodeclaim": record.name, "error": str(error)})
    with contextlib.suppress(ConflictError):  # somebody else already moved it on
        plane.store.delete(record)
    return record.model_copy(update={"last_error": str(error)})


def _mark_unavailable(plane: ControlPlane, record: NodeClaimRecord, error: LaunchError) -> bool:
    """Record the failed offerings; whether any was not known to be unavailable already."""
    new = error.spot_service_linked_role_missing and _spot_role_missing(plane, record, error)
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


SPOT_ROLE_EVENT = "SpotServiceLinkedRoleCreationFailure"


def _spot_role_missing(plane: ControlPlane, record: NodeClaimRecord, error: LaunchError) -> bool:
    """Karpenter's answer when EC2 refuses spot for want of its service-linked role: spot is unavailable
    everywhere for the unavailable-offerings TTL (shared by every invocation), so launches fall back to
    on-demand meanwhile, and a warning says how to fix it. Whether the refused launch asked for spot
    (then a retry differs: it cannot choose spot again)."""
    plane.instance_types.mark_capacity_type_unavailable(wk.CAPACITY_TYPE_SPOT, SPOT_SERVICE_LINKED_ROLE_ERROR)
    message = (
        f'Attempted to launch a spot instance but failed due to "{SPOT_SERVICE_LINKED_ROLE_ERROR}": '
        f"the account has no {naming.SPOT_SERVICE_LINKED_ROLE} role and the controller may not create it. "
        f"Create it with `aws iam create-service-linked-role --aws-service-name {naming.SPOT_SERVICE}`; "
        "until then spot is skipped for a few minutes at a time and on-demand used where allowed"
    )
    logger.warning(message, extra={"nodeclaim": record.name, "nodepool": record.nodepool})
    nodepool = _nodepool(plane, record.nodepool)
    if nodepool is not None:
        plane.kube.record_event(nodepool, SPOT_ROLE_EVENT, message, "Warning")
    return any(
        e.code == SPOT_SERVICE_LINKED_ROLE_ERROR and e.capacity_type == wk.CAPACITY_TYPE_SPOT
        for e in error.errors
    )

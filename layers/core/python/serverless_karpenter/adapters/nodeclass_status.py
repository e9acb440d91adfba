"""The EC2NodeClass status: what its selector terms resolved to, and whether it is ready.

Written the way Karpenter writes it (subnets with zone and zone ID, security groups, AMIs with their
requirements, the instance profile, and conditions), through the ``/status`` subresource, since the API
server ignores ``status`` in writes to the object itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from serverless_karpenter.adapters.kubernetes import KubernetesError
from serverless_karpenter.adapters.providers.model import ResolvedNodeClass
from serverless_karpenter.api import conditions
from serverless_karpenter.api import labels as wk
from serverless_karpenter.observability import logger

if TYPE_CHECKING:
    from serverless_karpenter.provisioning.context import KubernetesApi

READY = conditions.READY
VALIDATION_SUCCEEDED = "ValidationSucceeded"
PLACEMENT_GROUP_READY = "PlacementGroupReady"
# Each resolution's own condition, in the order the resolver works through them (a failure leaves the later
# ones unevaluated); with ValidationSucceeded and PlacementGroupReady, Karpenter v1.14's dependents of Ready.
PART_CONDITIONS = ("SubnetsReady", "SecurityGroupsReady", "AMIsReady", "InstanceProfileReady")
# Which condition a resolution error belongs to, from the field the error names, with Karpenter's reason.
_FIELD_CONDITION = {
    "subnetSelectorTerms": ("SubnetsReady", "SubnetsNotFound"),
    "securityGroupSelectorTerms": ("SecurityGroupsReady", "SecurityGroupsNotFound"),
    "amiSelectorTerms": ("AMIsReady", "AMINotFound"),
    "userData": ("AMIsReady", "UserDataInvalid"),
    "role": ("InstanceProfileReady", "InstanceProfileNotFound"),
    "instanceProfile": ("InstanceProfileReady", "InstanceProfileNotFound"),
}
# Karpenter's ValidationSucceeded while a resolution is not True (its validation controller's words).
DEPENDENCIES_NOT_READY = "DependenciesNotReady"
DEPENDENCIES_MESSAGE = "Awaiting AMI, Instance Profile, Security Group, and Subnet resolution"
# A resolution that failed on a call (AccessDenied, throttling), not on a field: nothing says which part.
RESOLUTION_FAILED = "ResolutionFailed"
AWAITING = "AwaitingReconciliation"
AWAITING_MESSAGE = "object is awaiting reconciliation"


def resolved_status(resolved: ResolvedNodeClass) -> dict[str, Any]:
    """Status fields of a node class that resolved (conditions are added by :func:`nodeclass_conditions`)."""
    status: dict[str, Any] = {
        "subnets": [
            {"id": s.id, "zone": s.zone, **({"zoneID": s.zone_id} if s.zone_id else {})}
            for s in resolved.subnets
        ],
        "securityGroups": [{"id": g.id, "name": g.name} for g in resolved.security_groups]
        or [{"id": g} for g in resolved.security_group_ids],
        "amis": [
            {
                "id": image.id,
                "name": image.name,
                "requirements": [{"key": wk.ARCH, "operator": "In", "values": [image.arch]}],
            }
            for image in resolved.images
        ]
        or [
            {"id": ami, "requirements": [{"key": wk.ARCH, "operator": "In", "values": [arch]}]}
            for arch, ami in sorted(resolved.amis.items())
        ],
    }
    if resolved.instance_profile:
        status["instanceProfile"] = resolved.instance_profile
    return status


def nodeclass_conditions(
    error: str | None,
    previous: Mapping[str, Any] | None,
    now: datetime,
    generation: int | None,
) -> list[dict[str, Any]]:
    """The conditions for a resolution that succeeded (``error`` None) or failed with ``error``.

    The part the error names is False with Karpenter's reason and our message (it names the field); the
    parts the resolver reached before it are True, those after it Unknown (not looked at this pass).
    ValidationSucceeded follows Karpenter's validation controller: False while a part is False, Unknown
    while one is Unknown; we make no dry-run launch, so a class that resolves is True. We support no
    placement groups, so PlacementGroupReady is True (Karpenter's value without a placement group)."""
    wanted: list[conditions.Wanted] = []
    failed: tuple[str, str] | None = None
    if error is not None:
        failed = next((c for field, c in _FIELD_CONDITION.items() if f"spec.{field}" in error), None)
    reached = True
    for kind in PART_CONDITIONS:
        if error is None or (failed is not None and reached and kind != failed[0]):
            wanted.append(conditions.Wanted.true(kind))
        elif failed is not None and kind == failed[0]:
            wanted.append(conditions.Wanted(kind, conditions.FALSE, failed[1], error))
            reached = False
        else:
            wanted.append(conditions.Wanted(kind, conditions.UNKNOWN, AWAITING, AWAITING_MESSAGE))
    if error is None:
        wanted.append(conditions.Wanted.true(VALIDATION_SUCCEEDED))
    elif failed is None:
        wanted.append(conditions.Wanted(VALIDATION_SUCCEEDED, conditions.FALSE, RESOLUTION_FAILED, error))
    else:
        wanted.append(
            conditions.Wanted(
                VALIDATION_SUCCEEDED, conditions.FALSE, DEPENDENCIES_NOT_READY, DEPENDENCIES_MESSAGE
            )
        )
    wanted.append(conditions.Wanted.true(PLACEMENT_GROUP_READY))
    return conditions.with_conditions((previous or {}).get("conditions") or [], wanted, generation, now)


def ready_condition(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The status's Ready condition, or None before any was written."""
    return next((c for c in status.get("conditions") or [] if c.get("type") == READY), None)


def desired_status(
    nodeclass: Mapping[str, Any],
    resolved: ResolvedNodeClass | None,
    error: str | None,
    now: datetime,
) -> dict[str, Any]:
    previous = nodeclass.get("status") or {}
    # A node class that stops resolving keeps what it last resolved to, as Karpenter's does.
    base = (
        resolved_status(resolved)
        if resolved is not None
        else {k: v for k, v in previous.items() if k != "conditions"}
    )
    generation = (nodeclass.get("metadata") or {}).get("generation")
    return {**base, "conditions": nodeclass_conditions(error, previous, now, generation)}


def write_status(
    kube: KubernetesApi,
    nodeclass: Mapping[str, Any],
    resolved: ResolvedNodeClass | None,
    error: str | None,
    now: datetime,
) -> bool:
    """Patch the status if it changed; whether a write was made. A failed write is only logged: the
    status reports, it never decides."""
    status = desired_status(nodeclass, resolved, error, now)
    if status == (nodeclass.get("status") or {}):
        return False
    name = nodeclass["metadata"]["name"]
    try:
        kube.patch_ec2nodeclass_status(name, status)
    except KubernetesError as failure:
        logger.warning(
            "failed writing EC2NodeClass status", extra={"ec2nodeclass": name, "error": str(failure)}
        )
        return False
    return True

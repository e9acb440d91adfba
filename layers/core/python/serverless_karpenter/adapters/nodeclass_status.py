"""The EC2NodeClass status: what its selector terms resolved to, and whether it is ready.

Written the way Karpenter writes it (subnets with zone and zone ID, security groups, AMIs with their
requirements, the instance profile, and conditions), through the ``/status`` subresource, since the API
server ignores ``status`` in writes to the object itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from serverless_karpenter.adapters.ec2 import ResolvedNodeClass
from serverless_karpenter.adapters.kubernetes import (
    KARPENTER_AWS_GROUP,
    KubernetesError,
    KubernetesGateway,
    call,
)
from serverless_karpenter.api import labels as wk
from serverless_karpenter.clock import to_rfc3339
from serverless_karpenter.observability import logger

PLURAL = "ec2nodeclasses"
VERSION = "v1"
READY = "Ready"
# Each resolution's own condition, as Karpenter has them; Ready is their conjunction.
PART_CONDITIONS = ("SubnetsReady", "SecurityGroupsReady", "AMIsReady", "InstanceProfileReady")
# Which condition a resolution error belongs to, from the field the error names.
_FIELD_CONDITION = {
    "subnetSelectorTerms": ("SubnetsReady", "SubnetsNotFound"),
    "securityGroupSelectorTerms": ("SecurityGroupsReady", "SecurityGroupsNotFound"),
    "amiSelectorTerms": ("AMIsReady", "AMINotFound"),
    "userData": ("AMIsReady", "UserDataInvalid"),
    "role": ("InstanceProfileReady", "InstanceProfileNotFound"),
    "instanceProfile": ("InstanceProfileReady", "InstanceProfileNotFound"),
}


def resolved_status(resolved: ResolvedNodeClass) -> dict[str, Any]:
    """Status fields of a node class that resolved (conditions are added by :func:`with_conditions`)."""
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


def with_conditions(
    status: dict[str, Any],
    error: str | None,
    previous: Mapping[str, Any] | None,
    now: datetime,
    generation: int | None,
) -> dict[str, Any]:
    """Add the conditions; a condition whose status did not change keeps its lastTransitionTime."""
    failed: tuple[str, str] | None = None
    if error is not None:
        failed = next(
            (c for field, c in _FIELD_CONDITION.items() if f"spec.{field}" in error), ("Ready", "NotReady")
        )
    before = {c.get("type"): c for c in (previous or {}).get("conditions") or []}
    conditions = []
    for kind in (*PART_CONDITIONS, READY):
        bad = failed is not None and kind in (failed[0], READY)
        condition: dict[str, Any] = {
            "type": kind,
            "status": "False" if bad else "True",
            "reason": failed[1] if bad and failed else kind,
            "message": (error or "") if bad else "",
        }
        if generation is not None:
            condition["observedGeneration"] = generation
        old = before.get(kind) or {}
        condition["lastTransitionTime"] = (
            old["lastTransitionTime"]
            if old.get("status") == condition["status"] and old.get("lastTransitionTime")
            else to_rfc3339(now)
        )
        conditions.append(condition)
    return {**status, "conditions": conditions}


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
    return with_conditions(base, error, previous, now, generation)


def write_status(
    kube: KubernetesGateway,
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
        call(
            kube.custom.patch_cluster_custom_object_status,
            KARPENTER_AWS_GROUP,
            VERSION,
            PLURAL,
            name,
            {"status": status},
        )
    except KubernetesError as failure:
        logger.warning(
            "failed writing EC2NodeClass status", extra={"ec2nodeclass": name, "error": str(failure)}
        )
        return False
    return True

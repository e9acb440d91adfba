"""NodeClaim objects (karpenter.sh/v1) in the cluster, mirrored from the DynamoDB records.

DynamoDB stays the source of truth; the object is what `kubectl get nodeclaims`, eks-node-viewer and
Karpenter's dashboards read, written as Karpenter writes its own (labels, nodeClassRef, requirements,
requests, expireAfter, terminationGracePeriod, taints, the owner reference to the NodePool, the
``karpenter.sh/termination`` finalizer, and status through the /status subresource). An object appears
once its record has an instance (a claim whose launch fails never leaves an object behind).

The API other modules call (stable; nc21b's status and nc21c's adoption build on it):

- :func:`render` ``(record, *, nodepool_uid, type_labels, drift, consolidatable) -> dict``: the whole
  object a record should be, status included; pure. Condition times come from the record, so two
  renders of one record are equal.
- :func:`merged_conditions` ``(current, desired, now) -> list``: the conditions to write, each keeping its
  ``lastTransitionTime`` while its status is unchanged (Karpenter's condition set).
- ``lifecycle.nodeclaim_writer.NodeClaimObjects`` ``(kube, clock)``: the writer. ``sync`` converges every
  live record's object from one LIST, writing only what differs (a Lambda that died between the DynamoDB
  write and the object write is repaired on the next pass); it reports the objects a user deleted
  (``kubectl delete nodeclaim``) for the caller to start their termination, and the objects with no
  record (adoption's). ``release`` removes our finalizer once the instance is gone, so the object goes;
  ``event`` records an Event with the NodeClaim as involvedObject.

The writes need, in the function's ClusterRole (deploy/rbac.yaml): nodeclaims list, create, patch and
delete, nodeclaims/status patch (the lifecycle pass), and get, patch, delete (release, events).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.api import nodeclaim as api
from serverless_karpenter.api.common import format_duration
from serverless_karpenter.clock import to_rfc3339
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.scheduling import resources

JSON = dict[str, Any]
API_VERSION = "karpenter.sh/v1"
KIND = "NodeClaim"
# Karpenter's NodeClaim CRD refuses requirement keys in its own domains other than these two, and the
# hostname: a claim's requirements may hold them for scheduling, the object may not.
_ALLOWED_KARPENTER_KEYS = frozenset({wk.CAPACITY_TYPE, wk.NODEPOOL})
# Annotations Karpenter puts on a NodeClaim (the drift hashes); ours (serverless-karpenter.io/...) stay
# in the record.
_MIRRORED_ANNOTATION_DOMAINS = ("karpenter.sh/", "karpenter.k8s.aws/")
_REASON_CHARACTERS = re.compile(r"[^A-Za-z0-9_,:]")
AWAITING = "AwaitingReconciliation"

# The launched instance type's labels (the catalog's), for a record.
TypeLabels = Callable[[NodeClaimRecord], Mapping[str, str]]


def _requirement_allowed(key: str) -> bool:
    if key == wk.HOSTNAME:
        return False
    domain = key.split("/", 1)[0] if "/" in key else ""
    if domain.endswith("karpenter.sh"):
        return key in _ALLOWED_KARPENTER_KEYS
    return True


def _reason(text: str) -> str:
    """A condition reason the CRD accepts (CamelCase, no spaces): "NodePoolDrifted: x" -> NodePoolDrifted."""
    head = text.split(":", 1)[0].strip()
    cleaned = _REASON_CHARACTERS.sub("", head.title() if " " in head else head).strip("_,:")
    return cleaned if cleaned[:1].isalpha() else "Unknown"


def _condition(kind: str, status: str, reason: str, when: datetime, message: str = "") -> JSON:
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": to_rfc3339(when),
    }


def conditions(
    record: NodeClaimRecord,
    *,
    drift: str | None = None,
    consolidatable_since: datetime | None = None,
    observed_at: datetime | None = None,
) -> list[JSON]:
    """Karpenter's NodeClaim conditions for the record: Launched, Registered and Initialized (Ready is
    their root), then Drifted, Consolidatable and DisruptionReason while they hold, and
    InstanceTerminating once the instance is being terminated. Drift has no time of its own in the
    record: it is stamped ``observed_at`` (the pass that saw it), and kept from then on by
    :func:`merged_conditions`."""
    created = record.created_at
    steps = (
        (api.CONDITION_LAUNCHED, record.launched_at if record.instance_id else None),
        (api.CONDITION_REGISTERED, record.registered_at if record.node_name else None),
        (api.CONDITION_INITIALIZED, record.initialized_at),
    )
    out = [
        _condition(kind, "True", kind, when) if when else _condition(kind, "Unknown", AWAITING, created)
        for kind, when in steps
    ]
    waiting = [kind for kind, when in steps if when is None]
    if waiting:
        message = ", ".join(f"{kind}=Unknown" for kind in waiting)
        out.append(_condition(api.CONDITION_READY, "Unknown", "UnhealthyDependents", created, message))
    else:
        out.append(
            _condition(api.CONDITION_READY, "True", api.CONDITION_READY, record.initialized_at or created)
        )
    if drift:
        reason, _, detail = drift.partition(":")
        seen = observed_at or created
        out.append(_condition(api.CONDITION_DRIFTED, "True", _reason(reason), seen, detail.strip()))
    if consolidatable_since is not None:
        kind = api.CONDITION_CONSOLIDATABLE
        out.append(_condition(kind, "True", kind, consolidatable_since))
    if record.is_deleting or record.state == NodeClaimState.TERMINATED:
        reason = _reason(record.disruption_reason or "Unknown")
        when = record.deletion_requested_at or created
        out.append(
            _condition(api.CONDITION_DISRUPTION_REASON, "True", reason, when, record.disruption_reason or "")
        )
    if record.state in (NodeClaimState.TERMINATING, NodeClaimState.TERMINATED):
        kind = "InstanceTerminating"
        out.append(_condition(kind, "True", kind, record.deletion_requested_at or created))
    return out


def merged_conditions(
    current: Iterable[Mapping[str, Any]], desired: Iterable[JSON], now: datetime
) -> list[JSON]:
    """``desired``, each condition keeping the current one's lastTransitionTime when its status is the
    same (a reason or message may change without a transition). A condition new to the object, or whose
    status changed, is stamped with its own time, or ``now`` when that lies in the past of the current one."""
    previous = {c.get("type"): c for c in current}
    out = []
    for wanted in desired:
        before = previous.get(wanted["type"])
        stamp = wanted["lastTransitionTime"]
        if (
            before is not None
            and before.get("status") == wanted["status"]
            and before.get("lastTransitionTime")
        ):
            stamp = before["lastTransitionTime"]
        elif before is not None and str(before.get("lastTransitionTime") or "") > stamp:
            stamp = to_rfc3339(now)
        out.append({**wanted, "lastTransitionTime": stamp})
    return out


def _quantities(values: Mapping[str, int]) -> dict[str, str]:
    return {name: resources.format_quantity(name, value) for name, value in sorted(values.items())}


def _labels(record: NodeClaimRecord, type_labels: Mapping[str, str] | None) -> dict[str, str]:
    labels: dict[str, str] = {}
    if record.instance_type:
        option = next((o for o in record.instance_type_options if o.name == record.instance_type), None)
        if option is not None:
            labels[wk.ARCH] = option.arch
        # Karpenter labels a launched claim with its type's well-known labels (cpu, memory, family...).
        labels.update({k: v for k, v in (type_labels or {}).items() if k in wk.WELL_KNOWN_LABELS})
    labels.update(record.labels)
    labels[wk.NODEPOOL] = record.nodepool
    labels[wk.EC2NODECLASS] = record.nodeclass
    # A node's own labels, never a claim's (Karpenter sets them on the Node only).
    for key in (wk.HOSTNAME, wk.REGISTERED, wk.INITIALIZED):
        labels.pop(key, None)
    return labels


def _requirements(record: NodeClaimRecord) -> list[JSON]:
    requirements = [dict(r) for r in record.requirements if _requirement_allowed(str(r.get("key")))]
    names = sorted(record.option_names())
    if not any(r.get("key") == wk.INSTANCE_TYPE for r in requirements) and names:
        requirements.append({"key": wk.INSTANCE_TYPE, "operator": "In", "values": names})
    return requirements


def _taints(taints: Iterable[Mapping[str, str]]) -> list[JSON]:
    return [{k: v for k, v in t.items() if k in ("key", "value", "effect") and v != ""} for t in taints]


def render(
    record: NodeClaimRecord,
    *,
    nodepool_uid: str | None = None,
    type_labels: Mapping[str, str] | None = None,
    drift: str | None = None,
    consolidatable_since: datetime | None = None,
    observed_at: datetime | None = None,
) -> JSON:
    """The NodeClaim object of ``record``, as Karpenter would have written it. ``nodepool_uid`` is the live
    NodePool's (no owner reference without it: a reference with a wrong uid would let the garbage
    collector delete the claim); ``type_labels`` gives the launched type's well-known labels."""
    metadata: JSON = {
        "name": record.name,
        "labels": _labels(record, type_labels),
        "annotations": {
            k: v for k, v in record.annotations.items() if k.startswith(_MIRRORED_ANNOTATION_DOMAINS)
        },
        "finalizers": [wk.TERMINATION_FINALIZER],
    }
    if nodepool_uid:
        metadata["ownerReferences"] = [
            {
                "apiVersion": API_VERSION,
                "kind": "NodePool",
                "name": record.nodepool,
                "uid": nodepool_uid,
                "blockOwnerDeletion": True,
            }
        ]
    spec: JSON = {
        "nodeClassRef": {"group": wk.AWS_GROUP, "kind": "EC2NodeClass", "name": record.nodeclass},
        "requirements": _requirements(record),
        "resources": {"requests": _quantities(record.requests)},
        "expireAfter": format_duration(
            None if record.expire_after_seconds is None else _seconds(record.expire_after_seconds)
        ),
    }
    if record.termination_grace_period_seconds is not None:
        spec["terminationGracePeriod"] = format_duration(_seconds(record.termination_grace_period_seconds))
    if record.taints:
        spec["taints"] = _taints(record.taints)
    if record.startup_taints:
        spec["startupTaints"] = _taints(record.startup_taints)
    status: JSON = {
        "conditions": conditions(
            record, drift=drift, consolidatable_since=consolidatable_since, observed_at=observed_at
        ),
    }
    for key, value in (
        ("providerID", record.provider_id),
        ("nodeName", record.node_name),
        ("imageID", record.image_id),
    ):
        if value:
            status[key] = value
    if record.instance_id:
        status["capacity"] = _quantities(record.expected_capacity())
        status["allocatable"] = _quantities(record.expected_allocatable())
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec, "status": status}


def _seconds(value: float) -> timedelta:
    return timedelta(seconds=round(value))

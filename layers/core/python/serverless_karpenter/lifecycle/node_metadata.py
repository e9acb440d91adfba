"""The labels and annotations a Node gets from its NodeClaim, as Karpenter sets them.

Karpenter's NodeClaim carries, once launched: the NodePool template's labels, the single-valued
requirements, ``karpenter.sh/nodepool`` and ``karpenter.k8s.aws/ec2nodeclass`` (the claim template), every
single-valued label of the launched instance type (``node.kubernetes.io/instance-type``, arch, os, region
and the ``karpenter.k8s.aws/instance-*`` labels), and the offering's zone, zone ID and capacity type (the
provider's ``instanceToNodeClaim``). Its annotations: the template's, ``karpenter.sh/nodepool-hash`` and
``-hash-version`` (claim template), ``karpenter.k8s.aws/ec2nodeclass-hash`` and ``-hash-version`` and
``karpenter.k8s.aws/instance-profile-name`` (the provider's Create). Registration copies all of them onto
the Node and adds ``karpenter.sh/registered=true``; initialization adds ``karpenter.sh/initialized=true``.

The kubelet cannot be relied on for these: ``--node-labels`` carries what the launch knew (not the zone
ID, and the kubelet refuses some domains), and annotations not at all; so registration writes them through
the API, as Karpenter does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from serverless_karpenter.adapters.providers.model import ResolvedNodeClass
from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle.model import NodeClaimRecord

# Our own bookkeeping on a record (pod-set tracking for consolidateAfter): not Karpenter's, kept off nodes.
INTERNAL_ANNOTATION_DOMAIN = "serverless-karpenter.io"
INSTANCE_PROFILE_ANNOTATION = "karpenter.k8s.aws/instance-profile-name"


def claim_labels(
    record: NodeClaimRecord, type_labels: Mapping[str, str], nodeclass: ResolvedNodeClass | None
) -> dict[str, str]:
    """The launched claim's labels: the launched type's labels under what the claim itself says (its
    template labels and requirements, and the offering it launched in)."""
    labels = {**type_labels, **record.labels, wk.NODEPOOL: record.nodepool, wk.EC2NODECLASS: record.nodeclass}
    if record.instance_type:
        labels[wk.INSTANCE_TYPE] = record.instance_type
    if record.zone:
        labels[wk.ZONE] = record.zone
        zone_id = next(
            (
                s.zone_id
                for s in (nodeclass.subnets if nodeclass else ())
                if s.zone == record.zone and s.zone_id
            ),
            None,
        )
        if zone_id:
            labels[wk.ZONE_ID] = zone_id
    if record.capacity_type:
        labels[wk.CAPACITY_TYPE] = record.capacity_type
    return labels


def claim_annotations(record: NodeClaimRecord, nodeclass: ResolvedNodeClass | None) -> dict[str, str]:
    """The claim's annotations a Node carries: Karpenter's (the hashes and their versions, the instance
    profile) and the template's; our bookkeeping stays on the record."""
    annotations = {
        k: v for k, v in record.annotations.items() if wk.label_domain(k) != INTERNAL_ANNOTATION_DOMAIN
    }
    if nodeclass is not None and nodeclass.instance_profile:
        annotations.setdefault(INSTANCE_PROFILE_ANNOTATION, nodeclass.instance_profile)
    return annotations


def registration_metadata(
    record: NodeClaimRecord,
    node: Mapping[str, Any],
    type_labels: Mapping[str, str],
    nodeclass: ResolvedNodeClass | None,
) -> dict[str, Any]:
    """The ``metadata`` part of the registration patch: labels and annotations merged over the Node's own
    (the claim's win, as Karpenter's ``lo.Assign``), ``karpenter.sh/registered=true``."""
    meta = node.get("metadata") or {}
    return {
        "labels": {**claim_labels(record, type_labels, nodeclass), wk.REGISTERED: "true"},
        "annotations": claim_annotations(record, nodeclass),
        "resourceVersion": meta.get("resourceVersion"),
    }


def initialized_patch(node: Mapping[str, Any]) -> dict[str, Any] | None:
    """The patch that labels an initialized Node ``karpenter.sh/initialized=true``; None when it is."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    if labels.get(wk.INITIALIZED) == "true":
        return None
    return {"metadata": {"labels": {wk.INITIALIZED: "true"}}}

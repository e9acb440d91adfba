"""Drift a record shows on its own: its NodePool's or EC2NodeClass's hash changed since it was made, or its
AMI is no longer one its EC2NodeClass resolves to. The disruption pass checks these first, then what
needs the instance's network and the node's labels (``methods.drift_reason``); the lifecycle pass writes
them to the NodeClaim's Drifted condition."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from serverless_karpenter.api import labels as wk
from serverless_karpenter.api.ec2nodeclass import EC2NODECLASS_HASH_VERSION, EC2NodeClass
from serverless_karpenter.api.nodepool import NODEPOOL_HASH_VERSION, NodePool
from serverless_karpenter.lifecycle.model import NodeClaimRecord


class ResolvedAmis(Protocol):
    @property
    def amis(self) -> dict[str, str]: ...


def record_drift(
    record: NodeClaimRecord,
    annotations: Mapping[str, str],
    nodepool: NodePool | None,
    nodeclass: EC2NodeClass | None,
    resolved: ResolvedAmis | None,
) -> str | None:
    """ "Reason: detail" of the record's drift, or None. ``annotations`` are the record's, with its node's
    over them (the node's hashes win)."""
    if nodepool is not None and _hash_moved(
        annotations,
        wk.NODEPOOL_HASH,
        wk.NODEPOOL_HASH_VERSION,
        NODEPOOL_HASH_VERSION,
        nodepool.template_hash(),
    ):
        return "NodePoolDrifted: the NodePool template changed"
    if nodeclass is not None and _hash_moved(
        annotations,
        wk.EC2NODECLASS_HASH,
        wk.EC2NODECLASS_HASH_VERSION,
        EC2NODECLASS_HASH_VERSION,
        nodeclass.static_hash(),
    ):
        return "NodeClassDrifted: the EC2NodeClass changed"
    if resolved is not None and record.image_id and resolved.amis:
        current = set(resolved.amis.values())
        if record.image_id not in current:
            return f"AMIDrift: {record.image_id} is no longer a resolved AMI ({', '.join(sorted(current))})"
    return None


def _hash_moved(annotations: Mapping[str, str], key: str, version_key: str, ours: str, current: str) -> bool:
    """Whether the stamped hash differs from ``current``. As Karpenter: a hash of another computation
    (another version: Karpenter's own, on a node it launched) says nothing about drift; a record from
    before versions were written counts as ours."""
    stamped = annotations.get(key)
    return bool(stamped) and annotations.get(version_key, ours) == ours and stamped != current

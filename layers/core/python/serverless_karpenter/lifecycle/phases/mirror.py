"""The NodeClaim mirror: every live record written to the cluster as a karpenter.sh/v1 NodeClaim object
(status and conditions included), so that Karpenter's tools and ``kubectl get nodeclaims`` work."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from serverless_karpenter.adapters.providers.model import ResolvedNodeClass
from serverless_karpenter.api.ec2nodeclass import EC2NodeClass
from serverless_karpenter.api.nodepool import NodePool
from serverless_karpenter.disruption.candidates import last_pod_event
from serverless_karpenter.disruption.drift import record_drift
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.lifecycle.nodeclaim_writer import NodeClaimObjects, SyncResult
from serverless_karpenter.lifecycle.phases.base import LifecyclePass
from serverless_karpenter.provisioning.context import ControlPlane


def _parsed(model: Any, manifests: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for manifest in manifests:
        try:
            out[manifest["metadata"]["name"]] = model.model_validate(manifest)
        except ValueError:
            continue  # one that does not parse shows no drift; its validation reports it elsewhere
    return out


def mirror_objects(
    plane: ControlPlane,
    writer: NodeClaimObjects,
    live: list[NodeClaimRecord],
    nodeclass_specs: list[dict[str, Any]],
    resolved: Mapping[str, ResolvedNodeClass | None],
    manifests: list[dict[str, Any]],
    claims: list[dict[str, Any]] | None = None,
) -> SyncResult:
    """Write every live record's NodeClaim object: the owner reference needs the live NodePool's uid (from
    ``manifests``, the pass's NodePools), the labels the launched type's (from the catalog), the Drifted
    condition the record's own drift and Consolidatable the NodePool's consolidateAfter since the node's
    last pod event."""
    now = plane.clock.now()
    uids = {
        m["metadata"]["name"]: str(m["metadata"].get("uid") or "")
        for m in manifests
        if not m["metadata"].get("deletionTimestamp")
    }
    pools: dict[str, NodePool] = _parsed(NodePool, manifests)
    classes: dict[str, EC2NodeClass] = _parsed(EC2NodeClass, nodeclass_specs)
    drift: dict[str, str] = {}
    consolidatable: dict[str, datetime] = {}
    for record in live:
        if not record.instance_id:
            continue
        pool = pools.get(record.nodepool)
        reason = record_drift(
            record, record.annotations, pool, classes.get(record.nodeclass), resolved.get(record.nodeclass)
        )
        if reason:
            drift[record.name] = reason
        after = pool.consolidate_after_timedelta() if pool is not None else None
        if record.state == NodeClaimState.INITIALIZED and after is not None:
            since = last_pod_event(record, []) + after
            if now >= since:
                consolidatable[record.name] = since
    labels_of = _TypeLabels(plane, nodeclass_specs, resolved)
    return writer.sync(
        live,
        record_of=plane.store.get,
        nodepool_uids={k: v for k, v in uids.items() if v},
        type_labels=labels_of,
        drift=drift,
        consolidatable_since=consolidatable,
        listed=claims,
    )


class _TypeLabels:
    """The catalog's labels of a launched type, read once per node class and pass, and only if asked."""

    def __init__(
        self,
        plane: ControlPlane,
        specs: list[dict[str, Any]],
        resolved: Mapping[str, ResolvedNodeClass | None],
    ) -> None:
        self.plane = plane
        self.specs = {s["metadata"]["name"]: s for s in specs}
        self.resolved = resolved
        self.by_class: dict[str, dict[str, Mapping[str, str]]] = {}

    def __call__(self, record: NodeClaimRecord) -> Mapping[str, str]:
        if record.nodeclass not in self.by_class:
            nodeclass = self.resolved.get(record.nodeclass)
            types: dict[str, Mapping[str, str]] = {}
            if nodeclass is not None:
                spec = self.specs.get(record.nodeclass, {})
                types = {
                    it.name: it.labels for it in self.plane.instance_types.instance_types(nodeclass, spec)
                }
            self.by_class[record.nodeclass] = types
        return self.by_class[record.nodeclass].get(record.instance_type or "", {})


class Mirror:
    def reconcile(self, state: LifecyclePass) -> None:
        result = state.result
        result.objects = mirror_objects(
            state.plane,
            state.objects,
            result.records,
            result.nodeclass_specs,
            state.resolved,
            state.nodepools or [],
            state.claims,
        )

"""Registration, as Karpenter's lifecycle ``registration.go``: a launched claim's Node has joined (found by
its providerID). The Node gets the claim's labels, annotations and taints, loses the unregistered taint
and gains our termination finalizer; the claim becomes Registered."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from serverless_karpenter.adapters.providers.model import ResolvedNodeClass
from serverless_karpenter.api import labels as wk
from serverless_karpenter.lifecycle import node_metadata
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.lifecycle.phases.base import NEXT, LifecyclePass, Outcome
from serverless_karpenter.observability import MetricName, MetricUnit, Msg, logger, metrics
from serverless_karpenter.provisioning.context import ControlPlane


def registration_patch(
    record: NodeClaimRecord,
    node: Mapping[str, Any],
    type_labels: Mapping[str, str] | None = None,
    nodeclass: ResolvedNodeClass | None = None,
) -> dict[str, Any]:
    """The claim's labels and annotations (:mod:`~serverless_karpenter.lifecycle.node_metadata`) and
    taints; the unregistered taint off; our finalizer on."""
    meta = node.get("metadata", {})
    taints = [
        t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != wk.UNREGISTERED_TAINT_KEY
    ]
    present = {(t.get("key"), t.get("effect")) for t in taints}
    for taint in [*record.taints, *record.startup_taints]:
        if (taint.get("key"), taint.get("effect")) not in present:
            taints.append(dict(taint))
    finalizers = list(meta.get("finalizers") or [])
    if wk.TERMINATION_FINALIZER not in finalizers:
        finalizers.append(wk.TERMINATION_FINALIZER)
    metadata = node_metadata.registration_metadata(record, node, type_labels or {}, nodeclass)
    return {"metadata": {**metadata, "finalizers": finalizers}, "spec": {"taints": taints}}


class Registration:
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        # Per EC2NodeClass, each instance type's labels: what a registering node is labelled with. Kept as
        # long as the reconciler (a warm Lambda's), as the catalog it reads.
        self._type_labels: dict[str, dict[str, Mapping[str, str]]] = {}

    def reconcile(self, record: NodeClaimRecord, state: LifecyclePass) -> Outcome:
        node = state.node_of(record)
        if record.state != NodeClaimState.LAUNCHED or node is None:
            return NEXT
        return self._register(record, node, state.resolved.get(record.nodeclass), state)

    def type_labels(self, record: NodeClaimRecord, nodeclass: ResolvedNodeClass | None) -> Mapping[str, str]:
        """The launched instance type's labels, from the catalog the provisioner chose it from."""
        if nodeclass is None or not record.instance_type:
            return {}
        if record.nodeclass not in self._type_labels:
            types = self.plane.instance_types.instance_types(nodeclass, {})
            self._type_labels[record.nodeclass] = {it.name: it.labels for it in types}
        return self._type_labels[record.nodeclass].get(record.instance_type, {})

    def _register(
        self,
        record: NodeClaimRecord,
        node: Mapping[str, Any],
        nodeclass: ResolvedNodeClass | None,
        state: LifecyclePass,
    ) -> NodeClaimRecord:
        plane = self.plane
        name = node["metadata"]["name"]
        patch = registration_patch(record, node, self.type_labels(record, nodeclass), nodeclass)
        state.updated_nodes[name] = plane.kube.patch_node(name, patch)
        saved = plane.store.save(
            record.model_copy(
                update={
                    "state": NodeClaimState.REGISTERED,
                    "node_name": name,
                    "registered_at": plane.clock.now(),
                }
            )
        )
        metrics.add_metric(name=MetricName.NODECLAIMS_REGISTERED, unit=MetricUnit.Count, value=1)
        logger.info(
            Msg.REGISTERED_NODECLAIM,
            extra={"nodeclaim": saved.name, "node": name, "provider-id": saved.provider_id},
        )
        state.result.registered.append(record.name)
        return saved

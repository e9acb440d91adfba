"""Initialization, as Karpenter's lifecycle ``initialization.go``: a registered claim's Node is Ready, its
startup taints and Karpenter's known ephemeral taints are gone, and every extended resource it was
launched for is registered; the Node is labelled initialized and the claim becomes Initialized."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from serverless_karpenter.lifecycle import node_metadata
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.lifecycle.phases.base import NEXT, LifecyclePass, Outcome
from serverless_karpenter.observability import MetricName, MetricUnit, Msg, logger, metrics
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.taints import is_known_ephemeral, taints_from_dicts
from serverless_karpenter.termination.terminator import node_is_ready


def is_initialized(record: NodeClaimRecord, node: Mapping[str, Any]) -> bool:
    """Ready, startup taints and Karpenter's known ephemeral taints gone, and every requested extended
    resource registered."""
    if not node_is_ready(node):
        return False
    present = taints_from_dicts((node.get("spec") or {}).get("taints"))
    if any(is_known_ephemeral(t) for t in present):
        return False
    for startup in taints_from_dicts(record.startup_taints):
        if any(t.matches(startup) for t in present):
            return False
    allocatable = resources.parse_list((node.get("status") or {}).get("allocatable"))
    for name, value in record.requests.items():
        if "/" in name and value > 0 and allocatable.get(name, 0) <= 0:
            return False
    return True


class Initialization:
    def reconcile(self, record: NodeClaimRecord, state: LifecyclePass) -> Outcome:
        node = state.node_of(record)
        if node is None:
            return NEXT
        plane = state.plane
        now = plane.clock.now()
        if record.state == NodeClaimState.INITIALIZED:
            # Labelled when it initialized; a node initialized before we labelled (or adopted) gets it now.
            self._label_initialized(node, state)
        if record.state == NodeClaimState.REGISTERED and is_initialized(record, node):
            self._label_initialized(node, state)
            saved = plane.store.save(
                record.model_copy(update={"state": NodeClaimState.INITIALIZED, "initialized_at": now})
            )
            metrics.add_metric(name=MetricName.NODECLAIMS_INITIALIZED, unit=MetricUnit.Count, value=1)
            if record.launched_at:
                metrics.add_metric(
                    name=MetricName.INITIALIZATION_LATENCY,
                    unit=MetricUnit.Seconds,
                    value=(now - record.launched_at).total_seconds(),
                )
            logger.info(Msg.INITIALIZED_NODECLAIM, extra={"nodeclaim": saved.name, "node": saved.node_name})
            state.result.initialized.append(record.name)
            return saved
        return NEXT

    def _label_initialized(self, node: Mapping[str, Any], state: LifecyclePass) -> None:
        patch = node_metadata.initialized_patch(node)
        if patch is not None:
            name = node["metadata"]["name"]
            state.updated_nodes[name] = state.plane.kube.patch_node(name, patch)

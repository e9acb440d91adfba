"""Pods on nodes being deleted are handed to provisioning, so their replacement capacity launches while
the drain is still under way (Karpenter counts them as pending in its provisioning simulation)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from serverless_karpenter.api import labels as wk
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter.scheduling.taints import Taint, tolerations_from_dicts

_DISRUPTED = Taint(key=wk.DISRUPTED_TAINT_KEY, value="", effect="NoSchedule")


class _PodsAndNodes(Protocol):
    def list_nodes(self) -> list[dict[str, Any]]: ...

    def list_pods_on_node(self, node_name: str) -> list[dict[str, Any]]: ...


def tolerates_disruption(pod: Mapping[str, Any]) -> bool:
    """A pod that tolerates the disrupted taint would come straight back, so it is neither drained nor
    rescheduled."""
    tolerations = tolerations_from_dicts((pod.get("spec") or {}).get("tolerations"))
    return any(t.tolerates(_DISRUPTED) for t in tolerations)


def is_reschedulable(pod: Mapping[str, Any]) -> bool:
    """A pod that will need a place elsewhere once its node goes: not finished, not already being
    deleted (its controller's replacement is pending on its own), not tied to the node (DaemonSet,
    static)."""
    return (
        not podlib.is_terminal(pod)
        and not podlib.is_deleting(pod)
        and not podlib.is_daemonset_pod(pod)
        and not podlib.is_mirror_pod(pod)
        and not tolerates_disruption(pod)
    )


def has_disrupted_taint(node: Mapping[str, Any]) -> bool:
    return any(t.get("key") == wk.DISRUPTED_TAINT_KEY for t in (node.get("spec") or {}).get("taints") or [])


def is_node_deleting(node: Mapping[str, Any]) -> bool:
    """Being deleted, or tainted for disruption (its replacements launching): no place for new pods."""
    return bool((node.get("metadata") or {}).get("deletionTimestamp")) or has_disrupted_taint(node)


def reschedulable_pods(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [p for p in pods if is_reschedulable(p)]


def pods_on_deleting_nodes(kube: _PodsAndNodes) -> list[dict[str, Any]]:
    """Reschedulable pods of every node being deleted or tainted for disruption, for the provisioner."""
    out: list[dict[str, Any]] = []
    for node in kube.list_nodes():
        if is_node_deleting(node):
            out.extend(p for p in kube.list_pods_on_node(node["metadata"]["name"]) if is_reschedulable(p))
    return out

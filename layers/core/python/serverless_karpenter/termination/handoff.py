"""Pods on nodes being deleted are handed to provisioning, so their replacement capacity launches while
the drain is still under way (Karpenter counts them as pending in its provisioning simulation)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from serverless_karpenter.api import labels as wk
from serverless_karpenter.api.common import parse_duration
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter.scheduling.requirements import Requirements
from serverless_karpenter.scheduling.taints import Taint, tolerations_from_dicts

_DISRUPTED = Taint(key=wk.DISRUPTED_TAINT_KEY, value="", effect="NoSchedule")


class _PodsAndNodes(Protocol):
    def list_nodes(self) -> list[dict[str, Any]]: ...

    def list_pods_on_node(self, node_name: str) -> list[dict[str, Any]]: ...

    def list_pdbs(self) -> list[dict[str, Any]]: ...


def tolerates_disruption(pod: Mapping[str, Any]) -> bool:
    """A pod that tolerates the disrupted taint would come straight back, so it is neither drained nor
    rescheduled."""
    tolerations = tolerations_from_dicts((pod.get("spec") or {}).get("tolerations"))
    return any(t.tolerates(_DISRUPTED) for t in tolerations)


def is_reschedulable(pod: Mapping[str, Any]) -> bool:
    """Karpenter's IsReschedulable: a pod that will need a place elsewhere once its node goes. Active
    (not finished, not being deleted: a deleted pod's replacement is pending on its own), or a
    StatefulSet's pod being deleted (its replacement, with the same name, is created only once it is
    gone, so room for it is needed now); not tied to the node (DaemonSet, static). A pod that tolerates
    the disrupted taint is not drained, but it still dies with its node."""
    if podlib.is_terminal(pod):
        return False
    if podlib.is_deleting(pod) and podlib.owner_kind(pod) != "StatefulSet":
        return False
    return not podlib.is_daemonset_pod(pod) and not podlib.is_mirror_pod(pod)


def has_disrupted_taint(node: Mapping[str, Any]) -> bool:
    return any(t.get("key") == wk.DISRUPTED_TAINT_KEY for t in (node.get("spec") or {}).get("taints") or [])


def is_node_deleting(node: Mapping[str, Any]) -> bool:
    """Being deleted, or tainted for disruption (its replacements launching): no place for new pods."""
    return bool((node.get("metadata") or {}).get("deletionTimestamp")) or has_disrupted_taint(node)


def reschedulable_pods(pods: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [p for p in pods if is_reschedulable(p)]


def do_not_disrupt_active(pod: Mapping[str, Any], now: datetime) -> bool:
    """Karpenter's IsDoNotDisruptActive: ``karpenter.sh/do-not-disrupt`` is "true", or a duration the pod
    has not run for yet. An unparseable value does not block, as Karpenter ignores it."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(wk.DO_NOT_DISRUPT)
    if value is None:
        return False
    if value.strip().lower() == "true":
        return True
    try:
        duration = parse_duration(value.strip())
    except ValueError:
        return False
    if duration is None:  # "Never" would mean forever
        return True
    started = podlib.started(pod)
    return started is None or now < started + duration


def pdb_key(pdb: Mapping[str, Any]) -> str:
    meta = pdb.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name')}"


def pdb_selects(pdb: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
    """Whether a PodDisruptionBudget covers ``pod``: same namespace, and its selector matches (policy/v1:
    an empty selector matches every pod of the namespace, a missing one none)."""
    meta = pod.get("metadata") or {}
    if (pdb.get("metadata") or {}).get("namespace", "default") != meta.get("namespace", "default"):
        return False
    selector = (pdb.get("spec") or {}).get("selector")
    if selector is None:
        return False
    requirements = Requirements.from_labels(selector.get("matchLabels") or {}).merged(
        Requirements.from_node_selector_requirements(selector.get("matchExpressions") or [])
    )
    return requirements.matches_labels(meta.get("labels") or {}) is None


def _fully_blocking(pdb: Mapping[str, Any]) -> bool:
    """A PDB that never allows an eviction, whatever its status: maxUnavailable 0 or 0%, or minAvailable
    100% (Karpenter's isFullyBlocking)."""
    spec = pdb.get("spec") or {}
    max_unavailable, min_available = spec.get("maxUnavailable"), spec.get("minAvailable")
    return max_unavailable in (0, "0%") or min_available == "100%"


def _is_ready(pod: Mapping[str, Any]) -> bool:
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "Ready":
            return condition.get("status") != "False"
    return True


def _eviction_fully_blocked(pod: Mapping[str, Any], pdbs: Sequence[Mapping[str, Any]], now: datetime) -> bool:
    """Karpenter's isFullyBlocked: the Eviction API will refuse this pod until someone changes a PDB."""
    if (
        not podlib.is_active(pod)
        or tolerates_disruption(pod)
        or podlib.is_mirror_pod(pod)
        or do_not_disrupt_active(pod, now)
    ):
        return False  # not evicted at all, so no PDB stands in the way
    covering = [pdb for pdb in pdbs if pdb_selects(pdb, pod)]
    if len(covering) > 1:
        return True  # the Eviction API refuses a pod more than one PDB covers
    for pdb in covering:
        always_allow = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow"
        if always_allow and not _is_ready(pod):
            return False
        if _fully_blocking(pdb):
            return True
    return False


def is_currently_reschedulable(
    pod: Mapping[str, Any], pdbs: Sequence[Mapping[str, Any]], now: datetime
) -> bool:
    """Karpenter's IsCurrentlyReschedulable: reschedulable, not held by do-not-disrupt, and not behind a
    PDB that fully blocks its eviction (it will not leave, so capacity for it would sit idle)."""
    return (
        is_reschedulable(pod)
        and not do_not_disrupt_active(pod, now)
        and not _eviction_fully_blocked(pod, pdbs, now)
    )


def pods_on_deleting_nodes(
    kube: _PodsAndNodes, now: datetime, nodes: Sequence[Mapping[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """The currently reschedulable pods of every node being deleted or tainted for disruption, for the
    provisioner (Karpenter's ``Deleting().CurrentlyReschedulablePods``); ``nodes`` as the caller listed
    them this pass (else listed here)."""
    out: list[dict[str, Any]] = []
    pdbs: list[dict[str, Any]] | None = None
    for node in kube.list_nodes() if nodes is None else nodes:
        if is_node_deleting(node):
            if pdbs is None:
                pdbs = kube.list_pdbs()
            out.extend(
                p
                for p in kube.list_pods_on_node(node["metadata"]["name"])
                if is_currently_reschedulable(p, pdbs, now)
            )
    return out

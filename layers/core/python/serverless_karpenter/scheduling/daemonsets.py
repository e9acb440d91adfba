"""Which DaemonSets a node will run, as Karpenter decides it: their pods' requests are charged to the node
before any pending pod, and their host ports are taken.

For a new node (``isDaemonPodCompatible``): the DaemonSet tolerates the NodePool's taints (a
PreferNoSchedule taint never keeps a DaemonSet off) and one of its required node affinity terms (tried in
turn, as Karpenter relaxes them) is compatible with the NodePool's requirements and intersects the
instance type's labels; so the overhead is per instance type. For an existing node
(``isDaemonPodCompatibleWithNode``): it tolerates the node's taints and the node's labels meet its
nodeSelector and first required term. A DaemonSet pod with DRA resource claims runs on none, as far as
scheduling is concerned (Karpenter's IgnoreDRARequests, on by default).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.dra import has_dra_requirements
from serverless_karpenter.scheduling.hostports import HostPort, host_ports
from serverless_karpenter.scheduling.requirements import Requirements, required_node_affinity_terms
from serverless_karpenter.scheduling.taints import Taint, tolerations_from_dicts, untolerated

Obj = Mapping[str, Any]


def daemonset_pod(daemonset: Obj) -> dict[str, Any]:
    """The pod a DaemonSet runs on each node: its template, owned by the DaemonSet."""
    meta = daemonset.get("metadata") or {}
    template = (daemonset.get("spec") or {}).get("template") or {}
    return {
        "metadata": {
            **(template.get("metadata") or {}),
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", "default"),
            "ownerReferences": [{"kind": "DaemonSet", "name": meta.get("name", ""), "controller": True}],
        },
        "spec": template.get("spec") or {},
    }


@dataclass(frozen=True)
class DaemonGroup:
    """What the DaemonSets that run on some instance types of a NodePool ask of each node."""

    overhead: resources.ResourceList
    host_ports: frozenset[HostPort]


NO_DAEMONS = DaemonGroup({}, frozenset())


def template_terms(pod: Obj, requirements: Requirements, taints: Iterable[Taint]) -> list[Requirements]:
    """The DaemonSet pod's node constraints (nodeSelector with each required term) that a node of a
    NodePool with ``requirements`` and ``taints`` could meet; empty when none can."""
    spec = pod.get("spec") or {}
    if has_dra_requirements(pod):
        return []
    if untolerated(tolerations_from_dicts(spec.get("tolerations")), taints) is not None:
        return []
    count = max(1, len(required_node_affinity_terms(pod)))
    terms = [Requirements.from_pod(pod, required_term=i) for i in range(count)]
    return [term for term in terms if requirements.is_compatible(term)]


def group_of(pods: Sequence[Obj], compatible: Iterable[int]) -> DaemonGroup:
    members = [pods[i] for i in compatible]
    if not members:
        return NO_DAEMONS
    return DaemonGroup(
        podlib.total_requests(members), frozenset(port for pod in members for port in host_ports(pod))
    )


def node_daemons(pods: Sequence[Obj], labels: Mapping[str, str], taints: Iterable[Taint]) -> list[Obj]:
    """The DaemonSet pods an existing node with ``labels`` and ``taints`` runs."""
    node = Requirements.from_labels(labels)
    taints = tuple(taints)
    out = []
    for pod in pods:
        if has_dra_requirements(pod):
            continue
        tolerations = tolerations_from_dicts((pod.get("spec") or {}).get("tolerations"))
        if untolerated(tolerations, taints, include_prefer_no_schedule=True) is not None:
            continue
        if node.compatible(Requirements.from_pod(pod), frozenset()) is None:
            out.append(pod)
    return out


def remaining_daemon_requests(daemons: Sequence[Obj], running: Sequence[Obj]) -> resources.ResourceList:
    """What the node's DaemonSets will still take: their requests less those of the DaemonSet pods
    already running there, never below zero (Karpenter's ExistingNode remaining daemon resources)."""
    if not daemons:
        return {}
    left = resources.subtract(
        podlib.total_requests(daemons),
        podlib.total_requests(p for p in running if podlib.is_daemonset_pod(p)),
    )
    return {k: max(v, 0) for k, v in left.items()}

"""A pending pod's scheduling constraints, and Karpenter's order for relaxing its preferences.

Karpenter first treats every preference as required (the heaviest preferred node affinity term, every
preferred pod affinity and anti-affinity term, every ScheduleAnyway spread). When the pod cannot be
placed, one relaxation is applied and the pod is tried again (``preferences.go``), in this order:

1. drop the first required node affinity term, while more than one is left (terms are ORed);
2. drop the heaviest preferred pod affinity term;
3. drop the heaviest preferred pod anti-affinity term;
4. drop the heaviest preferred node affinity term;
5. drop a ScheduleAnyway topology spread constraint;
6. tolerate PreferNoSchedule taints (only when some NodePool has one).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.hostports import HostPort, host_ports
from serverless_karpenter.scheduling.requirements import (
    Requirements,
    preferred_node_affinity_terms,
    required_node_affinity_terms,
)
from serverless_karpenter.scheduling.taints import Toleration, tolerations_from_dicts
from serverless_karpenter.scheduling.topology import (
    AFFINITY,
    ANTI_AFFINITY,
    DO_NOT_SCHEDULE,
    HONOR,
    IGNORE,
    PER_NODE_KEYS,
    SCHEDULE_ANYWAY,
    SPREAD,
    NodeFilter,
    PodTopologyView,
    Selector,
    Topology,
    TopologyGroup,
    resolve_namespaces,
)
from serverless_karpenter.scheduling.volumes import VolumeIndex, volume_requirements
from serverless_karpenter.scheduling.volumeusage import Volumes, pod_volumes

_ONE_PASS = (0,)


@dataclass(eq=False)
class PodState:
    pod: Mapping[str, Any]
    key: str
    namespace: str
    labels: Mapping[str, str]
    requests: resources.ResourceList
    tolerations: tuple[Toleration, ...]
    host_ports: frozenset[HostPort]
    required_terms: list[Requirements]
    preferred_node: list[Requirements]
    required_affinity: list[TopologyGroup] = field(default_factory=list)
    required_anti: list[TopologyGroup] = field(default_factory=list)
    preferred_affinity: list[TopologyGroup] = field(default_factory=list)
    preferred_anti: list[TopologyGroup] = field(default_factory=list)
    spreads: list[TopologyGroup] = field(default_factory=list)
    spreads_anyway: list[TopologyGroup] = field(default_factory=list)
    # Groups whose selector picks this pod (it counts there), and inverse anti-affinity groups it must
    # respect or that it owns.
    counted_in: list[TopologyGroup] = field(default_factory=list)
    inverse_selecting: list[TopologyGroup] = field(default_factory=list)
    inverse_owned: list[TopologyGroup] = field(default_factory=list)
    tolerate_prefer_no_schedule: bool = False
    invalid: str | None = None
    relaxed: list[str] = field(default_factory=list)
    # The alternatives of node requirements the pod's volumes allow (none: no constraint), the one being
    # tried, and the claims it mounts by CSI driver (for existing nodes' volume limits).
    volume_alternatives: list[Requirements] = field(default_factory=list)
    volume_choice: int = 0
    volumes: Volumes = field(default_factory=dict)
    _view: PodTopologyView | None = None
    _signature: tuple[Any, ...] | None = None

    # -- the current constraints -------------------------------------------------------------------

    def node_requirements(self) -> Requirements:
        base = self.required_terms[0]
        if self.volume_alternatives:
            base = base.merged(self.volume_alternatives[self.volume_choice])
        return base.merged(self.preferred_node[0]) if self.preferred_node else base

    def volume_choices(self) -> Iterable[int]:
        """Make each volume alternative current in turn (one pass when there are none): a node takes the
        pod under the first it can meet, as Karpenter's ``CanAdd``. Stopping early keeps that one."""
        if not self.volume_alternatives:
            return _ONE_PASS  # the hot path: no generator for the pods without volume alternatives
        return self._each_volume_choice()

    def _each_volume_choice(self) -> Iterator[int]:
        for choice in range(len(self.volume_alternatives)):
            self.volume_choice = choice
            yield choice

    def strict_terms(self) -> tuple[Requirements, ...]:
        return tuple(self.required_terms)

    def owned_groups(self) -> list[TopologyGroup]:
        return [
            *self.spreads,
            *self.spreads_anyway,
            *self.required_affinity,
            *self.preferred_affinity,
            *self.required_anti,
            *self.preferred_anti,
        ]

    def topology_groups(self) -> list[TopologyGroup]:
        return [*self.owned_groups(), *self.inverse_selecting]

    def view(self) -> PodTopologyView:
        if self._view is None:
            self._view = PodTopologyView(
                # The pod's own affinity, never its volumes' zones: a volume binds the node, not the
                # domains a spread counts over (as Karpenter).
                self.namespace,
                self.labels,
                self.required_terms[0],
                self.tolerations,
            )
        return self._view

    def monotone(self) -> bool:
        """Whether a node that refused this pod will refuse it forever: true unless it has pod affinity or
        a spread whose minimum can grow (any key but hostname)."""
        if self.required_affinity or self.preferred_affinity:
            return False
        return all(g.key in PER_NODE_KEYS for g in (*self.spreads, *self.spreads_anyway))

    def signature(self) -> tuple[Any, ...]:
        """Pods with equal signatures are accepted and refused by the same nodes."""
        if self._signature is None:
            self._signature = (
                tuple(sorted(self.requests.items())),
                self.tolerations,
                self.required_terms[0],
                self.preferred_node[0] if self.preferred_node else None,
                tuple(self.volume_alternatives),
                tuple(id(g) for g in self.topology_groups()),
                self.host_ports,
                self.tolerate_prefer_no_schedule,
            )
        return self._signature

    # -- relaxation --------------------------------------------------------------------------------

    def relax(self, *, prefer_no_schedule_taints: bool) -> str | None:
        """Apply the next relaxation; what was removed, or None when nothing is left to relax."""
        change = self._next_relaxation(prefer_no_schedule_taints)
        if change is not None:
            self.relaxed.append(change)
            self._view = None
            self._signature = None
        return change

    def _next_relaxation(self, prefer_no_schedule_taints: bool) -> str | None:
        if len(self.required_terms) > 1:
            self.required_terms.pop(0)
            return "removed the first required node affinity term"
        if self.preferred_affinity:
            group = self.preferred_affinity.pop(0)
            return f"removed preferred {group.describe()}"
        if self.preferred_anti:
            group = self.preferred_anti.pop(0)
            return f"removed preferred {group.describe()}"
        if self.preferred_node:
            self.preferred_node.pop(0)
            return "removed the heaviest preferred node affinity term"
        if self.spreads_anyway:
            group = self.spreads_anyway.pop(0)
            return f"removed {group.describe()}"
        if prefer_no_schedule_taints and not self.tolerate_prefer_no_schedule:
            self.tolerate_prefer_no_schedule = True
            return "tolerated PreferNoSchedule taints"
        return None


def _affinity_group(
    kind: str,
    term: Mapping[str, Any],
    pod_namespace: str,
    pod_labels: Mapping[str, str],
    namespace_labels: Mapping[str, Mapping[str, str]],
) -> TopologyGroup:
    selector = Selector.from_dict(term.get("labelSelector")).with_label_keys(
        pod_labels, term.get("matchLabelKeys") or (), term.get("mismatchLabelKeys") or ()
    )
    return TopologyGroup(
        kind=kind,
        key=str(term.get("topologyKey") or ""),
        namespaces=resolve_namespaces(term, pod_namespace, namespace_labels),
        selector=selector,
    )


def _spread_group(
    constraint: Mapping[str, Any],
    namespace: str,
    labels: Mapping[str, str],
    strict_terms: list[Requirements],
    tolerations: tuple[Toleration, ...],
) -> TopologyGroup:
    selector = Selector.from_dict(constraint.get("labelSelector")).with_label_keys(
        labels, constraint.get("matchLabelKeys") or (), ()
    )
    affinity_policy = constraint.get("nodeAffinityPolicy") or HONOR
    taints_policy = constraint.get("nodeTaintsPolicy") or IGNORE
    terms = tuple(t for t in strict_terms if len(t)) if affinity_policy == HONOR else ()
    node_filter = NodeFilter(terms=terms, tolerations=tolerations if taints_policy == HONOR else None)
    min_domains = constraint.get("minDomains")
    return TopologyGroup(
        kind=SPREAD,
        key=str(constraint.get("topologyKey") or ""),
        namespaces=frozenset({namespace}),
        selector=selector,
        max_skew=int(constraint.get("maxSkew") or 1),
        min_domains=int(min_domains) if min_domains else None,
        node_filter=node_filter,
        label=str(constraint.get("whenUnsatisfiable") or DO_NOT_SCHEDULE),
    )


def _weighted(terms: Any) -> list[Mapping[str, Any]]:
    """Preferred pod affinity terms, heaviest first (stable)."""
    ordered = sorted(terms or (), key=lambda t: -int(t.get("weight") or 0))
    return [t.get("podAffinityTerm") or {} for t in ordered]


def prepare(
    pod: Mapping[str, Any],
    topology: Topology,
    *,
    namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
    volumes: VolumeIndex | None = None,
) -> PodState:
    """A pod's constraints, its groups interned in ``topology``."""
    namespace_labels = namespace_labels or {}
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    namespace = meta.get("namespace") or "default"
    labels = dict(meta.get("labels") or {})
    node_selector = Requirements.from_node_selector(spec.get("nodeSelector"))
    terms = [node_selector.merged(t) for t in required_node_affinity_terms(pod)] or [node_selector]
    invalid = None
    volume_alternatives: list[Requirements] = []
    mounted: Volumes = {}
    if volumes is not None:
        volume_alternatives, invalid = volume_requirements(pod, volumes)
        mounted = pod_volumes(pod, volumes)
    tolerations = tolerations_from_dicts(spec.get("tolerations"))
    state = PodState(
        pod=pod,
        key=podlib.key(pod),
        namespace=namespace,
        labels=labels,
        requests=podlib.requests(pod),
        tolerations=tolerations,
        host_ports=host_ports(pod),
        required_terms=terms,
        preferred_node=[r for _, r in preferred_node_affinity_terms(pod)],
        invalid=invalid,
        volume_alternatives=volume_alternatives,
        volumes=mounted,
    )
    affinity = spec.get("affinity") or {}
    pod_affinity = affinity.get("podAffinity") or {}
    anti = affinity.get("podAntiAffinity") or {}
    for term in pod_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or ():
        state.required_affinity.append(
            topology.intern(_affinity_group(AFFINITY, term, namespace, labels, namespace_labels))
        )
    for term in _weighted(pod_affinity.get("preferredDuringSchedulingIgnoredDuringExecution")):
        state.preferred_affinity.append(
            topology.intern(_affinity_group(AFFINITY, term, namespace, labels, namespace_labels))
        )
    for term in anti.get("requiredDuringSchedulingIgnoredDuringExecution") or ():
        group = _affinity_group(ANTI_AFFINITY, term, namespace, labels, namespace_labels)
        state.required_anti.append(topology.intern(group))
        state.inverse_owned.append(
            topology.intern(
                _affinity_group(ANTI_AFFINITY, term, namespace, labels, namespace_labels), inverse=True
            )
        )
    for term in _weighted(anti.get("preferredDuringSchedulingIgnoredDuringExecution")):
        state.preferred_anti.append(
            topology.intern(_affinity_group(ANTI_AFFINITY, term, namespace, labels, namespace_labels))
        )
    for constraint in spec.get("topologySpreadConstraints") or ():
        group = topology.intern(_spread_group(constraint, namespace, labels, terms, tolerations))
        if constraint.get("whenUnsatisfiable") == SCHEDULE_ANYWAY:
            state.spreads_anyway.append(group)
        else:
            state.spreads.append(group)
    return state


def link(states: list[PodState], topology: Topology) -> None:
    """Once every group exists: which groups count each pod, and which inverse groups it must respect."""
    groups = topology.groups
    inverse = topology.inverse_groups
    cache: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[list[TopologyGroup], list[TopologyGroup]]] = {}
    for state in states:
        signature = (state.namespace, tuple(sorted(state.labels.items())))
        found = cache.get(signature)
        if found is None:
            found = (
                [g for g in groups if g.selects(state.namespace, state.labels)],
                [g for g in inverse if g.selects(state.namespace, state.labels)],
            )
            cache[signature] = found
        state.counted_in, state.inverse_selecting = found


def restricted_requirement(requirements: Requirements) -> str | None:
    """A key a new node could never be given: hostname and the like, or a restricted domain."""
    for key in requirements:
        if key in wk.RESTRICTED_LABELS:
            return key
        if key not in wk.WELL_KNOWN_LABELS and wk.is_restricted_label(key) is not None:
            return key
    return None

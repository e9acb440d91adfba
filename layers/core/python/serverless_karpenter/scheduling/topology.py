"""Pod topology: spread constraints, pod affinity and anti-affinity, counted per domain.

Karpenter's model (``topology.go``/``topologygroup.go``), in our own code. A ``TopologyGroup`` counts the
pods one selector picks out, per domain of one topology key. Pods that share a constraint (a Deployment's
replicas) share one group. Three kinds:

- spread: a pod may go to a domain whose count (plus one when it selects itself) is within ``maxSkew`` of
  the smallest count over the eligible domains (zero when fewer than ``minDomains`` are eligible, and
  always zero for hostname, since a new node is an empty domain); the least-loaded such domain wins.
- affinity: a pod must go where a selected pod already is; the first of a self-selecting group may go
  anywhere.
- anti-affinity: a pod must go where no selected pod is. Every pod with required anti-affinity also
  owns an *inverse* group, so a pod its selector matches keeps out of its domains.

Domains are registered up front from NodePool requirements, instance type offerings and existing nodes;
new NodeClaims add their hostname. Counts start from the pods bound to existing nodes and grow as the
simulation places pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.scheduling.requirements import Requirement, Requirements
from serverless_karpenter.scheduling.taints import Taint, Toleration, untolerated

SPREAD = "topology spread"
AFFINITY = "pod affinity"
ANTI_AFFINITY = "pod anti-affinity"

DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"

# Keys whose every new node is a fresh domain, so the global minimum is always zero.
PER_NODE_KEYS = frozenset({wk.HOSTNAME})

# All namespaces (an empty namespaceSelector).
ALL_NAMESPACES: frozenset[str] = frozenset({"*"})


@dataclass(frozen=True, slots=True)
class Selector:
    """A label selector, hashable. ``None`` selectors (select nothing) are ``Selector(nothing=True)``."""

    match_labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[tuple[str, str, frozenset[str]], ...] = ()
    nothing: bool = False

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> Selector:
        if data is None:
            return cls(nothing=True)
        expressions = tuple(
            sorted(
                (str(e.get("key", "")), str(e.get("operator", "")), frozenset(e.get("values") or ()))
                for e in data.get("matchExpressions") or ()
            )
        )
        return cls(tuple(sorted((data.get("matchLabels") or {}).items())), expressions)

    def with_label_keys(
        self, labels: Mapping[str, str], match: Iterable[str], mismatch: Iterable[str]
    ) -> Selector:
        """``matchLabelKeys``/``mismatchLabelKeys``: the pod's own values, In or NotIn."""
        extra = [(k, "In", frozenset({labels[k]})) for k in match if k in labels]
        extra += [(k, "NotIn", frozenset({labels[k]})) for k in mismatch if k in labels]
        if not extra or self.nothing:
            return self
        return Selector(self.match_labels, tuple(sorted((*self.expressions, *extra))))

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.nothing:
            return False
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        for key, operator, values in self.expressions:
            present = key in labels
            if operator == "In":
                if not present or labels[key] not in values:
                    return False
            elif operator == "NotIn":
                if present and labels[key] in values:
                    return False
            elif operator == "Exists":
                if not present:
                    return False
            elif operator == "DoesNotExist":
                if present:
                    return False
            else:
                return False
        return True

    def __str__(self) -> str:
        if self.nothing:
            return "(none)"
        parts = [f"{k}={v}" for k, v in self.match_labels]
        parts += [
            f"{k} {op} [{' '.join(sorted(vs))}]" if vs else f"{k} {op}" for k, op, vs in self.expressions
        ]
        return ",".join(parts) or "(all)"


@dataclass(frozen=True, slots=True)
class NodeFilter:
    """Which nodes a spread constraint counts: nodeAffinityPolicy and nodeTaintsPolicy."""

    terms: tuple[Requirements, ...] = ()  # the pod's required node terms (ORed); empty: any node
    tolerations: tuple[Toleration, ...] | None = None  # None: taints ignored

    def matches_labels(self, labels: Mapping[str, str], taints: Iterable[Taint]) -> bool:
        if self.terms and not any(t.matches_labels(labels) is None for t in self.terms):
            return False
        return self.tolerations is None or untolerated(self.tolerations, taints) is None

    def matches_requirements(self, requirements: Requirements, taints: Iterable[Taint]) -> bool:
        if self.terms and not any(requirements.is_compatible(t) for t in self.terms):
            return False
        return self.tolerations is None or untolerated(self.tolerations, taints) is None


@dataclass(eq=False)
class TopologyGroup:
    kind: str
    key: str
    namespaces: frozenset[str]
    selector: Selector
    max_skew: int = 1
    min_domains: int | None = None
    node_filter: NodeFilter | None = None
    # Pure description for messages, e.g. "DoNotSchedule".
    label: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    occupied: set[str] = field(default_factory=set)
    # Domains the group has from existing nodes its node filter takes.
    node_domains: set[str] = field(default_factory=set)
    # Spread: (minimum, [(count, domain)] within skew, least first), per kind of pod; dropped whenever
    # the counts or domains change.
    rankings: dict[tuple[Any, ...], tuple[int, list[tuple[int, str]]]] = field(default_factory=dict)

    def identity(self) -> tuple[Any, ...]:
        return (
            self.kind,
            self.key,
            self.namespaces,
            self.selector,
            self.max_skew,
            self.min_domains,
            self.node_filter,
        )

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return (self.namespaces is ALL_NAMESPACES or namespace in self.namespaces) and self.selector.matches(
            labels
        )

    def register(self, domain: str) -> None:
        if domain not in self.counts:
            self.counts[domain] = 0
            self.rankings.clear()

    def register_node(self, domain: str, labels: Mapping[str, str], taints: Iterable[Taint]) -> None:
        if self.node_filter is not None and not self.node_filter.matches_labels(labels, taints):
            return
        self.node_domains.add(domain)
        self.register(domain)

    def record(self, domain: str) -> None:
        self.counts[domain] = self.counts.get(domain, 0) + 1
        self.occupied.add(domain)
        self.rankings.clear()

    def describe(self) -> str:
        if self.kind == SPREAD:
            extra = f" minDomains {self.min_domains}" if self.min_domains else ""
            return (
                f"topology spread on {self.key} (maxSkew {self.max_skew}{extra}, {self.label}) "
                f"of pods {self.selector}"
            )
        return f"{self.kind} on {self.key} with pods {self.selector}"


@dataclass(frozen=True, slots=True)
class PodTopologyView:
    """What a topology check needs of one pod."""

    namespace: str
    labels: Mapping[str, str]
    # The pod's strict node requirements: its nodeSelector and current required node affinity term,
    # without preferences. As in Karpenter (and kube-scheduler), a spread's domains and its minimum are
    # counted from these; a preferred term narrows only the node a pod may take (the node's domains).
    node_requirements: Requirements
    tolerations: tuple[Toleration, ...]


class Topology:
    """Every group of a scheduling run, with the domains each key can take."""

    def __init__(self) -> None:
        self._groups: dict[tuple[Any, ...], TopologyGroup] = {}
        self._inverse: dict[tuple[Any, ...], TopologyGroup] = {}
        # key -> domain -> the taint sets of the places that offer it (NodePools, new NodeClaims)
        self._domains: dict[str, dict[str, list[tuple[Taint, ...]]]] = {}
        # Existing nodes: key -> [(domain, labels, taints)]. A spread counts a node's domain only when its
        # node filter (nodeAffinityPolicy, nodeTaintsPolicy) takes the node, as Karpenter's countDomains.
        self._node_domains: dict[str, list[tuple[str, Mapping[str, str], tuple[Taint, ...]]]] = {}

    @property
    def groups(self) -> list[TopologyGroup]:
        return list(self._groups.values())

    @property
    def inverse_groups(self) -> list[TopologyGroup]:
        return list(self._inverse.values())

    def intern(self, group: TopologyGroup, *, inverse: bool = False) -> TopologyGroup:
        table = self._inverse if inverse else self._groups
        found = table.get(group.identity())
        if found is not None:
            return found
        table[group.identity()] = group
        for domain in self._domains.get(group.key, {}):
            group.register(domain)
        for domain, labels, taints in self._node_domains.get(group.key, ()):
            group.register_node(domain, labels, taints)
        return group

    def register_domain(self, key: str, domain: str, taints: tuple[Taint, ...] = ()) -> None:
        places = self._domains.setdefault(key, {}).setdefault(domain, [])
        if taints not in places:
            places.append(taints)
        for table in (self._groups, self._inverse):
            for group in table.values():
                if group.key == key:
                    group.register(domain)

    def register_node_domain(
        self, key: str, domain: str, labels: Mapping[str, str], taints: tuple[Taint, ...]
    ) -> None:
        """An existing node's domain: a domain of every group whose node filter takes the node."""
        self._node_domains.setdefault(key, []).append((domain, labels, taints))
        for table in (self._groups, self._inverse):
            for group in table.values():
                if group.key == key:
                    group.register_node(domain, labels, taints)

    def keys(self) -> set[str]:
        return {g.key for g in self._groups.values()} | {g.key for g in self._inverse.values()}

    def eligible_domains(self, group: TopologyGroup, pod: PodTopologyView) -> list[str]:
        """The domains a spread's minimum is taken over: the group's domains that the pod's strict node
        requirements allow and, with nodeTaintsPolicy Honor, that a NodePool whose taints it tolerates
        offers (an existing node's domain is the group's only if its filter took the node)."""
        allowed = pod.node_requirements.get(group.key)
        out = []
        honor_taints = group.node_filter is not None and group.node_filter.tolerations is not None
        offered = self._domains.get(group.key, {})
        for domain in group.counts:
            if not allowed.has(domain):
                continue
            if honor_taints and domain not in group.node_domains:
                places = offered.get(domain, ())
                if not any(untolerated(pod.tolerations, t) is None for t in places):
                    continue
            out.append(domain)
        return out

    # -- the per-candidate check -------------------------------------------------------------------

    def allowed(
        self,
        group: TopologyGroup,
        pod: PodTopologyView,
        node_domains: Requirement,
        self_selecting: bool,
        *,
        explain: bool = True,
    ) -> Requirement | str:
        """The domains of ``group.key`` this pod may take on a node offering ``node_domains``; a reason
        when there is none (an empty one unless ``explain``)."""
        key = group.key
        pod_domains = pod.node_requirements.get(key)
        finite = None if node_domains.complement else node_domains.values()
        if group.kind == SPREAD:
            return self._spread(group, pod, pod_domains, node_domains, finite, self_selecting, explain)
        if group.kind == AFFINITY:
            candidates = finite if finite is not None else group.counts.keys()
            options = [d for d in candidates if group.counts.get(d, 0) > 0 and pod_domains.has(d)]
            if options:
                return Requirement(key, "In", options)
            # The first of a self-selecting group opens a domain: while no domain the pod may use holds a
            # matching pod (Karpenter: all domains empty, or none compatible with the pod has one).
            if self_selecting and not any(
                group.counts.get(d, 0) > 0 and pod_domains.has(d) for d in group.occupied
            ):
                viable = sorted(
                    d for d in (finite if finite is not None else group.counts) if pod_domains.has(d)
                )
                if viable:
                    return Requirement(key, "In", viable[:1])
            if not explain:
                return ""
            where = "on this node" if finite is not None and len(finite) == 1 else "in an allowed domain"
            return f"{group.describe()}: no matching pod {where}"
        # Anti-affinity (also the inverse groups).
        candidates = finite if finite is not None else group.counts.keys()
        options = [d for d in candidates if d not in group.occupied and pod_domains.has(d)]
        if options:
            return Requirement(key, "In", options)
        if not explain:
            return ""
        return f"{group.describe()}: every allowed domain already has a matching pod"

    def _spread(
        self,
        group: TopologyGroup,
        pod: PodTopologyView,
        pod_domains: Requirement,
        node_domains: Requirement,
        finite: frozenset[str] | None,
        self_selecting: bool,
        explain: bool,
    ) -> Requirement | str:
        key = group.key
        counts = group.counts
        increment = 1 if self_selecting else 0
        if key not in PER_NODE_KEYS:
            minimum, ranking = self._ranking(group, pod, pod_domains, increment)
            for _, domain in ranking:
                if node_domains.has(domain):
                    return Requirement(key, "In", (domain,))
            if not explain:
                return ""
            return (
                f"{group.describe()}: no {key} domain within maxSkew "
                f"(counts {_format_counts(counts, finite)}, minimum {minimum})"
            )
        minimum = 0
        best: str | None = None
        best_count = 0
        candidates = sorted(finite) if finite is not None else sorted(counts)
        for domain in candidates:
            if domain not in counts or not pod_domains.has(domain) or not node_domains.has(domain):
                continue
            count = counts[domain] + increment
            if count - minimum <= group.max_skew and (best is None or count < best_count):
                best, best_count = domain, count
        if best is None:
            if not explain:
                return ""
            return (
                f"{group.describe()}: no {key} domain within maxSkew "
                f"(counts {_format_counts(counts, finite)}, minimum {minimum})"
            )
        return Requirement(key, "In", (best,))

    def _ranking(
        self, group: TopologyGroup, pod: PodTopologyView, pod_domains: Requirement, increment: int
    ) -> tuple[int, list[tuple[int, str]]]:
        honor_taints = group.node_filter is not None and group.node_filter.tolerations is not None
        cache_key = (increment, pod_domains, pod.tolerations if honor_taints else None)
        found = group.rankings.get(cache_key)
        if found is not None:
            return found
        counts = group.counts
        eligible = self.eligible_domains(group, pod)
        minimum = min((counts.get(d, 0) for d in eligible), default=0)
        if group.min_domains is not None and len(eligible) < group.min_domains:
            minimum = 0
        ranking = sorted(
            (count + increment, domain)
            for domain, count in counts.items()
            if pod_domains.has(domain) and count + increment - minimum <= group.max_skew
        )
        group.rankings[cache_key] = (minimum, ranking)
        return minimum, ranking


def _format_counts(counts: Mapping[str, int], finite: frozenset[str] | None) -> str:
    shown = sorted(d for d in counts if finite is None or d in finite)
    text = " ".join(f"{d}={counts[d]}" for d in shown[:6])
    if len(shown) > 6:
        text += f" and {len(shown) - 6} more"
    return text or "none"


def resolve_namespaces(
    term: Mapping[str, Any], pod_namespace: str, namespace_labels: Mapping[str, Mapping[str, str]]
) -> frozenset[str]:
    """A pod affinity term's namespaces: its list plus its namespaceSelector's; the pod's own by default."""
    names = set(term.get("namespaces") or ())
    selector = term.get("namespaceSelector")
    if selector is not None:
        parsed = Selector.from_dict(selector)
        if not parsed.match_labels and not parsed.expressions:
            return ALL_NAMESPACES
        names.update(n for n, labels in namespace_labels.items() if parsed.matches(labels))
    elif not names:
        names.add(pod_namespace)
    return frozenset(names)

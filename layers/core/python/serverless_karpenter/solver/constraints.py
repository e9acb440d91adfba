"""Which pods may share a node: the per-node limits that hostname anti-affinity and spread impose.

The solver repacks pods onto new nodes, so it must keep every constraint that depends on which pods
share a node. It models each as a *class*: the pods a term's selector matches (members) and the pods
that carry the term (owners). A node holding an owner may hold at most ``cap`` pods of the class:

- required pod anti-affinity on ``kubernetes.io/hostname``: cap 1 (an owner and a matching pod never
  share a node, and the kube-scheduler checks both directions);
- topology spread on ``kubernetes.io/hostname`` with ``DoNotSchedule``: cap ``maxSkew``. With at most
  ``maxSkew`` matching pods on each new node, every placement keeps the skew within ``maxSkew``
  whatever the other nodes hold, so the rule is safe (if sometimes stricter than needed).

Only members count toward a cap. An owner its own selector does not match (app=web against app=db) is
not a member, so such owners may share a node with each other; under anti-affinity they must not share
one with any member, so they own a class of their own with the same selector and cap 0.

Zonal constraints are kept by never moving a pod out of the zone set its NodeClaim had, when the pod
carries a zonal term (spread, affinity or anti-affinity on a zone key) or some pod's zonal term selects
it: the scheduler counted it in that zone. Every other pod may go to any zone its own node selector
and affinity allow, so it can fill a node the zonal pods pinned to any zone. Constraints
the solver cannot keep while moving pods (hostname pod affinity, other topology keys) make the pod
*pinned*: its NodeClaim stays as the first-fit scheduler made it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from serverless_karpenter.api import labels as wk

ZONAL_KEYS = frozenset({wk.ZONE, wk.ZONE_ID, "failure-domain.beta.kubernetes.io/zone"})


@dataclass(frozen=True, slots=True)
class Selector:
    """A label selector with the namespaces it looks in (None: every namespace)."""

    match_labels: tuple[tuple[str, str], ...]
    match_expressions: tuple[tuple[str, str, frozenset[str]], ...]
    namespaces: frozenset[str] | None

    @classmethod
    def from_term(
        cls, selector: Mapping[str, Any] | None, namespaces: frozenset[str] | None, extra: Mapping[str, str]
    ) -> Selector:
        selector = selector or {}
        labels = dict(selector.get("matchLabels") or {})
        labels.update(extra)
        expressions = tuple(
            sorted(
                (str(e["key"]), str(e["operator"]), frozenset(str(v) for v in e.get("values") or ()))
                for e in selector.get("matchExpressions") or ()
            )
        )
        return cls(tuple(sorted(labels.items())), expressions, namespaces)

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        for key, value in self.match_labels:
            if labels.get(key) != value:
                return False
        for key, operator, values in self.match_expressions:
            present = key in labels
            if operator == "In" and not (present and labels[key] in values):
                return False
            if operator == "NotIn" and present and labels[key] in values:
                return False
            if operator == "Exists" and not present:
                return False
            if operator == "DoesNotExist" and present:
                return False
        return True


@dataclass(frozen=True, slots=True)
class NodeClass:
    """A per-node class: at most ``cap`` of its pods on a node that holds one of its owners."""

    selector: Selector
    cap: int
    # Anti-affinity: its owners that match it must each have a node of their own (a true bound on the
    # node count). Spread caps are the solver's own safe reading, so they bound nothing.
    exclusive: bool = False

    def for_outsiders(self) -> NodeClass:
        """The class an owner its selector does not match owns instead: under anti-affinity it may sit
        beside no member at all, while a spread still allows ``cap`` members beside it."""
        return NodeClass(self.selector, self.cap - 1) if self.exclusive else self


@dataclass(frozen=True, slots=True)
class PodConstraints:
    owned: tuple[NodeClass, ...]
    pinned_reason: str | None
    # Selectors of the pod's own zonal terms; a pod with any keeps its claim's zones, as does a pod
    # they select.
    zonal: tuple[Selector, ...] = ()


def _namespaces(term: Mapping[str, Any], namespace: str) -> frozenset[str] | None:
    if term.get("namespaceSelector") is not None:
        return None  # any namespace may match: the stricter reading is the safe one
    listed = term.get("namespaces")
    return frozenset(listed) if listed else frozenset({namespace})


def pod_constraints(pod: Mapping[str, Any]) -> PodConstraints:
    """The per-node classes a pod owns, or why it must stay where the first-fit scheduler put it."""
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    labels = meta.get("labels") or {}
    spec = pod.get("spec") or {}
    owned: list[NodeClass] = []
    zonal: list[Selector] = []
    affinity = spec.get("affinity") or {}
    for term in (affinity.get("podAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or ():
        if term.get("topologyKey") not in ZONAL_KEYS:
            return PodConstraints((), f"pod affinity on {term.get('topologyKey')}")
        zonal.append(Selector.from_term(term.get("labelSelector"), _namespaces(term, namespace), {}))
    for term in (affinity.get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or ():
        key = term.get("topologyKey")
        if key == wk.HOSTNAME:
            selector = Selector.from_term(term.get("labelSelector"), _namespaces(term, namespace), {})
            owned.append(NodeClass(selector, 1, exclusive=True))
        elif key in ZONAL_KEYS:
            zonal.append(Selector.from_term(term.get("labelSelector"), _namespaces(term, namespace), {}))
        else:
            return PodConstraints((), f"pod anti-affinity on {key}")
    for constraint in spec.get("topologySpreadConstraints") or ():
        if constraint.get("whenUnsatisfiable", "DoNotSchedule") != "DoNotSchedule":
            continue
        key = constraint.get("topologyKey")
        extra = {k: labels[k] for k in constraint.get("matchLabelKeys") or () if k in labels}
        selector = Selector.from_term(constraint.get("labelSelector"), frozenset({namespace}), extra)
        if key == wk.HOSTNAME:
            owned.append(NodeClass(selector, max(1, int(constraint.get("maxSkew") or 1))))
        elif key in ZONAL_KEYS:
            zonal.append(selector)
        else:
            return PodConstraints((), f"topology spread on {key}")
    return PodConstraints(tuple(owned), None, tuple(zonal))


def zone_bound(pods: Sequence[Mapping[str, Any]], constraints: Sequence[PodConstraints]) -> list[bool]:
    """Per pod: must it stay in its claim's zones (it has a zonal term, or a zonal term selects it)?"""
    selectors = {s for c in constraints for s in c.zonal}
    out = []
    for pod, c in zip(pods, constraints, strict=True):
        if c.zonal:
            out.append(True)
            continue
        meta = pod.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        labels = meta.get("labels") or {}
        out.append(any(s.matches(namespace, labels) for s in selectors))
    return out


def memberships(
    pods: Sequence[Mapping[str, Any]], constraints: Sequence[PodConstraints]
) -> tuple[list[NodeClass], list[tuple[tuple[int, bool, bool], ...]]]:
    """Every class, and per pod the classes it belongs to as (class index, is owner, is member)."""
    classes: list[NodeClass] = []
    index: dict[NodeClass, int] = {}
    owned_by: list[set[int]] = []
    for pod, c in zip(pods, constraints, strict=True):
        meta = pod.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        labels = meta.get("labels") or {}
        owned: set[int] = set()
        for term in c.owned:
            cls = term if term.selector.matches(namespace, labels) else term.for_outsiders()
            if cls not in index:
                index[cls] = len(classes)
                classes.append(cls)
            owned.add(index[cls])
        owned_by.append(owned)
    out: list[tuple[tuple[int, bool, bool], ...]] = []
    for pod, owned in zip(pods, owned_by, strict=True):
        meta = pod.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        labels = meta.get("labels") or {}
        member = {i for i, cls in enumerate(classes) if cls.selector.matches(namespace, labels)}
        out.append(tuple(sorted((i, i in owned, i in member) for i in owned | member)))
    return classes, out

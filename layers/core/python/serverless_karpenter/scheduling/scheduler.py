"""The provisioning simulation: pending pods onto existing nodes, in-flight NodeClaims, then new ones.

Karpenter's semantics: pods sorted by cpu then memory, largest first; each goes to the first existing
node or in-flight claim that can take it; otherwise to the first new claim it is compatible with; else
a new claim from the heaviest NodePool that can host it. A new claim keeps every instance type that
still fits all of its pods, so CreateFleet can choose among them. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from serverless_karpenter.api import labels as wk
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.requirements import Requirement, Requirements
from serverless_karpenter.scheduling.taints import (
    Taint,
    Toleration,
    taints_from_dicts,
    tolerations_from_dicts,
    untolerated,
)

# Keys an offering decides rather than the instance type.
OFFERING_KEYS = frozenset({wk.ZONE, wk.CAPACITY_TYPE, wk.ZONE_ID, wk.CAPACITY_RESERVATION_ID})
# Karpenter passes at most this many instance types to CreateFleet.
MAX_INSTANCE_TYPES = 60


class OfferingLike(Protocol):
    @property
    def zone(self) -> str: ...
    @property
    def capacity_type(self) -> str: ...
    @property
    def price(self) -> float: ...
    @property
    def available(self) -> bool: ...


class InstanceTypeLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def allocatable(self) -> Mapping[str, int]: ...
    @property
    def capacity(self) -> Mapping[str, int]: ...
    @property
    def labels(self) -> Mapping[str, str]: ...
    @property
    def offerings(self) -> Sequence[Any]: ...


@dataclass
class NodePoolTemplate:
    """What scheduling needs of a NodePool: its requirements (labels included), taints and room."""

    name: str
    nodeclass: str
    weight: int
    requirements: Requirements
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    instance_types: Sequence[InstanceTypeLike]
    daemon_overhead: resources.ResourceList = field(default_factory=dict)
    # Remaining room under spec.limits (None: unlimited).
    remaining: resources.ResourceList | None = None


@dataclass
class ExistingCapacity:
    """A node, or an in-flight NodeClaim, that can still take pods."""

    name: str
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    available: resources.ResourceList
    in_flight: bool = False
    requirements: Requirements | None = None  # in-flight claims not yet launched
    pods: list[str] = field(default_factory=list)


@dataclass
class NewNodeClaim:
    nodepool: str
    nodeclass: str
    requirements: Requirements
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    daemon_overhead: resources.ResourceList
    pod_requests: resources.ResourceList
    instance_types: list[InstanceTypeLike]
    pods: list[str] = field(default_factory=list)

    @property
    def requests(self) -> resources.ResourceList:
        return resources.merge(self.pod_requests, self.daemon_overhead)


@dataclass(frozen=True)
class ChosenOffering:
    instance_type: str
    zone: str
    capacity_type: str
    price: float


@dataclass
class SchedulingResult:
    new_nodeclaims: list[NewNodeClaim]
    existing: dict[str, list[str]]  # capacity name -> pod keys placed there
    unschedulable: dict[str, dict[str, str]]  # pod key -> {nodepool or "": reason}


def offering_allowed(requirements: Requirements, offering: Any) -> bool:
    return (
        offering.available
        and requirements.get(wk.ZONE).has(offering.zone)
        and requirements.get(wk.CAPACITY_TYPE).has(offering.capacity_type)
    )


def defined_by_instance_type(key: str) -> bool:
    """Keys an instance type answers for: on a type without the label, the value does not exist."""
    return key in (wk.INSTANCE_TYPE, wk.ARCH, wk.OS, wk.WINDOWS_BUILD) or key.startswith(
        "karpenter.k8s.aws/instance-"
    )


def instance_type_mismatch(requirements: Requirements, it: InstanceTypeLike) -> str | None:
    """Why ``it`` cannot satisfy ``requirements``, or None.

    As Karpenter's Intersects: keys the type does not answer for (nodepool, custom labels) are left to
    the NodePool; an instance-type key the type lacks (a GPU name on a CPU type) counts as absent.
    """
    labels = it.labels
    for key, req in requirements.items():
        if key in OFFERING_KEYS:
            continue
        value = labels.get(key)
        if value is None:
            if defined_by_instance_type(key) and not req.allows_absent():
                return f"{req} (the type has no {key} label)"
            continue
        if not req.has(value):
            return str(req)
    if not any(offering_allowed(requirements, o) for o in it.offerings):
        return "no available offering in the allowed zones and capacity types"
    return None


def cheapest_offering(requirements: Requirements, it: InstanceTypeLike) -> Any | None:
    allowed = [o for o in it.offerings if offering_allowed(requirements, o)]
    return min(allowed, key=lambda o: o.price) if allowed else None


def choose_offering(claim: NewNodeClaim) -> ChosenOffering | None:
    """What CreateFleet would pick: spot before on-demand when allowed, then the cheapest price."""
    best: tuple[int, float, str, Any] | None = None
    rank = {wk.CAPACITY_TYPE_RESERVED: 0, wk.CAPACITY_TYPE_SPOT: 1, wk.CAPACITY_TYPE_ON_DEMAND: 2}
    for it in claim.instance_types:
        for o in it.offerings:
            if not offering_allowed(claim.requirements, o):
                continue
            candidate = (rank.get(o.capacity_type, 3), o.price, it.name, o)
            if best is None or candidate[:3] < best[:3]:
                best = candidate
    if best is None:
        return None
    o = best[3]
    return ChosenOffering(best[2], o.zone, o.capacity_type, o.price)


def order_instance_types(claim: NewNodeClaim) -> list[InstanceTypeLike]:
    """Cheapest allowed offering first, truncated to what CreateFleet takes (keeping minValues)."""
    priced = [(cheapest_offering(claim.requirements, it), it) for it in claim.instance_types]
    ordered = [
        it
        for o, it in sorted(
            ((o, it) for o, it in priced if o is not None), key=lambda p: (p[0].price, p[1].name)
        )
    ]
    limit = MAX_INSTANCE_TYPES
    if claim.requirements.has_min_values():
        prefix = claim.requirements.min_values_prefix([it.labels for it in ordered])
        if prefix is not None:
            limit = max(limit, prefix)
    return ordered[:limit]


class Scheduler:
    def __init__(
        self,
        nodepools: Sequence[NodePoolTemplate],
        existing: Sequence[ExistingCapacity] = (),
    ) -> None:
        # Heaviest pools first; ties by name, as Karpenter orders them.
        self._pools = sorted(nodepools, key=lambda p: (-p.weight, p.name))
        self._existing = list(existing)
        self._new: list[NewNodeClaim] = []
        self._remaining = {
            p.name: (dict(p.remaining) if p.remaining is not None else None) for p in self._pools
        }

    def solve(self, pending: Sequence[Mapping[str, Any]]) -> SchedulingResult:
        unschedulable: dict[str, dict[str, str]] = {}
        prepared = [(pod, podlib.requests(pod)) for pod in pending]
        prepared.sort(
            key=lambda p: (-p[1].get(resources.CPU, 0), -p[1].get(resources.MEMORY, 0), podlib.key(p[0]))
        )
        for pod, requests in prepared:
            reasons = self._place(pod, requests)
            if reasons is not None:
                unschedulable[podlib.key(pod)] = reasons
        for claim in self._new:
            claim.instance_types = order_instance_types(claim)
        return SchedulingResult(
            new_nodeclaims=self._new,
            existing={c.name: c.pods for c in self._existing if c.pods},
            unschedulable=unschedulable,
        )

    def _place(self, pod: Mapping[str, Any], requests: resources.ResourceList) -> dict[str, str] | None:
        spec = pod.get("spec", {})
        tolerations = tolerations_from_dicts(spec.get("tolerations"))
        terms = _required_terms(pod)
        key = podlib.key(pod)
        for capacity in self._existing:
            if self._fits_existing(capacity, pod, terms, tolerations, requests):
                capacity.available = resources.subtract(capacity.available, requests)
                capacity.pods.append(key)
                return None
        for claim in self._new:
            if self._add_to_claim(claim, terms, tolerations, requests):
                claim.pods.append(key)
                return None
        reasons: dict[str, str] = {}
        for pool in self._pools:
            reason = self._open_claim(pool, terms, tolerations, requests)
            if reason is None:
                self._new[-1].pods.append(key)
                return None
            reasons[pool.name] = reason
        if not self._pools:
            reasons[""] = "no NodePool exists"
        return reasons

    def _fits_existing(
        self,
        capacity: ExistingCapacity,
        pod: Mapping[str, Any],
        terms: list[Requirements],
        tolerations: tuple[Toleration, ...],
        requests: resources.ResourceList,
    ) -> bool:
        if not resources.fits(requests, capacity.available):
            return False
        if untolerated(tolerations, capacity.taints) is not None:
            return False
        for term in terms:
            if capacity.requirements is not None:
                if capacity.requirements.compatible(term) is None:
                    return True
            elif term.matches_labels(capacity.labels) is None:
                return True
        return False

    def _add_to_claim(
        self,
        claim: NewNodeClaim,
        terms: list[Requirements],
        tolerations: tuple[Toleration, ...],
        requests: resources.ResourceList,
    ) -> bool:
        if untolerated(tolerations, claim.taints) is not None:
            return False
        total = resources.merge(claim.requests, requests)
        for term in terms:
            if claim.requirements.compatible(term) is not None:
                continue
            merged = claim.requirements.merged(term)
            options = [
                it
                for it in claim.instance_types
                if resources.fits(total, it.allocatable) and instance_type_mismatch(merged, it) is None
            ]
            if options and (
                not merged.has_min_values() or merged.check_min_values([it.labels for it in options]) is None
            ):
                claim.requirements = merged
                claim.instance_types = options
                claim.pod_requests = resources.merge(claim.pod_requests, requests)
                return True
        return False

    def _open_claim(
        self,
        pool: NodePoolTemplate,
        terms: list[Requirements],
        tolerations: tuple[Toleration, ...],
        requests: resources.ResourceList,
    ) -> str | None:
        taint = untolerated(tolerations, pool.taints)
        if taint is not None:
            return f"did not tolerate taint {taint}"
        total = resources.merge(requests, pool.daemon_overhead)
        last_reason = ""
        for term in terms:
            incompatible = pool.requirements.compatible(term)
            if incompatible is not None:
                last_reason = f"incompatible requirements: {incompatible}"
                continue
            merged = pool.requirements.merged(term)
            compatible = [it for it in pool.instance_types if instance_type_mismatch(merged, it) is None]
            if not compatible:
                last_reason = (
                    f"no instance type in nodepool {pool.name!r} satisfies requirements {_describe(merged)}"
                )
                continue
            fitting = [it for it in compatible if resources.fits(total, it.allocatable)]
            if not fitting:
                short = _shortest_resource(total, compatible)
                last_reason = (
                    f"requests {resources.format_list(total)} (with daemonset overhead); no instance type in "
                    f"nodepool {pool.name!r} allowed by {_describe(merged)} has enough {short}"
                )
                continue
            remaining = self._remaining[pool.name]
            if remaining is not None:
                # Only the resources the NodePool limits count.
                fitting = [
                    it for it in fitting if all(it.capacity.get(k, 0) <= v for k, v in remaining.items())
                ]
                if not fitting:
                    last_reason = (
                        f"all instance types exceed nodepool {pool.name!r} limits "
                        f"(remaining {resources.format_list(remaining)})"
                    )
                    continue
            if merged.has_min_values():
                failed = merged.check_min_values([it.labels for it in fitting])
                if failed is not None:
                    last_reason = f"minValues not met: {failed}"
                    continue
            claim = NewNodeClaim(
                nodepool=pool.name,
                nodeclass=pool.nodeclass,
                requirements=merged,
                labels=dict(pool.labels),
                taints=pool.taints,
                daemon_overhead=dict(pool.daemon_overhead),
                pod_requests=dict(requests),
                instance_types=fitting,
            )
            if remaining is not None:
                # Reserve the largest option's capacity, as Karpenter does, so limits are never overshot.
                largest = resources.maximum(it.capacity for it in fitting)
                self._remaining[pool.name] = resources.subtract(
                    remaining, {k: largest.get(k, 0) for k in remaining}
                )
            self._new.append(claim)
            return None
        return last_reason or "no compatible requirements"


def _required_terms(pod: Mapping[str, Any]) -> list[Requirements]:
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}
    required = (affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get(
        "nodeSelectorTerms"
    ) or []
    count = max(1, len(required))
    return [Requirements.from_pod(pod, required_term=i) for i in range(count)]


def _describe(requirements: Requirements) -> str:
    return " ".join(str(r) for r in requirements.values() if not _is_any(r)) or "(none)"


def _is_any(requirement: Requirement) -> bool:
    return requirement.operator() == "Exists"


def _shortest_resource(requests: Mapping[str, int], types: Sequence[InstanceTypeLike]) -> str:
    """The resource that no compatible type offers enough of, for the explanation."""
    for name in sorted(requests, key=lambda n: (n not in (resources.CPU, resources.MEMORY), n)):
        if all(requests[name] > it.allocatable.get(name, 0) for it in types):
            return name
    return "room for all of them at once"


def nodepool_requirements(
    nodepool: Mapping[str, Any],
) -> tuple[Requirements, dict[str, str], tuple[Taint, ...]]:
    """A NodePool's requirements (its template labels included), labels and taints."""
    template = (nodepool.get("spec") or {}).get("template") or {}
    labels = dict(((template.get("metadata") or {}).get("labels")) or {})
    labels[wk.NODEPOOL] = nodepool["metadata"]["name"]
    spec = template.get("spec") or {}
    reqs = Requirements.from_node_selector_requirements(spec.get("requirements")).merged(
        Requirements.from_labels(labels)
    )
    return reqs, labels, taints_from_dicts(spec.get("taints"))

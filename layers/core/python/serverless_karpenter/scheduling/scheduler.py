"""The provisioning simulation: pending pods onto existing nodes, in-flight NodeClaims, then new ones.

Karpenter's semantics (``pkg/controllers/provisioning/scheduling``): pods sorted by cpu then memory,
largest first; each goes to the first existing node or in-flight claim that can take it; otherwise to a
new claim of this run (fewest pods first); else a new claim from the heaviest NodePool that can host it.
Every candidate is checked for taints, host ports, node requirements, topology (spread, pod affinity and
anti-affinity, see ``topology.py``) and room. A pod that fits nowhere has its preferences relaxed one at
a time in Karpenter's order (``preferences.py``) and is tried again after the others. A new claim keeps
every instance type that still fits all of its pods, so CreateFleet can choose among them. Reasons for
unschedulable pods name the first failing constraint per NodePool, with the numbers.

Hot paths work on precomputed per-NodePool instance type views, cache compatible-type lists per
requirement set, and skip claims that already refused an identical pod whose refusal cannot change.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Protocol, cast

from serverless_karpenter.api import labels as wk
from serverless_karpenter.observability import tracer
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.claim_index import ClaimIndex
from serverless_karpenter.scheduling.daemonsets import NO_DAEMONS, DaemonGroup, group_of, template_terms
from serverless_karpenter.scheduling.dra import DRA_ERROR, has_dra_requirements
from serverless_karpenter.scheduling.gc_pause import without_gc_pauses
from serverless_karpenter.scheduling.hostports import HostPort, conflict, host_ports
from serverless_karpenter.scheduling.hostports import describe as describe_port
from serverless_karpenter.scheduling.preferences import PodState, link, prepare, restricted_requirement
from serverless_karpenter.scheduling.requirements import Requirement, Requirements
from serverless_karpenter.scheduling.reservations import (
    Reservations,
    ReservationShortfall,
    reserved_requirements,
)
from serverless_karpenter.scheduling.taints import PREFER_NO_SCHEDULE, Taint, taints_from_dicts, untolerated
from serverless_karpenter.scheduling.topology import ANTI_AFFINITY, PER_NODE_KEYS, Topology, TopologyGroup
from serverless_karpenter.scheduling.volumes import VolumeIndex
from serverless_karpenter.scheduling.volumeusage import VolumeUsage

# Keys an offering decides rather than the instance type.
OFFERING_KEYS = frozenset({wk.ZONE, wk.CAPACITY_TYPE, wk.ZONE_ID, wk.CAPACITY_RESERVATION_ID})
# Karpenter passes at most this many instance types to CreateFleet.
MAX_INSTANCE_TYPES = 60
# Capacity that makes an instance type exotic (karpenter-provider-aws's ExoticInstanceTypeFilter), with
# metal sizes: such types launch only when a claim's options leave nothing else.
EXOTIC_RESOURCES = (
    resources.NVIDIA_GPU,
    resources.AMD_GPU,
    resources.AWS_NEURON,
    resources.AWS_NEURON_CORE,
    resources.HABANA_GAUDI,
)


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
    """What scheduling needs of a NodePool: its requirements (labels included), taints and room.

    ``daemonsets`` are the pods the cluster's DaemonSets run (:func:`daemonsets.daemonset_pod`); which of
    them a node runs, so what they take of it, depends on its instance type (:meth:`daemon_groups`).
    ``daemon_overhead`` is charged to every type besides (a fixed overhead, as some callers give it)."""

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
    daemonsets: Sequence[Mapping[str, Any]] = ()
    _groups: tuple[list[DaemonGroup], list[int], dict[str, int]] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    # What every Scheduler over this template derives from it alone (its type views, the types each
    # requirement set allows, the price rankings): disruption simulates dozens of candidates a pass over
    # the same templates, and rebuilding these for each was most of a simulation's cost.
    _prepared: _PoolPrepared | None = field(default=None, init=False, repr=False, compare=False)

    def daemon_groups(self) -> tuple[list[DaemonGroup], list[int]]:
        """The distinct DaemonSet groups of this NodePool's nodes, and each instance type's (by position
        in ``instance_types``): Karpenter's buildDaemonOverheadGroups, computed once per template."""
        if self._groups is None:
            self._groups = self._build_groups()
        return self._groups[0], self._groups[1]

    def overhead_for(self, it: InstanceTypeLike) -> resources.ResourceList:
        """What the DaemonSets take of a node of type ``it`` of this NodePool."""
        groups, _ = self.daemon_groups()
        assert self._groups is not None
        index = self._groups[2].get(it.name)
        return groups[index].overhead if index is not None else dict(self.daemon_overhead)

    def _build_groups(self) -> tuple[list[DaemonGroup], list[int], dict[str, int]]:
        pods = list(self.daemonsets)
        # A new node will be registered and initialized: a DaemonSet that waits for those labels still
        # runs there (Karpenter's NodeClaimTemplate adds them for this simulation alone).
        node_to_be = self.requirements.add(
            Requirement(wk.REGISTERED, "In", ("true",)), Requirement(wk.INITIALIZED, "In", ("true",))
        )
        terms = [template_terms(pod, node_to_be, self.taints) for pod in pods]
        # A DaemonSet whose terms name no instance-type or offering key runs on every type or none.
        per_type = [i for i, ts in enumerate(terms) if any(_names_type_keys(t) for t in ts)]
        everywhere = [i for i, ts in enumerate(terms) if ts and i not in per_type]
        groups: list[DaemonGroup] = []
        keys: dict[tuple[int, ...], int] = {}
        of_type: list[int] = []
        by_name: dict[str, int] = {}
        for it in self.instance_types:
            members = tuple(
                sorted(
                    everywhere
                    + [i for i in per_type if any(instance_type_mismatch(t, it) is None for t in terms[i])]
                )
            )
            index = keys.get(members)
            if index is None:
                group = group_of(pods, members)
                index = keys[members] = len(groups)
                groups.append(
                    DaemonGroup(resources.merge(self.daemon_overhead, group.overhead), group.host_ports)
                )
            of_type.append(index)
            by_name[it.name] = index
        return groups, of_type, by_name


def _names_type_keys(requirements: Requirements) -> bool:
    return any(defined_by_instance_type(key) or key in OFFERING_KEYS for key in requirements)


def claim_daemon_overhead(
    template: NodePoolTemplate, instance_types: Sequence[InstanceTypeLike]
) -> resources.ResourceList:
    """A NodeClaim's DaemonSet requests: the least any of its instance types' DaemonSets take
    (Karpenter's addDaemonRequests, the minimum across the overhead groups it still has types of)."""
    overheads = {id(o): o for o in (template.overhead_for(it) for it in instance_types)}
    return resources.minimum(overheads.values())


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
    # Pods already running there: their topology counts and host ports.
    bound_pods: Sequence[Mapping[str, Any]] = field(default_factory=list)


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
    # The placeholder hostname hostname-keyed topology counts this node under.
    hostname: str = ""
    host_ports: set[HostPort] = field(default_factory=set)

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
    # The placed pods in the order they were placed, and each one's constraints as it was placed (its
    # preferences relaxed as far as it took): what a later stage needs to check a placement under the
    # constraints the scheduler kept (``validate.py``).
    order: list[str] = field(default_factory=list)
    states: dict[str, PodState] = field(default_factory=dict)


def offering_filter(requirements: Requirements) -> Callable[[Any], bool]:
    """Whether an offering is available in the zones and capacity types ``requirements`` allow; the two
    requirements are looked up once, for loops over many offerings."""
    zone, capacity_type = requirements.get(wk.ZONE), requirements.get(wk.CAPACITY_TYPE)
    if wk.CAPACITY_RESERVATION_ID in requirements:
        # A claim holding reservations launches into those only; an offering of no reservation has no
        # reservation-id label.
        reservation = requirements.get(wk.CAPACITY_RESERVATION_ID)
        rest = offering_filter(requirements.without(wk.CAPACITY_RESERVATION_ID))
        return lambda o: (
            rest(o)
            and (
                reservation.has(o.reservation_id)
                if getattr(o, "reservation_id", None)
                else reservation.allows_absent()
            )
        )
    if wk.ZONE_ID in requirements:
        # A zone id names one zone of the account (use1-az1 is us-east-1b in one account, 1a in
        # another): an offering whose zone id is unknown cannot be shown to satisfy it.
        zone_id = requirements.get(wk.ZONE_ID)
        return lambda o: (
            o.available
            and zone.has(o.zone)
            and capacity_type.has(o.capacity_type)
            and zone_id.has(getattr(o, "zone_id", None) or "")
        )
    return lambda o: o.available and zone.has(o.zone) and capacity_type.has(o.capacity_type)


def offering_allowed(requirements: Requirements, offering: Any) -> bool:
    return offering_filter(requirements)(offering)


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
    if not any(map(offering_filter(requirements), it.offerings)):
        return "no available offering in the allowed zones and capacity types"
    return None


def is_exotic(it: InstanceTypeLike) -> bool:
    """A GPU, accelerator or metal type: one a pod gets only when it asks for it."""
    if "metal" in it.labels.get(wk.INSTANCE_SIZE, ""):
        return True
    capacity = it.capacity
    return any(capacity.get(name, 0) > 0 for name in EXOTIC_RESOURCES)


def without_exotic(types: Sequence[InstanceTypeLike], requirements: Requirements) -> list[InstanceTypeLike]:
    """What CreateFleet is given of a claim's options (Karpenter's exotic filter at launch): the generic
    types when there are any, so a CPU pod never lands on a cheaper GPU or metal type; all of them when
    every option is exotic (the pod asked for a GPU, a GPU family, a metal size) or under minValues."""
    if requirements.has_min_values():
        return list(types)
    generic = [it for it in types if not is_exotic(it)]
    return generic or list(types)


def cheapest_offering(requirements: Requirements, it: InstanceTypeLike) -> Any | None:
    allowed = list(filter(offering_filter(requirements), it.offerings))
    return min(allowed, key=lambda o: o.price) if allowed else None


# CreateFleet's preference among capacity types (lower first), before price.
CAPACITY_RANK = {wk.CAPACITY_TYPE_RESERVED: 0, wk.CAPACITY_TYPE_SPOT: 1, wk.CAPACITY_TYPE_ON_DEMAND: 2}


def choose_offering(claim: NewNodeClaim) -> ChosenOffering | None:
    """What CreateFleet would pick: spot before on-demand when allowed, then the cheapest price."""
    best: tuple[int, float, str, Any] | None = None
    allowed = offering_filter(claim.requirements)
    for it in claim.instance_types:
        for o in it.offerings:
            if not allowed(o):
                continue
            candidate = (CAPACITY_RANK.get(o.capacity_type, 3), o.price, it.name, o)
            if best is None or candidate[:3] < best[:3]:
                best = candidate
    if best is None:
        return None
    o = best[3]
    return ChosenOffering(best[2], o.zone, o.capacity_type, o.price)


def order_instance_types(
    claim: NewNodeClaim, prices: dict[tuple[int, Requirement, Requirement], float | None] | None = None
) -> list[InstanceTypeLike]:
    """Cheapest allowed offering first, truncated to what CreateFleet takes (keeping minValues).

    ``prices`` caches each type's cheapest allowed price per zone and capacity-type requirement across
    the claims of one run, which mostly share them."""
    zone, capacity_type = claim.requirements.get(wk.ZONE), claim.requirements.get(wk.CAPACITY_TYPE)
    cache = prices if prices is not None else {}
    priced: list[tuple[float, str, InstanceTypeLike]] = []
    for it in claim.instance_types:
        key = (id(it), zone, capacity_type)
        if key in cache:
            price = cache[key]
        else:
            allowed = [
                o.price
                for o in it.offerings
                if o.available and zone.has(o.zone) and capacity_type.has(o.capacity_type)
            ]
            price = cache[key] = min(allowed) if allowed else None
        if price is not None:
            priced.append((price, it.name, it))
    limit = MAX_INSTANCE_TYPES
    if not claim.requirements.has_min_values():
        return [it for _, _, it in heapq.nsmallest(limit, priced, key=lambda p: (p[0], p[1]))]
    priced.sort(key=lambda p: (p[0], p[1]))
    ordered = [it for _, _, it in priced]
    if claim.requirements.has_min_values():
        prefix = claim.requirements.min_values_prefix([it.labels for it in ordered])
        if prefix is not None:
            limit = max(limit, prefix)
    return ordered[:limit]


def truncate_instance_types(result: SchedulingResult) -> SchedulingResult:
    """Karpenter's ``TruncateInstanceTypes``: CreateFleet takes the :data:`MAX_INSTANCE_TYPES` cheapest
    instance types of a claim, so a claim whose cheapest ones no longer meet its minValues cannot
    launch as planned. It is dropped and its pods fail to schedule with the reason, once, rather than
    being planned again and refused at every launch."""
    kept: list[NewNodeClaim] = []
    for claim in result.new_nodeclaims:
        cheapest = without_exotic(claim.instance_types, claim.requirements)[:MAX_INSTANCE_TYPES]
        shortfall = (
            claim.requirements.check_min_values(it.labels for it in cheapest)
            if claim.requirements.has_min_values()
            else None
        )
        if shortfall is None:
            claim.instance_types = list(cheapest)
            kept.append(claim)
            continue
        reason = (
            f"couldn't meet minValues requirements: {shortfall}, in the {MAX_INSTANCE_TYPES} cheapest "
            "instance types that CreateFleet takes"
        )
        for pod in claim.pods:
            result.unschedulable.setdefault(pod, {})[claim.nodepool] = reason
    result.new_nodeclaims = kept
    return result


class _TypeView:
    """An instance type of a NodePool with what its pods can use unpacked (allocatable less what the
    DaemonSets of such a node take), so the hot filters compare plain integers with pod requests. A
    type whose DaemonSets do not fit at all has room for nothing."""

    __slots__ = ("cpu", "daemons", "exotic", "extra", "it", "memory", "pods", "ports")

    def __init__(self, it: InstanceTypeLike, daemons: DaemonGroup = NO_DAEMONS) -> None:
        net = resources.subtract(it.allocatable, daemons.overhead)
        self.it = it
        self.exotic = is_exotic(it)
        self.daemons = daemons
        self.ports = daemons.host_ports
        self.cpu = net.get(resources.CPU, 0)
        self.memory = net.get(resources.MEMORY, 0)
        self.pods = net.get(resources.PODS, 0)
        self.extra = {k: v for k, v in net.items() if k not in _CORE}
        if any(v < 0 for v in net.values()):
            self.cpu = -1

    def fits(self, cpu: int, memory: int, pods: int, extra: Mapping[str, int]) -> bool:
        if cpu > self.cpu or memory > self.memory or pods > self.pods:
            return False
        have = self.extra
        return all(value <= have.get(name, 0) for name, value in extra.items())


_CORE = frozenset({resources.CPU, resources.MEMORY, resources.PODS})
_VIEW_CPU, _VIEW_MEMORY, _VIEW_PODS = attrgetter("cpu"), attrgetter("memory"), attrgetter("pods")


def _split(requests: Mapping[str, int]) -> tuple[int, int, int, dict[str, int]]:
    return (
        requests.get(resources.CPU, 0),
        requests.get(resources.MEMORY, 0),
        requests.get(resources.PODS, 0),
        {k: v for k, v in requests.items() if k not in _CORE and v > 0},
    )


class _PoolPrepared:
    """A template's type views with the compatible-type lists per requirement set and the price
    rankings per zone and capacity-type requirement: pure functions of the template, so shared by every
    Scheduler over it (the same few requirement sets recur for thousands of pods)."""

    __slots__ = ("compatible", "one_overhead", "rankings", "views")

    def __init__(self, template: NodePoolTemplate) -> None:
        groups, of_type = template.daemon_groups()
        self.views = [
            _TypeView(it, groups[g]) for it, g in zip(template.instance_types, of_type, strict=True)
        ]
        # With one DaemonSet group (the usual case) every type's overhead is the same, known at once.
        self.one_overhead: resources.ResourceList | None = (
            dict(groups[0].overhead) if len(groups) == 1 else {} if not groups else None
        )
        self.compatible: dict[Requirements, tuple[list[_TypeView], frozenset[int]]] = {}
        self.rankings: dict[tuple[Requirement, Requirement], list[_TypeView]] = {}


class _Pool:
    """A NodePool template with its instance types precomputed (once per template: ``_PoolPrepared``)."""

    def __init__(self, template: NodePoolTemplate) -> None:
        self.template = template
        prepared = template._prepared
        if prepared is None:
            prepared = template._prepared = _PoolPrepared(template)
        self.views = prepared.views
        self.one_overhead = prepared.one_overhead
        self._prepared = prepared

    def compatible(self, requirements: Requirements) -> tuple[list[_TypeView], frozenset[int]]:
        cache = self._prepared.compatible
        found = cache.get(requirements)
        if found is None:
            views = [v for v in self.views if instance_type_mismatch(requirements, v.it) is None]
            found = (views, frozenset(id(v) for v in views))
            if len(cache) > 4096:
                cache.clear()
            cache[requirements] = found
        return found

    def ranking(self, zone: Requirement, capacity_type: Requirement) -> list[_TypeView]:
        """The pool's types with an available offering in ``zone`` and ``capacity_type``, cheapest
        first (ties by name): what a claim's launch options are cut from."""
        rankings = self._prepared.rankings
        key = (zone, capacity_type)
        found = rankings.get(key)
        if found is None:
            priced = []
            for view in self.views:
                prices = [
                    o.price
                    for o in view.it.offerings
                    if o.available and zone.has(o.zone) and capacity_type.has(o.capacity_type)
                ]
                if prices:
                    priced.append((min(prices), view.it.name, view))
            priced.sort(key=lambda p: (p[0], p[1]))
            found = [view for _, _, view in priced]
            if len(rankings) > 4096:
                rankings.clear()
            rankings[key] = found
        return found


@dataclass(eq=False)
class _Claim:
    """Scheduling state of a NewNodeClaim: its options and the room the largest of them leaves."""

    claim: NewNodeClaim
    pool: _Pool
    views: list[_TypeView]
    room_cpu: int = 0
    room_memory: int = 0
    room_pods: int = 0
    _envelope: tuple[int, int, int, int] = (-1, 0, 0, 0)  # (option count, cpu, memory, pods)
    # What the smallest option has of each: a total within it keeps every option.
    floor: tuple[int, int, int] = (0, 0, 0)
    _hostname: Requirement | None = None
    # The capacity reservations the claim holds (reservations.py).
    reserved: frozenset[str] = frozenset()
    # The claim's requirements on some keys, for as long as its requirements are the same object.
    _domains: tuple[Requirements | None, tuple[str, ...], tuple[Requirement, ...]] = (None, (), ())

    def domains(self, keys: tuple[str, ...]) -> tuple[Requirement, ...]:
        requirements = self.claim.requirements
        cached_for, cached_keys, found = self._domains
        if cached_for is not requirements or cached_keys != keys:
            found = tuple([requirements.get(key) for key in keys])
            self._domains = (requirements, keys, found)
        return found

    def refresh_room(self) -> None:
        views = self.views
        if self._envelope[0] != len(views):
            # Options only ever shrink, so an unchanged count means an unchanged set.
            cpus, memories, pods_ = (
                list(map(_VIEW_CPU, views)),
                list(map(_VIEW_MEMORY, views)),
                list(map(_VIEW_PODS, views)),
            )
            self._envelope = (
                len(views),
                max(cpus, default=0),
                max(memories, default=0),
                max(pods_, default=0),
            )
            self.floor = (min(cpus, default=0), min(memories, default=0), min(pods_, default=0))
        # The views' room is net of their DaemonSets: only the pods' requests count against it.
        requests = self.claim.pod_requests
        _, cpu, memory, pods = self._envelope
        self.room_cpu = cpu - requests.get(resources.CPU, 0)
        self.room_memory = memory - requests.get(resources.MEMORY, 0)
        self.room_pods = pods - requests.get(resources.PODS, 0)

    def hostname_requirement(self) -> Requirement:
        if self._hostname is None:
            self._hostname = _hostname_requirement(self.claim.hostname)
        return self._hostname


class _TopologyMemo:
    """One pod's topology verdicts on the new NodeClaims it tries, by the claims' domains.

    While a pod tries the claims, no count changes (a pod is recorded only once placed), and with no
    per-node group (hostname) the verdict on a claim depends only on the claim's requirements on the
    groups' keys. So a zonal spread pod that a zone refuses skips every other claim of that zone at the
    cost of a lookup, rather than repeating the requirement and topology checks for each."""

    __slots__ = ("keys", "results")

    def __init__(self, keys: tuple[str, ...]) -> None:
        self.keys = keys
        self.results: dict[tuple[Requirement, ...], Requirements | str] = {}

    @staticmethod
    def of(state: PodState) -> _TopologyMemo | None:
        groups = state.topology_groups()
        # The verdicts hold for one set of the pod's requirements: not across volume alternatives.
        if not groups or any(g.key in PER_NODE_KEYS for g in groups) or len(state.volume_alternatives) > 1:
            return None
        return _TopologyMemo(tuple(sorted({g.key for g in groups})))

    def get(self, entry: _Claim) -> Requirements | str | None:
        return self.results.get(entry.domains(self.keys))

    def put(self, entry: _Claim, verdict: Requirements | str) -> None:
        self.results[entry.domains(self.keys)] = verdict

    def refuses(self, domains: Hashable) -> bool:
        """Whether a claim with these domains (``_Claim.domains``) is known to refuse the pod."""
        return isinstance(self.results.get(cast(tuple[Requirement, ...], domains)), str)


@dataclass(eq=False)
class _Existing:
    capacity: ExistingCapacity
    domains: Requirements  # the node's labels (with its hostname) as requirements
    host_ports: set[HostPort]
    volume_usage: VolumeUsage | None = None  # None: its CSINode limits no driver


def _hostname_requirement(hostname: str) -> Requirement:
    return Requirement(wk.HOSTNAME, "In", (hostname,))


class Scheduler:
    """Karpenter's provisioning simulation. ``solve`` may be called once per instance.

    ``namespaces`` (name -> labels) resolves pod affinity namespaceSelectors; ``volumes`` enables volume
    topology (without it, volumes are not checked). Pods already bound to existing capacity are read from
    ``ExistingCapacity.bound_pods`` for topology counts and host ports. ``reserved_fallback`` lets a pod
    that finds no room in a reservation fall back to other capacity (disruption's simulation) rather than
    wait for it (the provisioner's).
    """

    def __init__(
        self,
        nodepools: Sequence[NodePoolTemplate],
        existing: Sequence[ExistingCapacity] = (),
        *,
        namespaces: Mapping[str, Mapping[str, str]] | None = None,
        volumes: VolumeIndex | None = None,
        reserved_fallback: bool = False,
    ) -> None:
        # Heaviest pools first; ties by name, as Karpenter orders them.
        self._pools = [_Pool(p) for p in sorted(nodepools, key=lambda p: (-p.weight, p.name))]
        self._reservations = Reservations(
            (it for p in self._pools for it in p.template.instance_types), strict=not reserved_fallback
        )
        self._existing_input = list(existing)
        self._new: list[NewNodeClaim] = []
        self._claims: list[_Claim] = []
        self._remaining = {
            p.template.name: (dict(p.template.remaining) if p.template.remaining is not None else None)
            for p in self._pools
        }
        self._namespaces = namespaces or {}
        self._volumes = volumes
        self.topology = Topology()
        self._prefer_no_schedule = any(
            t.effect == PREFER_NO_SCHEDULE for p in self._pools for t in p.template.taints
        ) or any(t.effect == PREFER_NO_SCHEDULE for c in self._existing_input for t in c.taints)
        # Monotone pods: the first node index worth trying again for this signature.
        self._skip_existing: dict[tuple[Any, ...], int] = {}
        # New NodeClaims in Karpenter's order (fewest pods first, kept incrementally rather than
        # re-sorted per pod), partitioned so a pod skips the claims its rules refuse (claim_index.py);
        # and, per monotone signature, the claims that refused it.
        self._by_pod_count: ClaimIndex[_Claim] = ClaimIndex()
        self._rejected: dict[tuple[Any, ...], set[int]] = {}
        self._hostnames = 0

    # -- setup -------------------------------------------------------------------------------------

    def register_existing(self, states: list[PodState]) -> list[_Existing]:
        """Existing capacity and every domain registered, with the counts of the pods already running.
        Public, with ``topology_narrowing`` and ``record_placement``: ``validate.Replay`` checks a
        placement with the scheduler's own steps rather than a copy of them."""
        topology = self.topology
        existing: list[_Existing] = []
        bound_states: list[tuple[PodState, _Existing]] = []
        for capacity in self._existing_input:
            labels = dict(capacity.labels)
            labels.setdefault(wk.HOSTNAME, capacity.name)
            domains = (
                capacity.requirements
                if capacity.requirements is not None
                else Requirements.from_labels(labels)
            )
            if wk.HOSTNAME not in domains:
                domains = domains.add(_hostname_requirement(labels[wk.HOSTNAME]))
            entry = _Existing(capacity, domains, set())
            if self._volumes is not None:
                entry.volume_usage = VolumeUsage.of_node(capacity.name, capacity.bound_pods, self._volumes)
            existing.append(entry)
            for pod in capacity.bound_pods:
                entry.host_ports.update(host_ports(pod))
                bound_states.append((prepare(pod, topology, namespace_labels=self._namespaces), entry))
        keys = topology.keys()
        # Domains: what each NodePool can offer, and what each existing node is.
        for pool in self._pools:
            template = pool.template
            # Only the types the NodePool allows, with their offerings in the zones its node class has
            # subnets in (offerings come from those), define its domains: a zone no allowed type is
            # offered in is not one a spread must fill (kubernetes-sigs/karpenter#3272).
            allowed, _ = pool.compatible(template.requirements) if keys else ([], frozenset())
            for key in keys:
                for domain in _pool_domains(template, allowed, key):
                    topology.register_domain(key, domain, template.taints)
        for entry in existing:
            capacity = entry.capacity
            node_labels = entry.domains.single_valued_labels() if capacity.requirements is None else {}
            for key in keys:
                requirement = entry.domains.get(key)
                if requirement.complement:
                    continue
                if capacity.requirements is None:
                    # A node (or a launched claim known by its labels): its domain counts for a spread
                    # only where the spread's node filter takes it.
                    for domain in requirement.values():
                        topology.register_node_domain(key, domain, node_labels, capacity.taints)
                else:
                    for domain in requirement.values():
                        topology.register_domain(key, domain, capacity.taints)
        link(states + [s for s, _ in bound_states], topology)
        # Counts start from the pods already running.
        for state, entry in bound_states:
            self.record_placement(state, entry.domains, entry.capacity.taints, exact=True)
        return existing

    # -- solve -------------------------------------------------------------------------------------

    # A span per solve, without its result (a whole SchedulingResult is no X-Ray metadata).
    @tracer.capture_method(capture_response=False)
    @without_gc_pauses
    def solve(self, pending: Sequence[Mapping[str, Any]]) -> SchedulingResult:
        states = [
            prepare(pod, self.topology, namespace_labels=self._namespaces, volumes=self._volumes)
            for pod in pending
        ]
        # A pod with DRA resource claims is refused outright, never relaxed (dra.py).
        refused = {id(state) for state, pod in zip(states, pending, strict=True) if has_dra_requirements(pod)}
        existing = self.register_existing(states)
        states.sort(
            key=lambda s: (-s.requests.get(resources.CPU, 0), -s.requests.get(resources.MEMORY, 0), s.key)
        )
        unschedulable: dict[str, dict[str, str]] = {}
        # Karpenter's queue: a pod that fails is relaxed and tried again after the others; one with nothing
        # left to relax is retried only if some pod was placed since its last try (pod affinity may now hold).
        dra_reasons = {p.template.name: DRA_ERROR for p in self._pools} or {"": DRA_ERROR}
        for state in states:
            if id(state) in refused:
                unschedulable[state.key] = dict(dra_reasons)
        queue: deque[PodState] = deque(s for s in states if id(s) not in refused)
        placed = 0
        last_failure: dict[int, int] = {}
        order: list[str] = []
        placed_states: dict[str, PodState] = {}
        while queue:
            state = queue.popleft()
            reasons = self._place(state, existing)
            if reasons is None:
                placed += 1
                unschedulable.pop(state.key, None)
                order.append(state.key)
                placed_states[state.key] = state
                continue
            unschedulable[state.key] = reasons
            # A pod waiting for reserved capacity keeps its preferences: the room may come back.
            waits = any(isinstance(r, ReservationShortfall) for r in reasons.values())
            if (
                state.invalid is None
                and not waits
                and state.relax(prefer_no_schedule_taints=self._prefer_no_schedule)
            ):
                queue.append(state)
            elif (waits or state.required_affinity or state.preferred_affinity) and last_failure.get(
                id(state)
            ) != placed:
                # As for pod affinity, a placement since may have freed a reservation (a claim that
                # narrowed gives back the ones it can no longer launch into).
                last_failure[id(state)] = placed
                queue.append(state)
        for entry in self._claims:
            if entry.reserved:
                entry.claim.requirements = reserved_requirements(entry.claim.requirements, entry.reserved)
            entry.claim.instance_types = self._launch_options(entry)
            entry.claim.daemon_overhead = _least_overhead(entry.views, entry.pool)
        return SchedulingResult(
            new_nodeclaims=self._new,
            existing={e.capacity.name: e.capacity.pods for e in existing if e.capacity.pods},
            unschedulable=unschedulable,
            order=order,
            states=placed_states,
        )

    def _launch_options(self, entry: _Claim) -> list[InstanceTypeLike]:
        """``order_instance_types`` for one claim, from its pool's types ranked once per zone and
        capacity-type requirement (claims mostly share them)."""
        requirements = entry.claim.requirements
        ranking = entry.pool.ranking(requirements.get(wk.ZONE), requirements.get(wk.CAPACITY_TYPE))
        members = {id(v) for v in entry.views}
        if not requirements.has_min_values():
            # Karpenter's exotic filter, then its truncation to the cheapest types CreateFleet takes.
            generic: list[InstanceTypeLike] = []
            exotic: list[InstanceTypeLike] = []
            for view in ranking:
                if id(view) in members:
                    if view.exotic:
                        exotic.append(view.it)
                    else:
                        generic.append(view.it)
                        if len(generic) == MAX_INSTANCE_TYPES:
                            break
            return generic or exotic[:MAX_INSTANCE_TYPES]
        ordered = [view.it for view in ranking if id(view) in members]
        limit = MAX_INSTANCE_TYPES
        prefix = requirements.min_values_prefix([it.labels for it in ordered])
        if prefix is not None:
            limit = max(limit, prefix)
        return ordered[:limit]

    def _place(self, state: PodState, existing: list[_Existing]) -> dict[str, str] | None:
        monotone = state.monotone()
        signature = state.signature() if monotone else None
        start = self._skip_existing.get(signature, 0) if signature is not None else 0
        if state.invalid is None:
            for index in range(start, len(existing)):
                if any(self._try_existing(existing[index], state) for _ in state.volume_choices()):
                    if signature is not None:
                        self._skip_existing[signature] = index
                    return None
            if signature is not None:
                self._skip_existing[signature] = len(existing)
            rejected = self._rejected.setdefault(signature, set()) if signature is not None else None
            cpu, memory, pods, _ = _split(state.requests)
            memo = _TopologyMemo.of(state)
            # Karpenter tries the new NodeClaims with the fewest pods first.
            for entry in self._claims_to_try(state, memo):
                if cpu > entry.room_cpu or memory > entry.room_memory or pods > entry.room_pods:
                    continue
                if rejected is not None and id(entry) in rejected:
                    continue
                for _ in state.volume_choices():
                    refusal = self._try_claim(entry, state, memo)
                    if refusal is None:
                        self._by_pod_count.move(entry)
                        return None
                # A reservation another claim frees may let the claim take the pod later.
                if rejected is not None and not isinstance(refusal, ReservationShortfall):
                    rejected.add(id(entry))
        reasons: dict[str, str] = {}
        for pool in self._pools:
            if state.invalid is not None:
                reasons[pool.template.name] = state.invalid
                continue
            for _ in state.volume_choices():
                reason = self._open_claim(pool, state)
                if reason is None:
                    return None
                # The last alternative's reason stands for all, as Karpenter's lastErr.
                reasons[pool.template.name] = reason
            if isinstance(reason, ReservationShortfall):
                # Karpenter waits for the heavier NodePool's reservation rather than fall back.
                break
        if not self._pools:
            reasons[""] = state.invalid or "no NodePool exists"
        return reasons

    # -- existing capacity -------------------------------------------------------------------------

    def _try_existing(self, entry: _Existing, state: PodState) -> bool:
        capacity = entry.capacity
        if not resources.fits(state.requests, capacity.available):
            return False
        if untolerated(state.tolerations, capacity.taints, include_prefer_no_schedule=False) is not None:
            return False
        if state.host_ports and conflict(state.host_ports, entry.host_ports) is not None:
            return False
        if entry.volume_usage is not None and entry.volume_usage.exceeds(state.volumes) is not None:
            return False
        node_requirements = state.node_requirements()
        if capacity.requirements is not None:
            if not capacity.requirements.is_compatible(node_requirements):
                return False
        elif node_requirements.matches_labels(entry.domains.single_valued_labels()) is not None:
            return False
        if state.topology_groups():
            narrowed = self.topology_narrowing(state, entry.domains, entry.domains, None, explain=False)
            if isinstance(narrowed, str):
                return False
        capacity.available = resources.subtract(capacity.available, state.requests)
        capacity.pods.append(state.key)
        entry.host_ports.update(state.host_ports)
        if entry.volume_usage is not None:
            entry.volume_usage.add(state.volumes)
        self.record_placement(state, entry.domains, capacity.taints, exact=True)
        return True

    # -- new NodeClaims ----------------------------------------------------------------------------

    def _claims_to_try(self, state: PodState, memo: _TopologyMemo | None) -> Iterator[_Claim]:
        """The new NodeClaims in Karpenter's order, less whole classes of them the pod's topology is
        known to refuse, skipped without a visit (``claim_index.py``):

        - with a memo (zonal rules only), the claims whose domains on the rules' keys a first claim of
          theirs has already been refused for: the verdict depends on those domains alone;
        - with hostname anti-affinity (its own, or another's that selects it), the claims that already
          hold a pod of such a group: the pod may not join it there, and counts only grow."""
        index = self._by_pod_count
        if memo is not None:
            keys = memo.keys
            return index.in_order_except(("domains", keys), lambda entry: entry.domains(keys), memo.refuses)
        groups = _hostname_anti_groups(state)
        if groups:
            return index.in_order_except(
                ("hostname anti-affinity", tuple(id(g) for g in groups)),
                lambda entry: any(entry.claim.hostname in g.occupied for g in groups),
                bool,
            )
        return index.in_order()

    def _try_claim(self, entry: _Claim, state: PodState, memo: _TopologyMemo | None = None) -> str | None:
        claim = entry.claim
        known = memo.get(entry) if memo is not None else None
        if isinstance(known, str):
            return "topology"
        taint = untolerated(
            state.tolerations, claim.taints, include_prefer_no_schedule=not state.tolerate_prefer_no_schedule
        )
        if taint is not None:
            return f"did not tolerate taint {taint}"
        if state.host_ports:
            clash = conflict(state.host_ports, claim.host_ports)
            if clash is not None:
                return f"{describe_port(clash)} is taken on the node"
        node_requirements = state.node_requirements()
        if not claim.requirements.is_compatible(node_requirements):
            return "requirements"
        merged = claim.requirements.merged(node_requirements)
        if state.topology_groups():
            if known is None:
                known = self.topology_narrowing(
                    state, merged, merged, entry.hostname_requirement(), explain=False
                )
                if memo is not None:
                    memo.put(entry, known)
            narrowed = known
            if isinstance(narrowed, str):
                return "topology"
            if len(narrowed):
                merged = merged.merged(narrowed)
        total = resources.merge(claim.pod_requests, state.requests)
        cpu, memory, pods, extra = _split(total)
        floor_cpu, floor_memory, floor_pods = entry.floor
        if cpu <= floor_cpu and memory <= floor_memory and pods <= floor_pods:
            views = entry.views
        else:
            views = [v for v in entry.views if v.cpu >= cpu and v.memory >= memory and v.pods >= pods]
        if extra:
            views = [v for v in views if v.fits(cpu, memory, pods, extra)]
        if state.host_ports:
            views = [v for v in views if not v.ports or conflict(state.host_ports, v.ports) is None]
        if merged is not claim.requirements:
            _, allowed = entry.pool.compatible(merged)
            views = [v for v in views if id(v) in allowed]
        if not views:
            return "resources"
        if merged.has_min_values() and merged.check_min_values([v.it.labels for v in views]) is not None:
            return "minValues"
        reserved = entry.reserved
        if self._reservations:
            found = self._reservations.to_reserve(reserved, (v.it for v in views), offering_filter(merged))
            if isinstance(found, ReservationShortfall):
                return found
            self._reservations.hold(reserved, found)
            entry.reserved = found
        claim.requirements = merged
        entry.views = views
        claim.pod_requests = resources.merge(claim.pod_requests, state.requests)
        claim.pods.append(state.key)
        claim.host_ports.update(state.host_ports)
        entry.refresh_room()
        self.record_placement(state, merged, claim.taints, exact=False, hostname=claim.hostname)
        return None

    def _open_claim(self, pool: _Pool, state: PodState) -> str | None:
        template = pool.template
        name = template.name
        taint = untolerated(
            state.tolerations,
            template.taints,
            include_prefer_no_schedule=not state.tolerate_prefer_no_schedule,
        )
        if taint is not None:
            return f"did not tolerate taint {taint}"
        node_requirements = state.node_requirements()
        restricted = restricted_requirement(node_requirements)
        if restricted is not None:
            return f'requires label "{restricted}", which a new node of nodepool "{name}" cannot be given'
        incompatible = template.requirements.compatible(node_requirements)
        if incompatible is not None:
            return f'node selector/affinity not allowed by nodepool "{name}": {incompatible}'
        merged = template.requirements.merged(node_requirements)
        hostname = self._next_hostname()
        if state.topology_groups():
            for group in state.topology_groups():
                if group.key == wk.HOSTNAME:
                    group.register(hostname)
            narrowed = self.topology_narrowing(state, merged, merged, _hostname_requirement(hostname))
            if isinstance(narrowed, str):
                return f'nodepool "{name}": {narrowed}'
            if len(narrowed):
                merged = merged.merged(narrowed)
        compatible, _ = pool.compatible(merged)
        if not compatible:
            return _no_type_reason(pool, merged)
        if state.host_ports:
            # A new node starts with its DaemonSets' host ports taken (Karpenter's per-group usage).
            free = [v for v in compatible if not v.ports or conflict(state.host_ports, v.ports) is None]
            if not free:
                clash = conflict(state.host_ports, compatible[0].ports)
                assert clash is not None
                return (
                    f'nodepool "{name}": {describe_port(clash)} is taken by a DaemonSet on every '
                    "instance type"
                )
            compatible = free
        cpu, memory, pods, extra = _split(state.requests)
        fitting = [v for v in compatible if v.cpu >= cpu and v.memory >= memory and v.pods >= pods]
        if extra:
            fitting = [v for v in fitting if v.fits(cpu, memory, pods, extra)]
        if not fitting:
            return _resource_reason(name, state.requests, merged, compatible)
        remaining = self._remaining[name]
        if remaining is not None:
            if remaining.get(resources.NODES, 1) <= 0:
                return f'nodepool "{name}" limits: node limits have been exhausted for nodepool'
            # Only the resources the NodePool limits count; a new node is one of limits.nodes.
            within = [
                v for v in fitting if all(_limited_capacity(v.it, k) <= room for k, room in remaining.items())
            ]
            if not within:
                return _limits_reason(name, remaining, fitting)
            fitting = within
        if has_own_zonal_anti_affinity(state):
            merged, fitting = _commit_to_zone(merged, fitting)
        if merged.has_min_values():
            failed = merged.check_min_values([v.it.labels for v in fitting])
            if failed is not None:
                return f'nodepool "{name}": {failed} among the {len(fitting)} instance types that fit'
        reserved: frozenset[str] = frozenset()
        if self._reservations:
            found = self._reservations.to_reserve(reserved, (v.it for v in fitting), offering_filter(merged))
            if isinstance(found, ReservationShortfall):
                return ReservationShortfall(f'nodepool "{name}": {found}')
            self._reservations.hold(reserved, found)
            reserved = found
        claim = NewNodeClaim(
            nodepool=name,
            nodeclass=template.nodeclass,
            requirements=merged,
            labels=dict(template.labels),
            taints=template.taints,
            daemon_overhead=_least_overhead(fitting, pool),
            pod_requests=dict(state.requests),
            instance_types=[],
            pods=[state.key],
            hostname=hostname,
            host_ports=set(state.host_ports),
        )
        if remaining is not None:
            # Reserve the largest option's capacity, as Karpenter does, so limits are never overshot.
            self._remaining[name] = resources.subtract(
                remaining, {k: max(_limited_capacity(v.it, k) for v in fitting) for k in remaining}
            )
        entry = _Claim(claim, pool, fitting, reserved=reserved)
        entry.refresh_room()
        self._claims.append(entry)
        self._new.append(claim)
        self.topology.register_domain(wk.HOSTNAME, hostname, template.taints)
        self.record_placement(state, merged, template.taints, exact=False, hostname=hostname)
        # Filed after its pod is counted: the index classes a claim by the pods it holds.
        self._by_pod_count.add(entry)
        return None

    def _next_hostname(self) -> str:
        self._hostnames += 1
        return f"hostname-placeholder-{self._hostnames:04d}"

    # -- topology ----------------------------------------------------------------------------------

    def topology_narrowing(
        self,
        state: PodState,
        merged: Requirements,
        domains: Requirements,
        hostname: Requirement | None,
        *,
        explain: bool = True,
    ) -> Requirements | str:
        """The narrowing every topology group of the pod asks of a node with ``domains``; a reason if
        one cannot be met."""
        view = state.view()
        out: list[Requirement] = []
        topology = self.topology
        for group in state.owned_groups():
            node_domains = (
                hostname if hostname is not None and group.key == wk.HOSTNAME else domains.get(group.key)
            )
            allowed = topology.allowed(group, view, node_domains, group in state.counted_in, explain=explain)
            if isinstance(allowed, str):
                return allowed
            out.append(allowed)
        for group in state.inverse_selecting:
            node_domains = (
                hostname if hostname is not None and group.key == wk.HOSTNAME else domains.get(group.key)
            )
            allowed = topology.allowed(group, view, node_domains, False, explain=explain)
            if isinstance(allowed, str):
                return allowed
            out.append(allowed)
        # Only what actually narrows the node: an unchanged requirement keeps the claim's requirements
        # (and its cached instance type lists) as they are.
        narrowed = Requirements(r for r in out if r.key != wk.HOSTNAME and not _within(merged.get(r.key), r))
        if len(narrowed) and not merged.is_compatible(narrowed):
            return f"topology narrows to {narrowed}, which the node does not allow"
        return narrowed

    def record_placement(
        self,
        state: PodState,
        requirements: Requirements,
        taints: tuple[Taint, ...],
        *,
        exact: bool,
        hostname: str | None = None,
    ) -> None:
        """Count the pod in every group that selects it, where its node's domain is known."""
        for group in state.counted_in:
            if group.node_filter is not None:
                if exact:
                    if not group.node_filter.matches_labels(requirements.single_valued_labels(), taints):
                        continue
                elif not group.node_filter.matches_requirements(requirements, taints):
                    continue
            for domain in _domains_of(group.key, requirements, hostname, group.kind == ANTI_AFFINITY):
                group.record(domain)
        for group in state.inverse_owned:
            for domain in _domains_of(group.key, requirements, hostname, True):
                group.record(domain)


def _hostname_anti_groups(state: PodState) -> tuple[TopologyGroup, ...]:
    """The hostname anti-affinity groups that keep the pod off a node holding one of their pods: its own
    (required, or preferred and not yet relaxed) and the inverse groups of others' that select it."""
    return tuple(
        g
        for g in (*state.required_anti, *state.preferred_anti, *state.inverse_selecting)
        if g.key == wk.HOSTNAME and g.kind == ANTI_AFFINITY
    )


def has_own_zonal_anti_affinity(state: PodState) -> bool:
    """Whether the pod has a zonal pod anti-affinity of its own (required, or a preference not yet
    relaxed). Only then does committing its claim to a zone free the others for its peers; a pod merely
    selected by another's keeps every zone it may use, for CreateFleet to choose from."""
    return any(g.key == wk.ZONE for g in (*state.required_anti, *state.preferred_anti))


def _commit_to_zone(
    requirements: Requirements, fitting: list[_TypeView]
) -> tuple[Requirements, list[_TypeView]]:
    """Pin a new claim to the zone of its cheapest allowed offering.

    Beyond Karpenter: its claim keeps every allowed zone until launch, so a zonal anti-affinity counts
    it in all of them and the next such pod waits for the next batch (3 pods, 3 batches). A claim that
    commits to one zone leaves the others free, so the three place in distinct zones in one batch."""
    zone = requirements.get(wk.ZONE)
    if not zone.complement and len(zone.values()) <= 1:
        return requirements, fitting
    allowed = offering_filter(requirements)
    best: tuple[int, float, str] | None = None
    for view in fitting:
        for o in view.it.offerings:
            if allowed(o):
                candidate = (CAPACITY_RANK.get(o.capacity_type, 3), o.price, o.zone)
                if best is None or candidate < best:
                    best = candidate
    if best is None:
        return requirements, fitting
    pinned = requirements.add(Requirement(wk.ZONE, "In", (best[2],)))
    in_zone = offering_filter(pinned)
    return pinned, [v for v in fitting if any(map(in_zone, v.it.offerings))]


def _within(current: Requirement, narrowing: Requirement) -> bool:
    """Whether ``current`` already allows nothing ``narrowing`` forbids (both plain In sets)."""
    return (
        not current.complement
        and not narrowing.complement
        and not current.has_bounds()
        and current.values() <= narrowing.values()
    )


def _domains_of(key: str, requirements: Requirements, hostname: str | None, every: bool) -> list[str]:
    if key == wk.HOSTNAME and hostname is not None:
        return [hostname]
    requirement = requirements.get(key)
    if requirement.complement:
        return []
    values = requirement.values()
    if every or len(values) == 1:
        return list(values)
    return []


def _pool_domains(template: NodePoolTemplate, views: Sequence[_TypeView], key: str) -> set[str]:
    """The values a NodePool's nodes can take for ``key``: its requirement's, or those of the types it
    allows (``views``) and their offerings."""
    requirement = template.requirements.get(key)
    if key == wk.HOSTNAME:
        return set()
    if key in (wk.ZONE, wk.CAPACITY_TYPE):
        found = set()
        for view in views:
            for offering in view.it.offerings:
                if offering_allowed(template.requirements, offering):
                    found.add(offering.zone if key == wk.ZONE else offering.capacity_type)
        return found
    if not requirement.complement:
        return set(requirement.values())
    values = {v.it.labels[key] for v in views if key in v.it.labels}
    return {v for v in values if requirement.has(v)}


def _limited_capacity(it: InstanceTypeLike, key: str) -> int:
    """What a node of type ``it`` uses of a NodePool limit on ``key``."""
    return 1 if key == resources.NODES else it.capacity.get(key, 0)


def _limits_reason(nodepool: str, remaining: Mapping[str, int], fitting: Sequence[_TypeView]) -> str:
    keys = sorted(remaining)
    smallest = min(fitting, key=lambda v: tuple(_limited_capacity(v.it, k) for k in keys))
    left = " ".join(f"{k}={resources.format_quantity(k, max(remaining[k], 0))}" for k in keys)
    needs = " ".join(f"{k}={resources.format_quantity(k, _limited_capacity(smallest.it, k))}" for k in keys)
    return (
        f'nodepool "{nodepool}" limits: remaining {left}; the smallest instance type that fits '
        f"({smallest.it.name}) has {needs}"
    )


def _no_type_reason(pool: _Pool, requirements: Requirements) -> str:
    """Which requirement leaves no instance type: the first key that, alone, rules out every type."""
    name = pool.template.name
    for key, requirement in requirements.items():
        if key in (wk.NODEPOOL, wk.HOSTNAME) or requirement.operator() == "Exists":
            continue
        single = Requirements([requirement])
        if not any(instance_type_mismatch(single, v.it) is None for v in pool.views):
            if key in OFFERING_KEYS:
                return f'no instance type in nodepool "{name}" is offered with {requirement}'
            return f'no instance type in nodepool "{name}" has {requirement}'
    return f'no instance type in nodepool "{name}" satisfies all of {_describe(requirements)} at once'


def _least_overhead(views: Sequence[_TypeView], pool: _Pool | None = None) -> resources.ResourceList:
    """The least DaemonSet overhead among the views (per distinct group, as Karpenter's minimum)."""
    if pool is not None and pool.one_overhead is not None:
        return dict(pool.one_overhead)
    groups = {id(v.daemons): v.daemons.overhead for v in views}
    return resources.minimum(groups.values())


def _resource_reason(
    nodepool: str,
    requests: Mapping[str, int],
    requirements: Requirements,
    compatible: Sequence[_TypeView],
) -> str:
    shown = {k: v for k, v in requests.items() if k != resources.PODS}
    text = f"requests {resources.format_list(shown)}"
    overhead = _least_overhead(compatible)
    overhead_shown = {k: v for k, v in overhead.items() if k != resources.PODS and v > 0}
    if overhead_shown:
        text += f" plus daemonset overhead {resources.format_list(overhead_shown)}"
    allowed_by = f'in nodepool "{nodepool}" allowed by {_describe(requirements)}'
    for name in sorted(requests, key=lambda n: (n not in (resources.CPU, resources.MEMORY), n)):
        if requests[name] <= 0:
            continue
        if not any(v.it.allocatable.get(name, 0) for v in compatible):
            return f"{text}; no instance type {allowed_by} offers {name}"
        # What the pods of each type can have of it, its DaemonSets' share taken.
        best = max(v.it.allocatable.get(name, 0) - v.daemons.overhead.get(name, 0) for v in compatible)
        if requests[name] > best:
            return (
                f"{text}; no instance type {allowed_by} has enough {name} "
                f"(largest allocatable {resources.format_quantity(name, best + overhead.get(name, 0))})"
            )
    return f"{text}; no single instance type {allowed_by} has room for all of them at once"


def _describe(requirements: Requirements) -> str:
    shown = [
        str(r)
        for key, r in requirements.items()
        if key not in (wk.NODEPOOL, wk.HOSTNAME)
        and not _is_any(r)
        and (defined_by_instance_type(key) or key in OFFERING_KEYS)
    ]
    return " ".join(shown) or "(any)"


def _is_any(requirement: Requirement) -> bool:
    return requirement.operator() == "Exists" and not requirement.has_bounds()


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

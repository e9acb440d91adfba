"""Improve the first-fit scheduler's new NodeClaims: repack their pods at a lower $/h, with a bound.

``improve`` takes the scheduler's result and returns a result that is never dearer, and that the
scheduler's own predicates accept wherever they accept first fit's, plus a report of its cost and a
proven lower bound.

- Each pod keeps the constraints the scheduler placed it under (its ``PodState``: preferences count as
  required unless the scheduler relaxed them). NodeClaims whose pods carry constraints the solver
  cannot keep while moving them (see :mod:`.constraints`), and NodePools with limits, stay exactly as
  the scheduler made them.
- The other claims are grouped by NodePool and requirements other than the zone, so every pod keeps
  the instance-type restrictions its claim had. A pod keeps its claim's zone set only when the
  scheduler's zonal counting depends on where it is (it has a zonal term, or one selects it); any other
  pod may go to any zone its NodePool and node selector allow. A new node holds only pods whose zone
  sets meet and is pinned to their intersection, so the nodes that hostname anti-affinity forces carry
  the zonal pods of any zone. Each group is repacked (see :mod:`.packing`); the packing replaces the
  group's claims if it is cheaper and the whole placement with it passes the scheduler's predicates
  (``scheduling.validate``: taints, host ports, requirements, room, topology on fresh counts) where
  first fit's does. That check, not the solver's model of the rules, is what guarantees the result:
  a repacking it refuses leaves first fit's claims in place.
- The bound (see :mod:`.bound`) counts of each node only what the pods can use: its room rounded down
  to the gcd of their requests.
- Each new claim carries every type that fits it, cheapest first, truncated as Karpenter does for
  CreateFleet, with minValues kept.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.gc_pause import without_gc_pauses
from serverless_karpenter.scheduling.hostports import HostPort, conflict
from serverless_karpenter.scheduling.preferences import PodState
from serverless_karpenter.scheduling.requirements import Requirement, Requirements
from serverless_karpenter.scheduling.reservations import offers_reserved
from serverless_karpenter.scheduling.scheduler import (
    CAPACITY_RANK,
    EXOTIC_RESOURCES,
    MAX_INSTANCE_TYPES,
    ExistingCapacity,
    InstanceTypeLike,
    NewNodeClaim,
    NodePoolTemplate,
    SchedulingResult,
    claim_daemon_overhead,
    instance_type_mismatch,
    offering_allowed,
    offering_filter,
    without_exotic,
)
from serverless_karpenter.scheduling.validate import Replay, daemon_groups_by_type
from serverless_karpenter.scheduling.volumes import VolumeIndex
from serverless_karpenter.solver.adaptive import best_packing
from serverless_karpenter.solver.bound import dual_bound, owner_priced_bound
from serverless_karpenter.solver.constraints import NodeClass, memberships, pod_constraints, zone_bound
from serverless_karpenter.solver.packing import ANY_ZONE, Membership, NodeOption, PackProblem, Vector, fits

# The time the solver may take grows with the batch (0.4 ms a pod, at least 0.2 s) up to 1.5 s, so small
# batches stay fast and a 5,000-pod burst still places at well over 1,000 pods/s end to end.
MAX_TIME_BUDGET_S = 1.5
MIN_TIME_BUDGET_S = 0.2
BUDGET_PER_POD_S = 0.0004
# The check of the repacked placement against the scheduler's predicates is part of the time the solver
# may take: the search stops early by what the check is expected to take (measured 20-30 us a pod on the
# benchmark host), at most this share of the budget.
CHECK_S_PER_POD = 0.00003
CHECK_SHARE = 0.3
# How many main types each group tries, best dual ratio first.
CANDIDATE_TYPES = 6


@dataclass(frozen=True, slots=True)
class SolveReport:
    cost: float  # $/h of the new NodeClaims returned
    lower_bound: float  # no placement of the same pods on new nodes costs less
    gap: float  # cost / lower_bound - 1
    ffd_cost: float  # $/h of the scheduler's NodeClaims
    seconds: float
    repacked_claims: int  # scheduler claims replaced
    pinned_claims: int  # scheduler claims kept because of constraints or limits


def default_budget(pods: int) -> float:
    return min(MAX_TIME_BUDGET_S, max(MIN_TIME_BUDGET_S, BUDGET_PER_POD_S * pods))


def claim_cost(claim: NewNodeClaim) -> float:
    """The $/h of what CreateFleet would buy for the claim (as ``choose_offering``)."""
    return _claim_costs([claim])[id(claim)]


def _claim_costs(claims: Sequence[NewNodeClaim]) -> dict[int, float]:
    """``claim_cost`` of each claim (by id), with what CreateFleet would buy of each type worked out once
    per zone and capacity-type rule: the scheduler's claims share a few of those and many types. The
    choice is ``choose_offering``'s: the preferred capacity type, then the price, then the type name."""
    by_rule: dict[tuple[Requirement, Requirement], dict[int, tuple[int, float] | None]] = {}
    out: dict[int, float] = {}
    for claim in claims:
        requirements = claim.requirements
        choices = by_rule.setdefault((requirements.get(wk.ZONE), requirements.get(wk.CAPACITY_TYPE)), {})
        best: tuple[int, float, str] | None = None
        for it in claim.instance_types:
            key = id(it)
            if key in choices:
                choice = choices[key]
            else:
                choice = choices[key] = _launch_choice(requirements, it)
            if choice is not None and (best is None or (*choice, it.name) < best):
                best = (*choice, it.name)
        out[id(claim)] = best[1] if best is not None else 0.0
    return out


def _launch_choice(requirements: Requirements, it: InstanceTypeLike) -> tuple[int, float] | None:
    """What CreateFleet would buy of this type: the capacity type it prefers, then the lowest price."""
    best: tuple[int, float] | None = None
    allowed = offering_filter(requirements)
    for o in it.offerings:
        if allowed(o):
            candidate = (CAPACITY_RANK.get(o.capacity_type, 3), o.price)
            if best is None or candidate < best:
                best = candidate
    return best


def _min_price(requirements: Requirements, it: InstanceTypeLike) -> float | None:
    prices = [o.price for o in it.offerings if offering_allowed(requirements, o)]
    return min(prices) if prices else None


def _room(
    it: InstanceTypeLike, overhead: Mapping[str, int], dims: Sequence[str], grain: Sequence[int]
) -> Vector | None:
    """What pods can use of a node: allocatable less the DaemonSets, rounded down to ``grain``.

    Every request of the pods being placed is a multiple of the grain (their gcd) in its dimension, so
    no set of them can use the remainder: dropping it changes no placement, and it tightens the bound
    (1930m of cpu is 1900m to pods that ask in steps of 50m)."""
    room = tuple(
        (it.allocatable.get(d, 0) - overhead.get(d, 0)) // g * g for d, g in zip(dims, grain, strict=True)
    )
    return None if any(r < 0 for r in room) else room


def _grain(vectors: Sequence[Vector], dims: int) -> tuple[int, ...]:
    return tuple(math.gcd(*(v[d] for v in vectors)) or 1 for d in range(dims))


def _claim_zones(claim: NewNodeClaim) -> frozenset[str] | None:
    """The zones a claim allows, or None when it says nothing of zones (any zone)."""
    requirement = claim.requirements.get(wk.ZONE)
    if requirement.operator() == "Exists":
        return None
    return requirement.values()


def _pod_zones(
    state: PodState, claim: NewNodeClaim, pool: NodePoolTemplate | None, zone_bound: bool
) -> frozenset[str] | None:
    """The zones a pod may go to when repacked (None: any). Its claim's, when the scheduler's zonal
    counts depend on where it is; otherwise whatever its NodePool and its node requirements as the
    scheduler placed it allow (the required term it used, its volumes' zones and its heaviest
    preferred node affinity term unless relaxed)."""
    if zone_bound or pool is None:
        return _claim_zones(claim)
    allowed = _zone_intersection(pool.requirements.get(wk.ZONE), state.node_requirements().get(wk.ZONE))
    if allowed.operator() == "In":
        return allowed.values()
    if allowed.operator() == "Exists":
        return None
    return _claim_zones(claim)


@functools.lru_cache(maxsize=1024)
def _zone_intersection(pool_zones: Requirement, pod_zones: Requirement) -> Requirement:
    """Thousands of pods share a few zone rules: each intersection is worked out once."""
    return pool_zones.intersection(pod_zones)


def _zones_mergeable(claim: NewNodeClaim) -> bool:
    """Claims whose zone rule is a plain list (or absent) can share nodes across zone sets."""
    return claim.requirements.get(wk.ZONE).operator() in ("In", "Exists")


def _group_key(claim: NewNodeClaim) -> tuple[str, frozenset[Requirement]]:
    dropped = {wk.HOSTNAME, wk.ZONE} if _zones_mergeable(claim) else {wk.HOSTNAME}
    return claim.nodepool, frozenset(r for key, r in claim.requirements.items() if key not in dropped)


@without_gc_pauses
def improve(
    result: SchedulingResult,
    templates: Sequence[NodePoolTemplate],
    time_budget_s: float,
    pods: Sequence[Mapping[str, Any]],
    *,
    existing: Sequence[ExistingCapacity] = (),
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
    volumes: VolumeIndex | None = None,
) -> tuple[SchedulingResult, SolveReport]:
    """A result whose new NodeClaims cost at most the scheduler's, and the report on it.

    ``existing``, ``namespaces`` and ``volumes`` are what the scheduler was given: the repacking is
    checked against the scheduler's predicates over them (see :mod:`..scheduling.validate`)."""
    started = time.perf_counter()
    deadline = started + time_budget_s - min(CHECK_SHARE * time_budget_s, CHECK_S_PER_POD * len(pods))
    pools = {t.name: t for t in templates}
    replay = Replay(pods, templates, existing, states=result.states, namespaces=namespaces, volumes=volumes)
    states = replay.states
    claims = result.new_nodeclaims
    claim_costs = _claim_costs(claims)
    ffd_cost = sum(claim_costs.values())

    claim_states = [states[k] for c in claims for k in c.pods if k in states]
    constraints = [pod_constraints(s) for s in claim_states]
    bound = dict(zip((s.key for s in claim_states), zone_bound(claim_states, constraints), strict=True))
    zones_of = {
        k: _pod_zones(states[k], claim, pools.get(claim.nodepool), bound[k])
        for claim in claims
        for k in claim.pods
        if k in states
    }
    classes, member_of = memberships(claim_states, constraints)
    pod_index = {s.key: i for i, s in enumerate(claim_states)}
    requests = [s.requests for s in claim_states]
    requests_of = {s.key: s.requests for s in claim_states}
    dims = sorted(
        {name for r in requests for name in r}
        | {name for t in templates for g in t.daemon_groups()[0] for name in g.overhead}
    )
    vectors: list[Vector] = [tuple(r.get(d, 0) for d in dims) for r in requests]

    grain = _grain(vectors, len(dims))
    lower_bound = _lower_bound(vectors, member_of, classes, templates, dims, grain)

    pinned: list[NewNodeClaim] = []
    groups: dict[tuple[str, frozenset[Requirement]], list[NewNodeClaim]] = {}
    # Reservations' room is counted by the scheduler alone: a repack could plan one past it.
    reserved_pools = {t.name for t in templates if offers_reserved(t.instance_types)}
    for claim in claims:
        pool = pools.get(claim.nodepool)
        movable = (
            pool is not None
            and pool.remaining is None
            and pool.name not in reserved_pools
            and all(k in pod_index and constraints[pod_index[k]].pinned_reason is None for k in claim.pods)
        )
        if movable:
            groups.setdefault(_group_key(claim), []).append(claim)
        else:
            pinned.append(claim)

    caps = [c.cap for c in classes]
    # Pods at most one to a node open nodes first when packing (measured: better than anti-affinity
    # owners alone); only anti-affinity counts toward the bound's node count.
    exclusive = frozenset(i for i, c in enumerate(classes) if c.cap == 1)
    # Each group's first-fit claims, what replaces them (themselves where the repacking is no cheaper),
    # and its cost.
    replacements: list[tuple[list[NewNodeClaim], list[NewNodeClaim], float]] = []
    for (pool_name, _), group in sorted(groups.items(), key=lambda g: -len(g[1])):
        replacement = _repack(
            group,
            pools[pool_name],
            dims,
            grain,
            vectors,
            member_of,
            caps,
            pod_index,
            requests_of,
            exclusive,
            classes,
            zones_of,
            {s.key: s.host_ports for s in claim_states},
            deadline,
        )
        group_cost = sum(claim_costs[id(c)] for c in group)
        if replacement is not None and replacement[1] < group_cost:
            for claim in replacement[0]:
                claim.host_ports = {port for k in claim.pods for port in states[k].host_ports}
            replacements.append((group, replacement[0], replacement[1]))
        else:
            replacements.append((group, group, group_cost))
    accepted = _within_predicates(result, pinned, replacements, replay)

    out: list[NewNodeClaim] = list(pinned)
    cost = sum(claim_costs[id(c)] for c in pinned)
    repacked = 0
    for index, (group, chosen, chosen_cost) in enumerate(replacements):
        if index in accepted:
            out.extend(chosen)
            cost += chosen_cost
            repacked += len(group)
        else:
            out.extend(group)
            cost += sum(claim_costs[id(c)] for c in group)
    report = SolveReport(
        cost=cost,
        lower_bound=lower_bound,
        gap=max(0.0, cost / lower_bound - 1.0) if lower_bound > 0 else 0.0,  # float noise at the optimum
        ffd_cost=ffd_cost,
        seconds=time.perf_counter() - started,
        repacked_claims=repacked,
        pinned_claims=len(pinned),
    )
    improved = SchedulingResult(
        new_nodeclaims=out,
        existing=result.existing,
        unschedulable=result.unschedulable,
        order=result.order,
        states=result.states,
    )
    return improved, report


# How many times a placement is checked again after its failing repackings are given up, before the
# solver gives up every repacking (each round gives up at least one; in practice one round is enough).
CHECK_ROUNDS = 3


def _within_predicates(
    result: SchedulingResult,
    pinned: Sequence[NewNodeClaim],
    replacements: Sequence[tuple[Sequence[NewNodeClaim], Sequence[NewNodeClaim], float]],
    replay: Replay,
) -> set[int]:
    """The repackings (indexes into ``replacements``) that may replace their groups' first-fit claims:
    the whole placement, with them, breaks no rule of the scheduler's predicates that first fit's
    placement does not break already.

    Every claim is counted where it will be (``fixed``): first fit's claims end narrowed to their final
    zones, and a pod counted late there may break a zonal spread the scheduler checked before it knew,
    as Karpenter does. Those are first fit's own and are no reason to refuse a repacking; any other is."""
    accepted = {i for i, (group, replacement, _) in enumerate(replacements) if replacement is not group}
    if not accepted:
        return accepted
    baseline: set[tuple[str, str]] = set()
    covered: set[str] = set()  # the pods ``baseline`` answers for
    for _ in range(CHECK_ROUNDS):
        claims: list[NewNodeClaim] = list(pinned)
        owner: dict[int, int] = {}  # claim index -> replacement index
        for i, (group, replacement, _) in enumerate(replacements):
            for claim in replacement if i in accepted else group:
                if i in accepted:
                    owner[len(claims)] = i
                claims.append(claim)
        candidate = SchedulingResult(
            claims, result.existing, result.unschedulable, order=result.order, states=result.states
        )
        found = replay.violations(candidate, claims=owner.keys(), fixed=range(len(claims)))
        if not found:
            return accepted
        flagged = {v.pod for v in found if v.pod}
        if not flagged <= covered:
            # First fit's own findings, for the pods found here only (every pod is still counted).
            covered |= flagged
            first_fit = replay.violations(
                result, claims=(), fixed=range(len(result.new_nodeclaims)), only=covered
            )
            baseline = {(v.pod, v.rule) for v in first_fit}
        new = [v for v in found if not v.pod or (v.pod, v.rule) not in baseline]
        if not new:
            return accepted
        refused = {owner[v.claim] for v in new if v.claim is not None and v.claim in owner}
        if any(v.claim is None or v.claim not in owner for v in new):
            return set()  # a rule broken where nothing moved: the repackings together caused it
        accepted -= refused
        if not accepted:
            return accepted
    return set()


def _lower_bound(
    vectors: Sequence[Vector],
    member_of: Sequence[Membership],
    classes: Sequence[NodeClass],
    templates: Sequence[NodePoolTemplate],
    dims: Sequence[str],
    grain: Sequence[int],
) -> float:
    """Relax every pod to go on any NodePool's type at its cheapest allowed price: a bound for all."""
    if not vectors:
        return 0.0
    demand = [sum(v[d] for v in vectors) for d in range(len(dims))]
    # Anti-affinity keeps apart only owners its selector matches: an owner that is no member may share
    # a node with other such owners, so it forces no node of its own.
    exclusive = [0] * len(classes)
    owners: list[dict[Vector, int]] = [{} for _ in classes]
    for vector, membership in zip(vectors, member_of, strict=True):
        for cls, is_owner, is_member in membership:
            if is_owner and is_member and classes[cls].exclusive:
                exclusive[cls] += 1
                owners[cls][vector] = owners[cls].get(vector, 0) + 1
    min_nodes = max(exclusive, default=0)
    columns = []
    for pool in templates:
        for it in pool.instance_types:
            price = _min_price(pool.requirements, it)
            room = _room(it, pool.overhead_for(it), dims, grain)
            if price is not None and room is not None:
                columns.append((room, price))
    bound, duals = dual_bound(demand, min_nodes, columns)
    if not min_nodes:
        return bound
    # The group that forces the most nodes, each priced at the least a node that holds its pod costs.
    largest = max(range(len(classes)), key=exclusive.__getitem__)
    return max(bound, owner_priced_bound(demand, duals, columns, owners[largest]))


def _repack(
    group: Sequence[NewNodeClaim],
    pool: NodePoolTemplate,
    dims: Sequence[str],
    grain: Sequence[int],
    vectors: Sequence[Vector],
    member_of: Sequence[Membership],
    caps: Sequence[int],
    pod_index: Mapping[str, int],
    requests_of: Mapping[str, resources.ResourceList],
    exclusive: frozenset[int],
    classes: Sequence[NodeClass],
    zones_of: Mapping[str, frozenset[str] | None],
    ports_of: Mapping[str, frozenset[HostPort]],
    deadline: float,
) -> tuple[list[NewNodeClaim], float] | None:
    template = group[0]
    base = Requirements(r for key, r in template.requirements.items() if key not in (wk.HOSTNAME, wk.ZONE))
    group_keys = [k for claim in group for k in claim.pods]
    zone_sets = [zones_of[k] for k in group_keys]
    universe = sorted(set().union(*(z for z in zone_sets if z is not None)))
    if not _zones_mergeable(template):
        requirements = base.add(template.requirements.get(wk.ZONE))
    elif any(z is None for z in zone_sets):
        requirements = base
    else:
        requirements = base.add(Requirement(wk.ZONE, "In", universe))
    bit = {zone: 1 << i for i, zone in enumerate(universe)}
    pod_zones = [ANY_ZONE if z is None else sum(bit[zone] for zone in z) for z in zone_sets]
    if not _zones_mergeable(template) or all(mask == ANY_ZONE for mask in pod_zones):
        pod_zones = []
    types: list[InstanceTypeLike] = []
    launch: list[tuple[int, float]] = []
    options: list[NodeOption] = []
    # Karpenter's exotic filter at launch keeps GPU, accelerator and metal types off a node whose pods do
    # not ask for them; they are no option here either, so a repacked node is priced as it will launch.
    asks_exotic = requirements.has_min_values() or any(
        requests_of[k].get(name, 0) > 0 for k in group_keys for name in EXOTIC_RESOURCES
    )
    compatible = [it for it in pool.instance_types if instance_type_mismatch(requirements, it) is None]
    if not asks_exotic:
        compatible = without_exotic(compatible, requirements)
    for it in compatible:
        choice = _launch_choice(requirements, it)
        room = _room(it, pool.overhead_for(it), dims, grain)
        if choice is None or room is None:
            continue
        options.append(NodeOption(len(types), room, choice[1]))
        types.append(it)
        launch.append(choice)
    if not options:
        return None
    options.sort(key=lambda o: (o.price, o.index))
    members = [pod_index[k] for k in group_keys]
    group_vectors = [vectors[i] for i in members]
    group_membership = [member_of[i] for i in members]
    demand = [sum(v[d] for v in group_vectors) for d in range(len(dims))]
    owners: dict[int, int] = {}
    for membership in group_membership:
        for cls, is_owner, is_member in membership:
            if is_owner and is_member and cls in exclusive and classes[cls].exclusive:
                owners[cls] = owners.get(cls, 0) + 1
    columns = [(o.room, o.price) for o in options]
    min_nodes = max(owners.values(), default=0)
    _, weights = dual_bound(demand, min_nodes, columns)

    def ratio(option: NodeOption) -> float:
        value = sum(w * r for w, r in zip(weights, (*option.room, 1), strict=True))
        return option.price / value if value > 0 else float("inf")

    candidates = sorted(options, key=lambda o: (ratio(o), o.price))[:CANDIDATE_TYPES]
    problem = PackProblem(group_vectors, group_membership, caps, options, pod_zones)
    packed = best_packing(problem, candidates, deadline, weights, exclusive, min_nodes)
    if packed is None:
        return None
    nodes, _ = packed
    # Karpenter's ordering of a claim's types (cheapest allowed offering first), from prices computed once.
    cheapest = {o.index: _min_price(requirements, types[o.index]) or 0.0 for o in options}
    by_price = sorted((o.index for o in options), key=lambda i: (cheapest[i], types[i].name))
    rooms = {o.index: o.room for o in options}
    # The host ports each type's DaemonSets bind: a node whose pods bind one of them cannot be that type.
    daemons = daemon_groups_by_type(pool)
    daemon_ports = {o.index: daemons[id(types[o.index])].host_ports for o in options}
    # Per zone set a node can end in: its requirements, and the types offered there with what
    # CreateFleet would buy of each (a handful of zone sets, so computed once each).
    in_zones: dict[int, tuple[Requirements, dict[int, tuple[int, float]]]] = {
        ANY_ZONE: (requirements, {o.index: launch[o.index] for o in options})
    }
    out: list[NewNodeClaim] = []
    cost = 0.0
    for node in nodes:
        keys = [group_keys[i] for i in node.items]
        pod_requests = resources.merge(*(requests_of[k] for k in keys))
        mask = node.zones if pod_zones else ANY_ZONE
        if mask not in in_zones:
            narrowed = base.add(Requirement(wk.ZONE, "In", [zone for zone in universe if mask & bit[zone]]))
            choices = ((o.index, _launch_choice(narrowed, types[o.index])) for o in options)
            in_zones[mask] = (narrowed, {i: choice for i, choice in choices if choice is not None})
        node_requirements, node_launch = in_zones[mask]
        # Room is net of the daemonset overhead and covers every resource a pod here requests, so the
        # vector test is resources.fits(total, allocatable), only cheaper.
        used = node.used
        node_ports = {port for k in keys for port in ports_of[k]}
        # A claim carries the 60 cheapest types that fit (CreateFleet takes no more), so those are what
        # it can launch and cost; only minValues may need the rest, to find how many it must keep.
        enough = None if node_requirements.has_min_values() else MAX_INSTANCE_TYPES
        fitting_index: list[int] = []
        for i in by_price:
            if (
                i in node_launch
                and fits(used, rooms[i])
                and not (node_ports and daemon_ports[i] and conflict(node_ports, daemon_ports[i]))
            ):
                fitting_index.append(i)
                if len(fitting_index) == enough:
                    break
        if not fitting_index:
            return None
        fitting = [types[i] for i in fitting_index]
        cost += min(node_launch[i] for i in fitting_index)[1]
        limit = MAX_INSTANCE_TYPES
        if node_requirements.has_min_values():
            labels = [it.labels for it in fitting]
            if node_requirements.check_min_values(labels) is not None:
                return None
            limit = max(limit, node_requirements.min_values_prefix(labels) or 0)
        claim = NewNodeClaim(
            nodepool=template.nodepool,
            nodeclass=template.nodeclass,
            requirements=node_requirements,
            labels=dict(template.labels),
            taints=template.taints,
            daemon_overhead=claim_daemon_overhead(pool, fitting),
            pod_requests=pod_requests,
            instance_types=fitting[:limit],
            pods=keys,
        )
        out.append(claim)
    return out, cost

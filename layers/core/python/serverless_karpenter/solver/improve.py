"""Improve the first-fit scheduler's new NodeClaims: repack their pods at a lower $/h, with a bound.

``improve`` takes the scheduler's result and returns a result that is never dearer (when the
scheduler's claims are valid), plus a report of its cost and a proven lower bound.

- NodeClaims whose pods carry constraints the solver cannot keep while moving them (see
  :mod:`.constraints`), and NodePools with limits, stay exactly as the scheduler made them.
- The other claims are grouped by NodePool and requirements, so every pod keeps the zone set and the
  instance-type restrictions its claim had. Each group is repacked (see :mod:`.packing`); the packing
  replaces the group's claims if it is cheaper, or if a claim of the group breaks a per-node rule
  (from a scheduler that does not honour hostname anti-affinity or spread).
- Each new claim carries every type that fits it, cheapest first, truncated as Karpenter does for
  CreateFleet, with minValues kept.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.scheduling import pods as podlib
from serverless_karpenter.scheduling import resources
from serverless_karpenter.scheduling.requirements import Requirement, Requirements
from serverless_karpenter.scheduling.scheduler import (
    MAX_INSTANCE_TYPES,
    InstanceTypeLike,
    NewNodeClaim,
    NodePoolTemplate,
    SchedulingResult,
    choose_offering,
    instance_type_mismatch,
    offering_allowed,
)
from serverless_karpenter.solver.bound import dual_bound
from serverless_karpenter.solver.constraints import NodeClass, memberships, pod_constraints
from serverless_karpenter.solver.packing import NodeOption, Vector, best_packing

# How many main types each group tries, best dual ratio first.
CANDIDATE_TYPES = 6
_CAPACITY_RANK = {wk.CAPACITY_TYPE_RESERVED: 0, wk.CAPACITY_TYPE_SPOT: 1, wk.CAPACITY_TYPE_ON_DEMAND: 2}


@dataclass(frozen=True, slots=True)
class SolveReport:
    cost: float  # $/h of the new NodeClaims returned
    lower_bound: float  # no placement of the same pods on new nodes costs less
    gap: float  # cost / lower_bound - 1
    ffd_cost: float  # $/h of the scheduler's NodeClaims
    seconds: float
    repacked_claims: int  # scheduler claims replaced
    pinned_claims: int  # scheduler claims kept because of constraints or limits
    # Scheduler claims that broke a per-node rule (hostname anti-affinity or spread) and were replaced
    # even where the valid packing costs more: correctness before cost.
    repaired_claims: int = 0


def claim_cost(claim: NewNodeClaim) -> float:
    chosen = choose_offering(claim)
    return chosen.price if chosen is not None else 0.0


def _launch_choice(requirements: Requirements, it: InstanceTypeLike) -> tuple[int, float] | None:
    """What CreateFleet would buy of this type: the capacity type it prefers, then the lowest price."""
    best: tuple[int, float] | None = None
    for o in it.offerings:
        if offering_allowed(requirements, o):
            candidate = (_CAPACITY_RANK.get(o.capacity_type, 3), o.price)
            if best is None or candidate < best:
                best = candidate
    return best


def _min_price(requirements: Requirements, it: InstanceTypeLike) -> float | None:
    prices = [o.price for o in it.offerings if offering_allowed(requirements, o)]
    return min(prices) if prices else None


def _room(it: InstanceTypeLike, overhead: Mapping[str, int], dims: Sequence[str]) -> Vector | None:
    room = tuple(it.allocatable.get(d, 0) - overhead.get(d, 0) for d in dims)
    return None if any(r < 0 for r in room) else room


def _group_key(claim: NewNodeClaim) -> tuple[str, frozenset[Requirement]]:
    return claim.nodepool, frozenset(r for key, r in claim.requirements.items() if key != wk.HOSTNAME)


def improve(
    result: SchedulingResult,
    templates: Sequence[NodePoolTemplate],
    time_budget_s: float,
    pods: Sequence[Mapping[str, Any]],
) -> tuple[SchedulingResult, SolveReport]:
    """A result whose new NodeClaims cost at most the scheduler's, and the report on it."""
    started = time.perf_counter()
    deadline = started + time_budget_s
    pools = {t.name: t for t in templates}
    by_key = {podlib.key(p): p for p in pods}
    claims = result.new_nodeclaims
    claim_costs = {id(c): claim_cost(c) for c in claims}
    ffd_cost = sum(claim_costs.values())

    claim_pods = [by_key[k] for c in claims for k in c.pods if k in by_key]
    constraints = [pod_constraints(p) for p in claim_pods]
    classes, member_of = memberships(claim_pods, constraints)
    pod_index = {podlib.key(p): i for i, p in enumerate(claim_pods)}
    requests = [podlib.requests(p) for p in claim_pods]
    requests_of = {podlib.key(p): r for p, r in zip(claim_pods, requests, strict=True)}
    dims = sorted(
        {name for r in requests for name in r} | {name for t in templates for name in t.daemon_overhead}
    )
    vectors: list[Vector] = [tuple(r.get(d, 0) for d in dims) for r in requests]

    lower_bound = _lower_bound(vectors, member_of, classes, templates, dims)

    pinned: list[NewNodeClaim] = []
    groups: dict[tuple[str, frozenset[Requirement]], list[NewNodeClaim]] = {}
    for claim in claims:
        pool = pools.get(claim.nodepool)
        movable = (
            pool is not None
            and pool.remaining is None
            and all(k in pod_index and constraints[pod_index[k]].pinned_reason is None for k in claim.pods)
        )
        if movable:
            groups.setdefault(_group_key(claim), []).append(claim)
        else:
            pinned.append(claim)

    out: list[NewNodeClaim] = list(pinned)
    cost = sum(claim_costs[id(c)] for c in pinned)
    repacked = 0
    repaired = 0
    caps = [c.cap for c in classes]
    # Pods at most one to a node open nodes first when packing (measured: better than anti-affinity
    # owners alone); only anti-affinity counts toward the bound's node count.
    exclusive = frozenset(i for i, c in enumerate(classes) if c.cap == 1)
    for (pool_name, _), group in sorted(groups.items(), key=lambda g: -len(g[1])):
        replacement = _repack(
            group,
            pools[pool_name],
            dims,
            vectors,
            member_of,
            caps,
            pod_index,
            requests_of,
            exclusive,
            classes,
            deadline,
        )
        invalid = [c for c in group if not _keeps_classes(c, pod_index, member_of, caps)]
        group_cost = sum(claim_costs[id(c)] for c in group)
        if replacement is not None and (invalid or replacement[1] < group_cost):
            out.extend(replacement[0])
            cost += replacement[1]
            repacked += len(group)
            repaired += len(invalid)
        else:
            out.extend(group)
            cost += sum(claim_costs[id(c)] for c in group)
    report = SolveReport(
        cost=cost,
        lower_bound=lower_bound,
        gap=(cost / lower_bound - 1.0) if lower_bound > 0 else 0.0,
        ffd_cost=ffd_cost,
        seconds=time.perf_counter() - started,
        repacked_claims=repacked,
        repaired_claims=repaired,
        pinned_claims=len(pinned),
    )
    improved = SchedulingResult(
        new_nodeclaims=out, existing=result.existing, unschedulable=result.unschedulable
    )
    return improved, report


def _keeps_classes(
    claim: NewNodeClaim,
    pod_index: Mapping[str, int],
    member_of: Sequence[tuple[tuple[int, bool], ...]],
    caps: Sequence[int],
) -> bool:
    count: dict[int, int] = {}
    owned: set[int] = set()
    for key in claim.pods:
        for cls, is_owner in member_of[pod_index[key]]:
            count[cls] = count.get(cls, 0) + 1
            if is_owner:
                owned.add(cls)
    return all(count[cls] <= caps[cls] for cls in owned)


def _lower_bound(
    vectors: Sequence[Vector],
    member_of: Sequence[tuple[tuple[int, bool], ...]],
    classes: Sequence[NodeClass],
    templates: Sequence[NodePoolTemplate],
    dims: Sequence[str],
) -> float:
    """Relax every pod to go on any NodePool's type at its cheapest allowed price: a bound for all."""
    if not vectors:
        return 0.0
    demand = [sum(v[d] for v in vectors) for d in range(len(dims))]
    exclusive = [0] * len(classes)
    for membership in member_of:
        for cls, is_owner in membership:
            if is_owner and classes[cls].exclusive:
                exclusive[cls] += 1  # owners are members too when they match their own selector
    # Count only owners that match their own class: those are pairwise apart.
    min_nodes = max(exclusive, default=0)
    columns = []
    for pool in templates:
        for it in pool.instance_types:
            price = _min_price(pool.requirements, it)
            room = _room(it, pool.daemon_overhead, dims)
            if price is not None and room is not None:
                columns.append((room, price))
    bound, _ = dual_bound(demand, min_nodes, columns)
    return bound


def _repack(
    group: Sequence[NewNodeClaim],
    pool: NodePoolTemplate,
    dims: Sequence[str],
    vectors: Sequence[Vector],
    member_of: Sequence[tuple[tuple[int, bool], ...]],
    caps: Sequence[int],
    pod_index: Mapping[str, int],
    requests_of: Mapping[str, resources.ResourceList],
    exclusive: frozenset[int],
    classes: Sequence[NodeClass],
    deadline: float,
) -> tuple[list[NewNodeClaim], float] | None:
    template = group[0]
    requirements = Requirements(r for key, r in template.requirements.items() if key != wk.HOSTNAME)
    types: list[InstanceTypeLike] = []
    launch: list[tuple[int, float]] = []
    options: list[NodeOption] = []
    for it in pool.instance_types:
        if instance_type_mismatch(requirements, it) is not None:
            continue
        choice = _launch_choice(requirements, it)
        room = _room(it, pool.daemon_overhead, dims)
        if choice is None or room is None:
            continue
        options.append(NodeOption(len(types), room, choice[1]))
        types.append(it)
        launch.append(choice)
    if not options:
        return None
    options.sort(key=lambda o: (o.price, o.index))
    group_keys = [k for claim in group for k in claim.pods]
    members = [pod_index[k] for k in group_keys]
    group_vectors = [vectors[i] for i in members]
    group_membership = [member_of[i] for i in members]
    demand = [sum(v[d] for v in group_vectors) for d in range(len(dims))]
    owners: dict[int, int] = {}
    for membership in group_membership:
        for cls, is_owner in membership:
            if is_owner and cls in exclusive and classes[cls].exclusive:
                owners[cls] = owners.get(cls, 0) + 1
    _, weights = dual_bound(demand, max(owners.values(), default=0), [(o.room, o.price) for o in options])

    def ratio(option: NodeOption) -> float:
        value = sum(w * r for w, r in zip(weights, (*option.room, 1), strict=True))
        return option.price / value if value > 0 else float("inf")

    candidates = sorted(options, key=lambda o: (ratio(o), o.price))[:CANDIDATE_TYPES]
    packed = best_packing(
        group_vectors, group_membership, caps, candidates, options, deadline, weights, exclusive
    )
    if packed is None:
        return None
    nodes, _ = packed
    overhead = dict(pool.daemon_overhead)
    # Karpenter's ordering of a claim's types (cheapest allowed offering first), from prices computed once.
    cheapest = {o.index: _min_price(requirements, types[o.index]) or 0.0 for o in options}
    by_price = sorted((o.index for o in options), key=lambda i: (cheapest[i], types[i].name))
    rooms = {o.index: o.room for o in options}
    out: list[NewNodeClaim] = []
    cost = 0.0
    for node in nodes:
        keys = [group_keys[i] for i in node.items]
        pod_requests = resources.merge(*(requests_of[k] for k in keys))
        # Room is net of the daemonset overhead and covers every resource a pod here requests, so the
        # vector test is resources.fits(total, allocatable), only cheaper.
        used = node.used
        fitting_index = [i for i in by_price if all(u <= r for u, r in zip(used, rooms[i], strict=True))]
        fitting = [types[i] for i in fitting_index]
        cost += min(launch[i] for i in fitting_index)[1]
        limit = MAX_INSTANCE_TYPES
        if requirements.has_min_values():
            labels = [it.labels for it in fitting]
            if requirements.check_min_values(labels) is not None:
                return None
            limit = max(limit, requirements.min_values_prefix(labels) or 0)
        claim = NewNodeClaim(
            nodepool=template.nodepool,
            nodeclass=template.nodeclass,
            requirements=requirements,
            labels=dict(template.labels),
            taints=template.taints,
            daemon_overhead=overhead,
            pod_requests=pod_requests,
            instance_types=fitting[:limit],
            pods=keys,
        )
        out.append(claim)
    return out, cost

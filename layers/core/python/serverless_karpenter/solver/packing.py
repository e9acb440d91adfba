"""Packing pods onto nodes of chosen types: fill one node at a time, then shrink each to its cheapest type.

Pods are grouped into *shapes* (identical request vectors) and, within a shape, into *kinds* (identical
class memberships and zone sets), so one step places many identical pods and a node scans tens of
shapes, not thousands of pods. Every fill honours the per-node class caps and the zones.

- ``pack_adaptive`` with ``owner_first`` (pods that need a node of their own, hostname anti-affinity):
  each such pod opens a node of a type the relaxation's optimum buys for them (``bound.primal_mix``),
  filled by a branch and bound at the bound's prices (``_fill_best``); then the rest is packed afresh,
  several ways (``_pack_rest``).
- ``pack_adaptive`` without it: each node becomes the candidate type whose greedy fill is worth most
  per dollar; ``pack_with``: first-fit decreasing into nodes of one main type.

Each node then becomes the cheapest type that holds what it got, and ``best_packing`` keeps the cheapest
packing it finds within the time budget.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from operator import le

from serverless_karpenter.solver.bound import dual_bound, primal_mix

Vector = tuple[int, ...]
# A set of zones as bits (see ``improve``): a node may hold a pod only if their zone sets meet, and the
# node ends in the intersection of its pods' sets.
ANY_ZONE = -1
# How many of the (nearly) tight types a node opened for an anti-affinity pod tries; the best fill wins.
OPENER_CHOICES = 3
# How many steps the search for the best fill of a node an anti-affinity pod opens may take.
# What a pod costs a fill, as a share of the node's worth; each owner-first packing tries one, in order
# while time lasts. Measured on Karpenter's benchmark mix (seeds 42, 1, 2, 3; 0 to 0.2 tried): 0.03 gave
# the lowest gap on average, 0 the highest (see benchmarks/README.md).
FILL_POD_PENALTIES = (0.03,)
FILL_EXPANSIONS = 3000
# Per pod, its classes as (class index, is owner, is member). Only members count toward a cap: an owner
# that is no member adds nothing, it only needs the members beside it within the cap.
Membership = tuple[tuple[int, bool, bool], ...]


@dataclass(frozen=True, slots=True)
class NodeOption:
    """A type a node may become: its room for pods (daemonset overhead taken off) and its price."""

    index: int
    room: Vector
    price: float


@dataclass(slots=True)
class PackedNode:
    option: NodeOption
    items: list[int] = field(default_factory=list)
    used: list[int] = field(default_factory=list)
    zones: int = ANY_ZONE


@dataclass(slots=True)
class _Kind:
    membership: Membership
    items: list[int]
    zones: int = ANY_ZONE


@dataclass(slots=True)
class _Shape:
    vector: Vector
    kinds: list[_Kind]


def share_of(vector: Sequence[int], room: Sequence[int]) -> float:
    """The largest fraction of ``room`` that ``vector`` takes, over all resources (its size on a node)."""
    return max((v / r if r else (float("inf") if v else 0.0)) for v, r in zip(vector, room, strict=True))


def copies_that_fit(vector: Sequence[int], residual: Sequence[int], cap: int) -> int:
    """How many copies of ``vector`` fit in ``residual``, at most ``cap``."""
    limit = cap
    for v, r in zip(vector, residual, strict=True):
        if v:
            limit = min(limit, r // v)
            if not limit:
                break
    return limit


def fits(vector: Sequence[int], room: Sequence[int]) -> bool:
    """Whether ``vector`` fits in ``room`` (of the same length) in every dimension."""
    return all(map(le, vector, room))


def cheapest_fitting(used: Sequence[int], options: Sequence[NodeOption]) -> NodeOption | None:
    """``options`` sorted by price: the first that holds ``used``."""
    for option in options:
        if fits(used, option.room):
            return option
    return None


def _shapes(
    vectors: Sequence[Vector], memberships: Sequence[Membership], room: Vector, zones: Sequence[int] = ()
) -> list[_Shape]:
    by_vector: dict[Vector, dict[tuple[Membership, int], list[int]]] = {}
    for i, (vector, membership) in enumerate(zip(vectors, memberships, strict=True)):
        zone = zones[i] if zones else ANY_ZONE
        by_vector.setdefault(vector, {}).setdefault((membership, zone), []).append(i)

    ordered = sorted(by_vector, key=lambda v: (-share_of(v, room), v))
    # Within a shape, pods pinned to zones go first: the pods free of zones can go anywhere later.
    return [
        _Shape(
            v,
            [
                _Kind(m, list(reversed(items)), z)
                for (m, z), items in sorted(
                    by_vector[v].items(), key=lambda kv: (kv[0][1] == ANY_ZONE, kv[0])
                )
            ],
        )
        for v in ordered
    ]


def pack_with(
    vectors: Sequence[Vector],
    memberships: Sequence[Membership],
    caps: Sequence[int],
    main: NodeOption,
    options: Sequence[NodeOption],
    zones: Sequence[int] = (),
    deadline: float = float("inf"),
) -> list[PackedNode] | None:
    """Fill nodes of ``main`` one by one; a pod too big for ``main`` gets a node of the cheapest fitting
    option. Returns None if some pod fits no option, or past the deadline."""
    dims = len(main.room)
    shapes = _shapes(vectors, memberships, main.room, zones)
    nodes: list[PackedNode] = []
    left = len(vectors)
    while left:
        if time.perf_counter() > deadline:
            return None
        first = next(s for s in shapes if any(k.items for k in s.kinds))
        option = main if fits(first.vector, main.room) else cheapest_fitting(first.vector, options)
        if option is None:
            return None
        residual = list(option.room)
        count: dict[int, int] = {}
        owner: set[int] = set()
        node = PackedNode(option, [], [0] * dims)
        for shape in shapes:
            vector = shape.vector
            limit = copies_that_fit(vector, residual, left)
            if not limit:
                continue
            for kind in shape.kinds:
                if not kind.items or not limit or not kind.zones & node.zones:
                    continue
                take = min(limit, len(kind.items))
                for cls, is_owner, is_member in kind.membership:
                    if is_owner or cls in owner:
                        spare = caps[cls] - count.get(cls, 0)
                        if spare < take and (is_member or spare < 0):
                            take = spare
                if take <= 0:
                    continue
                for cls, is_owner, is_member in kind.membership:
                    if is_member:
                        count[cls] = count.get(cls, 0) + take
                    if is_owner:
                        owner.add(cls)
                node.zones &= kind.zones
                for _ in range(take):
                    node.items.append(kind.items.pop())
                for d in range(dims):
                    residual[d] -= vector[d] * take
                limit -= take
                left -= take
        if not node.items:
            return None  # the class caps forbid even one pod: cannot happen with caps >= 1
        node.used = [option.room[d] - residual[d] for d in range(dims)]
        nodes.append(node)
        shapes = [s for s in shapes if any(k.items for k in s.kinds)]
    return nodes


def shrink(nodes: list[PackedNode], options: Sequence[NodeOption]) -> float:
    """Make each node the cheapest option that holds its pods; the total price."""
    total = 0.0
    for node in nodes:
        better = cheapest_fitting(node.used, options)
        if better is not None and better.price < node.option.price:
            node.option = better
        total += node.option.price
    return total


def best_packing(
    vectors: Sequence[Vector],
    memberships: Sequence[Membership],
    caps: Sequence[int],
    candidates: Sequence[NodeOption],
    options: Sequence[NodeOption],
    deadline: float,
    weights: Sequence[float] = (),
    exclusive: frozenset[int] = frozenset(),
    zones: Sequence[int] = (),
    min_nodes: int = 0,
) -> tuple[list[PackedNode], float] | None:
    """The adaptive packing first, then each candidate main type until the deadline; the cheapest.
    ``zones`` gives each pod's zone set as bits (empty: no pod is pinned to zones)."""
    attempts: list[Attempt] = []
    if weights and candidates:
        adaptive = partial(
            pack_adaptive, vectors, memberships, caps, candidates, options, weights, zones=zones
        )
        if exclusive:
            attempts += [
                partial(
                    adaptive,
                    owner_first=True,
                    exclusive=exclusive,
                    min_nodes=min_nodes,
                    fill_penalty=p,
                    rest_deadline=deadline,
                )
                for p in FILL_POD_PENALTIES
            ]
        attempts += [partial(adaptive, dot=False), partial(adaptive, dot=True)]
    attempts += [partial(pack_with, vectors, memberships, caps, main, options, zones) for main in candidates]
    return cheapest_of(attempts, options, deadline)


# A way to pack, called with the time it may take as ``deadline=``.
Attempt = Callable[..., "list[PackedNode] | None"]


def cheapest_of(
    attempts: Sequence[Attempt], options: Sequence[NodeOption], deadline: float
) -> tuple[list[PackedNode], float] | None:
    """Each attempt in turn while time lasts, each node shrunk to its cheapest type; the cheapest."""
    best: tuple[list[PackedNode], float] | None = None
    for attempt in attempts:
        if best is not None and time.perf_counter() > deadline:
            break
        # The first packing always finishes, however slow the machine: without one, nothing improves.
        nodes = attempt(deadline=deadline if best is not None else float("inf"))
        if nodes is None:
            continue
        cost = shrink(nodes, options)
        if best is None or cost < best[1]:
            best = (nodes, cost)
    return best


def pack_adaptive(
    vectors: Sequence[Vector],
    memberships: Sequence[Membership],
    caps: Sequence[int],
    candidates: Sequence[NodeOption],
    options: Sequence[NodeOption],
    weights: Sequence[float],
    *,
    dot: bool = False,
    owner_first: bool = False,
    exclusive: frozenset[int] = frozenset(),
    deadline: float = float("inf"),
    zones: Sequence[int] = (),
    min_nodes: int = 0,
    fill_penalty: float = 0.0,
    rest_deadline: float | None = None,
) -> list[PackedNode] | None:
    """Each node becomes the candidate whose greedy fill is worth most per dollar under the dual weights
    (the value of what it holds, priced as the bound prices it), so the node shapes follow what is left.

    With ``owner_first``, pods that need a node of their own (hostname anti-affinity) each open a node
    first, as the bound's optimum does: of the types that are (nearly) tight in the dual, the one whose
    price goes most to "being a node" (the smallest), then filled with other pods. So the nodes the
    anti-affinity forces are full, rather than swallowing every other pod into a few big nodes and
    leaving the rest of the owners alone on their own small nodes.

    ``min_nodes`` is how many nodes the owners force. Owners open the types the relaxation's optimum
    buys for them, while its counts last, so those nodes come in the optimum's mix of shapes and what
    they leave suits the types that are best for the rest.

    ``rest_deadline`` (default: ``deadline``) bounds the packings of the rest after the first, which
    always finishes: when this is the packing that must finish, it still stops trying others in time."""
    left_of: dict[int, float] = {}
    budgeted: list[NodeOption] = []
    fill_cache: dict[tuple[int, tuple[tuple[int, int], ...]], list[tuple[_Shape, int]]] = {}
    shapes = _shapes(vectors, memberships, candidates[0].room, zones) if candidates else []
    shape_of = {id(kind): shape for shape in shapes for kind in shape.kinds}
    orders = [_size_order(shapes, option.room) for option in candidates]
    nodes: list[PackedNode] = []
    left = len(vectors)
    node_weight = weights[-1] if weights else 0.0

    def worth(option: NodeOption) -> float:
        return sum(w * r for w, r in zip(weights, option.room, strict=False)) + node_weight

    owner_orders: dict[int, list[int]] = {}
    owner_types: dict[Vector, list[NodeOption]] = {}
    owners = [
        (shape, kind)
        for shape in shapes
        for kind in shape.kinds
        if any(is_owner and is_member and cls in exclusive for cls, is_owner, is_member in kind.membership)
    ]

    def opener_types(vector: Vector) -> list[NodeOption]:
        """The (nearly) tight types an owner of this shape opens: the smallest first."""
        found = owner_types.get(vector)
        if found is None:
            fitting = [o for o in options if fits(vector, o.room) and worth(o) > 0]
            if not fitting:
                return []
            tightest = min(o.price / worth(o) for o in fitting)
            found = sorted(
                (o for o in fitting if o.price / worth(o) <= tightest * 1.005),
                key=lambda o: (-node_weight / o.price, o.price),
            )[:OPENER_CHOICES]
            found = [o for o in found if o.price <= found[0].price * 1.2]
            owner_types[vector] = found
        return found

    if owner_first and owners and min_nodes:
        # How many nodes of each opener type the relaxation's optimum buys for the owners, when the
        # nodes they force must be opener types and any type may hold the rest.
        eligible = list({o.index: o for shape, _ in owners for o in opener_types(shape.vector)}.values())
        columns = [(o.room, o.price) for o in (*options, *eligible)]
        counts_as_node = [False] * len(options) + [True] * len(eligible)
        demand = [sum(v[d] for v in vectors) for d in range(len(options[0].room))]
        _, duals = dual_bound(demand, min_nodes, columns, counts_as_node)
        mix = primal_mix(demand, min_nodes, columns, duals, counts_as_node=counts_as_node)
        left_of = {eligible[j - len(options)].index: x for j, x in mix.items() if j >= len(options)}
        budgeted = [o for o in eligible if o.index in left_of]
        # Owners that fit fewer of the types go first, while those types are still within the counts.
        owners.sort(key=lambda sk: sum(o.index in left_of for o in opener_types(sk[0].vector)))
    while left and owner_first and owners:
        if time.perf_counter() > deadline:
            return None
        owners = [o for o in owners if o[1].items]  # once a node, not in each of its fills
        if not owners:
            break
        shape, kind = owners[0]  # shapes are largest first
        others = owners[1:]
        openers = owner_types.get(shape.vector) or opener_types(shape.vector)
        if not openers:
            return None
        best_owner: tuple[float, NodeOption, list[tuple[_Kind, int]], list[int], int] | None = None
        within = [o for o in openers if left_of.get(o.index, 0) > 0.5] or [
            o for o in budgeted if left_of[o.index] > 0.5 and fits(shape.vector, o.room)
        ]
        for option in within or openers:
            order = owner_orders.get(option.index)
            if order is None:
                order = _size_order(shapes, option.room)
                owner_orders[option.index] = order
            fixed = _fill(shapes, (), option.room, caps, left, first=(shape, kind), also=others)
            key = (option.index, tuple((id(k), n) for k, n in fixed[0]))
            # The best fill found for the same node and opening stays the best while its pods are
            # still there (what is available only shrinks), so it is replayed rather than searched.
            cached = fill_cache.get(key)
            replayed = _replay(fixed, cached, option.room, caps) if cached is not None else None
            if replayed is None:
                incumbent = _fill(shapes, order, option.room, caps, left, first=(shape, kind), also=others)
                replayed = _fill_best(
                    shapes, option.room, caps, left, fixed, weights, incumbent, FILL_EXPANSIONS, fill_penalty
                )
                counts: dict[int, tuple[_Shape, int]] = {}
                for k, n in replayed[0][len(fixed[0]) :]:
                    s_of = shape_of[id(k)]
                    counts[id(s_of)] = (s_of, counts.get(id(s_of), (s_of, 0))[1] + n)
                fill_cache[key] = list(counts.values())
            plan, used, zone = replayed
            value = (sum(w * u for w, u in zip(weights, used, strict=False)) + node_weight) / option.price
            if best_owner is None or value > best_owner[0]:
                best_owner = (value, option, plan, used, zone)
        assert best_owner is not None
        _, option, plan, used, zone = best_owner
        if option.index in left_of:
            left_of[option.index] -= 1
        node = PackedNode(option, [], used, zone)
        for planned, take in plan:
            for _ in range(take):
                node.items.append(planned.items.pop())
            left -= take
        nodes.append(node)
    if owner_first:
        # Every node the owners need exists now. What is left is packed afresh, a few ways, and the
        # cheapest kept: from here a node is worth only the room it fills, at the bound's prices for
        # what is left (its mix of shapes is not the whole's).
        rest = sorted(i for shape in shapes for kind in shape.kinds for i in kind.items)
        if rest:
            packed = _pack_rest(
                rest,
                vectors,
                memberships,
                caps,
                options,
                zones,
                len(candidates),
                deadline if rest_deadline is None else min(deadline, rest_deadline),
            )
            if packed is None:
                return None
            nodes.extend(packed)
        return nodes
    while left:
        if time.perf_counter() > deadline:
            return None
        best: tuple[float, NodeOption, list[tuple[_Kind, int]], list[int], int] | None = None
        for option, order in zip(candidates, orders, strict=True):
            if dot:
                plan, used, zone = _fill_dot(shapes, option.room, caps, left)
            else:
                plan, used, zone = _fill(shapes, order, option.room, caps, left)
            if not plan:
                continue
            value = sum(w * u for w, u in zip(weights, (*used, 1), strict=True)) / option.price
            if best is None or value > best[0]:
                best = (value, option, plan, used, zone)
        if best is None:
            first = next(s for s in shapes if any(k.items for k in s.kinds))
            option_or_none = cheapest_fitting(first.vector, options)
            if option_or_none is None:
                return None
            plan, used, zone = _fill(shapes, list(range(len(shapes))), option_or_none.room, caps, left)
            best = (0.0, option_or_none, plan, used, zone)
        _, option, plan, used, zone = best
        node = PackedNode(option, [], used, zone)
        for kind, take in plan:
            for _ in range(take):
                node.items.append(kind.items.pop())
            left -= take
        nodes.append(node)
    return nodes


def _pack_rest(
    rest: Sequence[int],
    vectors: Sequence[Vector],
    memberships: Sequence[Membership],
    caps: Sequence[int],
    options: Sequence[NodeOption],
    zones: Sequence[int],
    choices: int,
    deadline: float,
) -> list[PackedNode] | None:
    """The pods ``rest`` (indices) packed as cheaply as :func:`_pack_rest_once` finds, then its worst
    nodes packed again while that is cheaper; its items as indices into ``vectors``.

    The greedy rules fill the first nodes well and leave the last ones what does not pack (on
    Karpenter's mix at 20,000 pods, the dot-product rule left a tail of 7900m nodes at 60-95% cpu: the
    rest 4.5% above its own bound, against 1.4% at 5,000). Packed together, the pods of the nodes worth
    least for their price (at the bound's prices of what they hold) fill fewer nodes: 2.0% at 20,000,
    unchanged at 5,000. A packing of them that is no cheaper ends the rounds."""
    nodes = _pack_rest_once(rest, vectors, memberships, caps, options, zones, choices, deadline)
    if nodes is None:
        return None
    demand = [sum(vectors[i][d] for i in rest) for d in range(len(options[0].room))]
    _, duals = dual_bound(demand, 0, [(o.room, o.price) for o in options])

    def worth_per_dollar(node: PackedNode) -> float:
        return sum(w * u for w, u in zip(duals, node.used, strict=False)) / node.option.price

    # The rounds are part of the packing that must finish (bounded: each packs a quarter of the nodes,
    # past the deadline by the first rule alone), so the cost does not depend on how busy the host is.
    for _ in range(REPACK_ROUNDS):
        if len(nodes) < 2:
            break
        worths = [worth_per_dollar(node) for node in nodes]
        ranked = sorted(range(len(nodes)), key=worths.__getitem__)
        worst = set(ranked[: max(2, int(len(nodes) * REPACK_SHARE))])
        items = sorted(i for n in worst for i in nodes[n].items)
        again = _pack_rest_once(items, vectors, memberships, caps, options, zones, choices, deadline)
        if again is None or shrink(again, options) >= sum(nodes[n].option.price for n in worst) - 1e-9:
            break
        nodes = [node for n, node in enumerate(nodes) if n not in worst] + again
    return nodes


# The share of the rest's nodes packed again each round, and how many rounds at most (measured on
# Karpenter's mix at 20,000 pods: a tenth gave 2.1%, a quarter 2.0%; the third round gained little).
REPACK_SHARE = 0.25
REPACK_ROUNDS = 3


def _pack_rest_once(
    rest: Sequence[int],
    vectors: Sequence[Vector],
    memberships: Sequence[Membership],
    caps: Sequence[int],
    options: Sequence[NodeOption],
    zones: Sequence[int],
    choices: int,
    deadline: float,
) -> list[PackedNode] | None:
    """The pods ``rest`` (indices) packed by the dot-product rule, by size, and on each of the best
    main types, within the deadline; the cheapest packing, its items as indices into ``vectors``."""
    sub_vectors = [vectors[i] for i in rest]
    sub_memberships = [memberships[i] for i in rest]
    sub_zones = [zones[i] for i in rest] if zones else []
    demand = [sum(v[d] for v in sub_vectors) for d in range(len(options[0].room))]
    _, duals = dual_bound(demand, 0, [(o.room, o.price) for o in options])
    weights = [*duals[:-1], 0.0]

    def ratio(option: NodeOption) -> float:
        value = sum(w * r for w, r in zip(weights, option.room, strict=False))
        return option.price / value if value > 0 else float("inf")

    ranked = sorted(options, key=lambda o: (ratio(o), o.price))[:choices]
    adaptive = partial(
        pack_adaptive, sub_vectors, sub_memberships, caps, ranked, options, weights, zones=sub_zones
    )
    attempts: list[Attempt] = [
        partial(adaptive, dot=True),
        partial(adaptive, dot=False),
        *(
            partial(pack_with, sub_vectors, sub_memberships, caps, main, options, sub_zones)
            for main in ranked[:3]
        ),
    ]
    best = cheapest_of(attempts, options, deadline)
    if best is None:
        return None
    for node in best[0]:
        node.items = [rest[i] for i in node.items]
    return best[0]


def _size_order(shapes: Sequence[_Shape], room: Vector) -> list[int]:
    """Shape indices, largest share of ``room`` first."""

    return sorted(range(len(shapes)), key=lambda s: (-share_of(shapes[s].vector, room), s))


def _fill(
    shapes: Sequence[_Shape],
    order: Sequence[int],
    room: Vector,
    caps: Sequence[int],
    left: int,
    first: tuple[_Shape, _Kind] | None = None,
    also: Sequence[tuple[_Shape, _Kind]] = (),
) -> tuple[list[tuple[_Kind, int]], list[int], int]:
    """Largest shapes first (in ``order``), as many of each as fit; ``first`` is placed before all.
    Returns the plan, the room it uses and the zones left to the node."""
    residual = list(room)
    zones = ANY_ZONE
    count: dict[int, int] = {}
    owner: set[int] = set()
    plan: list[tuple[_Kind, int]] = []
    planned: dict[int, int] = {}
    if first is not None:
        shape, kind = first
        plan.append((kind, 1))
        planned[id(kind)] = 1
        zones &= kind.zones
        left -= 1
        for d in range(len(residual)):
            residual[d] -= shape.vector[d]
        for cls, is_owner, is_member in kind.membership:
            if is_member:
                count[cls] = 1
            if is_owner:
                owner.add(cls)
    # Memberships the class caps refused: counts only grow as the node fills, so they stay refused.
    refused: set[Membership] = set()
    for shape, kind in also:
        # One each of these (other pods at most one to a node) before the rest, while they fit.
        if kind.membership in refused:
            continue
        if len(kind.items) - planned.get(id(kind), 0) <= 0 or not left or not kind.zones & zones:
            continue
        if not fits(shape.vector, residual):
            continue
        if any(
            (is_owner or cls in owner) and count.get(cls, 0) + is_member > caps[cls]
            for cls, is_owner, is_member in kind.membership
        ):
            refused.add(kind.membership)
            continue
        plan.append((kind, 1))
        planned[id(kind)] = planned.get(id(kind), 0) + 1
        zones &= kind.zones
        left -= 1
        for d in range(len(residual)):
            residual[d] -= shape.vector[d]
        for cls, is_owner, is_member in kind.membership:
            if is_member:
                count[cls] = count.get(cls, 0) + 1
            if is_owner:
                owner.add(cls)
    for s in order:
        shape = shapes[s]
        vector = shape.vector
        limit = copies_that_fit(vector, residual, left)
        if not limit:
            continue
        for kind in shape.kinds:
            available = len(kind.items) - planned.get(id(kind), 0)
            if available <= 0 or not limit or not kind.zones & zones:
                continue
            take = min(limit, available)
            for cls, is_owner, is_member in kind.membership:
                if is_owner or cls in owner:
                    spare = caps[cls] - count.get(cls, 0)
                    if spare < take and (is_member or spare < 0):
                        take = spare
            if take <= 0:
                continue
            for cls, is_owner, is_member in kind.membership:
                if is_member:
                    count[cls] = count.get(cls, 0) + take
                if is_owner:
                    owner.add(cls)
            plan.append((kind, take))
            zones &= kind.zones
            for d in range(len(residual)):
                residual[d] -= vector[d] * take
            limit -= take
            left -= take
    return plan, [r - x for r, x in zip(room, residual, strict=True)], zones


def _fill_dot(
    shapes: Sequence[_Shape], room: Vector, caps: Sequence[int], left: int
) -> tuple[list[tuple[_Kind, int]], list[int], int]:
    """Vector bin packing's dot-product rule: next, the shape most aligned with the room left (both
    scaled by the node's room), so cpu and memory run out together. Takes a quarter of what fits at
    once to keep the steps few."""
    dims = len(room)
    scale = [1.0 / r if r else 0.0 for r in room]
    residual = list(room)
    zones = ANY_ZONE
    taken: dict[int, int] = {}  # id(kind) -> count planned
    kinds_by_id: dict[int, _Kind] = {}
    count: dict[int, int] = {}
    owner: set[int] = set()
    live = [s for s in shapes if any(k.items for k in s.kinds)]
    while left:
        best: tuple[float, _Shape, _Kind, int] | None = None
        # A shape that cannot go on the node now never can: room, pods left, zones and class caps
        # only shrink as it fills. So each step scans only the shapes the last one could still place.
        still: list[_Shape] = []
        for shape in live:
            vector = shape.vector
            fit = left
            for d in range(dims):
                v = vector[d]
                if v:
                    fit = min(fit, residual[d] // v)
                    if not fit:
                        break
            if not fit:
                continue
            for kind in shape.kinds:
                available = len(kind.items) - taken.get(id(kind), 0)
                if available <= 0 or not kind.zones & zones:
                    continue
                take = min(fit, available)
                for cls, is_owner, is_member in kind.membership:
                    if is_owner or cls in owner:
                        spare = caps[cls] - count.get(cls, 0)
                        if spare < take and (is_member or spare < 0):
                            take = spare
                if take <= 0:
                    continue
                score = 0.0
                for d in range(dims):
                    score += vector[d] * scale[d] * residual[d] * scale[d]
                if best is None or score > best[0]:
                    best = (score, shape, kind, take)
                still.append(shape)
                break  # one kind per shape is enough to score the shape
        live = still
        if best is None:
            break
        _, shape, kind, take = best
        take = max(1, take // 4)
        kinds_by_id[id(kind)] = kind
        zones &= kind.zones
        taken[id(kind)] = taken.get(id(kind), 0) + take
        for cls, is_owner, is_member in kind.membership:
            if is_member:
                count[cls] = count.get(cls, 0) + take
            if is_owner:
                owner.add(cls)
        for d in range(dims):
            residual[d] -= shape.vector[d] * take
        left -= take
    plan = [(kinds_by_id[k], n) for k, n in taken.items()]
    return plan, [r - x for r, x in zip(room, residual, strict=True)], zones


@dataclass(slots=True)
class _Fill:
    """A node being filled: room left, members per class, classes with an owner here, zones left."""

    residual: list[int]
    count: dict[int, int]
    owner: set[int]
    zones: int

    def copy(self) -> _Fill:
        return _Fill(list(self.residual), dict(self.count), set(self.owner), self.zones)

    def take(
        self, shape: _Shape, want: int, caps: Sequence[int], held: Mapping[int, int]
    ) -> list[tuple[_Kind, int]] | None:
        """Take ``want`` pods of ``shape`` from its kinds within the class caps and zones (``held``:
        pods of a kind already planned elsewhere); None if that many cannot go here."""
        plan: list[tuple[_Kind, int]] = []
        for kind in shape.kinds:
            if not want:
                break
            available = len(kind.items) - held.get(id(kind), 0)
            if available <= 0 or not kind.zones & self.zones:
                continue
            take = min(want, available)
            for cls, is_owner, is_member in kind.membership:
                if is_owner or cls in self.owner:
                    spare = caps[cls] - self.count.get(cls, 0)
                    if spare < take and (is_member or spare < 0):
                        take = spare
            if take <= 0:
                continue
            for cls, is_owner, is_member in kind.membership:
                if is_member:
                    self.count[cls] = self.count.get(cls, 0) + take
                if is_owner:
                    self.owner.add(cls)
            self.zones &= kind.zones
            plan.append((kind, take))
            want -= take
        if want:
            return None
        for d, v in enumerate(shape.vector):
            self.residual[d] -= v * sum(n for _, n in plan)
        return plan


def _opening(
    fixed: tuple[list[tuple[_Kind, int]], list[int], int], room: Vector
) -> tuple[_Fill, dict[int, int]]:
    """The state of a node holding the ``fixed`` plan, and how many of each kind that plan holds."""
    opening, opening_used, opening_zones = fixed
    held: dict[int, int] = {}
    state = _Fill([r - u for r, u in zip(room, opening_used, strict=True)], {}, set(), opening_zones)
    for kind, n in opening:
        held[id(kind)] = held.get(id(kind), 0) + n
        for cls, is_owner, is_member in kind.membership:
            if is_member:
                state.count[cls] = state.count.get(cls, 0) + n
            if is_owner:
                state.owner.add(cls)
    return state, held


def _replay(
    fixed: tuple[list[tuple[_Kind, int]], list[int], int],
    chosen: Sequence[tuple[_Shape, int]],
    room: Vector,
    caps: Sequence[int],
) -> tuple[list[tuple[_Kind, int]], list[int], int] | None:
    """``fixed`` plus ``chosen`` (shapes and counts) again, if the pods are still there; else None."""
    state, held = _opening(fixed, room)
    plan = list(fixed[0])
    for shape, count in chosen:
        taken = state.take(shape, count, caps, held)
        if taken is None:
            return None
        plan.extend(taken)
    return plan, [r - x for r, x in zip(room, state.residual, strict=True)], state.zones


def _fill_best(
    shapes: Sequence[_Shape],
    room: Vector,
    caps: Sequence[int],
    left: int,
    fixed: tuple[list[tuple[_Kind, int]], list[int], int],
    weights: Sequence[float],
    incumbent: tuple[list[tuple[_Kind, int]], list[int], int],
    expansions: int,
    pod_penalty: float = 0.0,
) -> tuple[list[tuple[_Kind, int]], list[int], int]:
    """The fill of a node that holds the ``fixed`` pods worth most under ``weights`` (the bound's prices
    of the resources it takes): a depth-first branch and bound over the shapes, most valuable first,
    pruned by the best value the room left could still hold. Stops after ``expansions`` steps with the
    best found, never worse than ``incumbent`` (a greedy fill of the same node)."""
    dims = len(room)
    opening, opening_used, _ = fixed

    def worth(used: Sequence[int]) -> float:
        return sum(w * u for w, u in zip(weights, used, strict=False))

    # Each pod costs a little: small pods are what completes a node, and a fill that spends several
    # where one nearly does leaves the nodes after it short of them.
    penalty = pod_penalty * worth(room)
    best_plan, best_used, best_zones = incumbent
    best_value = worth(best_used) - penalty * sum(n for _, n in best_plan)
    start, held = _opening(fixed, room)
    candidates = sorted(
        (s for s in shapes if any(len(k.items) > held.get(id(k), 0) for k in s.kinds)),
        key=lambda s: -worth(s.vector),
    )
    values = [worth(s.vector) - penalty for s in candidates]
    # Per dimension, the most value a unit of it can buy among the shapes from i on.
    suffix: list[list[float]] = [[0.0] * dims for _ in range(len(candidates) + 1)]
    for i in range(len(candidates) - 1, -1, -1):
        for d in range(dims):
            v = candidates[i].vector[d]
            density = values[i] / v if v else float("inf")
            suffix[i][d] = max(suffix[i + 1][d], density)
    steps = 0

    def search(i: int, state: _Fill, value: float, plan: list[tuple[_Kind, int]], pods: int) -> None:
        nonlocal steps, best_value, best_plan, best_used, best_zones
        steps += 1
        if value > best_value * (1 + 1e-12):
            best_value = value
            best_plan = list(plan)
            best_used = [r - x for r, x in zip(room, state.residual, strict=True)]
            best_zones = state.zones
        if i == len(candidates) or steps > expansions or pods >= left:
            return
        # Value is linear in what the pods use, so the room left at its price caps what more can come;
        # per dimension, the densest shape left caps it too.
        bound = min(worth(state.residual), *(state.residual[d] * suffix[i][d] for d in range(dims)))
        if value + bound <= best_value * (1 + 1e-12):
            return
        shape = candidates[i]
        most = copies_that_fit(shape.vector, state.residual, left - pods)
        for count in range(most, 0, -1):
            trial = state.copy()
            taken = trial.take(shape, count, caps, held)
            if taken is None:
                continue
            search(i + 1, trial, value + count * values[i], plan + taken, pods + count)
            if steps > expansions:
                return
        search(i + 1, state, value, plan, pods)

    opened = sum(n for _, n in opening)
    search(0, start, worth(opening_used) - penalty * opened, list(opening), opened)
    return best_plan, best_used, best_zones

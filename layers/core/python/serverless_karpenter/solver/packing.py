"""Packing pods onto nodes of chosen types: fill one node at a time, then shrink each to its cheapest type.

Pods are grouped into *shapes* (identical request vectors) and, within a shape, into *kinds* (identical
class memberships), so one step places many identical pods and a node scans tens of shapes, not
thousands of pods. Each run fills nodes of one "main" type, largest shapes first (first-fit decreasing
into one bin at a time), honouring the per-node class caps; then each node becomes the cheapest type
that holds what it got. Several main types are tried (the dual bound ranks them) within the time budget
and the cheapest packing is kept.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from serverless_karpenter.solver.bound import dual_bound

Vector = tuple[int, ...]
# How many of the (nearly) tight types a node opened for an anti-affinity pod tries; the best fill wins.
OPENER_CHOICES = 3
Membership = tuple[tuple[int, bool], ...]


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


@dataclass(slots=True)
class _Kind:
    membership: Membership
    items: list[int]


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
    return all(v <= r for v, r in zip(vector, room, strict=True))


def cheapest_fitting(used: Sequence[int], options: Sequence[NodeOption]) -> NodeOption | None:
    """``options`` sorted by price: the first that holds ``used``."""
    for option in options:
        if fits(used, option.room):
            return option
    return None


def _shapes(vectors: Sequence[Vector], memberships: Sequence[Membership], room: Vector) -> list[_Shape]:
    by_vector: dict[Vector, dict[Membership, list[int]]] = {}
    for i, (vector, membership) in enumerate(zip(vectors, memberships, strict=True)):
        by_vector.setdefault(vector, {}).setdefault(membership, []).append(i)

    ordered = sorted(by_vector, key=lambda v: (-share_of(v, room), v))
    return [
        _Shape(v, [_Kind(m, list(reversed(items))) for m, items in sorted(by_vector[v].items())])
        for v in ordered
    ]


def pack_with(
    vectors: Sequence[Vector],
    memberships: Sequence[Membership],
    caps: Sequence[int],
    main: NodeOption,
    options: Sequence[NodeOption],
) -> list[PackedNode] | None:
    """Fill nodes of ``main`` one by one; a pod too big for ``main`` gets a node of the cheapest fitting
    option. Returns None if some pod fits no option."""
    dims = len(main.room)
    shapes = _shapes(vectors, memberships, main.room)
    nodes: list[PackedNode] = []
    left = len(vectors)
    while left:
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
                if not kind.items or not limit:
                    continue
                take = min(limit, len(kind.items))
                for cls, is_owner in kind.membership:
                    if is_owner or cls in owner:
                        take = min(take, caps[cls] - count.get(cls, 0))
                if take <= 0:
                    continue
                for cls, is_owner in kind.membership:
                    count[cls] = count.get(cls, 0) + take
                    if is_owner:
                        owner.add(cls)
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
) -> tuple[list[PackedNode], float] | None:
    """The adaptive packing first, then each candidate main type until the deadline; the cheapest."""
    best: tuple[list[PackedNode], float] | None = None

    def keep(nodes: list[PackedNode] | None) -> None:
        nonlocal best
        if nodes is not None:
            cost = shrink(nodes, options)
            if best is None or cost < best[1]:
                best = (nodes, cost)

    if weights and candidates:
        if exclusive:
            keep(
                pack_adaptive(
                    vectors,
                    memberships,
                    caps,
                    candidates,
                    options,
                    weights,
                    owner_first=True,
                    exclusive=exclusive,
                    deadline=deadline,
                )
            )
        keep(pack_adaptive(vectors, memberships, caps, candidates, options, weights, deadline=deadline))
        keep(
            pack_adaptive(
                vectors, memberships, caps, candidates, options, weights, dot=True, deadline=deadline
            )
        )
    for main in candidates:
        if best is not None and time.perf_counter() > deadline:
            break
        nodes = pack_with(vectors, memberships, caps, main, options)
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
) -> list[PackedNode] | None:
    """Each node becomes the candidate whose greedy fill is worth most per dollar under the dual weights
    (the value of what it holds, priced as the bound prices it), so the node shapes follow what is left.

    With ``owner_first``, pods that need a node of their own (hostname anti-affinity) each open a node
    first, as the bound's optimum does: of the types that are (nearly) tight in the dual, the one whose
    price goes most to "being a node" (the smallest), then filled with other pods. So the nodes the
    anti-affinity forces are full, rather than swallowing every other pod into a few big nodes and
    leaving the rest of the owners alone on their own small nodes."""
    shapes = _shapes(vectors, memberships, candidates[0].room) if candidates else []
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
        if any(is_owner and cls in exclusive for cls, is_owner in kind.membership)
    ]
    while left and owner_first and owners:
        if time.perf_counter() > deadline:
            return None
        while owners and not owners[0][1].items:
            owners.pop(0)
        if not owners:
            break
        shape, kind = owners[0]  # shapes are largest first
        openers = owner_types.get(shape.vector)
        if openers is None:
            fitting = [o for o in options if fits(shape.vector, o.room) and worth(o) > 0]
            if not fitting:
                return None
            tightest = min(o.price / worth(o) for o in fitting)
            openers = sorted(
                (o for o in fitting if o.price / worth(o) <= tightest * 1.03),
                key=lambda o: (-node_weight / o.price, o.price),
            )[:OPENER_CHOICES]
            owner_types[shape.vector] = openers
        best_owner: tuple[float, NodeOption, list[tuple[_Kind, int]], list[int]] | None = None
        for option in openers:
            order = owner_orders.get(option.index)
            if order is None:
                order = _size_order(shapes, option.room)
                owner_orders[option.index] = order
            plan, used = _fill(shapes, order, option.room, caps, left, first=(shape, kind), also=owners[1:])
            value = (sum(w * u for w, u in zip(weights, used, strict=False)) + node_weight) / option.price
            if best_owner is None or value > best_owner[0]:
                best_owner = (value, option, plan, used)
        assert best_owner is not None
        _, option, plan, used = best_owner
        node = PackedNode(option, [], used)
        for planned, take in plan:
            for _ in range(take):
                node.items.append(planned.items.pop())
            left -= take
        nodes.append(node)
    if owner_first and weights:
        # Every node the owners need exists now: from here a node is worth only the room it fills, and
        # the weights are those of the bound for what is left (its mix of shapes is not the whole's).
        remaining = [0] * len(options[0].room)
        for shape in shapes:
            n = sum(len(k.items) for k in shape.kinds)
            for d, v in enumerate(shape.vector):
                remaining[d] += n * v
        _, duals = dual_bound(remaining, 0, [(o.room, o.price) for o in options])
        resource_weights = [*duals[:-1], 0.0]

        def fill_ratio(option: NodeOption) -> float:
            value = sum(w * r for w, r in zip(resource_weights, option.room, strict=False))
            return option.price / value if value > 0 else float("inf")

        candidates = sorted(options, key=lambda o: (fill_ratio(o), o.price))[: len(candidates)]
        orders = [_size_order(shapes, option.room) for option in candidates]
        weights = resource_weights
        dot = True  # few, large nodes from here: balancing cpu against memory pays, and is cheap
    while left:
        if time.perf_counter() > deadline:
            return None
        best: tuple[float, NodeOption, list[tuple[_Kind, int]], list[int]] | None = None
        for option, order in zip(candidates, orders, strict=True):
            if dot:
                plan, used = _fill_dot(shapes, option.room, caps, left)
            else:
                plan, used = _fill(shapes, order, option.room, caps, left)
            if not plan:
                continue
            value = sum(w * u for w, u in zip(weights, (*used, 1), strict=True)) / option.price
            if best is None or value > best[0]:
                best = (value, option, plan, used)
        if best is None:
            first = next(s for s in shapes if any(k.items for k in s.kinds))
            option_or_none = cheapest_fitting(first.vector, options)
            if option_or_none is None:
                return None
            plan, used = _fill(shapes, list(range(len(shapes))), option_or_none.room, caps, left)
            best = (0.0, option_or_none, plan, used)
        _, option, plan, used = best
        node = PackedNode(option, [], used)
        for kind, take in plan:
            for _ in range(take):
                node.items.append(kind.items.pop())
            left -= take
        nodes.append(node)
    return nodes


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
) -> tuple[list[tuple[_Kind, int]], list[int]]:
    """Largest shapes first (in ``order``), as many of each as fit; ``first`` is placed before all."""
    residual = list(room)
    count: dict[int, int] = {}
    owner: set[int] = set()
    plan: list[tuple[_Kind, int]] = []
    planned: dict[int, int] = {}
    if first is not None:
        shape, kind = first
        plan.append((kind, 1))
        planned[id(kind)] = 1
        left -= 1
        for d in range(len(residual)):
            residual[d] -= shape.vector[d]
        for cls, is_owner in kind.membership:
            count[cls] = 1
            if is_owner:
                owner.add(cls)
    for shape, kind in also:
        # One each of these (other pods at most one to a node) before the rest, while they fit.
        if len(kind.items) - planned.get(id(kind), 0) <= 0 or not left:
            continue
        if any(v > r for v, r in zip(shape.vector, residual, strict=True)):
            continue
        if any(
            (is_owner or cls in owner) and count.get(cls, 0) + 1 > caps[cls]
            for cls, is_owner in kind.membership
        ):
            continue
        plan.append((kind, 1))
        planned[id(kind)] = planned.get(id(kind), 0) + 1
        left -= 1
        for d in range(len(residual)):
            residual[d] -= shape.vector[d]
        for cls, is_owner in kind.membership:
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
            if available <= 0 or not limit:
                continue
            take = min(limit, available)
            for cls, is_owner in kind.membership:
                if is_owner or cls in owner:
                    take = min(take, caps[cls] - count.get(cls, 0))
            if take <= 0:
                continue
            for cls, is_owner in kind.membership:
                count[cls] = count.get(cls, 0) + take
                if is_owner:
                    owner.add(cls)
            plan.append((kind, take))
            for d in range(len(residual)):
                residual[d] -= vector[d] * take
            limit -= take
            left -= take
    return plan, [r - x for r, x in zip(room, residual, strict=True)]


def _fill_dot(
    shapes: Sequence[_Shape], room: Vector, caps: Sequence[int], left: int
) -> tuple[list[tuple[_Kind, int]], list[int]]:
    """Vector bin packing's dot-product rule: next, the shape most aligned with the room left (both
    scaled by the node's room), so cpu and memory run out together. Takes a quarter of what fits at
    once to keep the steps few."""
    dims = len(room)
    scale = [1.0 / r if r else 0.0 for r in room]
    residual = list(room)
    taken: dict[int, int] = {}  # id(kind) -> count planned
    kinds_by_id: dict[int, _Kind] = {}
    count: dict[int, int] = {}
    owner: set[int] = set()
    live = [s for s in shapes if any(k.items for k in s.kinds)]
    while left:
        best: tuple[float, _Shape, _Kind, int] | None = None
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
                if available <= 0:
                    continue
                take = min(fit, available)
                for cls, is_owner in kind.membership:
                    if is_owner or cls in owner:
                        take = min(take, caps[cls] - count.get(cls, 0))
                if take <= 0:
                    continue
                score = 0.0
                for d in range(dims):
                    score += vector[d] * scale[d] * residual[d] * scale[d]
                if best is None or score > best[0]:
                    best = (score, shape, kind, take)
                break  # one kind per shape is enough to score the shape
        if best is None:
            break
        _, shape, kind, take = best
        take = max(1, take // 4)
        kinds_by_id[id(kind)] = kind
        taken[id(kind)] = taken.get(id(kind), 0) + take
        for cls, is_owner in kind.membership:
            count[cls] = count.get(cls, 0) + take
            if is_owner:
                owner.add(cls)
        for d in range(dims):
            residual[d] -= shape.vector[d] * take
        left -= take
    plan = [(kinds_by_id[k], n) for k, n in taken.items()]
    return plan, [r - x for r, x in zip(room, residual, strict=True)]

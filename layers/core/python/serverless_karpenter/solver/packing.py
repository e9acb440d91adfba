"""Packing pods onto nodes of chosen types: the shared pieces, and first-fit into one main type.

Pods are grouped into *shapes* (identical request vectors) and, within a shape, into *kinds* (identical
class memberships and zone sets), so one step places many identical pods and a node scans tens of
shapes, not thousands of pods. Every fill honours the per-node class caps and the zones, through one
rule: :meth:`NodeFill.allowed`.

- :func:`pack_with`: first-fit decreasing into nodes of one main type.
- ``adaptive.pack_adaptive``: each node the type whose fill is worth most per dollar, with the nodes
  that pods needing a node of their own force opened first (``node_fills`` holds the ways to fill one).

Each node then becomes the cheapest type that holds what it got (:func:`shrink`), and
``adaptive.best_packing`` keeps the cheapest packing it finds within the time budget (:func:`cheapest_of`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import le

Vector = tuple[int, ...]
# A set of zones as bits (see ``improve``): a node may hold a pod only if their zone sets meet, and the
# node ends in the intersection of its pods' sets.
ANY_ZONE = -1
# Per pod, its classes as (class index, is owner, is member). Only members count toward a cap: an owner
# that is no member adds nothing, it only needs the members beside it within the cap.
Membership = tuple[tuple[int, bool, bool], ...]


@dataclass(frozen=True, slots=True)
class NodeOption:
    """A type a node may become: its room for pods (daemonset overhead taken off) and its price."""

    index: int
    room: Vector
    price: float


@dataclass(frozen=True, slots=True)
class PackProblem:
    """What every packing packs: each pod's request vector, class memberships and zone set (bits; empty:
    no pod is pinned to zones), the per-node cap of each class, and the types a node may become (by
    price)."""

    vectors: Sequence[Vector]
    memberships: Sequence[Membership]
    caps: Sequence[int]
    options: Sequence[NodeOption]
    zones: Sequence[int] = ()

    def subset(self, pods: Sequence[int]) -> PackProblem:
        """The same problem for the pods ``pods`` (indices) only."""
        return PackProblem(
            [self.vectors[i] for i in pods],
            [self.memberships[i] for i in pods],
            self.caps,
            self.options,
            [self.zones[i] for i in pods] if self.zones else [],
        )

    def demand(self) -> list[int]:
        """The pods' requests summed, per resource."""
        return [sum(v[d] for v in self.vectors) for d in range(len(self.options[0].room))]


@dataclass(slots=True)
class PackedNode:
    option: NodeOption
    items: list[int] = field(default_factory=list)
    used: list[int] = field(default_factory=list)
    zones: int = ANY_ZONE


@dataclass(slots=True)
class Kind:
    membership: Membership
    items: list[int]
    zones: int = ANY_ZONE


@dataclass(slots=True)
class Shape:
    vector: Vector
    kinds: list[Kind]


# What a fill of one node plans: (kind, how many of its pods) in order, the room used, the zones left.
Plan = list[tuple[Kind, int]]
FillPlan = tuple[Plan, list[int], int]


@dataclass(slots=True)
class NodeFill:
    """A node being filled: room left, members per class, classes with an owner here, zones left."""

    residual: list[int]
    count: dict[int, int] = field(default_factory=dict)
    owner: set[int] = field(default_factory=set)
    zones: int = ANY_ZONE

    def copy(self) -> NodeFill:
        return NodeFill(list(self.residual), dict(self.count), set(self.owner), self.zones)

    def allowed(self, membership: Membership, want: int, caps: Sequence[int]) -> int:
        """How many of ``want`` pods of ``membership`` the class caps let onto this node (<= 0: none). A
        class counts where the pod owns it or an owner of it is here; a non-member only needs the class
        within its cap."""
        take = want
        count = self.count
        owner = self.owner
        for cls, is_owner, is_member in membership:
            if is_owner or cls in owner:
                spare = caps[cls] - count.get(cls, 0)
                if spare < take and (is_member or spare < 0):
                    take = spare
        return take

    def record(self, membership: Membership, n: int) -> None:
        """``n`` pods of ``membership`` are on the node: count them toward their classes."""
        count = self.count
        for cls, is_owner, is_member in membership:
            if is_member:
                count[cls] = count.get(cls, 0) + n
            if is_owner:
                self.owner.add(cls)

    def add(self, kind: Kind, vector: Vector, n: int) -> None:
        """Put ``n`` pods of ``kind`` (each of ``vector``) on the node."""
        if kind.membership:
            self.record(kind.membership, n)
        self.zones &= kind.zones
        residual = self.residual
        for d in range(len(residual)):
            residual[d] -= vector[d] * n

    def take(self, shape: Shape, want: int, caps: Sequence[int], held: Mapping[int, int], plan: Plan) -> int:
        """Up to ``want`` pods of ``shape`` from its kinds, within the class caps and zones, put on the
        node and appended to ``plan`` (``held``: pods of a kind already planned elsewhere); how many."""
        wanted = want
        vector = shape.vector
        for kind in shape.kinds:
            if not want:
                break
            available = len(kind.items) - held.get(id(kind), 0)
            if available <= 0 or not kind.zones & self.zones:
                continue
            n = min(want, available)
            if kind.membership:
                n = self.allowed(kind.membership, n, caps)
            if n <= 0:
                continue
            self.add(kind, vector, n)
            plan.append((kind, n))
            want -= n
        return wanted - want

    def used(self, room: Vector) -> list[int]:
        return [r - x for r, x in zip(room, self.residual, strict=True)]


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


def shapes_of(problem: PackProblem, room: Vector) -> list[Shape]:
    """The pods grouped into shapes, the largest share of ``room`` first, and kinds within them."""
    by_vector: dict[Vector, dict[tuple[Membership, int], list[int]]] = {}
    zones = problem.zones
    for i, (vector, membership) in enumerate(zip(problem.vectors, problem.memberships, strict=True)):
        zone = zones[i] if zones else ANY_ZONE
        by_vector.setdefault(vector, {}).setdefault((membership, zone), []).append(i)

    ordered = sorted(by_vector, key=lambda v: (-share_of(v, room), v))
    # Within a shape, pods pinned to zones go first: the pods free of zones can go anywhere later.
    return [
        Shape(
            v,
            [
                Kind(m, list(reversed(items)), z)
                for (m, z), items in sorted(
                    by_vector[v].items(), key=lambda kv: (kv[0][1] == ANY_ZONE, kv[0])
                )
            ],
        )
        for v in ordered
    ]


def size_order(shapes: Sequence[Shape], room: Vector) -> list[int]:
    """Shape indices, largest share of ``room`` first."""
    return sorted(range(len(shapes)), key=lambda s: (-share_of(shapes[s].vector, room), s))


def fill(
    shapes: Sequence[Shape],
    order: Sequence[int],
    room: Vector,
    caps: Sequence[int],
    left: int,
    first: tuple[Shape, Kind] | None = None,
    also: Sequence[tuple[Shape, Kind]] = (),
) -> FillPlan:
    """Largest shapes first (in ``order``), as many of each as fit; ``first`` is placed before all, then
    one each of ``also`` (other pods at most one to a node) while they fit."""
    state = NodeFill(list(room))
    plan: Plan = []
    # Pods of a kind the opening holds (``first`` and ``also``); a shape in ``order`` is taken once.
    planned: dict[int, int] = {}

    def put(shape: Shape, kind: Kind) -> None:
        nonlocal left
        state.add(kind, shape.vector, 1)
        plan.append((kind, 1))
        planned[id(kind)] = planned.get(id(kind), 0) + 1
        left -= 1

    if first is not None:
        put(*first)
    # Memberships the class caps refused: counts only grow as the node fills, so they stay refused.
    refused: set[Membership] = set()
    for shape, kind in also:
        if kind.membership in refused:
            continue
        if len(kind.items) - planned.get(id(kind), 0) <= 0 or not left or not kind.zones & state.zones:
            continue
        if not fits(shape.vector, state.residual):
            continue
        if state.allowed(kind.membership, 1, caps) <= 0:
            refused.add(kind.membership)
            continue
        put(shape, kind)
    for s in order:
        shape = shapes[s]
        limit = copies_that_fit(shape.vector, state.residual, left)
        if limit:
            left -= state.take(shape, limit, caps, planned, plan)
    return plan, state.used(room), state.zones


def place(option: NodeOption, planned: FillPlan) -> PackedNode:
    """A node of ``option`` holding the planned pods, taken out of their kinds."""
    plan, used, zones = planned
    node = PackedNode(option, [], used, zones)
    for kind, n in plan:
        for _ in range(n):
            node.items.append(kind.items.pop())
    return node


def pack_with(
    problem: PackProblem, main: NodeOption, deadline: float = float("inf")
) -> list[PackedNode] | None:
    """Fill nodes of ``main`` one by one; a pod too big for ``main`` gets a node of the cheapest fitting
    option. Returns None if some pod fits no option, or past the deadline."""
    shapes = shapes_of(problem, main.room)
    nodes: list[PackedNode] = []
    left = len(problem.vectors)
    while left:
        if time.perf_counter() > deadline:
            return None
        first = next(s for s in shapes if any(k.items for k in s.kinds))
        option = main if fits(first.vector, main.room) else cheapest_fitting(first.vector, problem.options)
        if option is None:
            return None
        node = place(option, fill(shapes, range(len(shapes)), option.room, problem.caps, left))
        if not node.items:
            return None  # the class caps forbid even one pod: cannot happen with caps >= 1
        left -= len(node.items)
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

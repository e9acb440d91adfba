"""The adaptive packing, and the search over packings that ``improve`` runs.

- ``pack_adaptive`` with ``owner_first`` (pods that need a node of their own, hostname anti-affinity):
  each such pod opens a node of a type the relaxation's optimum buys for them (``bound.primal_mix``),
  filled by a branch and bound at the bound's prices (``node_fills.fill_best``); then the rest is packed
  afresh, several ways (``pack_rest``).
- ``pack_adaptive`` without it: each node becomes the candidate type whose greedy fill is worth most
  per dollar; ``packing.pack_with``: first-fit decreasing into nodes of one main type.

``best_packing`` tries them in turn within the time budget and keeps the cheapest.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import partial

from serverless_karpenter.solver.bound import dual_bound, primal_mix
from serverless_karpenter.solver.node_fills import fill_best, fill_dot, replay
from serverless_karpenter.solver.packing import (
    Attempt,
    FillPlan,
    Kind,
    NodeOption,
    PackedNode,
    PackProblem,
    Shape,
    Vector,
    cheapest_fitting,
    cheapest_of,
    fill,
    fits,
    pack_with,
    place,
    shapes_of,
    shrink,
    size_order,
)

# How many of the (nearly) tight types a node opened for an anti-affinity pod tries; the best fill wins.
OPENER_CHOICES = 3
# What a pod costs a fill, as a share of the node's worth; each owner-first packing tries one, in order
# while time lasts. Measured on Karpenter's benchmark mix (seeds 42, 1, 2, 3; 0 to 0.2 tried): 0.03 gave
# the lowest gap on average, 0 the highest (see benchmarks/README.md).
FILL_POD_PENALTIES = (0.03,)
# How many steps the search for the best fill of a node an anti-affinity pod opens may take.
FILL_EXPANSIONS = 3000
# The share of the rest's nodes packed again each round, and how many rounds at most (measured on
# Karpenter's mix at 20,000 pods: a tenth gave 2.1%, a quarter 2.0%; the third round gained little).
REPACK_SHARE = 0.25
REPACK_ROUNDS = 3


@dataclass(frozen=True, slots=True)
class AdaptiveOptions:
    """How ``pack_adaptive`` packs.

    ``candidates``: the types a node may be opened as; ``weights``: the dual prices of each resource and,
    last, of being a node. ``dot``: fill by the dot-product rule rather than largest first.
    ``owner_first``: the owners of the ``exclusive`` classes (pods that need a node of their own) each
    open a node first; ``min_nodes`` is how many nodes they force; ``fill_penalty`` is what a pod costs
    their best fill, as a share of the node's worth. ``rest_deadline`` (default: the deadline) bounds
    the packings of the rest after the first, which always finishes: when this is the packing that must
    finish, it still stops trying others in time."""

    candidates: Sequence[NodeOption]
    weights: Sequence[float]
    dot: bool = False
    owner_first: bool = False
    exclusive: frozenset[int] = field(default_factory=frozenset)
    min_nodes: int = 0
    fill_penalty: float = 0.0
    rest_deadline: float | None = None


def pack_adaptive(
    problem: PackProblem, how: AdaptiveOptions, deadline: float = float("inf")
) -> list[PackedNode] | None:
    """Each node becomes the candidate whose greedy fill is worth most per dollar under the dual weights
    (the value of what it holds, priced as the bound prices it), so the node shapes follow what is left.

    With ``owner_first``, pods that need a node of their own (hostname anti-affinity) each open a node
    first, as the bound's optimum does (:class:`_OwnerNodes`), and the rest is packed afresh."""
    shapes = shapes_of(problem, how.candidates[0].room) if how.candidates else []
    if how.owner_first:
        nodes = _OwnerNodes(problem, how, shapes).open(deadline)
        if nodes is None:
            return None
        # Every node the owners need exists now. What is left is packed afresh, a few ways, and the
        # cheapest kept: from here a node is worth only the room it fills, at the bound's prices for
        # what is left (its mix of shapes is not the whole's).
        rest = sorted(i for shape in shapes for kind in shape.kinds for i in kind.items)
        if rest:
            limit = deadline if how.rest_deadline is None else min(deadline, how.rest_deadline)
            packed = pack_rest(problem, rest, len(how.candidates), limit)
            if packed is None:
                return None
            nodes.extend(packed)
        return nodes
    return _fill_by_worth(problem, how, shapes, deadline)


def _fill_by_worth(
    problem: PackProblem, how: AdaptiveOptions, shapes: list[Shape], deadline: float
) -> list[PackedNode] | None:
    """Node after node, the candidate whose fill is worth most per dollar under the weights."""
    caps = problem.caps
    orders = [size_order(shapes, option.room) for option in how.candidates]
    nodes: list[PackedNode] = []
    left = len(problem.vectors)
    while left:
        if time.perf_counter() > deadline:
            return None
        best: tuple[float, NodeOption, FillPlan] | None = None
        for option, order in zip(how.candidates, orders, strict=True):
            if how.dot:
                planned = fill_dot(shapes, option.room, caps, left)
            else:
                planned = fill(shapes, order, option.room, caps, left)
            if not planned[0]:
                continue
            value = sum(w * u for w, u in zip(how.weights, (*planned[1], 1), strict=True)) / option.price
            if best is None or value > best[0]:
                best = (value, option, planned)
        if best is None:
            first = next(s for s in shapes if any(k.items for k in s.kinds))
            fallback = cheapest_fitting(first.vector, problem.options)
            if fallback is None:
                return None
            best = (0.0, fallback, fill(shapes, range(len(shapes)), fallback.room, caps, left))
        node = place(best[1], best[2])
        left -= len(node.items)
        nodes.append(node)
    return nodes


class _OwnerNodes:
    """The nodes the owners of exclusive classes force, opened first. Of the types that are (nearly)
    tight in the dual, each owner opens the one whose price goes most to "being a node" (the smallest),
    then it is filled with other pods. So the nodes the anti-affinity forces are full, rather than
    swallowing every other pod into a few big nodes and leaving the rest of the owners alone on their
    own small nodes.

    Owners open the types the relaxation's optimum buys for them, while its counts last, so those nodes
    come in the optimum's mix of shapes and what they leave suits the types that are best for the rest."""

    def __init__(self, problem: PackProblem, how: AdaptiveOptions, shapes: list[Shape]) -> None:
        self.problem = problem
        self.how = how
        self.shapes = shapes
        self.shape_of = {id(kind): shape for shape in shapes for kind in shape.kinds}
        self.node_weight = how.weights[-1] if how.weights else 0.0
        self.left_of: dict[int, float] = {}
        self.budgeted: list[NodeOption] = []
        self.fill_cache: dict[tuple[int, tuple[tuple[int, int], ...]], list[tuple[Shape, int]]] = {}
        self.orders: dict[int, list[int]] = {}
        self.types: dict[Vector, list[NodeOption]] = {}
        self.owners = [
            (shape, kind)
            for shape in shapes
            for kind in shape.kinds
            if any(
                is_owner and is_member and cls in how.exclusive
                for cls, is_owner, is_member in kind.membership
            )
        ]

    def worth(self, option: NodeOption) -> float:
        return sum(w * r for w, r in zip(self.how.weights, option.room, strict=False)) + self.node_weight

    def opener_types(self, vector: Vector) -> list[NodeOption]:
        """The (nearly) tight types an owner of this shape opens: the smallest first."""
        found = self.types.get(vector)
        if found is None:
            fitting = [o for o in self.problem.options if fits(vector, o.room) and self.worth(o) > 0]
            if not fitting:
                return []
            tightest = min(o.price / self.worth(o) for o in fitting)
            found = sorted(
                (o for o in fitting if o.price / self.worth(o) <= tightest * 1.005),
                key=lambda o: (-self.node_weight / o.price, o.price),
            )[:OPENER_CHOICES]
            found = [o for o in found if o.price <= found[0].price * 1.2]
            self.types[vector] = found
        return found

    def budget(self) -> None:
        """How many nodes of each opener type the relaxation's optimum buys for the owners, when the
        nodes they force must be opener types and any type may hold the rest."""
        options = self.problem.options
        eligible = list(
            {o.index: o for shape, _ in self.owners for o in self.opener_types(shape.vector)}.values()
        )
        columns = [(o.room, o.price) for o in (*options, *eligible)]
        counts_as_node = [False] * len(options) + [True] * len(eligible)
        demand = self.problem.demand()
        _, duals = dual_bound(demand, self.how.min_nodes, columns, counts_as_node)
        mix = primal_mix(demand, self.how.min_nodes, columns, duals, counts_as_node=counts_as_node)
        self.left_of = {eligible[j - len(options)].index: x for j, x in mix.items() if j >= len(options)}
        self.budgeted = [o for o in eligible if o.index in self.left_of]
        # Owners that fit fewer of the types go first, while those types are still within the counts.
        self.owners.sort(key=lambda sk: sum(o.index in self.left_of for o in self.opener_types(sk[0].vector)))

    def open(self, deadline: float) -> list[PackedNode] | None:
        """A node per owner, each the best fill of the best opener type; None past the deadline or if an
        owner fits no type."""
        if self.owners and self.how.min_nodes:
            self.budget()
        nodes: list[PackedNode] = []
        left = len(self.problem.vectors)
        owners = self.owners
        while left and owners:
            if time.perf_counter() > deadline:
                return None
            owners = [o for o in owners if o[1].items]  # once a node, not in each of its fills
            if not owners:
                break
            shape, kind = owners[0]  # shapes are largest first
            chosen = self.best_node(shape, kind, owners[1:], left)
            if chosen is None:
                return None
            option, planned = chosen
            if option.index in self.left_of:
                self.left_of[option.index] -= 1
            node = place(option, planned)
            left -= len(node.items)
            nodes.append(node)
        return nodes

    def best_node(
        self, shape: Shape, kind: Kind, others: Sequence[tuple[Shape, Kind]], left: int
    ) -> tuple[NodeOption, FillPlan] | None:
        """The node an owner of ``kind`` opens: of its opener types (within the optimum's counts where
        any is), the fill worth most per dollar."""
        openers = self.types.get(shape.vector) or self.opener_types(shape.vector)
        if not openers:
            return None
        within = [o for o in openers if self.left_of.get(o.index, 0) > 0.5] or [
            o for o in self.budgeted if self.left_of[o.index] > 0.5 and fits(shape.vector, o.room)
        ]
        best: tuple[float, NodeOption, FillPlan] | None = None
        for option in within or openers:
            planned = self.fill_for(option, shape, kind, others, left)
            used = planned[1]
            value = (
                sum(w * u for w, u in zip(self.how.weights, used, strict=False)) + self.node_weight
            ) / option.price
            if best is None or value > best[0]:
                best = (value, option, planned)
        assert best is not None
        return best[1], best[2]

    def fill_for(
        self, option: NodeOption, shape: Shape, kind: Kind, others: Sequence[tuple[Shape, Kind]], left: int
    ) -> FillPlan:
        """The best fill found of a node of ``option`` the owner opens, one each of ``others`` with it."""
        shapes, caps = self.shapes, self.problem.caps
        order = self.orders.get(option.index)
        if order is None:
            order = size_order(shapes, option.room)
            self.orders[option.index] = order
        fixed = fill(shapes, (), option.room, caps, left, first=(shape, kind), also=others)
        key = (option.index, tuple((id(k), n) for k, n in fixed[0]))
        # The best fill found for the same node and opening stays the best while its pods are still
        # there (what is available only shrinks), so it is replayed rather than searched.
        cached = self.fill_cache.get(key)
        replayed = replay(fixed, cached, option.room, caps) if cached is not None else None
        if replayed is not None:
            return replayed
        incumbent = fill(shapes, order, option.room, caps, left, first=(shape, kind), also=others)
        found = fill_best(
            shapes,
            option.room,
            caps,
            left,
            fixed,
            self.how.weights,
            incumbent,
            FILL_EXPANSIONS,
            self.how.fill_penalty,
        )
        counts: dict[int, tuple[Shape, int]] = {}
        for k, n in found[0][len(fixed[0]) :]:
            s_of = self.shape_of[id(k)]
            counts[id(s_of)] = (s_of, counts.get(id(s_of), (s_of, 0))[1] + n)
        self.fill_cache[key] = list(counts.values())
        return found


def pack_rest(
    problem: PackProblem, rest: Sequence[int], choices: int, deadline: float
) -> list[PackedNode] | None:
    """The pods ``rest`` (indices) packed as cheaply as :func:`_pack_rest_once` finds, then its worst
    nodes packed again while that is cheaper; its items as indices into the problem's pods.

    The greedy rules fill the first nodes well and leave the last ones what does not pack (on
    Karpenter's mix at 20,000 pods, the dot-product rule left a tail of 7900m nodes at 60-95% cpu: the
    rest 4.5% above its own bound, against 1.4% at 5,000). Packed together, the pods of the nodes worth
    least for their price (at the bound's prices of what they hold) fill fewer nodes: 2.0% at 20,000,
    unchanged at 5,000. A packing of them that is no cheaper ends the rounds."""
    options = problem.options
    nodes = _pack_rest_once(problem, rest, choices, deadline)
    if nodes is None:
        return None
    demand = problem.subset(rest).demand()
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
        again = _pack_rest_once(problem, items, choices, deadline)
        if again is None or shrink(again, options) >= sum(nodes[n].option.price for n in worst) - 1e-9:
            break
        nodes = [node for n, node in enumerate(nodes) if n not in worst] + again
    return nodes


def _pack_rest_once(
    problem: PackProblem, rest: Sequence[int], choices: int, deadline: float
) -> list[PackedNode] | None:
    """The pods ``rest`` (indices) packed by the dot-product rule, by size, and on each of the best
    main types, within the deadline; the cheapest packing, its items as indices into the problem's pods."""
    options = problem.options
    sub = problem.subset(rest)
    _, duals = dual_bound(sub.demand(), 0, [(o.room, o.price) for o in options])
    weights = [*duals[:-1], 0.0]

    def ratio(option: NodeOption) -> float:
        value = sum(w * r for w, r in zip(weights, option.room, strict=False))
        return option.price / value if value > 0 else float("inf")

    ranked = sorted(options, key=lambda o: (ratio(o), o.price))[:choices]
    how = AdaptiveOptions(ranked, weights)
    attempts: list[Attempt] = [
        partial(pack_adaptive, sub, replace(how, dot=True)),
        partial(pack_adaptive, sub, how),
        *(partial(pack_with, sub, main) for main in ranked[:3]),
    ]
    best = cheapest_of(attempts, options, deadline)
    if best is None:
        return None
    for node in best[0]:
        node.items = [rest[i] for i in node.items]
    return best[0]


def best_packing(
    problem: PackProblem,
    candidates: Sequence[NodeOption],
    deadline: float,
    weights: Sequence[float] = (),
    exclusive: frozenset[int] = frozenset(),
    min_nodes: int = 0,
) -> tuple[list[PackedNode], float] | None:
    """The adaptive packing first, then each candidate main type until the deadline; the cheapest."""
    attempts: list[Attempt] = []
    if weights and candidates:
        how = AdaptiveOptions(candidates, weights)
        if exclusive:
            attempts += [
                partial(
                    pack_adaptive,
                    problem,
                    replace(
                        how,
                        owner_first=True,
                        exclusive=exclusive,
                        min_nodes=min_nodes,
                        fill_penalty=p,
                        rest_deadline=deadline,
                    ),
                )
                for p in FILL_POD_PENALTIES
            ]
        attempts += [
            partial(pack_adaptive, problem, how),
            partial(pack_adaptive, problem, replace(how, dot=True)),
        ]
    attempts += [partial(pack_with, problem, main) for main in candidates]
    return cheapest_of(attempts, problem.options, deadline)

"""The covering bound is a proven lower bound: the LP relaxation's optimum, never above it."""

from __future__ import annotations

import itertools
import random
from operator import le

import pytest
from serverless_karpenter.solver.bound import dual_bound, owner_priced_bound, primal_mix


def exact_lp(demand: tuple[float, float], columns: list[tuple[tuple[float, float], float]]) -> float:
    """min c.x s.t. sum x_t a_t >= demand, x >= 0, by enumerating bases (two rows: at most two columns)."""
    best = float("inf")
    for a, c in columns:
        need = max(
            demand[i] / a[i] if a[i] > 0 else (float("inf") if demand[i] > 0 else 0.0) for i in range(2)
        )
        best = min(best, need * c)
    for (a, ca), (b, cb) in itertools.combinations(columns, 2):
        det = a[0] * b[1] - a[1] * b[0]
        if abs(det) < 1e-12:
            continue
        x = (demand[0] * b[1] - demand[1] * b[0]) / det
        y = (a[0] * demand[1] - a[1] * demand[0]) / det
        if x >= -1e-12 and y >= -1e-12:
            best = min(best, x * ca + y * cb)
    return best


def test_one_type() -> None:
    bound, weights = dual_bound([10], 0, [((4,), 1.0)])
    assert bound == pytest.approx(2.5)
    assert weights[0] * 4 <= 1.0 + 1e-9  # dual feasible: y . a <= c


def test_pods_that_need_a_node_each_raise_the_bound() -> None:
    assert dual_bound([1], 5, [((4,), 1.0)])[0] == pytest.approx(5.0)


def test_two_resources_mix_two_types() -> None:
    bound, _ = dual_bound([8, 32], 0, [((4, 8), 1.0), ((2, 16), 1.0)])
    assert bound == pytest.approx(8 / 3, rel=1e-3)
    assert bound <= 8 / 3 + 1e-9


@pytest.mark.parametrize("seed", range(20))
def test_never_above_the_lp_optimum_and_close_to_it(seed: int) -> None:
    rng = random.Random(seed)
    columns = [
        ((rng.uniform(1, 64), rng.uniform(1, 256)), rng.uniform(0.05, 5.0)) for _ in range(rng.randint(2, 30))
    ]
    demand = (rng.uniform(10, 2000), rng.uniform(10, 8000))
    bound, weights = dual_bound(list(demand), 0, columns)
    optimum = exact_lp(demand, columns)
    assert bound <= optimum * (1 + 1e-9)
    assert bound >= optimum * (1 - 1e-9)  # the simplex solves the LP exactly
    for room, price in columns:  # the weights are a feasible dual: the bound is proven, not estimated
        assert weights[0] * room[0] + weights[1] * room[1] <= price * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(10))
def test_the_primal_mix_covers_the_demand_at_the_bound(seed: int) -> None:
    rng = random.Random(seed)
    columns = [
        ((rng.uniform(1, 64), rng.uniform(1, 256)), rng.uniform(0.05, 5.0)) for _ in range(rng.randint(2, 30))
    ]
    demand = [rng.uniform(10, 2000), rng.uniform(10, 8000)]
    bound, duals = dual_bound(demand, 0, columns)
    mix = primal_mix(demand, 0, columns, duals)
    assert mix, "a basic optimum exists and the duals name it"
    for d in range(2):
        assert sum(columns[j][0][d] * x for j, x in mix.items()) >= demand[d] * (1 - 1e-6)
    assert sum(columns[j][1] * x for j, x in mix.items()) == pytest.approx(bound, rel=1e-9)


def test_the_node_row_counts_only_the_columns_that_count_as_nodes() -> None:
    # Two small nodes must exist; a big type is cheaper per unit but does not meet the node row.
    columns = [((2.0,), 1.0), ((100.0,), 10.0)]
    demand = [102.0]
    everyone, _ = dual_bound(demand, 2, columns)
    only_small, duals = dual_bound(demand, 2, columns, counts_as_node=[True, False])
    assert everyone == pytest.approx(11.0, rel=1e-3)  # one of each: the big one counts as a node
    assert only_small == pytest.approx(2 * 1.0 + 98 * 0.1, rel=1e-3)  # two small, the rest big
    mix = primal_mix(demand, 2, columns, duals, counts_as_node=[True, False])
    assert mix[0] == pytest.approx(2.0) and mix[1] == pytest.approx(0.98)


@pytest.mark.parametrize("seed", range(15))
def test_with_every_dimension_and_the_node_row_the_bound_is_the_lp_optimum(seed: int) -> None:
    # cpu, memory, pods, a GPU only some types have, and the node row: a primal mix that covers the
    # demand at the bound's cost certifies, by weak duality, that the bound is the optimum.
    rng = random.Random(seed)
    columns = [
        (
            (
                rng.choice((2000, 4000, 8000, 16000, 32000)),
                rng.choice((4, 8, 16, 32, 64, 128)) << 30,
                rng.choice((29, 58, 110, 234)),
                rng.choice((0, 0, 0, 1, 4)),
            ),
            round(rng.uniform(0.05, 5.0), 4),
        )
        for _ in range(rng.randint(5, 120))
    ]
    if not any(room[3] for room, _ in columns):
        columns.append(((4000, 16 << 30, 58, 1), 1.2))
    demand = [rng.randint(1, 500) * 100, rng.randint(1, 500) << 28, rng.randint(1, 900), rng.randint(0, 9)]
    min_nodes = rng.choice((0, 0, rng.randint(1, 300)))
    bound, duals = dual_bound(demand, min_nodes, columns)
    for room, price in columns:
        assert sum(y * a for y, a in zip(duals, (*room, 1), strict=True)) <= price * (1 + 1e-9)
    mix = primal_mix(demand, min_nodes, columns, duals, most_tight=len(columns))
    assert mix
    for d in range(4):
        assert sum(columns[j][0][d] * x for j, x in mix.items()) >= demand[d] * (1 - 1e-9)
    assert sum(x for x in mix.values()) >= min_nodes * (1 - 1e-9)
    assert sum(columns[j][1] * x for j, x in mix.items()) == pytest.approx(bound, rel=1e-9)


def test_a_resource_no_type_has_is_left_out_of_the_bound() -> None:
    # Nothing offers the second resource: no placement exists, and the bound covers the first alone.
    bound, duals = dual_bound([10, 5], 0, [((4, 0), 1.0), ((8, 0), 1.5)])
    assert bound == pytest.approx(1.875)
    assert duals[1] == 0.0


def test_identical_types_do_not_stall_the_simplex() -> None:
    columns = [((4.0, 8.0), 1.0)] * 50 + [((8.0, 16.0), 2.0)] * 50
    assert dual_bound([40, 80], 10, columns)[0] == pytest.approx(10.0)


def _partitions(items: list[int]) -> list[list[list[int]]]:
    if not items:
        return [[]]
    first, rest = items[0], items[1:]
    out = []
    for partition in _partitions(rest):
        out.append([[first], *partition])
        for i in range(len(partition)):
            out.append([*partition[:i], [first, *partition[i]], *partition[i + 1 :]])
    return out


def _cheapest_placement(
    owners: list[tuple[int, int]], others: list[tuple[int, int]], columns: list[tuple[tuple[int, int], float]]
) -> float:
    """Every way to put the pods on nodes, at most one owner a node, each node its cheapest type."""
    pods = owners + others
    best = float("inf")
    for partition in _partitions(list(range(len(pods)))):
        cost = 0.0
        for block in partition:
            if sum(i < len(owners) for i in block) > 1:
                break
            used = tuple(sum(pods[i][d] for i in block) for d in range(2))
            prices = [price for room, price in columns if all(map(le, used, room))]
            if not prices:
                break
            cost += min(prices)
        else:
            best = min(best, cost)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_pricing_each_owner_at_a_node_that_holds_it_stays_a_lower_bound(seed: int) -> None:
    rng = random.Random(seed)
    columns = [((rng.randint(1, 8), rng.randint(1, 8)), round(rng.uniform(0.5, 4.0), 2)) for _ in range(3)]
    columns.append(((8, 8), 4.5))  # something holds every pod
    owners = [(rng.randint(1, 6), rng.randint(1, 6)) for _ in range(rng.randint(1, 3))]
    others = [(rng.randint(1, 4), rng.randint(1, 4)) for _ in range(rng.randint(0, 3))]
    demand = [sum(p[d] for p in owners + others) for d in range(2)]
    plain, duals = dual_bound(demand, len(owners), columns)
    counted: dict[tuple[int, ...], int] = {}
    for vector in owners:
        counted[vector] = counted.get(vector, 0) + 1
    priced = owner_priced_bound(demand, duals, columns, counted)
    assert priced >= plain - 1e-9  # never below the covering bound
    assert priced <= _cheapest_placement(owners, others, columns) + 1e-9


def test_owners_too_big_for_the_cheap_type_are_priced_at_the_type_that_holds_them() -> None:
    # Two pods of 3 that may not share a node; a type of 1 at 1.0 and a type of 4 at 3.0. The covering
    # LP buys 4/3 large and 2/3 small nodes (4.67); but each pod needs a large node: 6.0.
    columns = [((1,), 1.0), ((4,), 3.0)]
    plain, duals = dual_bound([6], 2, columns)
    assert plain == pytest.approx(14 / 3)
    assert owner_priced_bound([6], duals, columns, {(3,): 2}) == pytest.approx(6.0)

"""A proven lower bound on the $/h of any placement: the dual of the covering LP's relaxation.

The relaxation: buy fractional nodes x_t >= 0 of each type t (price c_t, room a_t net of daemonset
overhead) so that the room bought covers the pods' summed requests b, and at least ``min_nodes`` nodes
(pods that must not share a node). Its optimum is at most the cost of every real placement. For any
weights y >= 0, weak duality gives

    cost(x) = sum_t c_t x_t >= s * sum_t (y . a_t) x_t >= s * (y . b),   s = min_t c_t / (y . a_t),

so every y yields a bound that holds whatever y is; the search below only makes it tight. The problem
has a handful of dimensions (cpu, memory, pods, nodes, maybe a GPU), so a refined grid over the simplex
of normalised weights finds the dual optimum closely in a few milliseconds, with no LP library.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

Column = tuple[Sequence[float], float]  # (room per dimension, price)


def _scale(weights: Sequence[float], columns: Sequence[tuple[tuple[float, ...], float]]) -> float:
    best = float("inf")
    for room, price in columns:
        value = 0.0
        for w, a in zip(weights, room, strict=True):
            value += w * a
        if value > 0.0:
            ratio = price / value
            best = min(best, ratio)
    return best


def _simplex_grid(dims: int, steps: int) -> list[tuple[int, ...]]:
    out = []
    for cut in itertools.combinations(range(steps + dims - 1), dims - 1):
        parts = []
        last = -1
        for c in (*cut, steps + dims - 1):
            parts.append(c - last - 1)
            last = c
        out.append(tuple(parts))
    return out


def dual_bound(
    demand: Sequence[float],
    min_nodes: int,
    columns: Sequence[Column],
    counts_as_node: Sequence[bool] | None = None,
) -> tuple[float, list[float]]:
    """The bound and the dual weights per dimension (demand dims, then the node count) that give it.
    ``counts_as_node`` (default: all) says which columns meet the node-count row."""
    rhs = [float(d) for d in demand] + [float(min_nodes)]
    active = [i for i, v in enumerate(rhs) if v > 0]
    if not active or not columns:
        return 0.0, [0.0] * len(rhs)
    # Normalise each dimension by its demand, so the weights live on the unit simplex.
    shares = [1.0] * len(columns) if counts_as_node is None else [float(c) for c in counts_as_node]
    normalised = [
        (tuple(([*list(room), share])[i] / rhs[i] for i in active), float(price))
        for (room, price), share in zip(columns, shares, strict=True)
    ]
    # Drop dominated columns: another no dearer with at least as much room never has a worse ratio.
    normalised.sort(key=lambda col: col[1])
    frontier: list[tuple[tuple[float, ...], float]] = []
    for room, price in normalised:
        if not any(all(o >= r for o, r in zip(other, room, strict=True)) for other, _ in frontier):
            frontier.append((room, price))
    dims = len(active)
    best_value = 0.0
    best_weights: tuple[float, ...] = tuple(1.0 / dims for _ in range(dims))
    steps = {1: 1, 2: 64, 3: 24, 4: 12}.get(dims, 6)
    for point in _simplex_grid(dims, steps):
        weights = tuple(p / steps for p in point)
        value = _scale(weights, frontier)
        if value != float("inf") and value > best_value:
            best_value, best_weights = value, weights
    # Refine around the best point with shrinking moves along pairs of coordinates.
    step = 1.0 / steps
    while step > 1e-5:
        improved = False
        for i, j in itertools.permutations(range(dims), 2):
            move = min(step, best_weights[j])
            if move <= 0:
                continue
            candidate = list(best_weights)
            candidate[i] += move
            candidate[j] -= move
            value = _scale(candidate, frontier)
            if value != float("inf") and value > best_value * (1 + 1e-12):
                best_value, best_weights, improved = value, tuple(candidate), True
        if not improved:
            step /= 2
    duals = [0.0] * len(rhs)
    for w, i in zip(best_weights, active, strict=True):
        duals[i] = w * best_value / rhs[i]  # y_i in original units: y . b equals the bound
    return best_value, duals


def _solve_square(matrix: list[list[float]], rhs: list[float]) -> list[float] | None:
    """Gaussian elimination with partial pivoting; None if singular."""
    n = len(rhs)
    a = [[*row, b] for row, b in zip(matrix, rhs, strict=True)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < 1e-12:
            return None
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(n):
            if r != col:
                factor = a[r][col] / a[col][col]
                if factor:
                    for c in range(col, n + 1):
                        a[r][c] -= factor * a[col][c]
    return [a[i][n] / a[i][i] for i in range(n)]


def primal_mix(
    demand: Sequence[float],
    min_nodes: int,
    columns: Sequence[Column],
    duals: Sequence[float],
    tolerance: float = 1e-3,
    most_tight: int = 10,
    counts_as_node: Sequence[bool] | None = None,
) -> dict[int, float]:
    """How many of each column (by index) the relaxation's optimum buys: the primal to ``duals``.

    By complementary slackness the optimum uses only columns the duals price at cost (tight) and meets
    the rows with a positive dual exactly, so it is a basic solution over those rows: try each square
    choice of tight columns, keep the cheapest that is non-negative and covers every row. Empty if the
    duals are too rough to name one (the caller then goes without)."""
    rhs = [float(d) for d in demand] + [float(min_nodes)]
    rows = [i for i, y in enumerate(duals) if y > 0 and rhs[i] > 0]
    if not rows:
        return {}
    shares = [1.0] * len(columns) if counts_as_node is None else [float(c) for c in counts_as_node]
    scored = []
    for index, (room, price) in enumerate(columns):
        value = sum(y * a for y, a in zip(duals, (*room, shares[index]), strict=True))
        if value > 0 and price <= value * (1 + tolerance):
            scored.append((price / value, index))
    tight = [index for _, index in sorted(scored)[:most_tight]]
    best: tuple[float, dict[int, float]] | None = None
    for basis in itertools.combinations(tight, len(rows)):
        full = [[*columns[j][0], shares[j]] for j in basis]
        x = _solve_square([[full[k][i] for k in range(len(basis))] for i in rows], [rhs[i] for i in rows])
        if x is None or any(v < -1e-9 for v in x):
            continue
        covered = all(
            sum(full[k][i] * x[k] for k in range(len(basis))) >= rhs[i] * (1 - 1e-9) for i in range(len(rhs))
        )
        if not covered:
            continue
        cost = sum(columns[j][1] * v for j, v in zip(basis, x, strict=True))
        if best is None or cost < best[0]:
            best = (cost, {j: max(0.0, v) for j, v in zip(basis, x, strict=True)})
    return best[1] if best else {}

"""A proven lower bound on the $/h of any placement: the dual of the covering LP's relaxation.

The relaxation: buy fractional nodes x_t >= 0 of each type t (price c_t, room a_t net of daemonset
overhead) so that the room bought covers the pods' summed requests b, and at least ``min_nodes`` nodes
(pods that must not share a node). Its optimum is at most the cost of every real placement. For any
weights y >= 0, weak duality gives

    cost(x) = sum_t c_t x_t >= s * sum_t (y . a_t) x_t >= s * (y . b),   s = min_t c_t / (y . a_t),

so every y yields a bound that holds whatever y is, even one a rounding error has moved. The LP has a
row per dimension (cpu, memory, pods, nodes, maybe a GPU) and a column per type, so a revised simplex
with a basis of that handful of rows solves it exactly in a few milliseconds, with no LP library: the
duals at its optimum are the y that make the bound tightest. (A grid search over the simplex of weights
took 0.15 s a call on 400 types, four calls a solve.)
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

Column = tuple[Sequence[float], float]  # (room per dimension, price)
Vector = tuple[int, ...]  # a pod's requests, per dimension

_EPS = 1e-12  # what counts as zero in the normalised LP (every row's demand is 1)


def _covering_duals(rows: Sequence[Sequence[float]], prices: Sequence[float]) -> list[float] | None:
    """The optimal duals y of  min c.x  s.t.  A x >= 1, x >= 0  (``rows``: A by row, one entry per
    column), by a two-phase revised simplex on the primal; None if no x covers every row.

    The basis is a handful of rows wide, so its inverse is kept explicitly. Surplus columns let a row
    be over-covered; artificial columns start the first phase. Dantzig's rule picks the entering
    column, and Bland's after a degenerate pivot, so the method cannot cycle."""
    m, n = len(rows), len(prices)
    # Columns: 0..n-1 the types, n..n+m-1 the surpluses (-e_i), n+m..n+2m-1 the artificials (e_i).
    columns = [[row[j] for row in rows] for j in range(n)]
    columns += [[-1.0 if i == k else 0.0 for i in range(m)] for k in range(m)]
    columns += [[1.0 if i == k else 0.0 for i in range(m)] for k in range(m)]
    basis = list(range(n + m, n + 2 * m))
    inverse = [[1.0 if i == k else 0.0 for k in range(m)] for i in range(m)]
    values = [1.0] * m

    def run(cost: Sequence[float], allowed: int) -> bool:
        """Pivot to the optimum of ``cost`` over the first ``allowed`` columns; False if unbounded."""
        bland = False
        for _ in range(50 * (allowed + m)):
            cb = [cost[b] for b in basis]
            y = [sum(cb[i] * inverse[i][k] for i in range(m)) for k in range(m)]
            entering, best = -1, -_EPS
            for j in range(allowed):
                column = columns[j]
                reduced = cost[j] - sum(y[k] * column[k] for k in range(m))
                if reduced < best:
                    entering, best = j, reduced
                    if bland:
                        break
            if entering < 0:
                return True
            column = columns[entering]
            direction = [sum(inverse[i][k] * column[k] for k in range(m)) for i in range(m)]
            leaving, ratio = -1, float("inf")
            for i in range(m):
                if direction[i] > _EPS:
                    r = values[i] / direction[i]
                    if r < ratio - _EPS or (abs(r - ratio) <= _EPS and basis[i] < basis[leaving]):
                        leaving, ratio = i, r
            if leaving < 0:
                return False
            bland = ratio <= _EPS
            pivot = direction[leaving]
            inverse[leaving] = [v / pivot for v in inverse[leaving]]
            values[leaving] /= pivot
            for i in range(m):
                if i != leaving and direction[i] != 0.0:
                    factor = direction[i]
                    inverse[i] = [a - factor * b for a, b in zip(inverse[i], inverse[leaving], strict=True)]
                    values[i] -= factor * values[leaving]
            basis[leaving] = entering
        return False  # did not converge: no answer rather than a wrong one

    phase_one = [0.0] * (n + m) + [1.0] * m
    if not run(phase_one, n + 2 * m) or sum(values[i] for i, b in enumerate(basis) if b >= n + m) > 1e-9:
        return None
    # An artificial still in the basis is at zero: it keeps cost 0 and no column prices in on it.
    cost = [float(p) for p in prices] + [0.0] * (2 * m)
    if not run(cost, n + m):
        return None
    cb = [cost[b] for b in basis]
    return [max(0.0, sum(cb[i] * inverse[i][k] for i in range(m))) for k in range(m)]


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
    shares = [1.0] * len(columns) if counts_as_node is None else [float(c) for c in counts_as_node]
    full = [[*(float(a) for a in room), share] for (room, _), share in zip(columns, shares, strict=True)]
    prices = [float(price) for _, price in columns]
    # Each row normalised by its demand (every right-hand side 1). A row no type has room in cannot be
    # covered at all; it is left out, as a bound on the rest still holds.
    rows = [[col[i] / rhs[i] for col in full] for i in active]
    kept = [k for k, row in enumerate(rows) if any(v > 0 for v in row)]
    duals_kept = _covering_duals([rows[k] for k in kept], prices) if kept else None
    duals = [0.0] * len(rhs)
    if duals_kept is None:
        return 0.0, duals
    for k, y in zip(kept, duals_kept, strict=True):
        duals[active[k]] = y / rhs[active[k]]
    # Weak duality with these weights, whatever rounding did to them: scale them to the tightest type.
    scale = float("inf")
    for col, price in zip(full, prices, strict=True):
        value = sum(y * a for y, a in zip(duals, col, strict=True))
        if value > 0:
            scale = min(scale, price / value)
    if scale == float("inf"):
        return 0.0, [0.0] * len(rhs)
    duals = [y * scale for y in duals]
    return sum(y * b for y, b in zip(duals, rhs, strict=True)), duals


def owner_priced_bound(
    demand: Sequence[float], duals: Sequence[float], columns: Sequence[Column], owners: Mapping[Vector, int]
) -> float:
    """A bound at least :func:`dual_bound`'s when pods must each have a node of their own (``owners``:
    how many such pods of each request vector, all of one class that allows one of them per node).

    ``dual_bound`` charges each of those nodes the node row's dual w, the same for every type, even a
    type too small to hold the pod. Priced per pod instead: take resource weights y >= 0 with
    c_t >= y.a_t for every type t. The node of an owner of vector v is some type t that holds v, so it
    costs y.a_t + (c_t - y.a_t) >= y.a_t + z_v, z_v = min over the types that hold v of c_t - y.a_t;
    every other node costs at least y.a_t. Summed over a placement's nodes, whose rooms cover the
    demand b: cost >= y.b + sum_v n_v z_v, whatever the placement, so a lower bound for any such y.

    The y tried are the LP's own resource duals scaled by 0, 0.1, ..., 1 (each still has c_t >= y.a_t,
    as c_t >= y.a_t + w >= y.a_t for the LP's duals): at 1, z_v >= w, so the best is never below
    ``dual_bound``'s y.b + w * sum_v n_v; at 0 it is the owners' cheapest nodes alone, which wins when
    they need types far dearer than the one the node row's dual is set by."""
    weights = duals[: len(demand)]
    worth = [sum(y * a for y, a in zip(weights, room, strict=True)) for room, _ in columns]
    at_full = sum(y * b for y, b in zip(weights, demand, strict=True))
    holding = {
        vector: [
            j for j, (room, _) in enumerate(columns) if all(v <= a for v, a in zip(vector, room, strict=True))
        ]
        for vector in owners
    }
    best = 0.0
    for step in range(OWNER_SCALES + 1):
        scale = step / OWNER_SCALES
        total = scale * at_full
        for vector, count in owners.items():
            fitting = holding[vector]
            if fitting:
                total += count * min(columns[j][1] - scale * worth[j] for j in fitting)
        best = max(best, total)
    return best


# How finely ``owner_priced_bound`` scales the duals (every scale gives a valid bound; the best is kept).
OWNER_SCALES = 10


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

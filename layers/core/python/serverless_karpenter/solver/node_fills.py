"""Ways to fill one node beyond the greedy ``packing.fill``: the dot-product rule, and the best fill of a
node an anti-affinity pod opens (a branch and bound at the bound's prices), with the replay of a fill
found before. All take pods through ``NodeFill``, so the class caps and zones are one rule."""

from __future__ import annotations

from collections.abc import Sequence

from serverless_karpenter.solver.packing import FillPlan, Kind, NodeFill, Plan, Shape, Vector, copies_that_fit


def fill_dot(shapes: Sequence[Shape], room: Vector, caps: Sequence[int], left: int) -> FillPlan:
    """Vector bin packing's dot-product rule: next, the shape most aligned with the room left (both
    scaled by the node's room), so cpu and memory run out together. Takes a quarter of what fits at
    once to keep the steps few."""
    dims = len(room)
    scale = [1.0 / r if r else 0.0 for r in room]
    state = NodeFill(list(room))
    residual = state.residual
    taken: dict[int, int] = {}  # id(kind) -> count planned
    kinds_by_id: dict[int, Kind] = {}
    # Each live shape with its vector scaled by the room once, so a score is ((v * s) * r) * s as before.
    live = [
        (s, [v * f for v, f in zip(s.vector, scale, strict=True)])
        for s in shapes
        if any(k.items for k in s.kinds)
    ]
    allowed = state.allowed  # bound once: the scan below asks it millions of times on large batches
    while left:
        best: tuple[float, Shape, Kind, int] | None = None
        zones_left = state.zones
        # A shape that cannot go on the node now never can: room, pods left, zones and class caps
        # only shrink as it fills. So each step scans only the shapes the last one could still place.
        still: list[tuple[Shape, list[float]]] = []
        for shape, scaled in live:
            vector = shape.vector
            fit = left
            for d in range(dims):
                v = vector[d]
                if v:
                    q = residual[d] // v
                    if q < fit:
                        fit = q
                        if not fit:
                            break
            if not fit:
                continue
            for kind in shape.kinds:
                # The scan's hot path: most kinds are spent or out of zone, so those are skipped before
                # the class caps (``NodeFill.allowed``) are asked.
                spare = len(kind.items) - taken.get(id(kind), 0)
                if spare <= 0 or not kind.zones & zones_left:
                    continue
                take = fit if fit < spare else spare
                if kind.membership:
                    take = allowed(kind.membership, take, caps)
                    if take <= 0:
                        continue
                score = 0.0
                for d in range(dims):
                    score += scaled[d] * residual[d] * scale[d]
                if best is None or score > best[0]:
                    best = (score, shape, kind, take)
                still.append((shape, scaled))
                break  # one kind per shape is enough to score the shape
        live = still
        if best is None:
            break
        _, shape, kind, take = best
        take = max(1, take // 4)
        kinds_by_id[id(kind)] = kind
        taken[id(kind)] = taken.get(id(kind), 0) + take
        state.add(kind, shape.vector, take)
        left -= take
    plan = [(kinds_by_id[k], n) for k, n in taken.items()]
    return plan, state.used(room), state.zones


def opening(fixed: FillPlan, room: Vector) -> tuple[NodeFill, dict[int, int]]:
    """The state of a node holding the ``fixed`` plan, and how many of each kind that plan holds."""
    plan, used, zones = fixed
    held: dict[int, int] = {}
    state = NodeFill([r - u for r, u in zip(room, used, strict=True)], zones=zones)
    for kind, n in plan:
        held[id(kind)] = held.get(id(kind), 0) + n
        state.record(kind.membership, n)
    return state, held


def _take_all(
    state: NodeFill, shape: Shape, want: int, caps: Sequence[int], held: dict[int, int]
) -> Plan | None:
    """``want`` pods of ``shape`` put on the node, or None if that many cannot go there."""
    taken: Plan = []
    return taken if state.take(shape, want, caps, held, taken) == want else None


def replay(
    fixed: FillPlan, chosen: Sequence[tuple[Shape, int]], room: Vector, caps: Sequence[int]
) -> FillPlan | None:
    """``fixed`` plus ``chosen`` (shapes and counts) again, if the pods are still there; else None."""
    state, held = opening(fixed, room)
    plan = list(fixed[0])
    for shape, count in chosen:
        taken = _take_all(state, shape, count, caps, held)
        if taken is None:
            return None
        plan.extend(taken)
    return plan, state.used(room), state.zones


def fill_best(
    shapes: Sequence[Shape],
    room: Vector,
    caps: Sequence[int],
    left: int,
    fixed: FillPlan,
    weights: Sequence[float],
    incumbent: FillPlan,
    expansions: int,
    pod_penalty: float = 0.0,
) -> FillPlan:
    """The fill of a node that holds the ``fixed`` pods worth most under ``weights`` (the bound's prices
    of the resources it takes): a depth-first branch and bound over the shapes, most valuable first,
    pruned by the best value the room left could still hold. Stops after ``expansions`` steps with the
    best found, never worse than ``incumbent`` (a greedy fill of the same node)."""
    dims = len(room)
    fixed_plan, fixed_used, _ = fixed

    def worth(used: Sequence[int]) -> float:
        return sum(w * u for w, u in zip(weights, used, strict=False))

    # Each pod costs a little: small pods are what completes a node, and a fill that spends several
    # where one nearly does leaves the nodes after it short of them.
    penalty = pod_penalty * worth(room)
    best_plan, best_used, best_zones = incumbent
    best_value = worth(best_used) - penalty * sum(n for _, n in best_plan)
    start, held = opening(fixed, room)
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

    def search(i: int, state: NodeFill, value: float, plan: Plan, pods: int) -> None:
        nonlocal steps, best_value, best_plan, best_used, best_zones
        steps += 1
        if value > best_value * (1 + 1e-12):
            best_value = value
            best_plan = list(plan)
            best_used = state.used(room)
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
            taken = _take_all(trial, shape, count, caps, held)
            if taken is None:
                continue
            search(i + 1, trial, value + count * values[i], plan + taken, pods + count)
            if steps > expansions:
                return
        search(i + 1, state, value, plan, pods)

    opened = sum(n for _, n in fixed_plan)
    search(0, start, worth(fixed_used) - penalty * opened, list(fixed_plan), opened)
    return best_plan, best_used, best_zones

"""First fit's cost per pod does not grow with the number of open NodeClaims (issue 22).

Counted, never timed: how many claims each pod's try loop visits and how many it runs the predicates on
(``Scheduler._try_claim``), for hostname anti-affine pods (one claim each, so the open claims grow with
the pods) and zonal spread pods among them, at two sizes. And the index under it (``ClaimIndex``) walks
exactly Karpenter's order less the refused classes, whatever the moves."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import pytest
from serverless_karpenter.api import labels as wk
from serverless_karpenter.scheduling.claim_index import ClaimIndex
from serverless_karpenter.scheduling.scheduler import Scheduler

from benchmarks import inputs

TYPES = inputs.instance_types(40)


def _pod(name: str, cpu_m: int, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    requests = {"cpu": f"{cpu_m}m", "memory": "256Mi"}
    return {
        "metadata": {"name": name, "namespace": "default", "uid": name, "labels": labels},
        "spec": {"containers": [{"name": "app", "resources": {"requests": requests}}], **spec},
        "status": {"phase": "Pending"},
    }


def _solo_pods(count: int) -> list[dict[str, Any]]:
    """``count`` pods that each need a node of their own, every one of a different size (so no pod can
    reuse another's refusals), and as many zonal spread pods of distinct sizes among them."""
    anti = {"labelSelector": {"matchLabels": {"app": "solo"}}, "topologyKey": wk.HOSTNAME}
    spread = {
        "maxSkew": 1,
        "topologyKey": wk.ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "zonal"}},
    }
    pods = []
    for i in range(count):
        affinity = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [anti]}}
        pods.append(_pod(f"solo-{i}", 100 + 2 * i, {"app": "solo"}, affinity=affinity))
        pods.append(_pod(f"zonal-{i}", 101 + 2 * i, {"app": "zonal"}, topologySpreadConstraints=[spread]))
    return pods


def _kind(state: Any) -> str:
    """The pod's kind, from its name: "solo", "zonal"; "plain", "hostname", ... in Karpenter's mix."""
    return str(state.key.split("/")[1].split("-")[0])


class _Counts:
    def __init__(self) -> None:
        self.visits: Counter[str] = Counter()  # claims a pod's try loop reached, by kind of pod
        self.predicates: Counter[str] = Counter()  # of those, the ones the predicates ran on
        self.solo_on_solo = 0  # visits by a solo pod to a claim that already holds one
        self.pods = 0
        self.claims = 0


def _count(monkeypatch: pytest.MonkeyPatch, pods: list[dict[str, Any]], types: int = 40) -> _Counts:
    counts = _Counts()
    claims_to_try = Scheduler._claims_to_try
    try_claim = Scheduler._try_claim

    def counted_walk(self: Scheduler, state: Any, memo: Any) -> Iterator[Any]:
        for entry in claims_to_try(self, state, memo):
            counts.visits[_kind(state)] += 1
            if _kind(state) == "solo" and any("/solo-" in p for p in entry.claim.pods):
                counts.solo_on_solo += 1
            yield entry

    def counted_try(self: Scheduler, entry: Any, state: Any, memo: Any = None) -> Any:
        counts.predicates[_kind(state)] += 1
        return try_claim(self, entry, state, memo)

    with monkeypatch.context() as patched:
        patched.setattr(Scheduler, "_claims_to_try", counted_walk)
        patched.setattr(Scheduler, "_try_claim", counted_try)
        result = Scheduler(inputs.templates(inputs.instance_types(types))).solve(pods)
    assert not result.unschedulable
    counts.pods, counts.claims = len(pods), len(result.new_nodeclaims)
    return counts


def test_anti_affine_pods_skip_every_claim_their_group_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    for size in (40, 160):
        counts = _count(monkeypatch, _solo_pods(size))
        assert counts.claims >= size  # one node per solo pod
        # No solo pod reaches a claim holding one (before the index, each ran the predicates on every
        # claim opened before it: 780 runs at 40 pods, 12,720 at 160); the few it reaches hold only
        # zonal pods, as many at either size.
        assert counts.solo_on_solo == 0
        assert counts.predicates["solo"] <= counts.visits["solo"] <= 3


def test_claims_tried_per_pod_stay_bounded_as_open_claims_grow(monkeypatch: pytest.MonkeyPatch) -> None:
    # Karpenter's benchmark mix: a fifth of the pods hostname anti-affine, so the open claims grow with
    # the pods. Before the index the predicate runs per zonal pod went from 2.7 (500 pods) to 25 (2,000).
    small = _count(monkeypatch, inputs.pods_for("karpenter", 500))
    large = _count(monkeypatch, inputs.pods_for("karpenter", 2000))
    assert large.claims >= 4 * small.claims * 0.9
    for kind in ("zonal", "hostname", "plain"):
        share = small.pods / 5 if kind == "plain" else 2 * small.pods / 5
        per_pod_small = small.visits[kind] / share
        per_pod_large = large.visits[kind] / (4 * share)
        assert per_pod_large <= 1.2 * per_pod_small, kind
        assert per_pod_large <= 3, kind
        assert large.predicates[kind] <= large.visits[kind]


# -- the index ---------------------------------------------------------------------------------------


class _Item:
    def __init__(self, name: int, zone: str) -> None:
        self.name, self.zone = name, zone

    def __repr__(self) -> str:
        return f"_Item({self.name}, {self.zone})"


@pytest.mark.parametrize("seed", range(12))
def test_the_index_walks_karpenters_order_less_the_refused_classes(seed: int) -> None:
    rng = random.Random(seed)
    index: ClaimIndex[_Item] = ClaimIndex()
    items: list[_Item] = []
    classify: Callable[[_Item], Hashable] = lambda item: item.zone  # noqa: E731
    for step in range(300):
        if not items or rng.random() < 0.3:
            items.append(_Item(step, rng.choice("abc")))
            index.add(items[-1])
        else:
            item = rng.choice(items)
            item.zone = rng.choice("abc")  # a placement may narrow the claim
            index.move(item)
        if step % 25 == 0:
            refused = set(rng.sample("abc", rng.randint(0, 2)))
            order = list(index.in_order())
            walked = list(index.in_order_except("zone", classify, refused.__contains__))
            assert walked == [item for item in order if item.zone not in refused]
    # A class refused midway (the caller learns its verdict from its first claim) is dropped at once.
    learned: set[Hashable] = set()
    walked = []
    for item in index.in_order_except("zone", classify, lambda zone: zone in learned):
        walked.append(item)
        learned.add(item.zone)
    assert len(walked) == len({item.zone for item in items})


def test_more_questions_than_partitions_kept_still_walk_right() -> None:
    rng = random.Random(7)
    index: ClaimIndex[_Item] = ClaimIndex()
    items = [_Item(i, rng.choice("abc")) for i in range(60)]
    for item in items:
        index.add(item)
    # More distinct questions than the index keeps partitions for: the least recently walked are
    # dropped and rebuilt, and every walk, and every move between them, stays right.
    for step in range(40):
        modulus = 2 + step % 11
        item = rng.choice(items)
        item.name += 1
        index.move(item)
        walked = list(index.in_order_except(("mod", modulus), lambda it, m=modulus: it.name % m, (0).__eq__))
        assert walked == [it for it in index.in_order() if it.name % modulus != 0]

"""Consolidation's simulations are bounded in compute time, as Karpenter's (1 and 3 minutes there): out of
time, multi-node consolidation keeps the best command it found and single-node consolidation decides
nothing, says which nodes it did not evaluate, and does not count the cluster as consolidated (issue 22: at
1,000 nodes a pass simulated for minutes). A negative budget stands for one already spent: no wall time."""

from __future__ import annotations

from datetime import timedelta

from serverless_karpenter.disruption import methods as m
from serverless_karpenter.disruption.candidates import Options, candidates

from tests.unit.test_disruption_core import TYPES, consolidatable_pair, pod, pool_manifest, record, snapshot

SPENT = timedelta(seconds=-1)


def test_single_node_out_of_time_decides_nothing_and_says_so() -> None:
    snap, pool = consolidatable_pair()
    assert m.evaluate(snap, pool, Options(), methods=(m.SINGLE,)).command is not None

    evaluation = m.evaluate(snap, pool, Options(single_node_timeout=SPENT), methods=(m.SINGLE,))

    assert evaluation.command is None and evaluation.timed_out
    for name in ("big", "small"):
        (note,) = [text for method, text in evaluation.notes[name] if method == m.SINGLE]
        assert note.startswith("not evaluated: single-node consolidation timed out")
        assert name not in evaluation.blockers, "not evaluated is no reason to report the node blocked"


def test_multi_node_out_of_time_decides_nothing_it_did_not_simulate() -> None:
    a, b = record("a", TYPES[1]), record("b", TYPES[1])
    snap = snapshot(
        [a, b],
        [pod("p1", a, cpu="600m"), pod("p2", b, cpu="600m")],
        manifest=pool_manifest(budgets=[{"nodes": "100%"}]),
    )
    pool = candidates(snap)[0]
    assert m.evaluate(snap, pool, Options(), methods=(m.MULTI,)).command is not None

    evaluation = m.evaluate(snap, pool, Options(multi_node_timeout=SPENT), methods=(m.MULTI,))

    assert evaluation.command is None and evaluation.timed_out
    assert all("timed out" in text for name in ("a", "b") for _, text in evaluation.notes[name])


def test_in_time_the_methods_are_not_timed_out() -> None:
    big = record("big", TYPES[1])
    snap = snapshot([big], [pod("p1", big, cpu="1")])
    evaluation = m.evaluate(snap, candidates(snap)[0], Options())
    assert evaluation.command is not None and not evaluation.timed_out

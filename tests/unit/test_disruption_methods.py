"""The disruption methods behind one interface, as Karpenter's ``Method`` (types.go): the pass runs them in
Karpenter's order, each says what it disrupts for (its budget reason) and how (graceful or eventual), and a
method's notion of its own candidates (ShouldDisrupt) is what its command is computed from."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from serverless_karpenter.disruption import methods as m
from serverless_karpenter.disruption.budgets import REASON_DRIFTED, REASON_EMPTY, REASON_UNDERUTILIZED
from serverless_karpenter.disruption.candidates import Options, candidates
from serverless_karpenter.disruption.methods.types import Method

from tests.unit.test_disruption_core import TYPES, consolidatable_pair, pod, pool_manifest, record, snapshot


def test_the_methods_run_in_karpenters_order() -> None:
    assert [type(method) for method in m.ORDER] == [
        m.Emptiness,
        m.Drift,
        m.MultiNodeConsolidation,
        m.SingleNodeConsolidation,
    ]
    assert m.METHODS == (m.EMPTINESS, m.DRIFT, m.MULTI, m.SINGLE)
    assert all(m.BY_NAME[method.name] is method for method in m.ORDER)


def test_each_method_names_its_reason_class_and_consolidation_type() -> None:
    described = {
        method.name: (method.reason, method.disruption_class, method.consolidation_type) for method in m.ORDER
    }

    assert described == {
        m.EMPTINESS: (REASON_EMPTY, m.GRACEFUL, "empty"),
        m.DRIFT: (REASON_DRIFTED, m.EVENTUAL, ""),
        m.MULTI: (REASON_UNDERUTILIZED, m.GRACEFUL, "multi"),
        m.SINGLE: (REASON_UNDERUTILIZED, m.GRACEFUL, "single"),
    }
    # A command's reason (its budget, its Events) is its method's.
    for method in m.ORDER:
        assert m.BUDGET_REASON[method.name] == method.reason


def test_should_disrupt_picks_each_methods_own_candidates() -> None:
    empty, busy = record("empty", TYPES[1]), record("busy", TYPES[1])
    snap = snapshot([empty, busy], [pod("p1", busy, cpu="500m")])
    by_name = {c.name: c for c in candidates(snap)[0]}

    emptiness, consolidation = m.BY_NAME[m.EMPTINESS], m.BY_NAME[m.SINGLE]
    assert emptiness.should_disrupt(snap, by_name["empty"])
    assert not emptiness.should_disrupt(snap, by_name["busy"])
    assert consolidation.should_disrupt(snap, by_name["busy"])
    assert not consolidation.should_disrupt(snap, by_name["empty"]), "empty nodes are emptiness's"
    assert not m.BY_NAME[m.DRIFT].should_disrupt(snap, by_name["busy"]), "nothing drifted"

    when_empty = snapshot([busy], [pod("p1", busy)], manifest=pool_manifest(consolidationPolicy="WhenEmpty"))
    assert not consolidation.should_disrupt(when_empty, candidates(when_empty)[0][0])


def test_expiration_is_forceful_and_no_method_of_the_pass() -> None:
    # Created with its NodePool's expireAfter of 2 hours, 3 hours ago.
    old = record("old", TYPES[0], age=timedelta(hours=3), expire_after_seconds=7200.0)
    snap = snapshot([old], [])
    (candidate,) = candidates(snap)[0]

    expiration = m.Expiration()
    assert expiration.disruption_class == "forceful"
    assert expiration.should_disrupt(snap, candidate)
    ((due, overdue),) = expiration.due(snap, [candidate])
    assert due is candidate and overdue == timedelta(hours=1)
    assert m.EXPIRATION not in m.METHODS


def fake_timer(*readings: float) -> Callable[[], float]:
    """A timer that reads ``readings`` in turn, then the last for ever: a method's compute time, without
    spending any."""
    values = list(readings)

    def read() -> float:
        return values.pop(0) if len(values) > 1 else values[0]

    return read


def test_the_consolidation_methods_run_on_the_timer_they_are_given() -> None:
    snap, pool = consolidatable_pair()
    options = Options(single_node_timeout=timedelta(seconds=45))

    in_time: Method = m.SingleNodeConsolidation(timer=fake_timer(0.0))
    assert in_time.compute_command(snap, pool, options, m.Evaluation()) is not None

    # The deadline is 45 s after the first reading; the next reading is past it.
    late = m.SingleNodeConsolidation(timer=fake_timer(0.0, 46.0))
    evaluation = m.Evaluation()
    assert late.compute_command(snap, pool, options, evaluation) is None
    assert evaluation.timed_out

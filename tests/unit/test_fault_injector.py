"""The simulator's fault injector counts what each armed fault did, so a test can tell armed from fired."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import TYPE_CHECKING, cast

import pytest
from serverless_karpenter import crashpoints
from serverless_karpenter.clock import ManualClock
from serverless_karpenter.config import Settings
from serverless_karpenter_sim.faults import TIMEOUT_MARGIN_SECONDS, FaultInjector
from serverless_karpenter_sim.kubeapi import KubeApiServer

if TYPE_CHECKING:
    from serverless_karpenter_sim.simulation import Simulation


def injector(settings: Settings | None = None) -> FaultInjector:
    """An injector over an API server that is never started: rules are matched in-process."""
    settings = settings or Settings(cluster_name="c")
    sim = SimpleNamespace(kube_server=KubeApiServer(ManualClock()), elapsed=0.0, settings=settings)
    return FaultInjector(cast("Simulation", sim))


def test_each_armed_fault_reports_whether_it_fired() -> None:
    faults = injector()
    faults.arm({"kube": {"verb": "list", "resource": "pods", "status": 500}, "times": 2})
    faults.arm({"kube": {"verb": "patch", "resource": "nodes", "status": 409}, "function": "disruption"})
    faults.arm({"crash": "test.injector.first"})
    faults.arm({"crash": "test.injector.first"})
    faults.arm({"crash": "test.injector.second"})

    with faults.invocation("termination"):
        api_faults = faults.sim.kube_server.faults
        assert api_faults.take("list", "pods", None, None) is not None
        assert api_faults.take("patch", "nodes", None, "n1") is None  # scoped to another Lambda
    with pytest.raises(crashpoints.InjectedCrash):
        crashpoints.hit("test.injector.first")

    assert [(f.description, f.injected) for f in faults.armed_faults()] == [
        ("#1 kube 500 on list pods", 1),
        ("#2 kube 409 on patch nodes in disruption", 0),
        ("#3 crash at test.injector.first", 1),
        ("#4 crash at test.injector.first", 0),  # armed twice, hit once: one of the two never fired
        ("#5 crash at test.injector.second", 0),
    ]
    assert faults.unfired() == [
        "#2 kube 409 on patch nodes in disruption",
        "#4 crash at test.injector.first",
        "#5 crash at test.injector.second",
    ]
    # Named crash points count with the rest, so the breakdown adds up to the total.
    assert faults.by_kind() == Counter({"kube/500": 1, "crash/test.injector.first": 1})
    assert faults.total_injected == 2


def test_crash_points_hit_before_the_injector_existed_are_not_its_own() -> None:
    crashpoints.arm("test.injector.earlier")
    with pytest.raises(crashpoints.InjectedCrash):
        crashpoints.hit("test.injector.earlier")
    faults = injector()
    faults.arm({"crash": "test.injector.earlier"})

    assert faults.unfired() == ["#1 crash at test.injector.earlier"]
    assert faults.total_injected == 0


def test_a_kubernetes_timeout_is_held_past_the_clients_read_timeout() -> None:
    faults = injector(Settings(cluster_name="c", kubernetes_read_timeout_seconds=2))
    faults.arm({"kube": {"verb": "list", "resource": "pods", "status": "timeout"}})
    faults.arm({"kube": {"verb": "list", "resource": "nodes", "status": "timeout", "delay_seconds": 0.1}})

    held = [rule.spec["delay_seconds"] for rule in faults.kube_rules]
    assert held == [2 + TIMEOUT_MARGIN_SECONDS, 0.1]

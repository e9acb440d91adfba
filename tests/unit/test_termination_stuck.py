"""A drain on a node whose kubelet is gone: evicted pods stay Terminating, and once one has been
terminating for over a minute past its deletionTimestamp it no longer holds up the drain (Karpenter's
IsStuckTerminating), so the instance is terminated."""

from __future__ import annotations

from datetime import timedelta

from serverless_karpenter.clock import to_rfc3339
from serverless_karpenter.scheduling.pods import is_stuck_terminating

from tests.unit.test_termination_drain import NOW, pod, world


def test_a_pod_is_stuck_terminating_a_minute_past_its_deletion_timestamp() -> None:
    deleting = pod("p")
    deleting["metadata"]["deletionTimestamp"] = to_rfc3339(NOW)
    assert not is_stuck_terminating(deleting, NOW + timedelta(seconds=60))
    assert is_stuck_terminating(deleting, NOW + timedelta(seconds=61))
    assert not is_stuck_terminating(pod("alive"), NOW + timedelta(hours=1))


def test_pods_no_kubelet_confirms_stop_holding_the_drain_after_a_minute() -> None:
    w = world(pod("app"), pod("ds", daemonset=True))
    # Nobody finishes the evicted pods: their kubelet is silent.
    for _ in range(3):
        w.terminator().reconcile()
        w.clock.advance(5)
    assert all(p["metadata"].get("deletionTimestamp") for p in w.cluster.pods.values())
    assert w.launcher.instances["i-victim"].state == "running"
    # Still waiting while the evicted pods are within a minute of their deletionTimestamp (the fake
    # cluster stamps NOW).
    w.clock.advance(60 - 15)
    [progress] = w.terminator().reconcile()
    assert not progress.terminated_instance and progress.waiting
    w.clock.advance(10)
    [progress] = w.terminator().reconcile()
    assert progress.terminated_instance
    assert w.launcher.instances["i-victim"].state == "terminated"

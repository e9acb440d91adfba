"""The watcher's LIST-then-WATCH against the simulated API server: the Lambda's loop (``run``, with its
reader thread) and the simulation's turns (``step``): batching, 410 Gone, bookmarks, the deadline."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kubernetes import client
from serverless_karpenter.adapters.kubernetes import KubernetesGateway, WatchExpired
from serverless_karpenter.clock import Clock, ManualClock, SystemClock
from serverless_karpenter.config import Settings
from serverless_karpenter.provisioning.batcher import PendingPodBatcher
from serverless_karpenter.provisioning.context import ControlPlane
from serverless_karpenter.provisioning.usecases import PendingPodWatch, StreamProgress
from serverless_karpenter_sim.kubeapi import KubeApiServer

from tests.builders import pod

pytestmark = pytest.mark.integration


@dataclass
class Rig:
    server: KubeApiServer
    clock: Any
    core: client.CoreV1Api
    plane: ControlPlane
    invocations: list[dict[str, object]]

    def session(self, seconds: float) -> PendingPodWatch:
        batcher = PendingPodBatcher(1.0, 10.0)
        deadline = self.clock.now() + timedelta(seconds=seconds)
        return PendingPodWatch(self.plane, batcher, self.invocations.append, deadline)

    def progress(self) -> dict[str, StreamProgress]:
        return {k: StreamProgress(p.lines, p.done) for k, p in self.server.watches.settle().items()}

    def create_pending(self, name: str) -> None:
        self.core.create_namespaced_pod("default", pod(name, unschedulable=True))


def rig(clock: Clock, watch_history: int = 10_000) -> Iterator[Rig]:
    server = KubeApiServer(clock, watch_history=watch_history)
    server.start()
    api = client.ApiClient(server.client_configuration())
    plane = cast(
        ControlPlane,
        SimpleNamespace(kube=KubernetesGateway(api, clock), clock=clock, settings=Settings(cluster_name="c")),
    )
    try:
        yield Rig(server, clock, client.CoreV1Api(api), plane, [])
    finally:
        api.close()
        server.stop()


@pytest.fixture
def manual() -> Iterator[Rig]:
    yield from rig(ManualClock(), watch_history=16)


def watcher_requests(r: Rig) -> dict[str, int]:
    return dict(r.server.audit.request_count)


def test_turns_batch_pods_after_a_quiet_second(manual: Rig) -> None:
    watch = manual.session(55)
    watch.step(manual.progress())  # LIST, then WATCH
    manual.create_pending("a")
    manual.create_pending("b")
    watch.step(manual.progress())
    assert watch.pending == {"default/a", "default/b"} and manual.invocations == []
    manual.clock.advance(1)
    watch.step(manual.progress())
    assert manual.invocations == [{"reason": "pending-pods", "pods": 2}]
    manual.core.patch_namespaced_pod_status("a", "default", {"status": {"phase": "Running"}})
    manual.core.delete_namespaced_pod("b", "default", grace_period_seconds=0)
    watch.step(manual.progress())
    assert watch.pending == frozenset()
    assert (watch.lists, watch.watches) == (1, 1)


def test_turns_follow_bookmarks_and_end_with_the_deadline(manual: Rig) -> None:
    watch = manual.session(55)
    watch.step(manual.progress())
    listed = int(watch.resource_version)
    for i in range(40):  # bound pods: the watch sees none of them, but they fill the pods' window
        manual.core.create_namespaced_pod("default", pod(f"bound{i}", node="n1"))
    manual.clock.advance(53)  # the bookmark 2 s before the watch's end
    watch.step(manual.progress())
    assert int(watch.resource_version) == manual.server.store.resource_version > listed
    # A watch from the bookmark's version is served; from the listed one it would be 410 Gone.
    manual.plane.kube.watch_pending_pods(watch.resource_version, 1).close()
    with pytest.raises(WatchExpired):
        manual.plane.kube.watch_pending_pods(str(listed), 1).next()
    manual.clock.advance(2)
    watch.step(manual.progress())
    assert watch.over and (watch.lists, watch.watches) == (1, 1)


def test_turns_list_again_after_410(manual: Rig) -> None:
    watch = manual.session(55)
    manual.server.faults.add(verb="watch", resource="pods", status=410, message="too old resource version")
    watch.step(manual.progress())
    assert (watch.lists, watch.watches) == (2, 2)  # the 410 on the WATCH request: list, and watch again
    manual.create_pending("a")
    watch.step(manual.progress())
    assert watch.pending == {"default/a"}


def test_turns_list_again_after_a_410_event(manual: Rig) -> None:
    """A watch from a version that fell out of the window gets a 200 stream with one ERROR event (the
    watch cache's answer): the watcher lists again and watches from the new list."""
    watch = manual.session(55)
    watch.step(manual.progress())
    watch.close()
    stale = watch.resource_version
    for i in range(40):
        manual.core.create_namespaced_pod("default", pod(f"bound{i}", node="n1"))
    watch._stream = manual.plane.kube.watch_pending_pods(stale, 50)  # as if reopened after a cut
    manual.create_pending("a")
    watch.step(manual.progress())
    assert watch.lists == 2 and watch.pending == {"default/a"}
    manual.core.delete_namespaced_pod("a", "default", grace_period_seconds=0)
    watch.step(manual.progress())
    assert watch.pending == frozenset()


def test_the_lambda_loop_lists_once_and_watches_to_its_deadline() -> None:
    """``run``: a reader thread feeds the loop, which wakes the batcher every second while pods are
    pending. Runs on the wall clock for a few seconds; asserts what happened, not how long it took."""
    for r in rig(SystemClock()):
        watch = r.session(4)
        threading.Timer(0.3, r.create_pending, args=("a",)).start()
        assert watch.run() == 1
        assert r.invocations == [{"reason": "pending-pods", "pods": 1}]
        assert (watch.lists, watch.watches) == (1, 1)
        assert watcher_requests(r) == {"create": 1, "list": 1, "watch": 1}

"""Watches through ``kubernetes.watch.Watch`` against the simulated API server."""

# The client declares every model field Optional and custom objects as `object`; a None or a non-dict
# there fails the test anyway, so these checks would only add noise.
# mypy: disable-error-code="union-attr,index"

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException
from serverless_karpenter.adapters.kubernetes import KubernetesGateway, WatchEvent, WatchExpired, WatchStream
from serverless_karpenter.clock import ManualClock
from serverless_karpenter_sim.kubeapi import KubeApiServer

pytestmark = pytest.mark.integration

NODECLAIMS = ("karpenter.sh", "v1", "nodeclaims")


@dataclass
class Kube:
    server: KubeApiServer
    clock: ManualClock
    api: client.ApiClient

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)


@pytest.fixture
def kube() -> Iterator[Kube]:
    clock = ManualClock()
    server = KubeApiServer(clock, watch_history=32)
    server.start()
    api = client.ApiClient(server.client_configuration())
    try:
        yield Kube(server, clock, api)
    finally:
        api.close()
        server.stop()


def config_map(name: str, **labels: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels=labels or None), data={"v": "0"})


def collect(stream: Iterator[dict], count: int) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    for event in stream:
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == count:
            break
    return seen


def test_watch_from_a_list_resource_version(kube: Kube) -> None:
    kube.core.create_namespaced_config_map("default", config_map("before"))
    listed = kube.core.list_namespaced_config_map("default")
    kube.core.create_namespaced_config_map("default", config_map("a"))
    kube.core.patch_namespaced_config_map("a", "default", {"data": {"v": "1"}})
    kube.core.delete_namespaced_config_map("a", "default")

    w = watch.Watch()
    events = []
    for event in w.stream(
        kube.core.list_namespaced_config_map,
        "default",
        resource_version=listed.metadata.resource_version,
        timeout_seconds=5,
    ):
        events.append(event)
        if len(events) == 3:
            w.stop()
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "a"),
        ("MODIFIED", "a"),
        ("DELETED", "a"),
    ]
    assert isinstance(events[0]["object"], client.V1ConfigMap)
    assert events[1]["object"].data == {"v": "1"}
    versions = [int(str(e["object"].metadata.resource_version)) for e in events]
    assert versions == sorted(versions) and versions[0] > int(str(listed.metadata.resource_version))


def test_watch_without_a_version_starts_with_the_current_state(kube: Kube) -> None:
    kube.core.create_namespaced_config_map("default", config_map("x"))
    kube.core.create_namespaced_config_map("default", config_map("y"))
    w = watch.Watch()
    stream = w.stream(kube.core.list_namespaced_config_map, "default", timeout_seconds=5)
    assert collect(stream, 2) == [("ADDED", "x"), ("ADDED", "y")]

    # and then keeps streaming what happens next
    threading.Timer(0.05, lambda: kube.core.create_namespaced_config_map("default", config_map("z"))).start()
    assert collect(stream, 1) == [("ADDED", "z")]
    w.stop()


def test_selectors_turn_relabels_into_added_and_deleted(kube: Kube) -> None:
    kube.core.create_namespaced_config_map("default", config_map("c", team="a"))
    rv = kube.core.list_namespaced_config_map("default").metadata.resource_version
    kube.core.patch_namespaced_config_map("c", "default", {"metadata": {"labels": {"team": "b"}}})
    kube.core.patch_namespaced_config_map("c", "default", {"data": {"v": "2"}})
    kube.core.patch_namespaced_config_map("c", "default", {"metadata": {"labels": {"team": "a"}}})
    kube.core.create_namespaced_config_map("default", config_map("other", team="b"))
    kube.core.create_namespaced_config_map("default", config_map("d", team="a"))

    w = watch.Watch()
    stream = w.stream(
        kube.core.list_namespaced_config_map,
        "default",
        label_selector="team=a",
        resource_version=rv,
        timeout_seconds=5,
    )
    assert collect(stream, 3) == [("DELETED", "c"), ("ADDED", "c"), ("ADDED", "d")]
    w.stop()


def test_field_selector_watch_on_one_pod(kube: Kube) -> None:
    for name in ("p1", "p2"):
        kube.core.create_namespaced_pod(
            "default",
            client.V1Pod(
                metadata=client.V1ObjectMeta(name=name),
                spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="i")]),
            ),
        )
    rv = kube.core.list_namespaced_pod("default").metadata.resource_version
    kube.core.patch_namespaced_pod_status("p2", "default", {"status": {"phase": "Running"}})
    kube.core.patch_namespaced_pod_status("p1", "default", {"status": {"phase": "Running"}})
    w = watch.Watch()
    stream = w.stream(
        kube.core.list_namespaced_pod,
        "default",
        field_selector="metadata.name=p1",
        resource_version=rv,
        timeout_seconds=5,
    )
    event = next(iter(stream))
    w.stop()
    assert (event["type"], event["object"].metadata.name, event["object"].status.phase) == (
        "MODIFIED",
        "p1",
        "Running",
    )


def test_custom_object_watch(kube: Kube) -> None:
    custom = client.CustomObjectsApi(kube.api)
    rv = custom.list_cluster_custom_object(*NODECLAIMS)["metadata"]["resourceVersion"]
    custom.create_cluster_custom_object(
        *NODECLAIMS,
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": "default-a"},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
            },
        },
    )
    custom.patch_cluster_custom_object_status(
        *NODECLAIMS, "default-a", {"status": {"providerID": "aws:///x"}}
    )
    w = watch.Watch()
    seen = []
    for event in w.stream(
        custom.list_cluster_custom_object, *NODECLAIMS, resource_version=rv, timeout_seconds=5
    ):
        seen.append((event["type"], event["object"]["metadata"]["name"], event["object"].get("status")))
        if len(seen) == 2:
            w.stop()
    assert seen == [("ADDED", "default-a", None), ("MODIFIED", "default-a", {"providerID": "aws:///x"})]


def test_too_old_resource_version_is_gone(kube: Kube) -> None:
    first = kube.core.create_namespaced_config_map("default", config_map("c"))
    for i in range(60):  # more than the 32 events of history this server keeps
        kube.core.patch_namespaced_config_map("c", "default", {"data": {"v": str(i)}})
    w = watch.Watch()
    with pytest.raises(ApiException) as err:
        for _ in w.stream(
            kube.core.list_namespaced_config_map,
            "default",
            resource_version=first.metadata.resource_version,
            timeout_seconds=5,
        ):
            pass
    assert err.value.status == 410
    assert "too old resource version" in err.value.reason

    # a fresh list gives a version the server can still watch from
    rv = kube.core.list_namespaced_config_map("default").metadata.resource_version
    kube.core.patch_namespaced_config_map("c", "default", {"data": {"v": "last"}})
    w = watch.Watch()
    stream = w.stream(kube.core.list_namespaced_config_map, "default", resource_version=rv, timeout_seconds=5)
    assert collect(stream, 1) == [("MODIFIED", "c")]
    w.stop()


def test_watch_expires_in_virtual_time(kube: Kube) -> None:
    done = threading.Event()
    received: list[str] = []

    def run() -> None:
        for event in watch.Watch().stream(
            kube.core.list_namespaced_config_map, "default", timeout_seconds=600
        ):
            received.append(event["type"])
        done.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    time.sleep(0.1)
    assert not done.is_set()
    kube.clock.advance(601)  # ten virtual minutes pass in no wall time
    assert done.wait(3), "the watch should end once its timeout passed on the server's clock"
    assert received == []


def test_watch_ends_when_the_server_stops() -> None:
    server = KubeApiServer(ManualClock())
    server.start()
    api = client.ApiClient(server.client_configuration())
    finished = threading.Event()

    def run() -> None:
        try:
            for _ in watch.Watch().stream(
                client.CoreV1Api(api).list_namespaced_pod, "default", timeout_seconds=600
            ):
                pass
        except Exception:  # the connection may be cut rather than ended cleanly; either way the watch is over
            pass
        finished.set()

    threading.Thread(target=run, daemon=True).start()
    time.sleep(0.1)
    server.stop()
    assert finished.wait(3)
    api.close()


# --- bookmarks, the window per resource, timeoutSeconds: through the control plane's watch adapter ----------


def pending_pod(name: str) -> dict:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        },
    }


def gateway(kube: Kube) -> KubernetesGateway:
    return KubernetesGateway(kube.api, kube.clock)


def until_bookmark(stream: WatchStream) -> WatchEvent:
    while (event := stream.next()) is not None:
        if event.type == "BOOKMARK":
            return event
    raise AssertionError("the watch ended without a bookmark")


def test_bookmark_two_seconds_before_the_watch_ends(kube: Kube) -> None:
    _, version = gateway(kube).list_pending_pods_at()
    stream = gateway(kube).watch_pending_pods(version, timeout_seconds=30)
    kube.core.create_namespaced_config_map("default", config_map("unrelated"))  # moves the resourceVersion
    threading.Timer(0.1, lambda: kube.clock.advance(28)).start()
    bookmark = until_bookmark(stream)
    # Only the resourceVersion, and the current one: every event up to it has been sent.
    assert bookmark.object["kind"] == "Pod" and bookmark.object["apiVersion"] == "v1"
    assert bookmark.resource_version == str(kube.server.store.resource_version)
    assert int(bookmark.resource_version) > int(version)
    assert set(bookmark.object["metadata"]) == {"resourceVersion", "creationTimestamp"}
    kube.clock.advance(2)
    assert stream.next() is None  # and then timeoutSeconds ends it
    assert stream.audit_id


def test_bookmark_about_every_minute(kube: Kube) -> None:
    _, version = gateway(kube).list_pending_pods_at()
    stream = gateway(kube).watch_pending_pods(version, timeout_seconds=600)
    versions = []
    for _ in range(2):
        kube.core.create_namespaced_config_map("default", config_map(f"cm{len(versions)}"))
        threading.Timer(0.1, lambda: kube.clock.advance(60)).start()
        versions.append(int(until_bookmark(stream).resource_version))
    stream.close()
    assert versions[0] < versions[1] == kube.server.store.resource_version


def test_no_bookmark_unless_asked(kube: Kube) -> None:
    w = watch.Watch()
    threading.Timer(0.2, lambda: kube.clock.advance(28)).start()  # past when a bookmark would be due
    threading.Timer(0.6, lambda: kube.clock.advance(2)).start()
    types = [e["type"] for e in w.stream(kube.core.list_namespaced_config_map, "default", timeout_seconds=30)]
    assert types == []  # ended by its timeout, in virtual time, with nothing to say


def test_the_window_is_per_resource(kube: Kube) -> None:
    """Churn of one resource (here config maps; Events and Nodes in a cluster) does not age a watch on
    another, as kube-apiserver's watch cache is per resource; past its own window a watch is 410 Gone."""
    kube.core.create_namespaced_pod("default", pending_pod("p"))
    _, version = gateway(kube).list_pending_pods_at()
    kube.core.create_namespaced_config_map("default", config_map("c"))
    for i in range(60):  # more than the 32 events of history this server keeps, of config maps
        kube.core.patch_namespaced_config_map("c", "default", {"data": {"v": str(i)}})
    stream = gateway(kube).watch_pending_pods(version, timeout_seconds=5)
    kube.core.delete_namespaced_pod("p", "default", grace_period_seconds=0)
    event = stream.next()
    stream.close()
    assert event is not None and (event.type, event.object["metadata"]["name"]) == ("DELETED", "p")

    for i in range(60):  # and now of pods
        kube.core.create_namespaced_pod("default", pending_pod(f"q{i}"))
    with pytest.raises(WatchExpired, match="too old resource version"):
        gateway(kube).watch_pending_pods(version, timeout_seconds=5).next()


def test_field_selector_watch_adds_and_deletes_as_pods_enter_and_leave_it(kube: Kube) -> None:
    kube.core.create_namespaced_pod("default", pending_pod("a"))
    pods, version = gateway(kube).list_pending_pods_at()
    assert [p["metadata"]["name"] for p in pods] == ["a"]
    stream = gateway(kube).watch_pending_pods(version, timeout_seconds=5)
    kube.core.create_namespaced_pod("default", pending_pod("b"))
    kube.core.patch_namespaced_pod_status("a", "default", {"status": {"phase": "Running"}})
    seen = [(e.type, e.object["metadata"]["name"]) for e in (stream.next(), stream.next()) if e]
    stream.close()
    assert seen == [("ADDED", "b"), ("DELETED", "a")]
    assert stream.lines_read == 2


def test_watch_request_answered_410(kube: Kube) -> None:
    _, version = gateway(kube).list_pending_pods_at()
    kube.server.faults.add(
        verb="watch", resource="pods", status=410, message="too old resource version: 1 (2)"
    )
    with pytest.raises(WatchExpired):
        gateway(kube).watch_pending_pods(version, timeout_seconds=5)

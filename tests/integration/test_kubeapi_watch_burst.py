"""A watch burst larger than the socket's buffers (10,000 pods created in one tick, at scale) settles: the
driver's settle sees the stream catch up while the write waits for the client, who then reads exactly the
lines it was told of."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kubernetes import client
from serverless_karpenter.clock import ManualClock
from serverless_karpenter_sim.kubeapi import KubeApiServer
from serverless_karpenter_sim.kubeapi.kinds import kind_of

pytestmark = pytest.mark.integration

CONFIG_MAPS = kind_of("", "v1", "configmaps")
BURST = 300
PAYLOAD = "x" * 100_000  # 300 x 100 kB: ~30 MB, more than loopback's socket buffers hold


@pytest.fixture
def server() -> Iterator[KubeApiServer]:
    api_server = KubeApiServer(ManualClock())
    api_server.start()
    yield api_server
    api_server.stop()


def test_a_burst_larger_than_the_socket_buffers_settles_and_is_read_in_full(server: KubeApiServer) -> None:
    api = client.ApiClient(server.client_configuration())
    request = api.param_serialize(
        method="GET",
        resource_path="/api/v1/namespaces/default/configmaps",
        query_params=[("watch", "true"), ("timeoutSeconds", 600)],
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*request).response  # not preloaded: the stream, unread until told to
    assert server.watches.settle(timeout=5.0)  # the watch is open, with nothing to send
    for i in range(BURST):
        server.store.create(
            CONFIG_MAPS, "default", {"metadata": {"name": f"cm-{i:03d}"}, "data": {"v": PAYLOAD}}
        )
    # Before the fix the stream counted its lines only once the write was done, and the write waited for a
    # client that reads only after the settle: TimeoutError.
    progress = server.watches.settle(timeout=5.0)
    (stream,) = progress.values()
    assert stream.lines == BURST and not stream.done
    names = []
    buffer = b""
    while len(names) < stream.lines:
        buffer += response.read1(1 << 20)
        *lines, buffer = buffer.split(b"\n")
        names += [json.loads(line)["object"]["metadata"]["name"] for line in lines if line]
    assert names == [f"cm-{i:03d}" for i in range(BURST)]
    response.release_conn()
    api.close()


def test_a_watch_that_ends_with_a_backlog_unread_is_seen_ended(server: KubeApiServer) -> None:
    clock = server.clock
    assert isinstance(clock, ManualClock)
    api = client.ApiClient(server.client_configuration())
    request = api.param_serialize(
        method="GET",
        resource_path="/api/v1/namespaces/default/configmaps",
        query_params=[("watch", "true"), ("timeoutSeconds", 60)],
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*request).response
    assert server.watches.settle(timeout=5.0)
    for i in range(BURST):
        server.store.create(
            CONFIG_MAPS, "default", {"metadata": {"name": f"cm-{i:03d}"}, "data": {"v": PAYLOAD}}
        )
    assert server.watches.settle(timeout=5.0)
    clock.advance(61)  # the watch's deadline passes while the client has read nothing
    (stream,) = server.watches.settle(timeout=5.0).values()
    assert stream.done and stream.lines == BURST
    body = response.read()  # every event, then the end of the stream
    assert body.count(b"\n") == BURST
    api.close()

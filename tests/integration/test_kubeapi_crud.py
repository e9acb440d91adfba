"""CRUD, discovery, resourceVersion, events, leases and auth on the simulated API server, through the
official kubernetes client only."""

# The client declares every model field Optional and custom objects as `object`; a None or a non-dict
# there fails the test anyway, so these checks would only add noise.
# mypy: disable-error-code="union-attr,index"

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from serverless_karpenter.clock import ManualClock
from serverless_karpenter_sim.kubeapi import KubeApiServer, client_configuration

from tests import builders

pytestmark = pytest.mark.integration

KARPENTER = ("karpenter.sh", "v1", "nodepools")


@dataclass
class Kube:
    server: KubeApiServer
    clock: ManualClock
    api: client.ApiClient

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api)

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)


@pytest.fixture
def kube() -> Iterator[Kube]:
    clock = ManualClock()
    server = KubeApiServer(clock)
    server.start()
    api = client.ApiClient(server.client_configuration())
    try:
        yield Kube(server, clock, api)
    finally:
        api.close()
        server.stop()


def status_of(err: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(err.body or "{}")
    return body


def pod(name: str, **labels: str) -> dict[str, Any]:
    return builders.pod(name, None, None, namespace=None, labels=labels)


def deployment(name: str, replicas: int = 1) -> client.V1Deployment:
    return client.V1Deployment(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1DeploymentSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(match_labels={"app": name}),
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(labels={"app": name}),
                spec=client.V1PodSpec(containers=[client.V1Container(name="app", image="nginx")]),
            ),
        ),
    )


def nodepool(name: str, **labels: str) -> dict:
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [],
                }
            }
        },
    }


def test_bootstrap_namespaces_and_discovery(kube: Kube) -> None:
    names = {ns.metadata.name for ns in kube.core.list_namespace().items}
    assert {"default", "kube-system", "kube-node-lease"} <= names

    assert client.VersionApi(kube.api).get_code().major == "1"
    assert client.CoreApi(kube.api).get_api_versions().versions == ["v1"]
    groups = {g.name for g in client.ApisApi(kube.api).get_api_versions().groups}
    assert {"apps", "policy", "karpenter.sh", "karpenter.k8s.aws", "coordination.k8s.io"} <= groups

    core_resources = {r.name: r for r in kube.core.get_api_resources().resources}
    assert core_resources["pods"].namespaced is True
    assert core_resources["nodes"].namespaced is False
    assert "pods/eviction" in core_resources and "pods/binding" in core_resources
    karpenter = {r.name: r for r in kube.custom.get_api_resources("karpenter.sh", "v1").resources}
    assert karpenter["nodeclaims"].namespaced is False
    assert "nodeclaims/status" in karpenter


def test_create_fills_metadata_from_the_clock(kube: Kube) -> None:
    kube.clock.advance(42)
    created = kube.core.create_namespaced_pod("default", pod("web"))
    meta = created.metadata
    assert meta.uid and meta.resource_version and meta.generation == 1
    assert meta.creation_timestamp == kube.clock.now()
    assert meta.namespace == "default"
    assert created.status.phase == "Pending"
    assert created.spec.termination_grace_period_seconds == 30

    fetched = kube.core.read_namespaced_pod("web", "default")
    assert fetched.metadata.uid == meta.uid
    listed = kube.core.list_namespaced_pod("default")
    assert [p.metadata.name for p in listed.items] == ["web"]
    assert int(str(listed.metadata.resource_version)) >= int(meta.resource_version)


def test_create_twice_is_already_exists(kube: Kube) -> None:
    kube.core.create_namespaced_config_map(
        "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c"))
    )
    with pytest.raises(ApiException) as err:
        kube.core.create_namespaced_config_map(
            "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c"))
        )
    assert err.value.status == 409
    assert status_of(err.value)["reason"] == "AlreadyExists"
    assert status_of(err.value)["message"] == 'configmaps "c" already exists'


def test_create_in_missing_namespace_is_not_found(kube: Kube) -> None:
    with pytest.raises(ApiException) as err:
        kube.core.create_namespaced_pod("nope", pod("web"))
    assert err.value.status == 404
    assert status_of(err.value)["message"] == 'namespaces "nope" not found'


def test_generate_name(kube: Kube) -> None:
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(generate_name="cfg-"))
    first = kube.core.create_namespaced_config_map("default", body)
    second = kube.core.create_namespaced_config_map("default", body)
    assert first.metadata.name.startswith("cfg-") and len(str(first.metadata.name)) == len("cfg-") + 5
    assert first.metadata.name != second.metadata.name


def test_get_missing_is_a_not_found_status(kube: Kube) -> None:
    with pytest.raises(ApiException) as err:
        kube.apps.read_namespaced_deployment("ghost", "default")
    assert err.value.status == 404
    body = status_of(err.value)
    assert body["kind"] == "Status" and body["status"] == "Failure" and body["code"] == 404
    assert body["reason"] == "NotFound"
    assert body["message"] == 'deployments.apps "ghost" not found'
    assert body["details"] == {"name": "ghost", "kind": "deployments", "group": "apps"}


def test_update_with_a_stale_resource_version_conflicts(kube: Kube) -> None:
    created = kube.apps.create_namespaced_deployment("default", deployment("web"))
    created.metadata.labels = {"tier": "front"}
    updated = kube.apps.replace_namespaced_deployment("web", "default", created)
    assert int(str(updated.metadata.resource_version)) > int(str(created.metadata.resource_version))
    assert updated.metadata.generation == 1  # metadata change only

    created.metadata.labels = {"tier": "back"}  # still carries the old resourceVersion
    with pytest.raises(ApiException) as err:
        kube.apps.replace_namespaced_deployment("web", "default", created)
    assert err.value.status == 409
    assert status_of(err.value)["reason"] == "Conflict"
    assert "the object has been modified" in status_of(err.value)["message"]

    updated.spec.replicas = 3
    bumped = kube.apps.replace_namespaced_deployment("web", "default", updated)
    assert bumped.metadata.generation == 2


def test_a_no_op_update_keeps_the_resource_version(kube: Kube) -> None:
    created = kube.core.create_namespaced_config_map(
        "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c"), data={"a": "1"})
    )
    again = kube.core.replace_namespaced_config_map("c", "default", created)
    assert again.metadata.resource_version == created.metadata.resource_version


def test_resource_version_is_one_global_counter(kube: Kube) -> None:
    versions = [
        kube.core.create_namespaced_config_map(
            "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="a"))
        ).metadata.resource_version,
        kube.core.create_node(
            client.V1Node(metadata=client.V1ObjectMeta(name="n1"))
        ).metadata.resource_version,
        kube.custom.create_cluster_custom_object(*KARPENTER, nodepool("default"))["metadata"][
            "resourceVersion"
        ],
        kube.core.create_namespaced_pod("kube-system", pod("p")).metadata.resource_version,
    ]
    as_ints = [int(v) for v in versions]
    assert as_ints == sorted(as_ints) and len(set(as_ints)) == 4


def test_concurrent_creates_get_distinct_versions(kube: Kube) -> None:
    versions: list[int] = []
    lock = threading.Lock()

    def create(worker: int) -> None:
        api = client.ApiClient(kube.server.client_configuration())
        core = client.CoreV1Api(api)
        for i in range(20):
            made = core.create_namespaced_config_map(
                "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"w{worker}-{i}"))
            )
            with lock:
                versions.append(int(str(made.metadata.resource_version)))
        api.close()

    threads = [threading.Thread(target=create, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(versions) == 80 and len(set(versions)) == 80
    assert len(kube.core.list_namespaced_config_map("default").items) == 80


def test_cluster_scoped_and_all_namespaces(kube: Kube) -> None:
    kube.core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name="ip-10-0-0-1.ec2.internal")))
    assert kube.core.read_node("ip-10-0-0-1.ec2.internal").metadata.namespace is None
    kube.core.create_namespaced_pod("default", pod("a"))
    kube.core.create_namespaced_pod("kube-system", pod("b"))
    everywhere = kube.core.list_pod_for_all_namespaces()
    assert [(p.metadata.namespace, p.metadata.name) for p in everywhere.items] == [
        ("default", "a"),
        ("kube-system", "b"),
    ]
    assert [p.metadata.name for p in kube.core.list_namespaced_pod("kube-system").items] == ["b"]


def test_custom_resources_with_status_subresource(kube: Kube) -> None:
    created: dict[str, Any] = kube.custom.create_cluster_custom_object(  # type: ignore[assignment]
        *KARPENTER, nodepool("default", team="a")
    )
    assert created["metadata"]["generation"] == 1 and "namespace" not in created["metadata"]
    assert (
        kube.custom.get_cluster_custom_object(*KARPENTER, "default")["metadata"]["uid"]
        == created["metadata"]["uid"]
    )

    kube.custom.create_cluster_custom_object(*KARPENTER, nodepool("spot", team="b"))
    listed = kube.custom.list_cluster_custom_object(*KARPENTER, label_selector="team=b")
    assert listed["kind"] == "NodePoolList" and [i["metadata"]["name"] for i in listed["items"]] == ["spot"]

    # status is ignored on the main resource and the only thing /status changes
    created["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    created["spec"]["weight"] = 10
    replaced: dict[str, Any] = kube.custom.replace_cluster_custom_object(  # type: ignore[assignment]
        *KARPENTER, "default", created
    )
    assert "status" not in replaced and replaced["metadata"]["generation"] == 2
    with_status = kube.custom.patch_cluster_custom_object_status(
        *KARPENTER, "default", {"status": {"resources": {"nodes": "1"}}}
    )
    # Karpenter's CRD defaults status.nodes to 0: the API server applies schema defaults to status too.
    assert with_status["status"] == {"resources": {"nodes": "1"}, "nodes": 0}
    assert with_status["metadata"]["generation"] == 2

    with pytest.raises(ApiException) as err:
        kube.custom.replace_cluster_custom_object(*KARPENTER, "default", created)  # stale resourceVersion
    assert err.value.status == 409

    kube.custom.delete_cluster_custom_object(*KARPENTER, "default")
    with pytest.raises(ApiException) as err:
        kube.custom.get_cluster_custom_object(*KARPENTER, "default")
    assert err.value.status == 404
    assert status_of(err.value)["message"] == 'nodepools.karpenter.sh "default" not found'


def test_cluster_scoped_custom_resources_are_not_namespaced(kube: Kube) -> None:
    with pytest.raises(ApiException) as err:
        kube.custom.create_namespaced_custom_object(
            "karpenter.sh", "v1", "default", "nodeclaims", {"metadata": {"name": "x"}}
        )
    assert err.value.status == 404
    claim = kube.custom.create_cluster_custom_object(
        "karpenter.sh",
        "v1",
        "nodeclaims",
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"generateName": "default-"},
            "spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [],
            },
        },
    )
    assert claim["metadata"]["name"].startswith("default-")
    nodeclass = kube.custom.create_cluster_custom_object(
        "karpenter.k8s.aws",
        "v1",
        "ec2nodeclasses",
        {
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {
                "role": "KarpenterNodeRole",
                "amiSelectorTerms": [{"alias": "al2023@latest"}],
                "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
                "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "demo"}}],
            },
        },
    )
    assert nodeclass["kind"] == "EC2NodeClass"
    overlay = kube.custom.create_cluster_custom_object(
        "karpenter.sh",
        "v1alpha1",
        "nodeoverlays",
        {
            "apiVersion": "karpenter.sh/v1alpha1",
            "kind": "NodeOverlay",
            "metadata": {"name": "price"},
            "spec": {"requirements": [], "priceAdjustment": "-10%"},
        },
    )
    assert overlay["apiVersion"] == "karpenter.sh/v1alpha1"


def test_scale_subresource(kube: Kube) -> None:
    kube.apps.create_namespaced_deployment("default", deployment("web", replicas=2))
    scale = kube.apps.read_namespaced_deployment_scale("web", "default")
    assert scale.spec.replicas == 2 and scale.status.selector == "app=web"
    kube.apps.patch_namespaced_deployment_scale("web", "default", {"spec": {"replicas": 5}})
    after = kube.apps.read_namespaced_deployment("web", "default")
    assert after.spec.replicas == 5 and after.metadata.generation == 2


def test_delete_collection_by_label(kube: Kube) -> None:
    for name, team in (("a", "x"), ("b", "x"), ("c", "y")):
        kube.core.create_namespaced_config_map(
            "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels={"team": team}))
        )
    kube.core.delete_collection_namespaced_config_map("default", label_selector="team=x")
    assert [c.metadata.name for c in kube.core.list_namespaced_config_map("default").items] == ["c"]


def test_invalid_names_and_labels_are_rejected(kube: Kube) -> None:
    with pytest.raises(ApiException) as err:
        kube.core.create_namespaced_pod("default", pod("Not_Valid"))
    assert err.value.status == 422 and status_of(err.value)["reason"] == "Invalid"
    with pytest.raises(ApiException) as err:
        kube.core.create_namespaced_pod("default", pod("web", zone="us-east-1a:bad"))
    assert err.value.status == 422
    assert "metadata.labels" in status_of(err.value)["message"]


def test_leases_support_optimistic_leader_election(kube: Kube) -> None:
    leases = client.CoordinationV1Api(kube.api)
    lease = leases.create_namespaced_lease(
        "kube-node-lease",
        client.V1Lease(
            metadata=client.V1ObjectMeta(name="provisioner"),
            spec=client.V1LeaseSpec(holder_identity="a", lease_duration_seconds=15),
        ),
    )
    mine = leases.read_namespaced_lease("provisioner", "kube-node-lease")
    theirs = leases.read_namespaced_lease("provisioner", "kube-node-lease")
    mine.spec.holder_identity = "b"
    leases.replace_namespaced_lease("provisioner", "kube-node-lease", mine)
    theirs.spec.holder_identity = "c"
    with pytest.raises(ApiException) as err:
        leases.replace_namespaced_lease("provisioner", "kube-node-lease", theirs)
    assert err.value.status == 409
    assert leases.read_namespaced_lease("provisioner", "kube-node-lease").spec.holder_identity == "b"
    assert lease.metadata.resource_version == theirs.metadata.resource_version  # what the loser held


def test_events_share_storage_across_apis(kube: Kube) -> None:
    kube.clock.advance(60)
    regarding = client.V1ObjectReference(kind="Pod", name="web", namespace="default", api_version="v1")
    core_event = kube.core.create_namespaced_event(
        "default",
        client.CoreV1Event(
            metadata=client.V1ObjectMeta(name="web.1"),
            involved_object=regarding,
            reason="Nominated",
            message="Pod should schedule on: nodeclaim/default-abcde",
            type="Normal",
        ),
    )
    assert core_event.first_timestamp == kube.clock.now() and core_event.last_timestamp == kube.clock.now()
    assert core_event.count == 1

    events_v1 = client.EventsV1Api(kube.api)
    events_v1.create_namespaced_event(
        "default",
        client.EventsV1Event(
            metadata=client.V1ObjectMeta(name="web.2"),
            event_time=kube.clock.now() + timedelta(seconds=1),
            regarding=regarding,
            reason="Launched",
            note="launched nodeclaim",
            type="Normal",
            reporting_controller="karpenter",
            reporting_instance="lambda",
            action="Launch",
        ),
    )

    as_core = kube.core.list_namespaced_event("default", field_selector="involvedObject.name=web")
    assert {e.reason: e.message for e in as_core.items} == {
        "Nominated": "Pod should schedule on: nodeclaim/default-abcde",
        "Launched": "launched nodeclaim",
    }
    as_v1 = events_v1.list_namespaced_event("default", field_selector="regarding.name=web,reason=Launched")
    assert [(e.note, e.reporting_controller) for e in as_v1.items] == [("launched nodeclaim", "karpenter")]
    assert (
        kube.core.list_namespaced_event("default", field_selector="reason=Nominated").items[0].metadata.name
        == "web.1"
    )


def test_events_expire_after_an_hour_of_virtual_time(kube: Kube) -> None:
    ref = client.V1ObjectReference(kind="Node", name="n1")
    kube.core.create_namespaced_event(
        "default",
        client.CoreV1Event(metadata=client.V1ObjectMeta(name="old"), involved_object=ref, reason="A"),
    )
    kube.clock.advance(3601)
    kube.core.create_namespaced_event(
        "default",
        client.CoreV1Event(metadata=client.V1ObjectMeta(name="new"), involved_object=ref, reason="B"),
    )
    assert [e.metadata.name for e in kube.core.list_namespaced_event("default").items] == ["new"]


def test_requests_without_a_known_token_are_unauthorized(kube: Kube) -> None:
    bad = client.ApiClient(client_configuration(kube.server.url, token="not-a-token-the-server-issued"))
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(bad).list_namespace()
    assert err.value.status == 401 and status_of(err.value)["reason"] == "Unauthorized"
    anonymous_config = kube.server.client_configuration()
    anonymous_config.api_key = {}
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(client.ApiClient(anonymous_config)).list_namespace()
    assert err.value.status == 401
    assert kube.core.list_namespace().items  # the fixture's token is the admin's


def test_audit_counts_requests_by_verb(kube: Kube) -> None:
    kube.core.create_namespaced_config_map(
        "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c"))
    )
    kube.core.read_namespaced_config_map("c", "default")
    kube.core.list_namespaced_config_map("default")
    kube.core.patch_namespaced_config_map("c", "default", {"data": {"a": "b"}})
    kube.core.delete_namespaced_config_map("c", "default")
    counts = kube.server.audit.request_count
    assert (counts["create"], counts["get"], counts["list"], counts["patch"], counts["delete"]) == (
        1,
        1,
        1,
        1,
        1,
    )


def test_dry_run_writes_nothing(kube: Kube) -> None:
    preview = kube.core.create_namespaced_config_map(
        "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c")), dry_run="All"
    )
    assert preview.metadata.uid and preview.metadata.creation_timestamp == kube.clock.now()
    with pytest.raises(ApiException) as err:
        kube.core.read_namespaced_config_map("c", "default")
    assert err.value.status == 404

    real = kube.core.create_namespaced_config_map(
        "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c"))
    )
    patched = kube.core.patch_namespaced_config_map("c", "default", {"data": {"a": "1"}}, dry_run="All")
    assert patched.data == {"a": "1"}
    kube.core.delete_namespaced_config_map("c", "default", dry_run="All")
    kept = kube.core.read_namespaced_config_map("c", "default")
    assert kept.data is None and kept.metadata.resource_version == real.metadata.resource_version
    assert (
        kube.core.list_namespaced_config_map("default").metadata.resource_version
        == real.metadata.resource_version
    )

    with pytest.raises(ApiException) as err:
        kube.core.delete_namespaced_config_map("c", "default", dry_run="Some")
    assert err.value.status == 400

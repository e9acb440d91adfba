"""Built-in admission on the simulated API server: Node and Pod validation answered as kube-apiserver
answers it (422 Invalid with a cause per field, 400 for a quantity that does not decode), the
TaintNodesByCondition and DefaultTolerationSeconds plugins, and dryRun carried in a request's body."""

# mypy: disable-error-code="union-attr,index"

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from serverless_karpenter.clock import ManualClock
from serverless_karpenter_sim.kubeapi import KubeApiServer

pytestmark = pytest.mark.integration

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"


@pytest.fixture
def core() -> Iterator[client.CoreV1Api]:
    server = KubeApiServer(ManualClock())
    server.start()
    api = client.ApiClient(server.client_configuration())
    try:
        yield client.CoreV1Api(api)
    finally:
        api.close()
        server.stop()


def refused(call: Any, *args: Any, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(ApiException) as err:
        call(*args, **kwargs)
    return err.value.status, json.loads(err.value.body or "{}")


def node(name: str, taints: list[dict[str, Any]] | None = None, **status: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": name}, "spec": {"taints": taints} if taints else {}}
    if status:
        body["status"] = status
    return body


def pod(name: str, **spec: Any) -> dict[str, Any]:
    container = {"name": "app", "image": "nginx", **spec.pop("container", {})}
    return {"metadata": {"name": name}, "spec": {"containers": [container], **spec}}


# --- validation -------------------------------------------------------------------------------------------


def test_a_duplicate_taint_is_invalid(core: client.CoreV1Api) -> None:
    taints = [{"key": "a", "effect": "NoSchedule"}, {"key": "a", "value": "x", "effect": "NoSchedule"}]
    code, status = refused(core.create_node, node("n", taints))
    assert code == 422 and status["reason"] == "Invalid"
    assert status["message"] == (
        'Node "n" is invalid: spec.taints[1]: Duplicate value: core.Taint{Key:"a", Value:"x", '
        'Effect:"NoSchedule", TimeAdded:<nil>}: taints must be unique by key and effect pair'
    )
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueDuplicate",
            "field": "spec.taints[1]",
            "message": status["message"].split("spec.taints[1]: ", 1)[1],
        }
    ]
    # The same key with another effect is a different taint.
    core.create_node(node("ok", [{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoExecute"}]))


def test_an_unknown_taint_effect_and_a_bad_key_are_invalid_together(core: client.CoreV1Api) -> None:
    code, status = refused(core.create_node, node("n", [{"key": "bad key!", "effect": "Bogus"}]))
    assert code == 422
    fields = [(c["field"], c["reason"]) for c in status["details"]["causes"]]
    assert fields == [
        ("spec.taints[0].key", "FieldValueInvalid"),
        ("spec.taints[0].effect", "FieldValueNotSupported"),
    ]
    assert status["message"].startswith(
        'Node "n" is invalid: [spec.taints[0].key: Invalid value: "bad key!": '
    )
    assert (
        'spec.taints[0].effect: Unsupported value: "Bogus": supported values: "NoSchedule", '
        '"PreferNoSchedule", "NoExecute"]'
    ) in status["message"]


def test_a_taint_added_by_patch_is_validated(core: client.CoreV1Api) -> None:
    core.create_node(node("n"))
    code, status = refused(
        core.patch_node, "n", {"spec": {"taints": [{"key": NOT_READY, "effect": "NoSchedule"}, {"key": "x"}]}}
    )
    assert code == 422
    assert status["details"]["causes"][0] == {
        "reason": "FieldValueRequired",
        "field": "spec.taints[1].effect",
        "message": "Required value",
    }


def test_a_quantity_that_does_not_parse_fails_decoding(core: client.CoreV1Api) -> None:
    code, status = refused(
        core.create_namespaced_pod,
        "default",
        pod("p", container={"resources": {"requests": {"cpu": "lots"}}}),
    )
    # kube-apiserver cannot decode the body into a Pod at all: 400, before any validation.
    assert code == 400 and status["reason"] == "BadRequest"
    assert status["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: quantities must match the regular expression '
        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )
    code, _ = refused(core.create_node, node("n", capacity={"cpu": "lots"}))
    assert code == 400


def test_a_negative_request_is_invalid(core: client.CoreV1Api) -> None:
    code, status = refused(
        core.create_namespaced_pod,
        "default",
        pod("p", container={"resources": {"limits": {"memory": "-1Gi"}}}),
    )
    assert code == 422
    assert status["details"]["causes"][0]["field"] == "spec.containers[0].resources.limits[memory]"
    assert (
        status["details"]["causes"][0]["message"]
        == 'Invalid value: "-1Gi": must be greater than or equal to 0'
    )


def test_a_bad_label_value_is_invalid(core: client.CoreV1Api) -> None:
    body = pod("p")
    body["metadata"]["labels"] = {"app": "not a value!"}
    code, status = refused(core.create_namespaced_pod, "default", body)
    assert code == 422 and status["details"]["causes"][0]["field"] == "metadata.labels"


def test_a_bad_toleration_operator_is_invalid(core: client.CoreV1Api) -> None:
    tolerations = [{"key": "k", "operator": "Maybe", "value": "v", "effect": "NoSchedule"}]
    code, status = refused(core.create_namespaced_pod, "default", pod("p", tolerations=tolerations))
    assert code == 422
    assert status["message"] == (
        'Pod "p" is invalid: spec.tolerations[0].operator: Unsupported value: "Maybe": supported values: '
        '"Equal", "Exists"'
    )


def test_toleration_rules(core: client.CoreV1Api) -> None:
    tolerations = [
        {"operator": "Equal", "value": "v"},  # no key needs Exists
        {"key": "k", "operator": "Exists", "value": "v"},  # Exists takes no value
        {"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5},
    ]
    code, status = refused(core.create_namespaced_pod, "default", pod("p", tolerations=tolerations))
    assert code == 422
    assert [c["field"] for c in status["details"]["causes"]] == [
        "spec.tolerations[0].operator",
        "spec.tolerations[1].operator",
        "spec.tolerations[2].effect",
    ]


def test_affinity_operators_are_validated(core: client.CoreV1Api) -> None:
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}
                ]
            }
        },
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {
                        "matchExpressions": [{"key": "app", "operator": "Gt", "values": ["1"]}]
                    },
                }
            ]
        },
    }
    code, status = refused(core.create_namespaced_pod, "default", pod("p", affinity=affinity))
    assert code == 422
    assert [(c["field"], c["message"]) for c in status["details"]["causes"]] == [
        (
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
            ".matchExpressions[0].operator",
            'Invalid value: "Near": not a valid selector operator',
        ),
        (
            "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector"
            ".matchExpressions[0].operator",
            'Invalid value: "Gt": not a valid selector operator',
        ),
    ]


# --- mutating admission -----------------------------------------------------------------------------------


def test_a_new_node_is_tainted_not_ready(core: client.CoreV1Api) -> None:
    created = core.create_node(node("n", [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]))
    assert [(t.key, t.value, t.effect) for t in created.spec.taints] == [
        ("dedicated", "gpu", "NoSchedule"),
        (NOT_READY, None, "NoSchedule"),
    ]
    # Only on create: the lifecycle controller, not admission, owns it afterwards.
    core.patch_node("n", {"spec": {"taints": []}})
    assert not core.read_node("n").spec.taints


def test_a_new_pod_gets_the_default_tolerations(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_pod("default", pod("p"))
    assert [(t.key, t.operator, t.effect, t.toleration_seconds) for t in created.spec.tolerations] == [
        (NOT_READY, "Exists", "NoExecute", 300),
        (UNREACHABLE, "Exists", "NoExecute", 300),
    ]
    own = [{"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]
    mixed = core.create_namespaced_pod("default", pod("q", tolerations=own))
    assert [(t.key, t.toleration_seconds) for t in mixed.spec.tolerations] == [
        (NOT_READY, 30),
        (UNREACHABLE, 300),
    ]
    everything = core.create_namespaced_pod("default", pod("r", tolerations=[{"operator": "Exists"}]))
    assert [(t.key, t.operator) for t in everything.spec.tolerations] == [(None, "Exists")]


# --- dryRun in the body ----------------------------------------------------------------------------------


def test_dry_run_in_a_delete_body_keeps_the_object(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_pod("default", pod("p"))
    core.delete_namespaced_pod(
        "p", "default", body=client.V1DeleteOptions(dry_run=["All"], grace_period_seconds=0)
    )
    kept = core.read_namespaced_pod("p", "default")
    assert kept.metadata.resource_version == created.metadata.resource_version

    core.create_node(node("n"))
    core.delete_node("n", body=client.V1DeleteOptions(dry_run=["All"]))
    assert core.read_node("n").metadata.deletion_timestamp is None

    code, _ = refused(core.delete_node, "n", body=client.V1DeleteOptions(dry_run=["Some"]))
    assert code == 400
    core.delete_node("n", body=client.V1DeleteOptions())
    assert refused(core.read_node, "n")[0] == 404


def test_dry_run_in_an_eviction_keeps_the_pod(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("default", pod("p"))
    eviction = client.V1Eviction(
        metadata=client.V1ObjectMeta(name="p"), delete_options=client.V1DeleteOptions(dry_run=["All"])
    )
    core.create_namespaced_pod_eviction("p", "default", eviction)
    assert core.read_namespaced_pod("p", "default").metadata.deletion_timestamp is None

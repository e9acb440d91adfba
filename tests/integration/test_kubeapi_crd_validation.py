"""Our CRDs' schemas and Karpenter's CEL rules, enforced by the simulated API server (issue 17): each rule
refuses its invalid object with 422 Invalid naming the field, as kube-apiserver words it; unknown fields
follow fieldValidation; defaults apply on create, update and read; transition rules run on update only."""

# mypy: disable-error-code="union-attr,index"

from __future__ import annotations

import json
import ssl
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from serverless_karpenter.clock import ManualClock
from serverless_karpenter_sim.kubeapi import KubeApiServer, crd_schema, tls
from serverless_karpenter_sim.kubeapi.kinds import kind_of

from tests.crd_cases import BASES, CEL_CASES, NODEPOOL, RESOURCES, SCHEMA_CASES, Case, merge

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server() -> Iterator[KubeApiServer]:
    with KubeApiServer(ManualClock()) as started:
        yield started


@pytest.fixture(scope="module")
def api(server: KubeApiServer) -> Iterator[client.ApiClient]:
    api_client = client.ApiClient(server.client_configuration())
    try:
        yield api_client
    finally:
        api_client.close()


@pytest.fixture
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def _refusal(err: ApiException) -> dict[str, Any]:
    return json.loads(err.body)


@pytest.mark.parametrize("kind", sorted(BASES))
def test_the_valid_bases_are_accepted(custom: client.CustomObjectsApi, kind: str) -> None:
    created = custom.create_cluster_custom_object(*RESOURCES[kind], BASES[kind], dry_run="All")
    assert created["spec"]


@pytest.mark.parametrize("case", CEL_CASES + SCHEMA_CASES, ids=lambda c: c.id)
def test_each_rule_refuses_its_invalid_object_with_422_naming_the_field(
    custom: client.CustomObjectsApi, case: Case
) -> None:
    with pytest.raises(ApiException) as err:
        custom.create_cluster_custom_object(*RESOURCES[case.kind], case.manifest, dry_run="All")
    status = _refusal(err.value)
    assert (err.value.status, status["reason"]) == (422, "Invalid")
    group = RESOURCES[case.kind][0]
    name = case.manifest["metadata"]["name"]
    assert status["message"].startswith(f'{case.kind}.{group} "{name}" is invalid: ')
    causes = [(c["field"], c["message"]) for c in status["details"]["causes"]]
    assert any(field == case.field and case.message in message for field, message in causes), causes


def test_the_message_is_kube_apiservers(custom: client.CustomObjectsApi) -> None:
    bad = merge(NODEPOOL, {"spec": {"weight": 500, "template": {"spec": {"expireAfter": "720h\n"}}}})
    with pytest.raises(ApiException) as err:
        custom.create_cluster_custom_object(*RESOURCES["NodePool"], bad)
    assert _refusal(err.value)["message"] == (
        'NodePool.karpenter.sh "default" is invalid: ['
        'spec.template.spec.expireAfter: Invalid value: "720h\\n": spec.template.spec.expireAfter in body '
        "should match '^(([0-9]+(s|m|h))+|Never)$', "
        "spec.weight: Invalid value: 500: spec.weight in body should be less than or equal to 100]"
    )
    cel = merge(NODEPOOL, {"spec": {"template": {"metadata": {"labels": {"karpenter.sh/nodepool": "x"}}}}})
    with pytest.raises(ApiException) as err:
        custom.create_cluster_custom_object(*RESOURCES["NodePool"], cel)
    assert _refusal(err.value)["message"] == (
        'NodePool.karpenter.sh "default" is invalid: spec.template.metadata.labels: Invalid value: "object": '
        'label "karpenter.sh/nodepool" is restricted'
    )


def test_unknown_fields_follow_field_validation(
    server: KubeApiServer, custom: client.CustomObjectsApi
) -> None:
    typo = merge(NODEPOOL, {"metadata": {"name": "typo"}, "spec": {"wieght": 5}})
    with pytest.raises(ApiException) as err:  # kubectl's default
        custom.create_cluster_custom_object(*RESOURCES["NodePool"], typo, field_validation="Strict")
    assert err.value.status == 400
    assert _refusal(err.value)["message"] == (
        'NodePool in version "v1" cannot be handled as a NodePool: strict decoding error: '
        'unknown field "spec.wieght"'
    )
    # The server's default for other clients: pruned, with a warning.
    request = urllib.request.Request(
        f"{server.url}/apis/karpenter.sh/v1/nodepools",
        data=json.dumps(typo).encode(),
        headers={
            "Content-Type": "application/json",
            "Authorization": f"Bearer {server.client_configuration().api_key['BearerToken']}",
        },
        method="POST",
    )
    trusting = ssl.create_default_context(cafile=tls.local_authority().ca_file)
    with urllib.request.urlopen(request, context=trusting) as response:
        assert response.status == 201
        assert response.headers["Warning"] == '299 - "unknown field \\"spec.wieght\\""'
    stored = custom.get_cluster_custom_object(*RESOURCES["NodePool"], "typo")
    assert "wieght" not in stored["spec"]
    custom.delete_cluster_custom_object(*RESOURCES["NodePool"], "typo")


def test_defaults_apply_on_create_and_on_read(api: client.ApiClient, custom: client.CustomObjectsApi) -> None:
    bare = merge(NODEPOOL, {"metadata": {"name": "bare"}, "spec": {"disruption": None, "weight": None}})
    bare["spec"]["template"]["spec"].pop("expireAfter")
    created = custom.create_cluster_custom_object(*RESOURCES["NodePool"], bare, dry_run="All")
    assert created["spec"]["disruption"] == {
        "consolidateAfter": "0s",
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "budgets": [{"nodes": "10%"}],
    }
    assert created["spec"]["template"]["spec"]["expireAfter"] == "720h"
    nodeclass = custom.create_cluster_custom_object(
        *RESOURCES["EC2NodeClass"], BASES["EC2NodeClass"], dry_run="All"
    )
    assert nodeclass["spec"]["metadataOptions"] == {
        "httpEndpoint": "enabled",
        "httpProtocolIPv6": "disabled",
        "httpPutResponseHopLimit": 1,
        "httpTokens": "required",
    }


def test_an_object_stored_before_the_rules_reads_defaulted_and_takes_status_writes(
    server: KubeApiServer, custom: client.CustomObjectsApi
) -> None:
    store = server.store
    old = merge(NODEPOOL, {"metadata": {"name": "legacy"}, "spec": {"weight": 500, "disruption": None}})
    with crd_schema.stored_unvalidated():
        store.create(kind_of(*RESOURCES["NodePool"]), None, old)
    read = custom.get_cluster_custom_object(*RESOURCES["NodePool"], "legacy")
    assert read["spec"]["disruption"]["budgets"] == [{"nodes": "10%"}]  # defaulted on read
    assert read["spec"]["weight"] == 500
    condition = {
        "type": "ValidationSucceeded",
        "status": "False",
        "reason": "NodePoolValidationFailed",
        "message": "spec.weight: must be at most 100",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    # Ratcheting: the unchanged invalid spec does not block a status write...
    custom.patch_cluster_custom_object_status(
        *RESOURCES["NodePool"], "legacy", {"status": {"conditions": [condition]}}
    )
    # ...but the status itself is validated, and so is any change of the spec.
    with pytest.raises(ApiException) as err:
        custom.patch_cluster_custom_object_status(
            *RESOURCES["NodePool"], "legacy", {"status": {"conditions": [{**condition, "reason": ""}]}}
        )
    assert err.value.status == 422
    assert "status.conditions[0].reason" in err.value.body
    with pytest.raises(ApiException) as err:
        custom.patch_cluster_custom_object(*RESOURCES["NodePool"], "legacy", {"spec": {"weight": 400}})
    assert err.value.status == 422 and "spec.weight" in err.value.body
    custom.patch_cluster_custom_object(*RESOURCES["NodePool"], "legacy", {"spec": {"weight": 40}})
    custom.delete_cluster_custom_object(*RESOURCES["NodePool"], "legacy")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("group", "example.com", "nodeClassRef.group is immutable"),
        ("kind", "OtherNodeClass", "nodeClassRef.kind is immutable"),
    ],
)
def test_transition_rules_apply_on_update_only(
    custom: client.CustomObjectsApi, field: str, value: str, message: str
) -> None:
    changed = {"spec": {"template": {"spec": {"nodeClassRef": {field: value}}}}}
    pool = merge(NODEPOOL, {"metadata": {"name": f"moving-{field}"}, **changed})
    custom.create_cluster_custom_object(
        *RESOURCES["NodePool"], merge(NODEPOOL, {"metadata": pool["metadata"]})
    )
    try:
        with pytest.raises(ApiException) as err:
            custom.patch_cluster_custom_object(*RESOURCES["NodePool"], pool["metadata"]["name"], changed)
        causes = _refusal(err.value)["details"]["causes"]
        assert [(c["field"], c["message"]) for c in causes] == [
            ("spec.template.spec.nodeClassRef", f'Invalid value: "object": {message}')
        ]
        # On create there is no old value: the same object is accepted.
        custom.create_cluster_custom_object(
            *RESOURCES["NodePool"], {**pool, "metadata": {"name": f"fresh-{field}"}}, dry_run="All"
        )
        # The name may change.
        custom.patch_cluster_custom_object(
            *RESOURCES["NodePool"],
            pool["metadata"]["name"],
            {"spec": {"template": {"spec": {"nodeClassRef": {"name": "other"}}}}},
        )
    finally:
        custom.delete_cluster_custom_object(*RESOURCES["NodePool"], pool["metadata"]["name"])

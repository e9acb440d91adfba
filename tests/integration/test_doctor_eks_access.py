"""The simulator's EKS access entries and authentication modes (what `doctor`'s node-role check reads),
on a bare moto server, as EKS answers them."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.server import ThreadedMotoServer
from serverless_karpenter_sim import eks_access  # noqa: F401  (installs the API on moto)
from serverless_karpenter_sim.cloud import REGION, free_port

pytestmark = pytest.mark.integration

NODE_ROLE = "arn:aws:iam::123456789012:role/nodes/KarpenterNodeRole-demo"
ADMIN_ROLE = "arn:aws:iam::123456789012:role/Admin"
CLUSTER_ROLE = "arn:aws:iam::123456789012:role/cluster"


@pytest.fixture(scope="module")
def eks() -> Iterator[Any]:
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"

    def reset() -> None:  # moto's backends are the process's: leave them empty for the next test
        urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST")).close()

    reset()
    try:
        yield boto3.client(
            "eks",
            region_name=REGION,
            endpoint_url=url,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
    finally:
        reset()
        server.stop()


def create(eks: Any, name: str, mode: str | None = None) -> None:
    extra = {"accessConfig": {"authenticationMode": mode}} if mode else {}
    eks.create_cluster(name=name, roleArn=CLUSTER_ROLE, resourcesVpcConfig={}, **extra)


def error(call: Any, **kwargs: Any) -> tuple[str, str]:
    with pytest.raises(ClientError) as raised:
        call(**kwargs)
    return raised.value.response["Error"]["Code"], raised.value.response["Error"]["Message"]


def test_config_map_is_the_default_and_has_no_access_entries(eks: Any) -> None:
    create(eks, "legacy")
    assert (
        eks.describe_cluster(name="legacy")["cluster"]["accessConfig"]["authenticationMode"] == "CONFIG_MAP"
    )
    code, message = error(eks.list_access_entries, clusterName="legacy")
    assert code == "InvalidRequestException" and "[API, API_AND_CONFIG_MAP]" in message
    code, _ = error(eks.create_access_entry, clusterName="legacy", principalArn=NODE_ROLE, type="EC2_LINUX")
    assert code == "InvalidRequestException"


def test_access_entries_are_created_listed_described_and_deleted(eks: Any) -> None:
    create(eks, "modern", "API")
    node = eks.create_access_entry(clusterName="modern", principalArn=NODE_ROLE, type="EC2_LINUX")
    assert node["accessEntry"]["kubernetesGroups"] == ["system:nodes"]
    assert node["accessEntry"]["username"] == "system:node:{{EC2PrivateDNSName}}"
    eks.create_access_entry(clusterName="modern", principalArn=ADMIN_ROLE, kubernetesGroups=["admins"])
    pages = eks.get_paginator("list_access_entries").paginate(
        clusterName="modern", PaginationConfig={"PageSize": 1}
    )
    assert [p["accessEntries"] for p in pages] == [[ADMIN_ROLE], [NODE_ROLE]]
    admin = eks.describe_access_entry(clusterName="modern", principalArn=ADMIN_ROLE)["accessEntry"]
    assert admin["type"] == "STANDARD" and admin["kubernetesGroups"] == ["admins"]
    assert admin["username"] == "arn:aws:sts::123456789012:assumed-role/Admin/{{SessionName}}"

    code, _ = error(eks.create_access_entry, clusterName="modern", principalArn=NODE_ROLE, type="EC2_LINUX")
    assert code == "ResourceInUseException"
    eks.delete_access_entry(clusterName="modern", principalArn=NODE_ROLE)
    code, message = error(eks.describe_access_entry, clusterName="modern", principalArn=NODE_ROLE)
    assert code == "ResourceNotFoundException" and NODE_ROLE in message
    assert eks.list_access_entries(clusterName="modern")["accessEntries"] == [ADMIN_ROLE]


def test_node_entries_take_no_groups(eks: Any) -> None:
    create(eks, "strict", "API_AND_CONFIG_MAP")
    code, message = error(
        eks.create_access_entry,
        clusterName="strict",
        principalArn=NODE_ROLE,
        type="EC2_LINUX",
        kubernetesGroups=["system:nodes"],
    )
    assert code == "InvalidParameterException" and "EC2_LINUX" in message


def test_mode_changes_one_way_only(eks: Any) -> None:
    create(eks, "migrating")
    eks.update_cluster_config(name="migrating", accessConfig={"authenticationMode": "API_AND_CONFIG_MAP"})
    eks.create_access_entry(clusterName="migrating", principalArn=NODE_ROLE, type="EC2_LINUX")
    eks.update_cluster_config(name="migrating", accessConfig={"authenticationMode": "API"})
    assert eks.describe_cluster(name="migrating")["cluster"]["accessConfig"]["authenticationMode"] == "API"
    code, message = error(
        eks.update_cluster_config, name="migrating", accessConfig={"authenticationMode": "CONFIG_MAP"}
    )
    assert code == "InvalidRequestException" and "from API to CONFIG_MAP" in message
    assert eks.list_access_entries(clusterName="migrating")["accessEntries"] == [NODE_ROLE]


def test_no_such_cluster(eks: Any) -> None:
    code, _ = error(eks.list_access_entries, clusterName="nosuch")
    assert code == "ResourceNotFoundException"

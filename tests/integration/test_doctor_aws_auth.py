"""`doctor`'s node-role check on a cluster that still reads aws-auth (authentication mode
API_AND_CONFIG_MAP), against moto server and the simulated cluster: the node role joins by its
system:nodes mapping alone, and without it fails with its fix."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from serverless_karpenter_sim.eks_access import API_AND_CONFIG_MAP

from tests.integration.doctor_setup import (
    CLUSTER,
    DoctorSetup,
    only_failure,
    run_doctor,
    start_correct_setup,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def setup() -> Iterator[DoctorSetup]:
    yield from start_correct_setup(authentication_mode=API_AND_CONFIG_MAP)


def test_aws_auth_mapping_lets_nodes_join(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    # The functions' roles and the cluster's creator have entries, as on EKS; the node role has none.
    assert (
        setup.node_role_arn
        not in setup.client("eks").list_access_entries(clusterName=CLUSTER)["accessEntries"]
    )
    code, checks = run_doctor(capsys)
    assert code == 0 and {c["status"] for c in checks} == {"ok"}, checks
    [node_role] = [c for c in checks if c["check"] == "node-role"]
    assert node_role["summary"] == (
        f"the stack's node role {setup.node_role_arn} is mapped to system:nodes in aws-auth"
    )


def test_neither_access_entry_nor_aws_auth_mapping(
    setup: DoctorSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    setup.unmap_aws_auth()
    try:
        code, checks = run_doctor(capsys)
    finally:
        setup.map_node_role_in_aws_auth()
    failure = only_failure(checks, "node-role")
    assert code == 1
    assert failure["summary"] == (
        f"the stack's node role {setup.node_role_arn} has no access entry: its nodes cannot join the cluster"
    )
    assert failure["fix"] == (
        f"aws eks create-access-entry --cluster-name {CLUSTER} --principal-arn {setup.node_role_arn} "
        "--type EC2_LINUX"
    )


def test_access_entry_alone_is_enough_too(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    setup.unmap_aws_auth()
    setup.create_node_access_entry()
    try:
        code, checks = run_doctor(capsys)
    finally:
        setup.delete_node_access_entry()
        setup.map_node_role_in_aws_auth()
    assert code == 0 and {c["status"] for c in checks} == {"ok"}, checks
    [node_role] = [c for c in checks if c["check"] == "node-role"]
    assert node_role["summary"].endswith("has an EC2_LINUX access entry")

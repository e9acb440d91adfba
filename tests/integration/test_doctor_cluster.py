"""`doctor` against moto server and the simulated cluster: each mistake in the cluster's node classes,
node access, KMS keys and DaemonSets, seeded alone, fails exactly its own check with its fix.

The cluster is in API authentication mode, so the node role joins by its access entry alone
(test_doctor_aws_auth.py has a cluster that still reads aws-auth)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client as k8s
from kubernetes import utils as k8s_utils

from tests.integration.doctor_setup import (
    CLUSTER,
    DoctorSetup,
    daemonset,
    failures,
    key_policy,
    nodeclass,
    only_failure,
    run_doctor,
    start_correct_setup,
)

pytestmark = pytest.mark.integration

DISCOVERY = {"Key": "karpenter.sh/discovery", "Value": CLUSTER}


@pytest.fixture(scope="module")
def setup() -> Iterator[DoctorSetup]:
    yield from start_correct_setup()


def test_untagged_subnets(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    assert setup.sim.resources is not None
    ec2 = setup.client("ec2")
    subnets = setup.sim.resources.subnet_ids
    ec2.delete_tags(Resources=subnets, Tags=[DISCOVERY])
    try:
        code, checks = run_doctor(capsys)
    finally:
        ec2.create_tags(Resources=subnets, Tags=[DISCOVERY])
    failure = only_failure(checks, "nodeclass-selectors")
    assert code == 1
    assert "subnetSelectorTerms" in failure["summary"] and "match no subnet" in failure["summary"]
    assert "security group" not in failure["summary"]
    assert f"Key=karpenter.sh/discovery,Value={CLUSTER}" in failure["fix"]
    # The DaemonSet check needs the node class: it says it could not run rather than pass or fail.
    fit = [c for c in checks if c["check"] == "daemonsets-fit"]
    assert [c["status"] for c in fit] == ["skipped"]


def test_untagged_security_group(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    assert setup.sim.resources is not None
    ec2 = setup.client("ec2")
    group = setup.sim.resources.security_group_id
    ec2.delete_tags(Resources=[group], Tags=[DISCOVERY])
    try:
        code, checks = run_doctor(capsys)
    finally:
        ec2.create_tags(Resources=[group], Tags=[DISCOVERY])
    failure = only_failure(checks, "nodeclass-selectors")
    assert code == 1
    assert "match no security group" in failure["summary"] and "subnet" not in failure["summary"]
    assert f"Key=karpenter.sh/discovery,Value={CLUSTER}" in failure["fix"]


def test_ami_alias_that_resolves_nowhere(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    setup.replace_nodeclass(nodeclass(setup.kms_key, amiSelectorTerms=[{"alias": "al2023@v20000101"}]))
    try:
        code, checks = run_doctor(capsys)
    finally:
        setup.replace_nodeclass(nodeclass(setup.kms_key))
    failure = only_failure(checks, "ami-aliases")
    assert code == 1
    assert "al2023@v20000101 resolve to no AMI" in failure["summary"]
    assert "al2023@latest" in failure["fix"]


def create_access_entry(setup: DoctorSetup) -> str:
    return (
        f"aws eks create-access-entry --cluster-name {CLUSTER} --principal-arn {setup.node_role_arn} "
        "--type EC2_LINUX"
    )


def test_node_role_without_access_entry(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    setup.delete_node_access_entry()
    try:
        code, checks = run_doctor(capsys)
    finally:
        setup.create_node_access_entry()
    failure = only_failure(checks, "node-role")
    assert code == 1
    assert failure["summary"] == (
        f"the stack's node role {setup.node_role_arn} has no access entry: its nodes cannot join the cluster"
    )
    assert failure["fix"] == create_access_entry(setup)


def test_api_mode_ignores_aws_auth(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    """The node role mapped in aws-auth but without an access entry: an API-mode cluster never reads
    aws-auth, so its nodes cannot join."""
    setup.delete_node_access_entry()
    setup.map_node_role_in_aws_auth()
    try:
        code, checks = run_doctor(capsys)
    finally:
        setup.unmap_aws_auth()
        setup.create_node_access_entry()
    failure = only_failure(checks, "node-role")
    assert code == 1
    assert failure["summary"] == (
        f"the stack's node role {setup.node_role_arn} has no access entry, and its system:nodes mapping in "
        "aws-auth is ignored: the cluster's authentication mode is API, so its nodes cannot join the cluster"
    )
    assert failure["fix"] == create_access_entry(setup)


def test_node_role_with_a_standard_access_entry(
    setup: DoctorSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    """An entry of the wrong type (STANDARD, as for a person) does not make the role a node's."""
    eks = setup.client("eks")
    setup.delete_node_access_entry()
    eks.create_access_entry(clusterName=CLUSTER, principalArn=setup.node_role_arn, type="STANDARD")
    try:
        code, checks = run_doctor(capsys)
    finally:
        setup.delete_node_access_entry()
        setup.create_node_access_entry()
    failure = only_failure(checks, "node-role")
    assert code == 1
    assert "has a STANDARD access entry, not EC2_LINUX" in failure["summary"]
    assert failure["fix"] == (
        f"aws eks delete-access-entry --cluster-name {CLUSTER} --principal-arn {setup.node_role_arn} && "
        + create_access_entry(setup)
    )


def test_missing_instance_profile(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = nodeclass(setup.kms_key, instanceProfile="no-such-profile")
    del manifest["spec"]["role"]
    setup.replace_nodeclass(manifest)
    try:
        code, checks = run_doctor(capsys)
    finally:
        setup.replace_nodeclass(nodeclass(setup.kms_key))
    failure = only_failure(checks, "node-role")
    assert code == 1
    assert "instance profile no-such-profile does not exist" in failure["summary"]
    assert "aws iam create-instance-profile" in failure["fix"]


def test_kms_key_that_does_not_grant_the_launcher(
    setup: DoctorSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    kms = setup.client("kms")
    kms.put_key_policy(KeyId=setup.kms_key, PolicyName="default", Policy=key_policy("123456789012", None))
    try:
        code, checks = run_doctor(capsys)
    finally:
        kms.put_key_policy(
            KeyId=setup.kms_key,
            PolicyName="default",
            Policy=key_policy("123456789012", setup.stack.function_roles["provisioner"]),
        )
    failure = only_failure(checks, "kms-keys")
    assert code == 1
    summary, fix = failure["summary"], failure["fix"]
    assert setup.kms_key in summary and "nodes die at once" in summary
    assert setup.stack.function_roles["provisioner"] in fix and "kms:CreateGrant" in fix


def test_daemonset_that_no_longer_fits(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    apps = k8s.AppsV1Api(setup.sim.api_client)
    k8s_utils.create_from_dict(setup.sim.api_client, daemonset("log-shipper", "2"))
    try:
        code, checks = run_doctor(capsys)
    finally:
        apps.delete_namespaced_daemon_set("log-shipper", "kube-system")
    failure = only_failure(checks, "daemonsets-fit")
    assert code == 1
    summary = failure["summary"]
    assert 'NodePool "general"' in summary and "cpu=2200m" in summary and "c7a.medium" in summary
    assert "instance-cpu" in failure["fix"]


def test_everything_repaired_passes_again(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    code, checks = run_doctor(capsys)
    assert code == 0 and {c["status"] for c in checks} == {"ok"}, failures(checks)

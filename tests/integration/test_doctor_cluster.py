"""`doctor` against moto server and the simulated cluster: each mistake in the cluster's node classes,
node access, KMS keys and DaemonSets, seeded alone, fails exactly its own check with its fix."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client as k8s
from kubernetes import utils as k8s_utils

from tests.integration.doctor_setup import (
    CLUSTER,
    DoctorSetup,
    aws_auth,
    daemonset,
    failures,
    key_policy,
    nodeclass,
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
    failed = failures(checks)
    assert code == 1 and set(failed) == {"nodeclass-selectors"}, failed
    assert "subnetSelectorTerms" in failed["nodeclass-selectors"][0]["summary"]
    assert "match no subnet" in failed["nodeclass-selectors"][0]["summary"]
    assert f"Key=karpenter.sh/discovery,Value={CLUSTER}" in failed["nodeclass-selectors"][0]["fix"]
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
    failed = failures(checks)
    assert code == 1 and set(failed) == {"nodeclass-selectors"}, failed
    assert "match no security group" in failed["nodeclass-selectors"][0]["summary"]


def test_ami_alias_that_resolves_nowhere(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    setup.replace_nodeclass(nodeclass(setup.kms_key, amiSelectorTerms=[{"alias": "al2023@v20000101"}]))
    try:
        code, checks = run_doctor(capsys)
    finally:
        setup.replace_nodeclass(nodeclass(setup.kms_key))
    failed = failures(checks)
    assert code == 1 and set(failed) == {"ami-aliases"}, failed
    assert "al2023@v20000101 resolve to no AMI" in failed["ami-aliases"][0]["summary"]
    assert "al2023@latest" in failed["ami-aliases"][0]["fix"]


def test_node_role_without_access(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    # moto has no access-entry API, so the seeded cluster maps the node role in aws-auth instead.
    core = k8s.CoreV1Api(setup.sim.api_client)
    core.delete_namespaced_config_map("aws-auth", "kube-system")
    try:
        code, checks = run_doctor(capsys)
    finally:
        assert setup.sim.resources is not None
        role_arn = f"arn:aws:iam::123456789012:role/{setup.sim.resources.node_role_name}"
        k8s_utils.create_from_dict(setup.sim.api_client, aws_auth(role_arn))
    failed = failures(checks)
    assert code == 1 and set(failed) == {"node-role"}, failed
    assert "no access entry" in failed["node-role"][0]["summary"]
    assert "aws eks create-access-entry --cluster-name doctor" in failed["node-role"][0]["fix"]
    assert "--type EC2_LINUX" in failed["node-role"][0]["fix"]


def test_missing_instance_profile(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = nodeclass(setup.kms_key, instanceProfile="no-such-profile")
    del manifest["spec"]["role"]
    setup.replace_nodeclass(manifest)
    try:
        code, checks = run_doctor(capsys)
    finally:
        setup.replace_nodeclass(nodeclass(setup.kms_key))
    failed = failures(checks)
    assert code == 1 and set(failed) == {"node-role"}, failed
    assert "instance profile no-such-profile does not exist" in failed["node-role"][0]["summary"]
    assert "aws iam create-instance-profile" in failed["node-role"][0]["fix"]


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
    failed = failures(checks)
    assert code == 1 and set(failed) == {"kms-keys"}, failed
    summary, fix = failed["kms-keys"][0]["summary"], failed["kms-keys"][0]["fix"]
    assert setup.kms_key in summary and "nodes die at once" in summary
    assert setup.stack.function_roles["provisioner"] in fix and "kms:CreateGrant" in fix


def test_daemonset_that_no_longer_fits(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    apps = k8s.AppsV1Api(setup.sim.api_client)
    k8s_utils.create_from_dict(setup.sim.api_client, daemonset("log-shipper", "2"))
    try:
        code, checks = run_doctor(capsys)
    finally:
        apps.delete_namespaced_daemon_set("log-shipper", "kube-system")
    failed = failures(checks)
    assert code == 1 and set(failed) == {"daemonsets-fit"}, failed
    summary = failed["daemonsets-fit"][0]["summary"]
    assert 'NodePool "general"' in summary and "cpu=2200m" in summary and "c7a.medium" in summary
    assert "instance-cpu" in failed["daemonsets-fit"][0]["fix"]


def test_everything_repaired_passes_again(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    code, checks = run_doctor(capsys)
    assert code == 0 and not failures(checks)

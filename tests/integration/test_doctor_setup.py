"""`doctor` against moto server and the simulated cluster: a correct set-up passes every check, and each
AWS-side mistake, seeded alone, fails exactly its own check with its fix."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from serverless_karpenter import naming
from serverless_karpenter.doctor.checks import (
    CheckId,
    KmsKeyFacts,
    PermissionFacts,
    QueueFacts,
    Status,
    check_interruption_queue,
    check_lambda_permissions,
)
from serverless_karpenter_cli.main import main
from serverless_karpenter_sim.stack_policies import POLICY_NAME

from tests.integration.doctor_setup import (
    CLUSTER,
    DoctorSetup,
    failures,
    lambda_zip,
    run_doctor,
    start_correct_setup,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def setup() -> Iterator[DoctorSetup]:
    yield from start_correct_setup()


def test_correct_setup_passes_every_check(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    code, checks = run_doctor(capsys)
    by_status: dict[str, set[str]] = {}
    for check in checks:
        by_status.setdefault(check["status"], set()).add(check["check"])
    assert set(by_status) == {"ok"}, checks
    assert code == 0
    assert by_status["ok"] == {c.value for c in CheckId}
    # moto's server simulates the roles' policies (serverless_karpenter_sim.iam_simulation): each
    # function's role, holding the stack's scoped and conditioned statements, passes on its own.
    permissions = [c for c in checks if c["check"] == "lambda-permissions"]
    assert sorted(c["summary"] for c in permissions) == sorted(
        f"{function} role may do what it needs" for function in naming.FUNCTION_NAMES
    )
    selectors = next(c for c in checks if c["check"] == "nodeclass-selectors")
    assert (
        "3 subnet(s) in 3 zone(s) (us-east-1a, us-east-1b, us-east-1c), 1 security group(s)"
        in (selectors["summary"])
    )


def test_human_output_marks_each_check(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--cluster", CLUSTER]) == 0
    out = capsys.readouterr().out
    assert "✓ [stack]" in out and "✓ [daemonsets-fit]" in out and "✓ [lambda-permissions]" in out
    assert "✗" not in out and "- [" not in out
    assert out.rstrip().endswith("passed, 0 failed, 0 could not run")


def test_deleted_stack_resource(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    physical = setup.stack.outputs[naming.function_output("disruption")]
    lambda_ = setup.client("lambda")
    lambda_.delete_function(FunctionName=physical)
    try:
        code, checks = run_doctor(capsys)
    finally:
        lambda_.create_function(
            FunctionName=physical,
            Runtime="python3.12",
            Role=setup.stack.function_roles["disruption"],
            Handler="handler.lambda_handler",
            Code={"ZipFile": lambda_zip()},
        )
    failed = failures(checks)
    assert code == 1 and set(failed) == {"stack"}
    assert f"function {physical}" in failed["stack"][0]["summary"]
    assert f"cdk deploy -c clusterName={CLUSTER}" in failed["stack"][0]["fix"]


def test_queue_policy_without_eventbridge(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    sqs = setup.client("sqs")
    url = setup.queue_url
    statement = json.loads(setup.queue_policy)["Statement"][0]
    other = {**statement, "Principal": {"Service": "sns.amazonaws.com"}}
    sqs.set_queue_attributes(
        QueueUrl=url, Attributes={"Policy": json.dumps({"Version": "2012-10-17", "Statement": [other]})}
    )
    try:
        code, checks = run_doctor(capsys)
    finally:
        setup.restore_queue()
    failed = failures(checks)
    assert code == 1 and set(failed) == {"interruption-queue"}
    assert "does not let EventBridge" in failed["interruption-queue"][0]["summary"]
    assert "events.amazonaws.com sqs:SendMessage" in failed["interruption-queue"][0]["fix"]


def test_unencrypted_queue(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    sqs = setup.client("sqs")
    sqs.set_queue_attributes(QueueUrl=setup.queue_url, Attributes={"SqsManagedSseEnabled": "false"})
    try:
        code, checks = run_doctor(capsys)
    finally:
        setup.restore_queue()
    failed = failures(checks)
    assert code == 1 and set(failed) == {"interruption-queue"}
    assert "not encrypted" in failed["interruption-queue"][0]["summary"]
    assert "SqsManagedSseEnabled=true" in failed["interruption-queue"][0]["fix"]


def test_rule_not_targeting_the_queue(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    events = setup.client("events")
    rule = f"{CLUSTER}-SpotInterruption"
    targets = events.list_targets_by_rule(Rule=rule)["Targets"]
    events.remove_targets(Rule=rule, Ids=[t["Id"] for t in targets])
    # moto also drops the queue's policy when a target goes (EventBridge leaves it): put it back.
    setup.restore_queue()
    try:
        code, checks = run_doctor(capsys)
    finally:
        events.put_targets(Rule=rule, Targets=targets)
        setup.restore_queue()
    failed = failures(checks)
    assert code == 1 and set(failed) == {"interruption-rules"}, failed
    assert "SpotInterruption" in failed["interruption-rules"][0]["summary"]
    assert "aws events put-targets" in failed["interruption-rules"][0]["fix"]


def test_missing_spot_service_linked_role(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    iam = setup.client("iam")
    role = iam.get_role(RoleName=naming.SPOT_SERVICE_LINKED_ROLE)["Role"]
    iam.delete_role(RoleName=naming.SPOT_SERVICE_LINKED_ROLE)
    try:
        code, checks = run_doctor(capsys)
    finally:
        iam.create_role(
            RoleName=naming.SPOT_SERVICE_LINKED_ROLE,
            Path=role["Path"],
            AssumeRolePolicyDocument=json.dumps(role["AssumeRolePolicyDocument"]),
        )
    failed = failures(checks)
    assert code == 1 and set(failed) == {"spot-service-linked-role"}
    assert "ServiceLinkedRoleCreationNotPermitted" in failed["spot-service-linked-role"][0]["summary"]
    assert (
        failed["spot-service-linked-role"][0]["fix"]
        == "aws iam create-service-linked-role --aws-service-name spot.amazonaws.com"
    )


def _role_name(setup: DoctorSetup, function: str) -> str:
    return setup.stack.function_roles[function].rsplit("/", 1)[-1]


def test_lambda_role_missing_a_permission(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    iam = setup.client("iam")
    role = _role_name(setup, "provisioner")
    original = iam.get_role_policy(RoleName=role, PolicyName=POLICY_NAME)["PolicyDocument"]
    # The policy as it was before CreateFleet was granted: every statement that grants it, without it.
    document = json.loads(json.dumps(original))
    for statement in document["Statement"]:
        if isinstance(statement["Action"], list) and "ec2:CreateFleet" in statement["Action"]:
            statement["Action"].remove("ec2:CreateFleet")
    iam.put_role_policy(RoleName=role, PolicyName=POLICY_NAME, PolicyDocument=json.dumps(document))
    try:
        code, checks = run_doctor(capsys)
    finally:
        iam.put_role_policy(RoleName=role, PolicyName=POLICY_NAME, PolicyDocument=json.dumps(original))
    failed = failures(checks)
    assert code == 1 and set(failed) == {"lambda-permissions"}, failed
    [failure] = failed["lambda-permissions"]
    assert failure["summary"] == (
        f"provisioner role {setup.stack.function_roles['provisioner']} may not ec2:CreateFleet"
    )
    assert failure["fix"] == (
        "redeploy the stack to restore its policies; check SCPs and permission boundaries that deny "
        "these actions"
    )


def test_permissions_boundary_that_denies(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    iam = setup.client("iam")
    role = _role_name(setup, "termination")
    boundary = iam.create_policy(
        PolicyName="no-terminations",
        PolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [{"Effect": "Allow", "NotAction": "ec2:Terminate*", "Resource": "*"}],
            }
        ),
    )["Policy"]["Arn"]
    iam.put_role_permissions_boundary(RoleName=role, PermissionsBoundary=boundary)
    try:
        code, checks = run_doctor(capsys)
    finally:
        iam.delete_role_permissions_boundary(RoleName=role)
        iam.delete_policy(PolicyArn=boundary)
    failed = failures(checks)
    assert code == 1 and set(failed) == {"lambda-permissions"}, failed
    [failure] = failed["lambda-permissions"]
    assert failure["summary"] == (
        f"termination role {setup.stack.function_roles['termination']} may not ec2:TerminateInstances"
    )
    assert "permission boundaries" in failure["fix"]


def test_denied_lambda_permission_fails_and_unsimulated_is_not_a_pass() -> None:
    from tests.integration.doctor_setup import empty_facts

    facts = empty_facts()
    facts.permissions = [
        PermissionFacts("provisioner", "arn:aws:iam::1:role/p", ["ec2:CreateFleet"]),
        PermissionFacts("watcher", "arn:aws:iam::1:role/w", []),
        PermissionFacts("termination", "arn:aws:iam::1:role/t", None, "not implemented"),
        PermissionFacts(
            "disruption", "arn:aws:iam::1:role/d", ["ec2:DescribeInstances"], missing_context=["k"]
        ),
    ]
    results = check_lambda_permissions(facts)
    assert [r.status for r in results] == [Status.FAIL, Status.OK, Status.SKIPPED, Status.FAIL]
    assert "may not ec2:CreateFleet" in results[0].summary and results[0].fix
    assert "not simulated (not implemented)" in results[2].summary and not results[2].fix
    assert results[3].summary.endswith(
        "may not ec2:DescribeInstances (its policies also read k, which the simulation could not supply)"
    )


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (
            KmsKeyFacts("alias/aws/sqs", exists=True, enabled=True, key_manager="AWS"),
            "EventBridge cannot use",
        ),
        (
            KmsKeyFacts("k-1", exists=True, enabled=True, policy={"Statement": []}),
            "does not let EventBridge use it (kms:GenerateDataKey, kms:Decrypt)",
        ),
        (KmsKeyFacts("k-2", exists=False), "missing or disabled"),
    ],
)
def test_queue_key_eventbridge_cannot_use(key: KmsKeyFacts, expected: str) -> None:
    from tests.integration.doctor_setup import empty_facts

    facts = empty_facts()
    events_policy = {
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"}, "Action": "sqs:SendMessage"}
        ]
    }
    facts.queue = QueueFacts("https://q", "arn:aws:sqs:us-east-1:1:q", {}, events_policy, key)
    [result] = check_interruption_queue(facts)
    assert result.status == Status.FAIL and expected in result.summary and result.fix
    granted = {"Effect": "Allow", "Principal": {"Service": "events.amazonaws.com"}, "Action": "kms:*"}
    facts.queue.kms_key = KmsKeyFacts("k-3", exists=True, enabled=True, policy={"Statement": [granted]})
    assert check_interruption_queue(facts)[0].status == Status.OK

"""`doctor` against moto server and the simulated cluster: a correct set-up passes every check, and each
AWS-side mistake, seeded alone, fails exactly its own check with its fix; an undeployed stack fails the
stack check alone, and what cannot be checked without it says so."""

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
from serverless_karpenter.runtime import use_control_plane
from serverless_karpenter_cli.main import main
from serverless_karpenter_sim.stack_policies import POLICY_NAME

from tests.integration.doctor_setup import (
    CLUSTER,
    DoctorSetup,
    key_policy,
    lambda_zip,
    only_failure,
    run_doctor,
    run_doctor_report,
    start_correct_setup,
    statuses,
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
    # The cluster is in API mode: the node role joins by its access entry, as the stack creates it.
    [node_role] = [c for c in checks if c["check"] == "node-role"]
    assert node_role["summary"] == (
        f"the stack's node role {setup.node_role_arn} has an EC2_LINUX access entry"
    )


def test_human_output_marks_each_check(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "--cluster", CLUSTER]) == 0
    out = capsys.readouterr().out
    assert "✓ [stack]" in out and "✓ [daemonsets-fit]" in out and "✓ [lambda-permissions]" in out
    assert "✗" not in out and "- [" not in out
    assert out.rstrip().endswith("passed, 0 failed, 0 could not run")


# What needs the stack cannot be checked without it; the cluster's set-up can, and is.
WITHOUT_STACK = {
    "stack": {"fail"},
    "interruption-queue": {"skipped"},
    "interruption-rules": {"skipped"},
    "nodeclass-selectors": {"ok"},
    "ami-aliases": {"ok"},
    "node-role": {"ok"},
    "kms-keys": {"skipped"},
    "spot-service-linked-role": {"ok"},
    "lambda-permissions": {"skipped"},
    "cluster-network": {"skipped"},
    "daemonsets-fit": {"ok"},
    "karpenter-crds": {"ok"},
    "in-cluster-karpenter": {"ok"},
}


def test_undeployed_stack(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    setup.undeploy_stack()
    try:
        code, checks = run_doctor(capsys)
        human_code = main(["doctor", "--cluster", CLUSTER])
        out = capsys.readouterr().out
    finally:
        setup.redeploy_stack()
    failure = only_failure(checks, "stack")
    assert code == 1 and human_code == 1
    assert failure["summary"] == f"stack ServerlessKarpenter-{CLUSTER} is not deployed in us-east-1"
    assert failure["fix"] == f"cdk deploy -c clusterName={CLUSTER}  (or: make deploy CLUSTER={CLUSTER})"
    assert statuses(checks) == WITHOUT_STACK
    skipped = {c["check"]: c["summary"] for c in checks if c["status"] == "skipped"}
    assert skipped["interruption-queue"] == "no interruption queue to check (see the stack check)"
    assert skipped["kms-keys"].endswith("the launching role is unknown (see the stack check)")
    assert f"✗ [stack] stack ServerlessKarpenter-{CLUSTER} is not deployed" in out
    assert f"    fix: cdk deploy -c clusterName={CLUSTER}" in out
    assert "- [interruption-queue] no interruption queue to check" in out
    # Karpenter's CRDs: one line each (NodePool, NodeClaim, EC2NodeClass, the optional NodeOverlay).
    assert out.rstrip().endswith("10 passed, 1 failed, 5 could not run")


@pytest.fixture
def fresh_process(setup: DoctorSetup, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """As `doctor` run from a shell: no control plane installed, nothing read from the stack yet."""
    monkeypatch.delenv("STATE_TABLE_NAME")
    monkeypatch.setenv("CLUSTER_NAME", CLUSTER)  # connect() sets it from --cluster: put it back after
    use_control_plane(None)
    try:
        yield
    finally:
        use_control_plane(setup.sim.plane)


def test_undeployed_stack_from_a_fresh_process(
    setup: DoctorSetup, fresh_process: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the stack's outputs the command still reaches the cluster, and checks it."""
    setup.undeploy_stack()
    try:
        code, checks = run_doctor(capsys)
    finally:
        setup.redeploy_stack()
    assert code == 1
    assert "is not deployed" in only_failure(checks, "stack")["summary"]
    assert statuses(checks) == WITHOUT_STACK


def test_no_such_cluster(setup: DoctorSetup, fresh_process: None, capsys: pytest.CaptureFixture[str]) -> None:
    """A mistyped --cluster: no stack and no EKS cluster. Only the stack check can run."""
    code, report = run_doctor_report(capsys, "nosuch")
    assert code == 1 and report["cluster"] == "nosuch" and report["ok"] is False
    checks = report["checks"]
    failure = only_failure(checks, "stack")
    assert failure["summary"] == (
        "stack ServerlessKarpenter-nosuch is not deployed in us-east-1, and there is no EKS cluster nosuch "
        "there either"
    )
    assert (
        "check --cluster and --region" in failure["fix"]
        and "cdk deploy -c clusterName=nosuch" in failure["fix"]
    )
    assert {c["check"]: c["status"] for c in checks if c["check"] != "stack"} == {
        c.value: "skipped" for c in CheckId if c != CheckId.STACK
    }
    cluster_side = [c for c in checks if c["check"] == "daemonsets-fit"]
    assert cluster_side[0]["summary"] == "not checked: there is no EKS cluster nosuch in us-east-1"


def test_deleted_stack_resource(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    physical = setup.stack.outputs[naming.function_output("disruption")]
    lambda_ = setup.client("lambda")
    lambda_.delete_function(FunctionName=physical)
    try:
        code, checks = run_doctor(capsys)
    finally:
        lambda_.create_function(
            FunctionName=physical,
            Runtime="python3.14",
            Role=setup.stack.function_roles["disruption"],
            Handler="handler.lambda_handler",
            Code={"ZipFile": lambda_zip()},
        )
    failure = only_failure(checks, "stack")
    assert code == 1
    assert f"function {physical}" in failure["summary"]
    assert f"cdk deploy -c clusterName={CLUSTER}" in failure["fix"]


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
    failure = only_failure(checks, "interruption-queue")
    assert code == 1
    assert "does not let EventBridge" in failure["summary"]
    assert "events.amazonaws.com sqs:SendMessage" in failure["fix"]


def test_unencrypted_queue(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    sqs = setup.client("sqs")
    sqs.set_queue_attributes(QueueUrl=setup.queue_url, Attributes={"SqsManagedSseEnabled": "false"})
    try:
        code, checks = run_doctor(capsys)
    finally:
        setup.restore_queue()
    failure = only_failure(checks, "interruption-queue")
    assert code == 1
    assert "not encrypted" in failure["summary"]
    assert "SqsManagedSseEnabled=true" in failure["fix"]


def test_queue_key_that_eventbridge_cannot_use(
    setup: DoctorSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    """SSE-KMS with a customer-managed key whose policy lets the account, but not EventBridge, use it:
    EventBridge's deliveries fail, silently."""
    kms = setup.client("kms")
    key = kms.create_key(Description="interruption queue")["KeyMetadata"]["KeyId"]
    kms.put_key_policy(KeyId=key, PolicyName="default", Policy=key_policy("123456789012", None))
    # The policy again: moto drops it on an update that leaves it out.
    encrypted = {"KmsMasterKeyId": key, "SqsManagedSseEnabled": "false", "Policy": setup.queue_policy}
    setup.client("sqs").set_queue_attributes(QueueUrl=setup.queue_url, Attributes=encrypted)
    try:
        code, checks = run_doctor(capsys)
    finally:
        setup.restore_queue()
        kms.disable_key(KeyId=key)
    failure = only_failure(checks, "interruption-queue")
    assert code == 1
    assert failure["summary"] == (
        f"interruption queue {setup.queue_url}: its KMS key {key} does not let EventBridge use it "
        "(kms:GenerateDataKey, kms:Decrypt)"
    )
    assert failure["fix"] == (
        f"add to the key policy of {key}: Allow events.amazonaws.com kms:GenerateDataKey, kms:Decrypt"
    )


def test_misnamed_interruption_queue(setup: DoctorSetup, capsys: pytest.CaptureFixture[str]) -> None:
    """The interruption function configured with a queue named after the cluster (Karpenter's habit for
    settings.interruptionQueue), which does not exist, while the stack's queue and rules use another."""
    lambda_ = setup.client("lambda")
    function = setup.interruption_function
    variables = lambda_.get_function_configuration(FunctionName=function)["Environment"]["Variables"]
    wrong = setup.queue_url.rsplit("/", 1)[0] + f"/{CLUSTER}"
    lambda_.update_function_configuration(
        FunctionName=function, Environment={"Variables": {**variables, "INTERRUPTION_QUEUE_URL": wrong}}
    )
    try:
        code, checks = run_doctor(capsys)
    finally:
        lambda_.update_function_configuration(FunctionName=function, Environment={"Variables": variables})
    failure = only_failure(checks, "interruption-queue")
    right = setup.queue_url.rsplit("/", 1)[-1]
    assert code == 1
    assert failure["summary"] == (
        f"interruption queue {setup.queue_url}: the interruption function {function} is configured with "
        f"queue {CLUSTER} (INTERRUPTION_QUEUE_URL), which does not exist, not {right}, which the stack "
        "created and the rules target"
    )
    assert failure["fix"].startswith(
        f"set {function}'s INTERRUPTION_QUEUE_URL to {setup.queue_url} (queue {right}, not {CLUSTER}): "
        f"redeploy the stack (cdk deploy -c clusterName={CLUSTER}"
    )
    assert f"aws lambda update-function-configuration --function-name {function}" in failure["fix"]


def test_interruption_function_fed_from_another_queue(
    setup: DoctorSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its event source mapping reads the dead-letter queue: the rules fill a queue nothing reads."""
    assert setup.sim.resources is not None
    sqs = setup.client("sqs")
    dlq_arn = sqs.get_queue_attributes(QueueUrl=setup.sim.resources.dlq_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    setup.feed_interruption_function_from(dlq_arn)
    wrong = setup.event_source()
    try:
        code, checks = run_doctor(capsys)
    finally:
        setup.feed_interruption_function_from(setup.sim.resources.queue_arn)
    failure = only_failure(checks, "interruption-queue")
    function, queue = setup.interruption_function, setup.queue_url.rsplit("/", 1)[-1]
    assert code == 1
    assert failure["summary"] == (
        f"interruption queue {setup.queue_url}: the interruption function's event source mapping {wrong} "
        f"reads queue {CLUSTER}-interruption-dlq, not {queue}; no event source mapping feeds {queue} to the "
        f"interruption function {function}"
    )
    assert failure["fix"] == (
        f"aws lambda delete-event-source-mapping --uuid {wrong}; aws lambda create-event-source-mapping "
        f"--function-name {function} --event-source-arn {setup.sim.resources.queue_arn} "
        "--function-response-types ReportBatchItemFailures"
    )


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
    failure = only_failure(checks, "interruption-rules")
    assert code == 1
    assert "SpotInterruption" in failure["summary"]
    assert "aws events put-targets" in failure["fix"]


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
    failure = only_failure(checks, "spot-service-linked-role")
    assert code == 1
    assert "ServiceLinkedRoleCreationNotPermitted" in failure["summary"]
    assert failure["fix"] == "aws iam create-service-linked-role --aws-service-name spot.amazonaws.com"


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
    failure = only_failure(checks, "lambda-permissions")
    assert code == 1
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
    failure = only_failure(checks, "lambda-permissions")
    assert code == 1
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


def test_private_endpoint_with_functions_outside_the_vpc(
    setup: DoctorSetup, capsys: pytest.CaptureFixture[str]
) -> None:
    """The stack deployed without VPC keys, then the endpoint made private (EKS's recommended set-up): the
    functions cannot reach it, and the fix is the VPC-mode deploy, with the keys read from DescribeCluster."""
    eks = setup.client("eks")
    vpc_config = eks.describe_cluster(name=CLUSTER)["cluster"]["resourcesVpcConfig"]
    # As EKS reports it for a cluster created with subnets alone: public to all, private off.
    assert (vpc_config["endpointPublicAccess"], vpc_config["endpointPrivateAccess"]) == (True, False)
    assert vpc_config["publicAccessCidrs"] == ["0.0.0.0/0"]
    eks.update_cluster_config(
        name=CLUSTER, resourcesVpcConfig={"endpointPublicAccess": False, "endpointPrivateAccess": True}
    )
    try:
        code, checks = run_doctor(capsys)
    finally:
        eks.update_cluster_config(
            name=CLUSTER, resourcesVpcConfig={"endpointPublicAccess": True, "endpointPrivateAccess": False}
        )
    failure = only_failure(checks, "cluster-network")
    assert code == 1
    assert "API endpoint is private (endpointPublicAccess=false)" in failure["summary"]
    assert f"-c vpcId={vpc_config['vpcId']} " in failure["fix"]
    assert f"-c clusterSecurityGroupId={vpc_config['clusterSecurityGroupId']} " in failure["fix"]
    # The simulated subnets have no route to an internet gateway: all are offered.
    assert f"-c subnetIds={','.join(vpc_config['subnetIds'])} " in failure["fix"]

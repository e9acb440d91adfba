"""IAM enforced in the simulated cloud (issue 17): each simulated Lambda signs as its own role, and a call
its role's policies (the stack's, from ``policies.py``) do not allow is refused as AWS refuses it.

Each test that removes a statement first shows the call allowed with the statement in place, so it fails
if enforcement were off, and again if the statement were not the one that allows it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from serverless_karpenter import naming
from serverless_karpenter.adapters import aws
from serverless_karpenter.api import labels as wk
from serverless_karpenter_sim.cloud import ACCOUNT, REGION
from serverless_karpenter_sim.iam_enforcement import ENFORCEMENT
from serverless_karpenter_sim.simulation import Simulation
from serverless_karpenter_sim.stack_policies import POLICY_NAME

from tests.integration.simulate import simulation
from tests.integration.test_launch_templates import nodeclass, request

pytestmark = pytest.mark.integration

DENIED = re.compile(
    r"User: arn:aws:sts::123456789012:assumed-role/(?P<role>[^/]+)/(?P<session>\S+) is not authorized to "
    r"perform: (?P<action>\S+) on resource: (?P<resource>\S+) because no identity-based policy allows the "
    r"(?P=action) action"
)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Simulation]:
    sim = simulation(tmp_path_factory.mktemp("iam"), {"name": "iam", "manifests": []})
    sim.start()
    try:
        yield sim
    finally:
        sim.stop()


def role_name(sim: Simulation, function: str) -> str:
    return sim.stack.function_roles[function].rsplit("/", 1)[-1]


@contextmanager
def policy_edited(
    sim: Simulation, function: str, edit: Callable[[list[dict[str, Any]]], None]
) -> Iterator[None]:
    """``function``'s role with its stack policy's statements edited in place, restored after."""
    iam = sim.cloud.client("iam")
    role = role_name(sim, function)
    original = iam.get_role_policy(RoleName=role, PolicyName=POLICY_NAME)["PolicyDocument"]
    document = json.loads(json.dumps(original))
    edit(document["Statement"])
    iam.put_role_policy(RoleName=role, PolicyName=POLICY_NAME, PolicyDocument=json.dumps(document))
    try:
        yield
    finally:
        iam.put_role_policy(RoleName=role, PolicyName=POLICY_NAME, PolicyDocument=json.dumps(original))


def without(sim: Simulation, function: str, sid: str) -> Any:
    def remove(statements: list[dict[str, Any]]) -> None:
        kept = [s for s in statements if s.get("Sid") != sid]
        assert len(kept) == len(statements) - 1, f"{function}'s role has no statement {sid}"
        statements[:] = kept

    return policy_edited(sim, function, remove)


def refused(call: Callable[[], Any]) -> ClientError:
    with pytest.raises(ClientError) as caught:
        call()
    return caught.value


def test_each_function_signs_as_its_own_role_with_a_stable_distinct_key(sim: Simulation) -> None:
    credentials = sim.lambdas.credentials
    assert credentials is not None
    sts = aws.client("sts", REGION)
    seen = {}
    for function in sim.stack.function_roles:
        with credentials.acting_as(function):
            identity = sts.get_caller_identity()
            again = sts.get_caller_identity()
        session = sim.stack.outputs[naming.function_output(function)]
        assert identity["Arn"] == f"arn:aws:sts::{ACCOUNT}:assumed-role/{role_name(sim, function)}/{session}"
        assert again["Arn"] == identity["Arn"]
        seen[function] = credentials.sessions[function].access_key
    assert len(set(seen.values())) == len(seen), "each role has its own access key"
    # Outside any invocation the simulator acts as the administrator.
    assert "assumed-role" not in sts.get_caller_identity()["Arn"]


def test_a_json_service_refuses_with_access_denied_exception(sim: Simulation) -> None:
    """DynamoDB: the provisioner reads the table by AllowStateTableReadWrite; without it, AWS's error."""
    assert sim.resources is not None and sim.lambdas.credentials is not None
    table = sim.resources.table_name
    key = {"pk": {"S": "NODECLAIM"}, "sk": {"S": "nothing"}}
    dynamodb = aws.client("dynamodb", REGION)
    with sim.lambdas.credentials.acting_as("provisioner"):
        dynamodb.get_item(TableName=table, Key=key)
        with without(sim, "provisioner", "AllowStateTableReadWrite"):
            error = refused(lambda: dynamodb.get_item(TableName=table, Key=key))
    assert error.response["Error"]["Code"] == "AccessDeniedException"
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    match = DENIED.fullmatch(error.response["Error"]["Message"])
    assert match, error.response["Error"]["Message"]
    assert match["role"] == role_name(sim, "provisioner")
    assert match["action"] == "dynamodb:GetItem"
    assert match["resource"] == f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{table}"
    assert any("dynamodb:GetItem" in d for d in ENFORCEMENT.denials)


def test_ec2_refuses_with_unauthorized_operation(sim: Simulation) -> None:
    """EC2: reads are allowed by AllowRegionalReadActions (on "*", in the stack's region only)."""
    assert sim.lambdas.credentials is not None
    ec2 = aws.client("ec2", REGION)
    with sim.lambdas.credentials.acting_as("provisioner"):
        ec2.describe_subnets()
        with without(sim, "provisioner", "AllowRegionalReadActions"):
            error = refused(ec2.describe_subnets)
        # The statement's aws:RequestedRegion condition: another region is refused even with it.
        other_region = aws.client("ec2", "eu-west-1")
        refused(other_region.describe_subnets)
    assert error.response["Error"]["Code"] == "UnauthorizedOperation"
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    message = error.response["Error"]["Message"]
    assert message.startswith("You are not authorized to perform this operation. User: arn:aws:sts::")
    assert (
        "ec2:DescribeSubnets on resource: *" in message
        and "Encoded authorization failure message: " in message
    )


def test_terminating_needs_the_cluster_and_nodepool_tags_on_the_instance(sim: Simulation) -> None:
    """AllowScopedInstanceDeletion is conditioned on aws:ResourceTag: an instance not ours is refused."""
    assert sim.resources is not None and sim.lambdas.credentials is not None
    admin = sim.cloud.client("ec2")
    ami = sim.resources.amis["amd64"]
    ours = [
        {"Key": f"{wk.TAG_CLUSTER_PREFIX}{sim.cluster_name}", "Value": "owned"},
        {"Key": wk.NODEPOOL, "Value": "default"},
    ]

    def launch(tags: list[dict[str, str]]) -> str:
        specs = [{"ResourceType": "instance", "Tags": tags}] if tags else []
        instance = admin.run_instances(ImageId=ami, MinCount=1, MaxCount=1, TagSpecifications=specs)
        return str(instance["Instances"][0]["InstanceId"])

    foreign, tagged, tagged_again = launch([]), launch(ours), launch(ours)
    ec2 = aws.client("ec2", REGION)
    with sim.lambdas.credentials.acting_as("termination"):
        error = refused(lambda: ec2.terminate_instances(InstanceIds=[foreign]))
        ec2.terminate_instances(InstanceIds=[tagged])
        with without(sim, "termination", "AllowScopedInstanceDeletion"):
            refused(lambda: ec2.terminate_instances(InstanceIds=[tagged_again]))
    assert error.response["Error"]["Code"] == "UnauthorizedOperation"
    assert f"ec2:TerminateInstances on resource: arn:aws:ec2:{REGION}:{ACCOUNT}:instance/{foreign}" in str(
        error
    )
    states = {
        i["InstanceId"]: i["State"]["Name"]
        for r in admin.describe_instances(InstanceIds=[foreign, tagged, tagged_again])["Reservations"]
        for i in r["Instances"]
    }
    assert states[foreign] == "running" and states[tagged_again] == "running"
    assert states[tagged] in ("shutting-down", "terminated")


def _launch(sim: Simulation, name: str) -> Callable[[], Any]:
    resolved = sim.plane.resolver.resolve(nodeclass(sim, "iam"))
    return lambda: sim.plane.launcher.launch(request(name, "on-demand", ["m5.large"]), resolved)


def test_a_launch_passes_the_node_role_only_to_ec2(sim: Simulation) -> None:
    """AllowPassingInstanceRole: iam:PassRole of the node role, with iam:PassedToService ec2.amazonaws.com."""
    assert sim.lambdas.credentials is not None

    def pass_to_lambda_only(statements: list[dict[str, Any]]) -> None:
        for statement in statements:
            if statement.get("Sid") == "AllowPassingInstanceRole":
                statement["Condition"] = {"StringEquals": {"iam:PassedToService": "lambda.amazonaws.com"}}

    with sim.lambdas.credentials.acting_as("provisioner"):
        assert _launch(sim, "iam-pass-1")().id
        with without(sim, "provisioner", "AllowPassingInstanceRole"):
            removed = refused(_launch(sim, "iam-pass-2"))
        with policy_edited(sim, "provisioner", pass_to_lambda_only):
            other_service = refused(_launch(sim, "iam-pass-3"))
    for error in (removed, other_service):
        assert error.response["Error"]["Code"] == "UnauthorizedOperation"
        node_role = f"arn:aws:iam::{ACCOUNT}:role/KarpenterNodeRole-{sim.cluster_name}"
        assert f"iam:PassRole on resource: {node_role}" in str(error)


def test_tagging_on_create_is_allowed_only_for_the_launch(sim: Simulation) -> None:
    """AllowScopedResourceCreationTagging: ec2:CreateTags with ec2:CreateAction RunInstances/CreateFleet."""
    assert sim.lambdas.credentials is not None

    def only_on_run_instances(statements: list[dict[str, Any]]) -> None:
        for statement in statements:
            if statement.get("Sid") == "AllowScopedResourceCreationTagging":
                statement["Condition"]["StringEquals"]["ec2:CreateAction"] = ["RunInstances"]

    with sim.lambdas.credentials.acting_as("provisioner"):
        assert _launch(sim, "iam-tag-1")().id
        with without(sim, "provisioner", "AllowScopedResourceCreationTagging"):
            removed = refused(_launch(sim, "iam-tag-2"))
        with policy_edited(sim, "provisioner", only_on_run_instances):
            other_action = refused(_launch(sim, "iam-tag-3"))
    for error in (removed, other_action):
        assert error.response["Error"]["Code"] == "UnauthorizedOperation"
        assert "ec2:CreateTags on resource: arn:aws:ec2:" in str(error)


def test_a_query_service_refuses_with_access_denied(sim: Simulation) -> None:
    """IAM: the watcher has no instance-profile grant at all."""
    assert sim.lambdas.credentials is not None
    iam = aws.client("iam", REGION)
    profile = sim.stack.instance_profile
    with sim.lambdas.credentials.acting_as("watcher"):
        error = refused(lambda: iam.get_instance_profile(InstanceProfileName=profile))
    assert error.response["Error"]["Code"] == "AccessDenied"
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    match = DENIED.fullmatch(error.response["Error"]["Message"])
    assert match and match["action"] == "iam:GetInstanceProfile"
    assert match["resource"] == f"arn:aws:iam::{ACCOUNT}:instance-profile/{profile}"


def test_an_unknown_access_key_is_refused(sim: Simulation) -> None:
    assert sim.resources is not None
    stranger = boto3.session.Session(
        aws_access_key_id="AKIAUNKNOWNUNKNOWN00", aws_secret_access_key="x", region_name=REGION
    )
    sqs_error = refused(lambda: stranger.client("sqs").get_queue_attributes(QueueUrl=sim.resources.queue_url))
    ec2_error = refused(lambda: stranger.client("ec2").describe_instances())
    assert sqs_error.response["Error"]["Code"] == "UnrecognizedClientException"
    assert ec2_error.response["Error"]["Code"] == "AuthFailure"

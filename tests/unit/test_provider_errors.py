"""Each EC2 provider turns AWS's refusals into ``CloudError`` (keeping the code callers branch on), and
answers the refusals it expects (NotFound, AlreadyExists, ParameterNotFound) as the absence they mean."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError
from botocore.stub import ANY, Stubber
from serverless_karpenter import amifamily
from serverless_karpenter.adapters.providers.ami import DefaultAMIProvider
from serverless_karpenter.adapters.providers.errors import CloudError, EndpointUnanswered, translated
from serverless_karpenter.adapters.providers.instance import DefaultInstanceProvider
from serverless_karpenter.adapters.providers.instanceprofile import DefaultInstanceProfileProvider
from serverless_karpenter.adapters.providers.launchtemplate import DefaultLaunchTemplateProvider
from serverless_karpenter.adapters.providers.model import (
    LaunchError,
    LaunchRequest,
    NodeClassResolutionError,
    ResolvedNodeClass,
    Subnet,
)
from serverless_karpenter.adapters.providers.nodeclass import NodeClassResolver
from serverless_karpenter.adapters.providers.securitygroup import DefaultSecurityGroupProvider
from serverless_karpenter.adapters.providers.subnet import DefaultSubnetProvider
from serverless_karpenter.api import labels as wk

REGION = "us-east-1"
CLUSTER = amifamily.ClusterInfo("c1", "https://example.invalid", "")
NODECLASS = ResolvedNodeClass(
    name="default",
    subnets=[Subnet("subnet-1", "us-east-1a", "use1-az1", 100)],
    security_group_ids=["sg-1"],
    amis={"amd64": "ami-1"},
    ami_family="AL2023",
    instance_profile="nodes",
)
REQUEST = LaunchRequest(
    nodeclaim="default-abc",
    nodepool="default",
    capacity_type=wk.CAPACITY_TYPE_ON_DEMAND,
    overrides=[("m5.large", "us-east-1a", "amd64")],
    bootstrap=amifamily.NodeBootstrap(labels={}, taints=[]),
)


def client(service: str) -> Any:
    return boto3.client(service, region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")


@pytest.fixture
def ec2() -> Iterator[tuple[Any, Stubber]]:
    made = client("ec2")
    with Stubber(made) as stubber:
        yield made, stubber
        stubber.assert_no_pending_responses()


def refused(stubber: Stubber, operation: str, code: str, status: int = 400) -> None:
    stubber.add_client_error(
        operation, service_error_code=code, service_message="no", http_status_code=status
    )


def test_a_refused_subnet_lookup_is_a_cloud_error_with_its_code(ec2: tuple[Any, Stubber]) -> None:
    made, stubber = ec2
    refused(stubber, "describe_subnets", "UnauthorizedOperation", 403)
    with pytest.raises(CloudError) as raised:
        DefaultSubnetProvider(made).select([{"tags": {"karpenter.sh/discovery": "c1"}}])
    error = raised.value
    assert (error.code, error.operation, error.status) == ("UnauthorizedOperation", "DescribeSubnets", 403)
    assert error.access_denied and not error.throttled
    # Still the SDK's error for whatever reads its shape (the simulator's access-denied invariant).
    assert isinstance(error, ClientError) and error.response["Error"]["Code"] == "UnauthorizedOperation"


def test_a_throttled_security_group_lookup_says_so(ec2: tuple[Any, Stubber]) -> None:
    made, stubber = ec2
    refused(stubber, "describe_security_groups", "RequestLimitExceeded", 503)
    with pytest.raises(CloudError) as raised:
        DefaultSecurityGroupProvider(made).select([{"id": "sg-1"}])
    assert raised.value.code == "RequestLimitExceeded" and raised.value.throttled


def test_an_alias_without_parameters_has_no_images_and_a_refused_image_lookup_is_an_error(
    ec2: tuple[Any, Stubber],
) -> None:
    made, stubber = ec2
    ssm = client("ssm")
    with Stubber(ssm) as ssm_stubber:
        for _ in ("amd64", "arm64"):
            refused(ssm_stubber, "get_parameter", "ParameterNotFound")
        family, images = DefaultAMIProvider(made, ssm, "1.31").select([{"alias": "al2023@latest"}], None)
        assert (family, images) == ("AL2023", [])
        refused(ssm_stubber, "get_parameter", "AccessDeniedException")
        with pytest.raises(CloudError) as denied:
            DefaultAMIProvider(made, ssm, "1.31").select([{"alias": "al2023@latest"}], None)
    assert (denied.value.code, denied.value.operation) == ("AccessDeniedException", "GetParameter")
    refused(stubber, "describe_images", "AuthFailure")
    with pytest.raises(CloudError) as raised:
        DefaultAMIProvider(made, ssm, "1.31").select([{"id": "ami-1"}], "AL2023")
    assert raised.value.code == "AuthFailure"


def test_a_missing_instance_profile_is_created_and_a_refused_one_is_an_error() -> None:
    iam = client("iam")
    provider = DefaultInstanceProfileProvider(iam, "c1")
    name = provider.generated_name("default")
    with Stubber(iam) as stubber:
        refused(stubber, "get_instance_profile", "NoSuchEntity", 404)
        stubber.add_response(
            "create_instance_profile",
            {"InstanceProfile": _profile(name)},
            {
                "InstanceProfileName": name,
                "Tags": ANY,
            },
        )
        stubber.add_response(
            "add_role_to_instance_profile", {}, {"InstanceProfileName": name, "RoleName": "nodes"}
        )
        assert provider.ensure("default", {"role": "nodes"}) == name
        refused(stubber, "get_instance_profile", "AccessDenied", 403)
        with pytest.raises(CloudError) as raised:
            provider.ensure("default", {"role": "nodes"})
    assert raised.value.code == "AccessDenied" and raised.value.access_denied
    # Named without a call, for the readers that may not create profiles.
    assert provider.name_for("default", {"role": "nodes"}) == name


def test_an_existing_launch_template_is_used_and_a_refused_one_is_an_error(ec2: tuple[Any, Stubber]) -> None:
    made, stubber = ec2
    bootstrap = amifamily.NodeBootstrap(labels={}, taints=[])
    refused(stubber, "create_launch_template", "InvalidLaunchTemplateName.AlreadyExistsException")
    name = DefaultLaunchTemplateProvider(made, "c1", CLUSTER).ensure(NODECLASS, "amd64", bootstrap)
    assert name.startswith("karpenter.k8s.aws/c1/")
    refused(stubber, "create_launch_template", "UnauthorizedOperation", 403)
    with pytest.raises(CloudError) as raised:
        DefaultLaunchTemplateProvider(made, "c1", CLUSTER).ensure(NODECLASS, "amd64", bootstrap)
    assert raised.value.code == "UnauthorizedOperation"


def test_an_unknown_instance_is_absent_and_terminating_it_is_done(ec2: tuple[Any, Stubber]) -> None:
    made, stubber = ec2
    instances = DefaultInstanceProvider(made, "c1", DefaultLaunchTemplateProvider(made, "c1", CLUSTER))
    refused(stubber, "describe_instances", "InvalidInstanceID.NotFound")
    assert instances.get("i-0123456789abcdef0") is None
    refused(stubber, "terminate_instances", "InvalidInstanceID.NotFound")
    instances.terminate(["i-0123456789abcdef0"])
    refused(stubber, "terminate_instances", "UnauthorizedOperation", 403)
    with pytest.raises(CloudError) as raised:
        instances.terminate(["i-0123456789abcdef0"])
    assert raised.value.code == "UnauthorizedOperation"


def test_a_refused_fleet_keeps_its_code_and_a_missing_spot_role_is_a_launch_error(
    ec2: tuple[Any, Stubber],
) -> None:
    made, stubber = ec2
    instances = DefaultInstanceProvider(made, "c1", DefaultLaunchTemplateProvider(made, "c1", CLUSTER))
    stubber.add_response("create_launch_template", {})
    refused(stubber, "create_fleet", "InsufficientInstanceCapacity", 500)
    with pytest.raises(CloudError) as raised:
        instances.create(REQUEST, NODECLASS)
    assert (raised.value.code, raised.value.operation) == ("InsufficientInstanceCapacity", "CreateFleet")
    refused(stubber, "create_fleet", "AuthFailure.ServiceLinkedRoleCreationNotPermitted", 403)
    with pytest.raises(LaunchError) as failed:
        instances.create(REQUEST, NODECLASS)
    assert failed.value.spot_service_linked_role_missing


def test_a_refused_resolution_names_the_node_class_and_keeps_the_code(ec2: tuple[Any, Stubber]) -> None:
    made, stubber = ec2
    refused(stubber, "describe_subnets", "UnauthorizedOperation", 403)
    resolver = NodeClassResolver(made, client("ssm"), client("iam"), "c1", "1.31")
    manifest = {"metadata": {"name": "default"}, "spec": {"subnetSelectorTerms": [{"id": "subnet-1"}]}}
    with pytest.raises(NodeClassResolutionError) as raised:
        resolver.resolve(manifest)
    assert raised.value.code == "UnauthorizedOperation"
    assert str(raised.value).startswith(
        'EC2NodeClass "default": DescribeSubnets failed (UnauthorizedOperation)'
    )


def test_a_translated_client_says_when_the_endpoint_gave_no_answer() -> None:
    made = client("sts")

    def unreachable(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="https://sts.example.invalid")

    made.meta.events.register("before-send.sts.GetCallerIdentity", unreachable)
    with pytest.raises(EndpointUnanswered) as raised:
        translated(made).get_caller_identity()
    assert (raised.value.operation, raised.value.kind) == ("get_caller_identity", "EndpointConnectionError")
    ec2 = client("ec2")
    with Stubber(ec2) as stubber:
        refused(stubber, "describe_vpc_endpoints", "UnauthorizedOperation", 403)
        with pytest.raises(CloudError):
            list(translated(ec2).get_paginator("describe_vpc_endpoints").paginate())


def _profile(name: str) -> dict[str, Any]:
    return {
        "Path": "/",
        "InstanceProfileName": name,
        "InstanceProfileId": "AIPAEXAMPLEEXAMPLE01",
        "Arn": f"arn:aws:iam::123456789012:instance-profile/{name}",
        "CreateDate": datetime(2026, 1, 1, tzinfo=UTC),
        "Roles": [],
    }


def test_the_state_stores_refusals_are_cloud_errors_and_a_lost_race_a_conflict() -> None:
    """The lifecycle (adoption) catches CloudError around store calls, as it caught ClientError."""
    from serverless_karpenter.adapters.state_store import Lease, NodeClaimStore

    dynamodb = client("dynamodb")
    with Stubber(dynamodb) as stubber:
        refused(stubber, "get_item", "ProvisionedThroughputExceededException")
        with pytest.raises(CloudError) as raised:
            NodeClaimStore(dynamodb, "t").get("default-abc")
        assert raised.value.throttled and raised.value.operation == "GetItem"
        refused(stubber, "update_item", "ConditionalCheckFailedException")
        assert not Lease(dynamodb, "t", "provisioner", "me").acquire(datetime(2026, 1, 1, tzinfo=UTC), 60)

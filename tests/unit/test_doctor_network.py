"""`doctor`'s reachability check from the functions' network (VPC mode for private-endpoint clusters): the
endpoint access mode against where the functions run, the security-group ingress, the VPC endpoints; each
missing piece its own ✗. Pure checks over facts, and the gathering of those facts from moto."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from serverless_karpenter import naming
from serverless_karpenter.doctor.checks import (
    REQUIRED_ENDPOINTS,
    CheckId,
    CheckResult,
    EndpointFacts,
    Facts,
    FunctionNetworkFacts,
    IngressRule,
    NetworkFacts,
    NodeClassFacts,
    StackFacts,
    Status,
    SubnetFacts,
    check_cluster_network,
    run_checks,
)
from serverless_karpenter.doctor.gather import Gatherer

from tests.integration.doctor_setup import CLUSTER, empty_facts

VPC = "vpc-0123456789abcdef0"
CLUSTER_SG = "sg-0c1u5ter000000000"
FUNCTIONS_SG = "sg-0f0000000000000001"
ENDPOINTS_SG = "sg-0e0000000000000002"
SUBNETS = {
    "subnet-0a": SubnetFacts("subnet-0a", "10.0.1.0/24", "us-east-1a", None, "rtb-0a"),
    "subnet-0b": SubnetFacts("subnet-0b", "10.0.2.0/24", "us-east-1b", None, "rtb-0b"),
}
PROFILE = "ServerlessKarpenter-doctor-NodeInstanceProfile"


def https_from(*groups: str, cidrs: tuple[str, ...] = ()) -> list[IngressRule]:
    return [IngressRule("tcp", 443, 443, source_groups=list(groups), cidrs=list(cidrs))]


def endpoints(*, without: tuple[str, ...] = ()) -> list[EndpointFacts]:
    """What the stack creates in VPC mode (the ones the functions call), but ``without``."""
    out = []
    for service, (kind, _) in REQUIRED_ENDPOINTS.items():
        if service in without:
            continue
        if kind == "Gateway":
            out.append(
                EndpointFacts(
                    f"vpce-{service}", service, kind, "available", route_tables=["rtb-0a", "rtb-0b"]
                )
            )
        else:
            out.append(
                EndpointFacts(
                    f"vpce-{service}",
                    service,
                    kind,
                    "available",
                    private_dns=True,
                    security_groups=[ENDPOINTS_SG],
                )
            )
    return out


def vpc_mode(**changes: Any) -> NetworkFacts:
    """A private-endpoint cluster with the functions in its VPC, set up as the stack sets it up."""
    network = NetworkFacts(
        cluster_vpc_id=VPC,
        public_access=False,
        private_access=True,
        public_access_cidrs=[],
        cluster_security_group_id=CLUSTER_SG,
        endpoint_group_ingress={
            CLUSTER_SG: [IngressRule("-1", None, None, source_groups=[CLUSTER_SG]), *https_from(FUNCTIONS_SG)]
        },
        functions={
            name: FunctionNetworkFacts(VPC, list(SUBNETS), [FUNCTIONS_SG]) for name in naming.FUNCTION_NAMES
        },
        subnets=dict(SUBNETS),
        endpoints=endpoints(),
        endpoint_ingress={ENDPOINTS_SG: https_from(FUNCTIONS_SG)},
        private_cluster_subnets=list(SUBNETS),
        private_cluster_route_tables=["rtb-0a", "rtb-0b"],
    )
    for key, value in changes.items():
        setattr(network, key, value)
    return network


def outside_vpc(**changes: Any) -> NetworkFacts:
    """The functions outside any VPC (the stack without VPC keys)."""
    return vpc_mode(
        functions={name: FunctionNetworkFacts(None) for name in naming.FUNCTION_NAMES},
        endpoints=[],
        **changes,
    )


def results(
    network: NetworkFacts | None, nodeclasses: list[NodeClassFacts] | None = None
) -> list[CheckResult]:
    facts: Facts = empty_facts()
    facts.stack = StackFacts(
        name=naming.stack_name(CLUSTER),
        status="CREATE_COMPLETE",
        outputs={naming.StackOutput.NODE_INSTANCE_PROFILE_NAME: PROFILE},
    )
    facts.network = network
    facts.nodeclasses = nodeclasses or []
    out = check_cluster_network(facts)
    assert {r.check for r in out} == {CheckId.CLUSTER_NETWORK}
    return out


def failures(out: list[CheckResult]) -> list[CheckResult]:
    return [r for r in out if r.status == Status.FAIL]


def test_a_private_endpoint_is_out_of_reach_of_functions_outside_any_vpc() -> None:
    [result] = results(outside_vpc())
    assert result.status == Status.FAIL
    assert "API endpoint is private (endpointPublicAccess=false)" in result.summary
    assert "watcher" in result.summary and "they cannot reach it" in result.summary
    # The fix is the deploy that puts them in the VPC, with the keys read from DescribeCluster.
    assert (
        f"cdk deploy -c clusterName={CLUSTER} -c vpcId={VPC} -c subnetIds=subnet-0a,subnet-0b "
        f"-c clusterSecurityGroupId={CLUSTER_SG} -c routeTableIds=rtb-0a,rtb-0b" in result.fix
    )


def test_public_access_cidrs_cannot_admit_functions_outside_a_vpc() -> None:
    [result] = results(outside_vpc(public_access=True, public_access_cidrs=["203.0.113.0/24"]))
    assert result.status == Status.FAIL
    assert "admits only 203.0.113.0/24 (publicAccessCidrs)" in result.summary
    assert "from no fixed address" in result.summary
    assert "vpcId=" in result.fix and "0.0.0.0/0" in result.fix


def test_a_public_endpoint_open_to_all_passes_outside_a_vpc() -> None:
    [result] = results(
        outside_vpc(public_access=True, public_access_cidrs=["0.0.0.0/0"], private_access=False)
    )
    assert result.status == Status.OK
    assert "public to 0.0.0.0/0" in result.summary


def test_vpc_mode_as_the_stack_builds_it_passes_and_says_where_prices_come_from() -> None:
    [result] = results(vpc_mode())
    assert result.status == Status.OK, result
    assert f"run in {VPC}" in result.summary and "private API endpoint" in result.summary
    assert "bundled snapshot (the Pricing API has no endpoint here)" in result.summary


def test_private_access_off_is_its_own_failure() -> None:
    [result] = failures(
        results(vpc_mode(private_access=False, public_access=True, public_access_cidrs=["0.0.0.0/0"]))
    )
    assert "endpointPrivateAccess=false" in result.summary and "no NAT route" in result.summary
    assert result.fix == (
        f"aws eks update-cluster-config --name {CLUSTER} --resources-vpc-config endpointPrivateAccess=true"
    )


def test_a_cluster_group_without_ingress_from_the_functions_fails() -> None:
    rules = {CLUSTER_SG: [IngressRule("-1", None, None, source_groups=[CLUSTER_SG])]}
    [result] = failures(results(vpc_mode(endpoint_group_ingress=rules)))
    assert f"({CLUSTER_SG}) admits the functions' group(s) {FUNCTIONS_SG} on 443" in result.summary
    assert (
        f"aws ec2 authorize-security-group-ingress --group-id {CLUSTER_SG} --protocol tcp --port 443 "
        f"--source-group {FUNCTIONS_SG}" in result.fix
    )


@pytest.mark.parametrize(
    ("rule", "admitted"),
    [
        (IngressRule("tcp", 443, 443, cidrs=["10.0.0.0/16"]), True),  # the VPC's CIDR covers both subnets
        (IngressRule("tcp", 443, 443, cidrs=["10.0.1.0/24"]), False),  # one subnet only
        (IngressRule("tcp", 0, 65535, source_groups=[FUNCTIONS_SG]), True),
        (IngressRule("-1", None, None, source_groups=[FUNCTIONS_SG]), True),
        (IngressRule("tcp", 80, 80, source_groups=[FUNCTIONS_SG]), False),
        (IngressRule("udp", 443, 443, source_groups=[FUNCTIONS_SG]), False),
    ],
)
def test_which_rules_admit_the_functions(rule: IngressRule, admitted: bool) -> None:
    out = results(vpc_mode(endpoint_group_ingress={CLUSTER_SG: [rule]}))
    assert (failures(out) == []) == admitted, out


def test_each_missing_endpoint_is_its_own_failure() -> None:
    out = failures(results(vpc_mode(endpoints=endpoints(without=("ec2", "sqs", "dynamodb")))))
    assert len(out) == 3
    ec2, sqs, dynamodb = sorted(out, key=lambda r: ["ec2", "sqs", "dynamodb"].index(r.summary.split()[1]))
    assert ec2.summary.startswith(f"no ec2 interface endpoint in {VPC}: the functions cannot reach ec2")
    assert "--service-name com.amazonaws.us-east-1.ec2 --private-dns-enabled" in ec2.fix
    assert sqs.summary.startswith("no sqs interface endpoint")
    assert dynamodb.summary.startswith(f"no dynamodb gateway endpoint in {VPC}")
    assert "--vpc-endpoint-type Gateway" in dynamodb.fix and "--route-table-ids rtb-0a rtb-0b" in dynamodb.fix


def test_sts_logs_and_monitoring_endpoints_are_not_required() -> None:
    """The stack creates them by default, but the functions do not call them over their own network."""
    assert not {"sts", "logs", "monitoring"} & set(REQUIRED_ENDPOINTS)
    assert failures(results(vpc_mode())) == []


def test_endpoints_that_exist_but_do_not_serve_the_functions() -> None:
    broken = endpoints()
    for endpoint in broken:
        if endpoint.service == "eks":
            endpoint.private_dns = False
        if endpoint.service == "ssm":
            endpoint.security_groups = ["sg-0other"]
        if endpoint.service == "dynamodb":
            endpoint.route_tables = ["rtb-0a"]
        if endpoint.service == "lambda":
            endpoint.state = "pending"
    out = failures(
        results(vpc_mode(endpoints=broken, endpoint_ingress={ENDPOINTS_SG: https_from(FUNCTIONS_SG)}))
    )
    summaries = sorted(r.summary for r in out)
    assert len(out) == 4, summaries
    assert any("eks endpoint vpce-eks has private DNS off" in s for s in summaries)
    assert any("ssm endpoint vpce-ssm's security group(s) sg-0other do not admit" in s for s in summaries)
    assert any("dynamodb gateway endpoint vpce-dynamodb is not in the route tables" in s for s in summaries)
    assert any(s.startswith("no lambda interface endpoint") for s in summaries)  # pending is not there yet
    [dynamodb] = [r for r in out if "dynamodb" in r.summary]
    assert (
        dynamodb.fix
        == "aws ec2 modify-vpc-endpoint --vpc-endpoint-id vpce-dynamodb --add-route-table-ids rtb-0b"
    )


def test_through_nat_no_endpoint_is_needed() -> None:
    nat = {k: SubnetFacts(s.id, s.cidr, s.zone, "nat-0123", s.route_table) for k, s in SUBNETS.items()}
    [result] = results(vpc_mode(subnets=nat, endpoints=[]))
    assert result.status == Status.OK
    assert "AWS APIs through nat-0123" in result.summary


def test_a_public_subnet_is_its_own_failure() -> None:
    subnets = dict(SUBNETS)
    subnets["subnet-0b"] = SubnetFacts("subnet-0b", "10.0.2.0/24", "us-east-1b", "igw-0123", "rtb-pub")
    [result] = failures(results(vpc_mode(subnets=subnets)))
    assert "subnet subnet-0b is public (0.0.0.0/0 goes to igw-0123)" in result.summary


def test_a_function_in_another_vpc_fails() -> None:
    network = vpc_mode()
    network.functions["watcher"] = FunctionNetworkFacts("vpc-0ther", list(SUBNETS), [FUNCTIONS_SG])
    [result] = failures(results(network))
    assert result.summary == f"function watcher runs in vpc-0ther, not in the cluster's VPC {VPC}"


def test_a_node_class_with_a_role_needs_iam_which_has_no_endpoint() -> None:
    with_role = NodeClassFacts("general", {"role": "KarpenterNodeRole-doctor"}, [], [], {})
    with_profile = NodeClassFacts("pinned", {"instanceProfile": PROFILE}, [], [], {})
    [result] = failures(results(vpc_mode(), [with_role, with_profile]))
    assert 'EC2NodeClass "general" uses spec.role' in result.summary
    assert "IAM has no VPC endpoint" in result.summary
    assert f"set spec.instanceProfile to {PROFILE}" in result.fix
    # Through NAT, IAM is reachable.
    nat = {k: SubnetFacts(s.id, s.cidr, s.zone, "nat-0123", s.route_table) for k, s in SUBNETS.items()}
    assert failures(results(vpc_mode(subnets=nat), [with_role])) == []


def test_not_gathered_or_unknown_is_never_a_pass() -> None:
    [result] = results(None)
    assert result.status == Status.SKIPPED
    [result] = results(vpc_mode(public_access=None, private_access=None))
    assert result.status == Status.SKIPPED
    [result] = results(vpc_mode(functions={}))
    assert result.status == Status.SKIPPED


def test_run_checks_reports_the_network_check_without_the_cluster() -> None:
    facts = empty_facts()
    facts.cluster_unavailable = "the cluster could not be reached"
    facts.network = outside_vpc()
    [result] = [r for r in run_checks(facts, lambda *a: {}) if r.check == CheckId.CLUSTER_NETWORK]
    # Reading the cluster's Kubernetes API is not needed to say that the functions cannot reach it.
    assert result.status == Status.FAIL


# -- gathering, from moto -----------------------------------------------------------------------------------


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        yield


def _zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("handler.py", "def lambda_handler(event, context):\n    return None\n")
    return buffer.getvalue()


def test_gathering_the_network_from_aws(aws: None) -> None:
    ec2: Any = boto3.client("ec2", region_name="us-east-1")
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    private = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24", AvailabilityZone="us-east-1a")["Subnet"][
        "SubnetId"
    ]
    public = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.2.0/24", AvailabilityZone="us-east-1b")["Subnet"][
        "SubnetId"
    ]
    igw = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)
    public_table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    ec2.create_route(RouteTableId=public_table, DestinationCidrBlock="0.0.0.0/0", GatewayId=igw)
    ec2.associate_route_table(RouteTableId=public_table, SubnetId=public)
    private_table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
    ec2.associate_route_table(RouteTableId=private_table, SubnetId=private)
    cluster_sg = ec2.create_security_group(GroupName="eks-cluster", Description="cluster", VpcId=vpc)[
        "GroupId"
    ]
    functions_sg = ec2.create_security_group(GroupName="functions", Description="functions", VpcId=vpc)[
        "GroupId"
    ]
    ec2.authorize_security_group_ingress(
        GroupId=cluster_sg,
        IpPermissions=[
            {
                "IpProtocol": "tcp",
                "FromPort": 443,
                "ToPort": 443,
                "UserIdGroupPairs": [{"GroupId": functions_sg}],
            }
        ],
    )
    ec2.create_vpc_endpoint(
        VpcId=vpc,
        ServiceName="com.amazonaws.us-east-1.dynamodb",
        VpcEndpointType="Gateway",
        RouteTableIds=[private_table],
    )
    ec2.create_vpc_endpoint(
        VpcId=vpc,
        ServiceName="com.amazonaws.us-east-1.ec2",
        VpcEndpointType="Interface",
        SubnetIds=[private],
        SecurityGroupIds=[functions_sg],
        PrivateDnsEnabled=True,
    )
    iam: Any = boto3.client("iam", region_name="us-east-1")
    role = iam.create_role(
        RoleName="fn",
        AssumeRolePolicyDocument=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "lambda.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
        ),
    )["Role"]["Arn"]
    lambda_: Any = boto3.client("lambda", region_name="us-east-1")
    outputs = {}
    for name in ("watcher", "provisioner"):
        physical = f"{CLUSTER}-{name}"
        kwargs: dict[str, Any] = {}
        if name == "provisioner":
            kwargs["VpcConfig"] = {"SubnetIds": [private], "SecurityGroupIds": [functions_sg]}
        lambda_.create_function(
            FunctionName=physical,
            Runtime="python3.14",
            Role=role,
            Handler="handler.lambda_handler",
            Code={"ZipFile": _zip()},
            **kwargs,
        )
        outputs[naming.function_output(name)] = physical
    eks_cluster = {
        "resourcesVpcConfig": {
            "vpcId": vpc,
            "subnetIds": [private, public],
            "securityGroupIds": [],
            "clusterSecurityGroupId": cluster_sg,
            "endpointPublicAccess": False,
            "endpointPrivateAccess": True,
            "publicAccessCidrs": [],
        }
    }
    gatherer = Gatherer(
        CLUSTER, "us-east-1", lambda service: boto3.client(service, region_name="us-east-1"), None
    )
    network = gatherer.network(eks_cluster, outputs)
    assert network is not None
    assert network.functions["watcher"] == FunctionNetworkFacts(None)
    provisioner = network.functions["provisioner"]
    assert (provisioner.vpc_id, provisioner.subnet_ids, provisioner.security_groups) == (
        vpc,
        [private],
        [functions_sg],
    )
    assert (
        network.subnets[private].default_route is None
        and network.subnets[private].route_table == private_table
    )
    assert network.subnets[private].cidr == "10.0.1.0/24"
    assert any(
        r.admits_https([functions_sg], ["10.0.1.0/24"]) for r in network.endpoint_group_ingress[cluster_sg]
    )
    by_service = {e.service: e for e in network.endpoints}
    assert by_service["dynamodb"].type == "Gateway" and by_service["dynamodb"].route_tables == [private_table]
    assert by_service["ec2"].type == "Interface" and by_service["ec2"].private_dns
    # Only the private subnet is offered for the VPC-mode deploy.
    assert network.private_cluster_subnets == [private]
    assert network.private_cluster_route_tables == [private_table]

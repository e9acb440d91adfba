"""VPC mode (private-endpoint clusters): the context keys, and the synthesized functions' VPC configuration,
the security-group rules, the VPC endpoints, cfn-lint and cdk-nag, with endpoints and through NAT.

Synthesized offline from explicit context keys: no credentials, no lookups.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cfnlint.api import lint_file

from infra.config import (
    INTERFACE_ENDPOINT_SERVICES,
    VPC_ENDPOINT_SERVICES,
    ContextError,
    NetworkConfig,
    context_getter,
    read_cluster_configs,
)
from tests.infra.helpers import resources_of_type

pytestmark = pytest.mark.infra

VPC = "vpc-0123456789abcdef0"
SUBNETS = ("subnet-0aaaaaaaaaaaaaaa1", "subnet-0bbbbbbbbbbbbbbb2")
CLUSTER_SG = "sg-0ccccccccccccccc3"
ROUTE_TABLES = ("rtb-0ddddddddddddddd4", "rtb-0eeeeeeeeeeeeeee5")
VPC_CONTEXT: dict[str, object] = {
    "vpcId": VPC,
    "subnetIds": ",".join(SUBNETS),
    "clusterSecurityGroupId": CLUSTER_SG,
    "routeTableIds": ",".join(ROUTE_TABLES),
}
ENDPOINTS_CLUSTER = "private"  # every endpoint the functions need
NAT_CLUSTER = "private-nat"  # vpcEndpoints=none: the subnets route through a NAT gateway


def network(**context: object) -> NetworkConfig | None:
    (config,) = read_cluster_configs(context_getter({"clusterName": "c", **context}))
    return config.network


# -- context ----------------------------------------------------------------------------------------------


def test_no_vpc_key_means_no_vpc() -> None:
    assert network() is None


def test_vpc_keys_with_every_endpoint_by_default() -> None:
    config = network(**VPC_CONTEXT)
    assert config == NetworkConfig(
        vpc_id=VPC,
        subnet_ids=SUBNETS,
        cluster_security_group_id=CLUSTER_SG,
        endpoints=VPC_ENDPOINT_SERVICES,
        route_table_ids=ROUTE_TABLES,
    )
    assert config is not None and config.gateway_endpoints == ("dynamodb",)
    assert config.interface_endpoints == INTERFACE_ENDPOINT_SERVICES


def test_vpc_keys_as_lists_and_a_subset_of_endpoints() -> None:
    config = network(
        vpcId=VPC, subnetIds=list(SUBNETS), clusterSecurityGroupId=CLUSTER_SG, vpcEndpoints="EKS, sts ,ec2"
    )
    assert config is not None
    assert config.subnet_ids == SUBNETS
    assert config.endpoints == ("sts", "ec2", "eks")  # in the canonical order
    assert config.route_table_ids == ()  # no DynamoDB endpoint, so no route tables needed


def test_x_ray_is_an_endpoint_on_request_only() -> None:
    config = network(
        vpcId=VPC, subnetIds=SUBNETS[0], clusterSecurityGroupId=CLUSTER_SG, vpcEndpoints="xray,ec2"
    )
    assert config is not None and config.interface_endpoints == ("ec2", "xray")
    default = network(**VPC_CONTEXT)
    assert default is not None and "xray" not in default.endpoints


def test_vpc_endpoints_none_means_nat() -> None:
    config = network(vpcId=VPC, subnetIds=SUBNETS[0], clusterSecurityGroupId=CLUSTER_SG, vpcEndpoints="none")
    assert config is not None and config.endpoints == ()


@pytest.mark.parametrize(
    ("context", "message"),
    [
        ({"vpcId": VPC}, r"missing context 'subnetIds', 'clusterSecurityGroupId'.*resourcesVpcConfig"),
        ({"subnetIds": SUBNETS[0]}, "missing context 'vpcId'"),
        ({**VPC_CONTEXT, "vpcId": "vpc-nothex"}, "not a VPC id"),
        ({**VPC_CONTEXT, "subnetIds": "subnet-0aaaaaaaaaaaaaaa1,sg-0ccccccccccccccc3"}, "not a subnet id"),
        ({**VPC_CONTEXT, "clusterSecurityGroupId": VPC}, "not a security group id"),
        ({**VPC_CONTEXT, "vpcEndpoints": "ec2,iam"}, r"unknown service\(s\) \['iam'\]"),
        ({**VPC_CONTEXT, "routeTableIds": ""}, "missing context 'routeTableIds'"),
        ({**VPC_CONTEXT, "vpcEndpoints": "ec2"}, "'routeTableIds' is only for the DynamoDB gateway endpoint"),
        ({**VPC_CONTEXT, "clusterName": None, "clusterNames": "a,b"}, "deploy each VPC-mode cluster"),
    ],
)
def test_invalid_vpc_context_names_the_key(context: dict[str, object], message: str) -> None:
    values = {"clusterName": "c", **context}
    with pytest.raises(ContextError, match=message):
        read_cluster_configs(context_getter({k: v for k, v in values.items() if v is not None}))


# -- synthesized --------------------------------------------------------------------------------------------


@dataclass
class VpcSynth:
    stacks: dict[str, Any]
    templates: dict[str, dict[str, Any]]
    paths: dict[str, Path]


@pytest.fixture(scope="module")
def vpc_synth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VpcSynth]:
    """Both VPC variants in one app (one synth), checked by cdk-nag as `cdk deploy` checks them."""
    os.environ.pop("CDK_DEFAULT_ACCOUNT", None)
    os.environ.pop("CDK_DEFAULT_REGION", None)
    from aws_cdk import App, Validations
    from cdk_nag import AwsSolutionsChecks

    from infra.stack import ServerlessKarpenterStack

    outdir = tmp_path_factory.mktemp("cdk.out.vpc")
    app = App(outdir=str(outdir))
    contexts = {
        ENDPOINTS_CLUSTER: {"clusterName": ENDPOINTS_CLUSTER, **VPC_CONTEXT},
        NAT_CLUSTER: {
            "clusterName": NAT_CLUSTER,
            **{k: v for k, v in VPC_CONTEXT.items() if k != "routeTableIds"},
            "vpcEndpoints": "none",
            # X-Ray on (off by default): synthesized and checked by cdk-nag here too.
            "tracing": "true",
            "dashboard": "false",
        },
    }
    stacks = {}
    for name, context in contexts.items():
        (config,) = read_cluster_configs(context_getter(context))
        stacks[name] = ServerlessKarpenterStack(app, config.stack_name, config=config)
    Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True))
    assembly = app.synth()  # raises on any unacknowledged cdk-nag finding
    paths = {name: Path(assembly.directory) / stack.template_file for name, stack in stacks.items()}
    yield VpcSynth(
        stacks=stacks,
        templates={name: json.loads(path.read_text()) for name, path in paths.items()},
        paths=paths,
    )


def functions_security_group(template: dict[str, Any]) -> str:
    groups = [
        logical_id
        for logical_id in resources_of_type(template, "AWS::EC2::SecurityGroup")
        if logical_id.startswith("NetworkFunctionsSecurityGroup")
    ]
    (group,) = groups
    return group


@pytest.mark.parametrize("cluster", [ENDPOINTS_CLUSTER, NAT_CLUSTER])
def test_every_function_runs_in_the_subnets_with_its_own_security_group(
    vpc_synth: VpcSynth, cluster: str
) -> None:
    template = vpc_synth.templates[cluster]
    group = functions_security_group(template)
    functions = resources_of_type(template, "AWS::Lambda::Function")
    assert len(functions) == 5
    for function in functions.values():
        assert function["Properties"]["VpcConfig"] == {
            "SubnetIds": list(SUBNETS),
            "SecurityGroupIds": [{"Fn::GetAtt": [group, "GroupId"]}],
        }
    # Its group is its own (not the cluster's), and it only opens HTTPS outwards.
    egress = template["Resources"][group]["Properties"]["SecurityGroupEgress"]
    assert egress == [
        {
            "CidrIp": "0.0.0.0/0",
            "Description": "HTTPS to the cluster API and AWS APIs",
            "FromPort": 443,
            "IpProtocol": "tcp",
            "ToPort": 443,
        }
    ]
    assert "SecurityGroupIngress" not in template["Resources"][group]["Properties"]


@pytest.mark.parametrize("cluster", [ENDPOINTS_CLUSTER, NAT_CLUSTER])
def test_the_cluster_security_group_admits_the_functions_on_443(vpc_synth: VpcSynth, cluster: str) -> None:
    template = vpc_synth.templates[cluster]
    group = functions_security_group(template)
    rules = [
        r["Properties"]
        for r in resources_of_type(template, "AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"]["GroupId"] == CLUSTER_SG
    ]
    assert len(rules) == 1
    (rule,) = rules
    assert (rule["IpProtocol"], rule["FromPort"], rule["ToPort"]) == ("tcp", 443, 443)
    assert rule["SourceSecurityGroupId"] == {"Fn::GetAtt": [group, "GroupId"]}


@pytest.mark.parametrize("cluster", [ENDPOINTS_CLUSTER, NAT_CLUSTER])
def test_the_lambda_service_may_manage_every_functions_enis(vpc_synth: VpcSynth, cluster: str) -> None:
    template = vpc_synth.templates[cluster]
    policies = [
        (logical_id, p["Properties"])
        for logical_id, p in resources_of_type(template, "AWS::IAM::Policy").items()
        if any(
            "ec2:CreateNetworkInterface" in s["Action"]
            for s in p["Properties"]["PolicyDocument"]["Statement"]
        )
    ]
    assert len(policies) == 1
    (policy_id, policy) = policies[0]
    (statement,) = policy["PolicyDocument"]["Statement"]
    assert set(statement["Action"]) == {
        "ec2:CreateNetworkInterface",
        "ec2:DescribeNetworkInterfaces",
        "ec2:DescribeSubnets",
        "ec2:DeleteNetworkInterface",
        "ec2:AssignPrivateIpAddresses",
        "ec2:UnassignPrivateIpAddresses",
    }
    functions = resources_of_type(template, "AWS::Lambda::Function")
    roles = {f["Properties"]["Role"]["Fn::GetAtt"][0] for f in functions.values()}
    assert {r["Ref"] for r in policy["Roles"]} == roles
    # Lambda checks the role when it creates a VPC function: the policy and the way in come first.
    ingress = next(
        logical_id
        for logical_id, r in resources_of_type(template, "AWS::EC2::SecurityGroupIngress").items()
        if r["Properties"]["GroupId"] == CLUSTER_SG
    )
    for function in functions.values():
        assert {policy_id, ingress} <= set(function["DependsOn"])


def test_interface_and_gateway_endpoints(vpc_synth: VpcSynth) -> None:
    template = vpc_synth.templates[ENDPOINTS_CLUSTER]
    functions_group = functions_security_group(template)
    endpoints = resources_of_type(template, "AWS::EC2::VPCEndpoint")
    by_service: dict[str, dict[str, Any]] = {}
    for endpoint in endpoints.values():
        prefix, region, suffix = endpoint["Properties"]["ServiceName"]["Fn::Join"][1]
        assert (prefix, region) == ("com.amazonaws.", {"Ref": "AWS::Region"})
        by_service[suffix.lstrip(".")] = endpoint["Properties"]
    assert set(by_service) == {"sts", "ec2", "sqs", "ssm", "eks", "lambda", "logs", "monitoring", "dynamodb"}

    (endpoint_group,) = [
        logical_id
        for logical_id, r in resources_of_type(template, "AWS::EC2::SecurityGroup").items()
        if logical_id != functions_group
    ]
    for service in INTERFACE_ENDPOINT_SERVICES:
        properties = by_service[service]
        assert properties["VpcEndpointType"] == "Interface"
        assert properties["VpcId"] == VPC
        assert properties["SubnetIds"] == list(SUBNETS)
        assert properties["PrivateDnsEnabled"] is True  # the SDK's default hostnames resolve to it
        assert properties["SecurityGroupIds"] == [{"Fn::GetAtt": [endpoint_group, "GroupId"]}]
    dynamodb = by_service["dynamodb"]
    assert dynamodb["VpcEndpointType"] == "Gateway"
    assert dynamodb["RouteTableIds"] == list(ROUTE_TABLES)
    assert dynamodb["VpcId"] == VPC

    # The endpoints admit HTTPS from the functions only.
    (rule,) = [
        r["Properties"]
        for r in resources_of_type(template, "AWS::EC2::SecurityGroupIngress").values()
        if r["Properties"]["GroupId"] == {"Fn::GetAtt": [endpoint_group, "GroupId"]}
    ]
    assert (rule["IpProtocol"], rule["FromPort"], rule["ToPort"]) == ("tcp", 443, 443)
    assert rule["SourceSecurityGroupId"] == {"Fn::GetAtt": [functions_group, "GroupId"]}
    # Every function waits for every endpoint.
    for function in resources_of_type(template, "AWS::Lambda::Function").values():
        assert set(endpoints) <= set(function["DependsOn"])


def test_nat_mode_creates_no_endpoint(vpc_synth: VpcSynth) -> None:
    template = vpc_synth.templates[NAT_CLUSTER]
    assert resources_of_type(template, "AWS::EC2::VPCEndpoint") == {}
    assert len(resources_of_type(template, "AWS::EC2::SecurityGroup")) == 1  # the functions' own


def test_outside_a_vpc_nothing_changes(template: dict[str, Any]) -> None:
    """The default (public endpoint): no VPC configuration, no EC2 network resource."""
    for function in resources_of_type(template, "AWS::Lambda::Function").values():
        assert "VpcConfig" not in function["Properties"]
    assert not [r for r in template["Resources"].values() if r["Type"].startswith("AWS::EC2::")]


@pytest.mark.parametrize("cluster", [ENDPOINTS_CLUSTER, NAT_CLUSTER])
def test_vpc_mode_lints_clean(vpc_synth: VpcSynth, cluster: str) -> None:
    matches = lint_file(vpc_synth.paths[cluster])
    errors = [f"{m.rule.id} {m.message} ({m.path})" for m in matches if m.rule.id.startswith("E")]
    assert errors == []
    # No dependency the template already has through a reference (W3005), beyond the roles' own (CDK's).
    redundant = [m.message for m in matches if m.rule.id == "W3005" and "Role" not in m.message.split("'")[1]]
    assert redundant == []


@pytest.mark.parametrize("cluster", [ENDPOINTS_CLUSTER, NAT_CLUSTER])
def test_vpc_mode_passes_cdk_nag(vpc_synth: VpcSynth, cluster: str) -> None:
    from cdk_nag import AwsSolutionsChecks

    stack = vpc_synth.stacks[cluster]
    report = AwsSolutionsChecks().validate_scope(stack)
    errors = [
        f"{v.rule_name}: {v.description[:80]}"
        for v in report.violations
        if str(v.severity).lower() == "error"
    ]
    assert errors == []
    # The one acknowledgment VPC mode adds: the ENI actions on '*', on their own policy, with the reason.
    (vpc_ack,) = [a for a in stack.acknowledgments if "/Network/" in a.path]
    assert vpc_ack.rule == "AwsSolutions-IAM5[Resource::*]"
    assert vpc_ack.path.endswith("/Network/FunctionsVpcAccess")
    assert "DescribeNetworkInterfaces" in vpc_ack.reason


def test_tracing_on_request_traces_every_function_and_grants_x_ray(vpc_synth: VpcSynth) -> None:
    for cluster, traced in ((NAT_CLUSTER, True), (ENDPOINTS_CLUSTER, False)):
        template = vpc_synth.templates[cluster]
        for function in resources_of_type(template, "AWS::Lambda::Function").values():
            props = function["Properties"]
            assert ("TracingConfig" in props) is traced
            assert ("POWERTOOLS_TRACE_DISABLED" in props["Environment"]["Variables"]) is not traced
            if traced:
                assert props["TracingConfig"] == {"Mode": "Active"}
        granted = json.dumps(resources_of_type(template, "AWS::IAM::Policy"))
        assert ("xray:PutTraceSegments" in granted) is traced, cluster


def test_dashboard_false_leaves_the_dashboard_out_and_keeps_the_alarms(vpc_synth: VpcSynth) -> None:
    without, default = vpc_synth.templates[NAT_CLUSTER], vpc_synth.templates[ENDPOINTS_CLUSTER]
    assert not resources_of_type(without, "AWS::CloudWatch::Dashboard")
    assert "DashboardName" not in without["Outputs"]
    assert len(resources_of_type(default, "AWS::CloudWatch::Dashboard")) == 1
    assert "DashboardName" in default["Outputs"]
    assert len(resources_of_type(without, "AWS::CloudWatch::Alarm")) == len(
        resources_of_type(default, "AWS::CloudWatch::Alarm")
    )

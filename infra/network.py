"""VPC mode: the functions run in the cluster's VPC, for a cluster whose API endpoint is private.

Lambda functions outside a VPC reach a cluster only through its public endpoint, and from no fixed
address (so `publicAccessCidrs` cannot admit them). A private endpoint (EKS's recommended set-up) is
reachable only from inside the VPC: the functions then get ENIs in the given subnets, one security group
of their own, an ingress rule on 443 from that group to the cluster security group, and, unless the
subnets reach AWS through a NAT gateway, VPC endpoints for the AWS APIs they call (chosen by the
`vpcEndpoints` context key; see infra/README.md).

Everything is built from ids in the context, with L1 resources where the L2 would need to know each
subnet's zone (an offline synth does not): a synth never needs credentials or lookups.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Fn
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from constructs import Construct

from infra.config import NetworkConfig

HTTPS = 443
# What the Lambda service does with a VPC function's execution role: create, describe and delete the
# function's ENIs. The same actions as the AWS-managed AWSLambdaVPCAccessExecutionRole, without its
# logs:* on every log group (each role already writes to its own). AWS documents DescribeNetworkInterfaces
# as working only on "*", and DeleteNetworkInterface as failing unless every ENI id is allowed: the ENIs
# are Lambda's, created at run time, and carry no tag of ours to scope by.
VPC_ACCESS_ACTIONS = (
    "ec2:CreateNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
)

# The `vpcEndpoints` names, as CDK's endpoint services: their names carry the partition's prefix
# (cn.com.amazonaws... in China) when the stack's region is known.
INTERFACE_SERVICES: dict[str, ec2.InterfaceVpcEndpointAwsService] = {
    "sts": ec2.InterfaceVpcEndpointAwsService.STS,
    "ec2": ec2.InterfaceVpcEndpointAwsService.EC2,
    "sqs": ec2.InterfaceVpcEndpointAwsService.SQS,
    "ssm": ec2.InterfaceVpcEndpointAwsService.SSM,
    "eks": ec2.InterfaceVpcEndpointAwsService.EKS,
    "lambda": ec2.InterfaceVpcEndpointAwsService.LAMBDA_,
    "logs": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_LOGS,
    "monitoring": ec2.InterfaceVpcEndpointAwsService.CLOUDWATCH_MONITORING,
    "xray": ec2.InterfaceVpcEndpointAwsService.XRAY,
}
GATEWAY_SERVICES: dict[str, ec2.GatewayVpcEndpointAwsService] = {
    "dynamodb": ec2.GatewayVpcEndpointAwsService.DYNAMODB,
}


def endpoint_construct_id(service: str) -> str:
    return f"{service.capitalize()}Endpoint"


class FunctionNetwork(Construct):
    """The functions' security group, their way into the cluster, and the VPC endpoints they need."""

    def __init__(
        self, scope: Construct, construct_id: str, *, cluster_name: str, config: NetworkConfig
    ) -> None:
        super().__init__(scope, construct_id)
        self.config = config
        # The region's zones as a deploy-time list: nothing here selects subnets by zone (the functions'
        # and the endpoints' subnets are given), and an offline synth cannot know them.
        self.vpc = ec2.Vpc.from_vpc_attributes(
            self, "Vpc", vpc_id=config.vpc_id, availability_zones=Fn.get_azs()
        )
        self.subnets = [
            ec2.Subnet.from_subnet_id(self, f"Subnet{index}", subnet_id)
            for index, subnet_id in enumerate(config.subnet_ids)
        ]

        # Outbound HTTPS only: the cluster's endpoint and the AWS APIs (through endpoints or NAT) are all
        # on 443, and DNS goes to the VPC resolver, which security groups do not filter.
        self.security_group = ec2.SecurityGroup(
            self,
            "FunctionsSecurityGroup",
            vpc=self.vpc,
            description=f"serverless-karpenter {cluster_name} functions: HTTPS to the cluster and AWS APIs",
            allow_all_outbound=False,
        )
        self.security_group.add_egress_rule(
            ec2.Peer.any_ipv4(), ec2.Port.tcp(HTTPS), "HTTPS to the cluster API and AWS APIs"
        )
        # The cluster security group guards the API endpoint's ENIs: admit the functions on 443.
        self.cluster_ingress = ec2.CfnSecurityGroupIngress(
            self,
            "ClusterApiIngress",
            group_id=config.cluster_security_group_id,
            ip_protocol="tcp",
            from_port=HTTPS,
            to_port=HTTPS,
            source_security_group_id=self.security_group.security_group_id,
            description=f"serverless-karpenter {cluster_name} functions to the Kubernetes API",
        )

        self.endpoints: dict[str, ec2.CfnVPCEndpoint] = {}
        self.endpoint_security_group: ec2.SecurityGroup | None = None
        if config.interface_endpoints:
            self.endpoint_security_group = ec2.SecurityGroup(
                self,
                "EndpointsSecurityGroup",
                vpc=self.vpc,
                description=f"serverless-karpenter {cluster_name}: VPC endpoints, HTTPS from the functions",
                allow_all_outbound=False,
            )
            self.endpoint_security_group.add_ingress_rule(
                self.security_group, ec2.Port.tcp(HTTPS), "HTTPS from the serverless-karpenter functions"
            )
            for service in config.interface_endpoints:
                self.endpoints[service] = ec2.CfnVPCEndpoint(
                    self,
                    endpoint_construct_id(service),
                    vpc_id=config.vpc_id,
                    service_name=INTERFACE_SERVICES[service].name,
                    vpc_endpoint_type="Interface",
                    # One subnet per zone, as EC2 requires of an interface endpoint: the functions' own.
                    subnet_ids=list(config.subnet_ids),
                    security_group_ids=[self.endpoint_security_group.security_group_id],
                    # The SDK's default hostnames then resolve to the endpoint: no code path differs.
                    private_dns_enabled=True,
                )
        for service in config.gateway_endpoints:
            self.endpoints[service] = ec2.CfnVPCEndpoint(
                self,
                endpoint_construct_id(service),
                vpc_id=config.vpc_id,
                service_name=GATEWAY_SERVICES[service].name,
                vpc_endpoint_type="Gateway",
                route_table_ids=list(config.route_table_ids),
            )

        self.vpc_access_policy = iam.Policy(
            self,
            "FunctionsVpcAccess",
            statements=[iam.PolicyStatement(actions=list(VPC_ACCESS_ACTIONS), resources=["*"])],
        )

    def attach(self, role: iam.Role, function: Construct) -> None:
        """Let the Lambda service manage ``function``'s ENIs with ``role`` (CDK adds nothing to a role it
        is given), and create the function only once it can reach the cluster and the AWS APIs: its
        first scheduled run follows at once."""
        self.vpc_access_policy.attach_to_role(role)
        function.node.add_dependency(
            self.vpc_access_policy,
            self.cluster_ingress,
            *self.endpoints.values(),
            *([self.endpoint_security_group] if self.endpoint_security_group else []),
        )

    def function_props(self) -> dict[str, Any]:
        """What a function that talks to the cluster is given to run in the VPC."""
        return {
            "vpc": self.vpc,
            "vpc_subnets": ec2.SubnetSelection(subnets=self.subnets),
            "security_groups": [self.security_group],
        }

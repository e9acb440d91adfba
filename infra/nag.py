"""cdk-nag acknowledgments: each on one construct, for one finding, with the reason written down.

Nothing is acknowledged for a whole stack or a whole rule. Wildcard-resource findings (AwsSolutions-IAM5)
are derived from the policies as synthesized, and each wildcard gets the reason for its resource type;
a wildcard with no reason written here stays an error, so a new one cannot slip in unexplained.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aws_cdk import Acknowledgment, Stack, Validations
from aws_cdk import aws_iam as iam
from constructs import IConstruct

from infra.iam import NODE_MANAGED_POLICY_REASONS

if TYPE_CHECKING:
    from infra.stack import ServerlessKarpenterStack

# Why a wildcard is needed, by the resource type in the ARN (the part before "/*").
_NOT_TAGGABLE = "EC2 evaluates request tags only on resources being created, so (as in Karpenter's policy) "
_CREATED_AT_RUN_TIME = "created at run time, so their ids are unknown at deploy time; "
WILDCARD_RESOURCE_REASONS: dict[str, str] = {
    "image": (
        "RunInstances/CreateFleet use the AMI the EC2NodeClass selects (amiSelectorTerms), often an "
        "AWS-owned EKS-optimised AMI: its id is only known at run time and it cannot carry our tags"
    ),
    "snapshot": (
        "the snapshots behind the selected AMI's block devices: AWS-owned, so neither known nor taggable "
        "in advance"
    ),
    "security-group": (
        "security groups are chosen at run time by the EC2NodeClass's securityGroupSelectorTerms; "
        + _NOT_TAGGABLE
        + "this cannot be tag-conditioned"
    ),
    "subnet": (
        "subnets are chosen at run time by the EC2NodeClass's subnetSelectorTerms; "
        + _NOT_TAGGABLE
        + "this cannot be tag-conditioned"
    ),
    "capacity-reservation": (
        "capacity reservations are chosen at run time by the EC2NodeClass's "
        "capacityReservationSelectorTerms; they are not created by us and cannot be tag-conditioned"
    ),
    "launch-template": (
        "launch templates are "
        + _CREATED_AT_RUN_TIME
        + "every statement on them requires this cluster's request or resource tags"
    ),
    "instance": (
        "instances are " + _CREATED_AT_RUN_TIME + "launch, tagging and termination all require this "
        "cluster's request or resource tags"
    ),
    "fleet": "instant fleets are "
    + _CREATED_AT_RUN_TIME
    + "the statement requires this cluster's request tags",
    "volume": "EBS volumes are "
    + _CREATED_AT_RUN_TIME
    + "the statement requires this cluster's request tags",
    "network-interface": (
        "network interfaces are "
        + _CREATED_AT_RUN_TIME
        + "the statement requires this cluster's request tags"
    ),
    "spot-instances-request": (
        "spot requests are " + _CREATED_AT_RUN_TIME + "the statement requires this cluster's request tags"
    ),
    "instance-profile": (
        "instance profiles are created per EC2NodeClass at run time (spec.role); create, tag and "
        "add/remove role require this cluster's and this region's tags; only GetInstanceProfile (read) "
        "is unconditioned"
    ),
    "parameter": (
        "ssm:GetParameter on AWS's public parameters under /aws/service/ (EKS-optimised AMI ids) only"
    ),
}
NODE_MANAGED_POLICY_REASON = (
    "EKS nodes need this AWS-maintained policy for {why} (one of the four of Karpenter's "
    "KarpenterNodeRole: worker node, CNI, ECR pull-only, SSM); AWS keeps it in step with EKS, which a "
    "copied customer policy would not be"
)
VPC_ACCESS_REASON = (
    "VPC mode: the Lambda service manages the functions' ENIs with their execution roles; AWS documents "
    "DescribeNetworkInterfaces as working only on '*' and DeleteNetworkInterface as needing every ENI id, "
    "and the ENIs are Lambda's, made at run time (the actions of AWSLambdaVPCAccessExecutionRole, "
    "without its logs:* on '*')"
)
UNSCOPABLE_ACTIONS_REASON = "'*' only for actions AWS offers no resource-level permission for: {actions}"
REGION_LIMITED_REASON = " (the EC2 reads are limited to this region by aws:RequestedRegion)"


@dataclass(frozen=True)
class NagAcknowledgment:
    path: str
    rule: str
    reason: str


def acknowledge(construct: IConstruct, rule: str, reason: str) -> NagAcknowledgment:
    # The bare rule id: honoured both by synth's validation and by cdk-nag's own validate_scope().
    Validations.of(construct).acknowledge(Acknowledgment(id=rule, reason=reason))
    return NagAcknowledgment(construct.node.path, rule, reason)


def render(value: Any) -> str:
    """A resolved CloudFormation value as cdk-nag prints it: ``{"Ref": "AWS::Region"}`` is
    ``<AWS::Region>``."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Ref" in value:
        return f"<{value['Ref']}>"
    if isinstance(value, dict) and "Fn::GetAtt" in value:
        return "<{}.{}>".format(*value["Fn::GetAtt"])
    if isinstance(value, dict) and "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return str(separator).join(render(part) for part in parts)
    raise ValueError(f"cannot render {value!r}")


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _wildcard_resource_type(arn: str) -> str | None:
    match = re.search(r":([a-z-]+)/", arn)
    return match.group(1) if match else None


def acknowledge_role_wildcards(stack: Stack, role: iam.Role) -> list[NagAcknowledgment]:
    policy = role.node.try_find_child("DefaultPolicy")
    if not isinstance(policy, iam.Policy):
        return []
    document = stack.resolve(policy.document)
    unscopable: set[str] = set()
    acknowledged: list[NagAcknowledgment] = []
    seen: set[str] = set()
    for statement in document.get("Statement", []):
        actions = _as_list(statement["Action"])
        for resource in _as_list(statement.get("Resource", [])):
            arn = render(resource)
            if arn == "*":
                unscopable.update(actions)
            elif "*" in arn and arn not in seen:
                seen.add(arn)
                reason = WILDCARD_RESOURCE_REASONS.get(_wildcard_resource_type(arn) or "")
                if reason is not None:  # without a written reason the finding stays an error
                    acknowledged.append(acknowledge(role, f"AwsSolutions-IAM5[Resource::{arn}]", reason))
    if unscopable:
        reason = UNSCOPABLE_ACTIONS_REASON.format(actions=", ".join(sorted(unscopable)))
        if any(action.startswith("ec2:") for action in unscopable):
            reason += REGION_LIMITED_REASON
        acknowledged.append(acknowledge(role, "AwsSolutions-IAM5[Resource::*]", reason))
    return acknowledged


def acknowledge_findings(stack: ServerlessKarpenterStack) -> list[NagAcknowledgment]:
    acknowledged: list[NagAcknowledgment] = []
    node_role = stack.node_role.role
    if isinstance(node_role, iam.Role):
        cfn_role = node_role.node.default_child
        assert isinstance(cfn_role, iam.CfnRole)
        for managed_policy in stack.resolve(cfn_role.managed_policy_arns) or []:
            arn = render(managed_policy)
            why = NODE_MANAGED_POLICY_REASONS[arn.rsplit("/", 1)[-1]]
            acknowledged.append(
                acknowledge(
                    node_role, f"AwsSolutions-IAM4[Policy::{arn}]", NODE_MANAGED_POLICY_REASON.format(why=why)
                )
            )
    for role in stack.control_plane.roles.values():
        acknowledged.extend(acknowledge_role_wildcards(stack, role))
    if stack.network is not None:
        acknowledged.append(
            acknowledge(stack.network.vpc_access_policy, "AwsSolutions-IAM5[Resource::*]", VPC_ACCESS_REASON)
        )
    return acknowledged

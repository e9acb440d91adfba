"""The controller permissions the CDK stack grants each function's role, for the simulated account.

``infra/iam.py`` builds them with CDK, which the simulator does not ship with, so they are written here
again as plain policy statements: the same Sids, actions, resources and conditions, over the simulated
account's names. ``tests/infra/test_sim_policies_match_stack.py`` checks them against the synthesized
template, statement for statement, so the two cannot drift apart.

With them on the seeded roles, ``doctor``'s Lambda-permissions check simulates (see
:mod:`serverless_karpenter_sim.iam_simulation`) the very policies a deployed stack holds: its scoping to
the cluster's resources, region and tags included.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from serverless_karpenter import naming, state_schema
from serverless_karpenter.api import labels

if TYPE_CHECKING:
    from serverless_karpenter_sim.cloud import DeployedStack, SimulatedCloud

# The name the seeded roles' inline policy goes by (the stack's is CDK's "<Role>DefaultPolicy...").
POLICY_NAME = "ControllerPermissions"

EC2_DESCRIBE_ACTIONS = (
    "ec2:DescribeAvailabilityZones",
    "ec2:DescribeCapacityReservations",
    "ec2:DescribeImages",
    "ec2:DescribeInstances",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeLaunchTemplates",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSpotPriceHistory",
    "ec2:DescribeSubnets",
)
STATE_ACTIONS = (
    "dynamodb:BatchGetItem",
    "dynamodb:BatchWriteItem",
    "dynamodb:ConditionCheckItem",
    "dynamodb:DeleteItem",
    "dynamodb:DescribeTable",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:Query",
    "dynamodb:UpdateItem",
)
# What an SQS event source adds to the role of the function it triggers.
CONSUME_ACTIONS = (
    "sqs:ReceiveMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:GetQueueUrl",
    "sqs:DeleteMessage",
    "sqs:GetQueueAttributes",
)
PRE_EXISTING_LAUNCH_RESOURCE_TYPES = ("image", "snapshot", "security-group", "subnet", "capacity-reservation")
CREATED_LAUNCH_RESOURCE_TYPES = (
    "fleet",
    "instance",
    "volume",
    "network-interface",
    "launch-template",
    "spot-instances-request",
)

FUNCTION_CAPABILITIES: dict[str, tuple[str, ...]] = {
    "watcher": ("kubernetes-api", "invoke-provisioner"),
    "provisioner": (
        "kubernetes-api",
        "state-read-write",
        "ec2-read",
        "ec2-launch",
        "ec2-tag-instances",
        "ec2-terminate",
        "ec2-delete-launch-templates",
        "instance-profiles",
        "ssm-public-parameters",
        "pricing",
    ),
    "interruption": (
        "kubernetes-api",
        "state-read-write",
        "ec2-read",
        "send-termination-work",
        "park-malformed-interruptions",
    ),
    "disruption": (
        "kubernetes-api",
        "state-read-write",
        "ec2-read",
        "ssm-public-parameters",
        "pricing",
        "send-termination-work",
    ),
    "termination": (
        "kubernetes-api",
        "invoke-provisioner",
        "state-read-write",
        "ec2-read",
        "ec2-terminate",
        "send-termination-work",
    ),
}
# The queue each function consumes through an SQS event source (an attribute of StackArns).
CONSUMED_QUEUES = {"interruption": "interruption_queue", "termination": "termination_queue"}

Statement = dict[str, Any]


@dataclass(frozen=True)
class StackArns:
    """The stack's resources the statements name."""

    partition: str
    region: str
    account: str
    cluster: str
    state_table: str
    provisioner_function: str
    node_role: str
    interruption_queue: str
    interruption_dead_letter_queue: str
    termination_queue: str | None = None  # None: the simulated account has none


class ControllerStatements:
    """The statements of each capability, as ``infra.iam.ControllerPermissions`` builds them."""

    def __init__(self, arns: StackArns) -> None:
        self.arns = arns
        self.cluster_tag_key = f"{labels.TAG_CLUSTER_PREFIX}{arns.cluster}"

    def _ec2_arns(self, resource_types: tuple[str, ...] | list[str]) -> list[str]:
        a = self.arns
        # Images and snapshots may be owned by other accounts (public EKS AMIs): no account in the ARN.
        return [
            f"arn:{a.partition}:ec2:{a.region}:{'' if t in ('image', 'snapshot') else '*'}:{t}/*"
            for t in resource_types
        ]

    def _request_tags(self, owner_tag: str, create_actions: list[str] | None = None) -> dict[str, Any]:
        equals: dict[str, Any] = {
            f"aws:RequestTag/{self.cluster_tag_key}": "owned",
            f"aws:RequestTag/{labels.TAG_EKS_CLUSTER_NAME}": self.arns.cluster,
        }
        if create_actions:
            equals["ec2:CreateAction"] = create_actions
        return {"StringEquals": equals, "StringLike": {f"aws:RequestTag/{owner_tag}": "*"}}

    def _resource_tags(self, owner_tag: str = labels.NODEPOOL) -> dict[str, Any]:
        return {
            "StringEquals": {f"aws:ResourceTag/{self.cluster_tag_key}": "owned"},
            "StringLike": {f"aws:ResourceTag/{owner_tag}": "*"},
        }

    def statements(self, capability: str) -> list[Statement]:
        builders: dict[str, Callable[[], list[Statement]]] = {
            "kubernetes-api": self._kubernetes_api,
            "state-read-write": self._state_read_write,
            "ec2-read": self._ec2_read,
            "ec2-launch": self._ec2_launch,
            "ec2-tag-instances": self._ec2_tag_instances,
            "ec2-terminate": self._ec2_terminate,
            "ec2-delete-launch-templates": self._ec2_delete_launch_templates,
            "instance-profiles": self._instance_profiles,
            "ssm-public-parameters": self._ssm_public_parameters,
            "pricing": self._pricing,
            "invoke-provisioner": self._invoke_provisioner,
            "send-termination-work": self._send_termination_work,
            "park-malformed-interruptions": self._park_malformed_interruptions,
        }
        return builders[capability]()

    def _kubernetes_api(self) -> list[Statement]:
        a = self.arns
        return [
            {
                "Sid": "AllowAPIServerEndpointDiscovery",
                "Effect": "Allow",
                "Action": "eks:DescribeCluster",
                "Resource": f"arn:{a.partition}:eks:{a.region}:{a.account}:cluster/{a.cluster}",
            }
        ]

    def _state_read_write(self) -> list[Statement]:
        table = self.arns.state_table
        indexes = [f"{table}/index/{name}" for name in state_schema.GLOBAL_SECONDARY_INDEXES]
        return [
            {
                "Sid": "AllowStateTableReadWrite",
                "Effect": "Allow",
                "Action": list(STATE_ACTIONS),
                "Resource": [table, *indexes],
            }
        ]

    def _ec2_read(self) -> list[Statement]:
        return [
            {
                "Sid": "AllowRegionalReadActions",
                "Effect": "Allow",
                "Action": list(EC2_DESCRIBE_ACTIONS),
                "Resource": "*",
                "Condition": {"StringEquals": {"aws:RequestedRegion": self.arns.region}},
            }
        ]

    def _ec2_launch(self) -> list[Statement]:
        instance_like = [t for t in CREATED_LAUNCH_RESOURCE_TYPES if t != "launch-template"]
        launch = ["ec2:RunInstances", "ec2:CreateFleet"]
        return [
            {
                "Sid": "AllowLaunchWithExistingImagesSubnetsAndSecurityGroups",
                "Effect": "Allow",
                "Action": launch,
                "Resource": self._ec2_arns(PRE_EXISTING_LAUNCH_RESOURCE_TYPES),
            },
            {
                "Sid": "AllowLaunchFromOurLaunchTemplates",
                "Effect": "Allow",
                "Action": launch,
                "Resource": self._ec2_arns(["launch-template"]),
                "Condition": self._resource_tags(labels.EC2NODECLASS),
            },
            {
                "Sid": "AllowScopedEC2InstanceActionsWithTags",
                "Effect": "Allow",
                "Action": launch,
                "Resource": self._ec2_arns(instance_like),
                "Condition": self._request_tags(labels.NODEPOOL),
            },
            {
                "Sid": "AllowScopedLaunchTemplateCreation",
                "Effect": "Allow",
                "Action": "ec2:CreateLaunchTemplate",
                "Resource": self._ec2_arns(["launch-template"]),
                "Condition": self._request_tags(labels.EC2NODECLASS),
            },
            {
                "Sid": "AllowScopedResourceCreationTagging",
                "Effect": "Allow",
                "Action": "ec2:CreateTags",
                "Resource": self._ec2_arns(instance_like),
                "Condition": self._request_tags(labels.NODEPOOL, ["RunInstances", "CreateFleet"]),
            },
            {
                "Sid": "AllowScopedLaunchTemplateCreationTagging",
                "Effect": "Allow",
                "Action": "ec2:CreateTags",
                "Resource": self._ec2_arns(["launch-template"]),
                "Condition": self._request_tags(labels.EC2NODECLASS, ["CreateLaunchTemplate"]),
            },
            {
                "Sid": "AllowPassingInstanceRole",
                "Effect": "Allow",
                "Action": "iam:PassRole",
                "Resource": self.arns.node_role,
                "Condition": {
                    "StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]}
                },
            },
        ]

    def _ec2_tag_instances(self) -> list[Statement]:
        return [
            {
                "Sid": "AllowScopedResourceTagging",
                "Effect": "Allow",
                "Action": "ec2:CreateTags",
                "Resource": self._ec2_arns(["instance"]),
                "Condition": {
                    **self._resource_tags(),
                    "StringEqualsIfExists": {
                        f"aws:RequestTag/{labels.TAG_EKS_CLUSTER_NAME}": self.arns.cluster
                    },
                    "ForAllValues:StringEquals": {
                        "aws:TagKeys": [labels.TAG_EKS_CLUSTER_NAME, labels.NODECLAIM, labels.TAG_NAME]
                    },
                },
            }
        ]

    def _ec2_terminate(self) -> list[Statement]:
        return [
            {
                "Sid": "AllowScopedInstanceDeletion",
                "Effect": "Allow",
                "Action": "ec2:TerminateInstances",
                "Resource": self._ec2_arns(["instance"]),
                "Condition": self._resource_tags(labels.NODEPOOL),
            }
        ]

    def _ec2_delete_launch_templates(self) -> list[Statement]:
        return [
            {
                "Sid": "AllowScopedLaunchTemplateDeletion",
                "Effect": "Allow",
                "Action": "ec2:DeleteLaunchTemplate",
                "Resource": self._ec2_arns(["launch-template"]),
                "Condition": self._resource_tags(labels.EC2NODECLASS),
            }
        ]

    def _instance_profiles(self) -> list[Statement]:
        a = self.arns
        profile_arn = f"arn:{a.partition}:iam::{a.account}:instance-profile/*"
        request_scope = {
            f"aws:RequestTag/{self.cluster_tag_key}": "owned",
            f"aws:RequestTag/{labels.TAG_EKS_CLUSTER_NAME}": a.cluster,
            f"aws:RequestTag/{labels.REGION}": a.region,
        }
        resource_scope = {
            f"aws:ResourceTag/{self.cluster_tag_key}": "owned",
            f"aws:ResourceTag/{labels.REGION}": a.region,
        }
        return [
            {
                "Sid": "AllowScopedInstanceProfileCreationActions",
                "Effect": "Allow",
                "Action": "iam:CreateInstanceProfile",
                "Resource": profile_arn,
                "Condition": {
                    "StringEquals": request_scope,
                    "StringLike": {f"aws:RequestTag/{labels.EC2NODECLASS}": "*"},
                },
            },
            {
                "Sid": "AllowScopedInstanceProfileTagActions",
                "Effect": "Allow",
                "Action": "iam:TagInstanceProfile",
                "Resource": profile_arn,
                "Condition": {
                    "StringEquals": {**resource_scope, **request_scope},
                    "StringLike": {
                        f"aws:ResourceTag/{labels.EC2NODECLASS}": "*",
                        f"aws:RequestTag/{labels.EC2NODECLASS}": "*",
                    },
                },
            },
            {
                "Sid": "AllowScopedInstanceProfileActions",
                "Effect": "Allow",
                "Action": [
                    "iam:AddRoleToInstanceProfile",
                    "iam:RemoveRoleFromInstanceProfile",
                    "iam:DeleteInstanceProfile",
                ],
                "Resource": profile_arn,
                "Condition": {
                    "StringEquals": resource_scope,
                    "StringLike": {f"aws:ResourceTag/{labels.EC2NODECLASS}": "*"},
                },
            },
            {
                "Sid": "AllowInstanceProfileReadActions",
                "Effect": "Allow",
                "Action": "iam:GetInstanceProfile",
                "Resource": profile_arn,
            },
        ]

    def _ssm_public_parameters(self) -> list[Statement]:
        a = self.arns
        return [
            {
                "Sid": "AllowSSMReadActions",
                "Effect": "Allow",
                "Action": "ssm:GetParameter",
                "Resource": f"arn:{a.partition}:ssm:{a.region}::parameter/aws/service/*",
            }
        ]

    def _pricing(self) -> list[Statement]:
        return [
            {
                "Sid": "AllowPricingReadActions",
                "Effect": "Allow",
                "Action": "pricing:GetProducts",
                "Resource": "*",
            }
        ]

    def _invoke_provisioner(self) -> list[Statement]:
        return [
            {
                "Sid": "AllowInvokeProvisioner",
                "Effect": "Allow",
                "Action": "lambda:InvokeFunction",
                "Resource": self.arns.provisioner_function,
            }
        ]

    def _send_termination_work(self) -> list[Statement]:
        if self.arns.termination_queue is None:
            return []
        return [
            {
                "Sid": "AllowSendTerminationWork",
                "Effect": "Allow",
                "Action": ["sqs:SendMessage", "sqs:GetQueueUrl", "sqs:GetQueueAttributes"],
                "Resource": self.arns.termination_queue,
            }
        ]

    def _park_malformed_interruptions(self) -> list[Statement]:
        return [
            {
                "Sid": "AllowParkMalformedInterruptions",
                "Effect": "Allow",
                "Action": "sqs:SendMessage",
                "Resource": self.arns.interruption_dead_letter_queue,
            }
        ]


def controller_policy(function: str, arns: StackArns) -> dict[str, Any]:
    """The policy document the stack gives ``function``'s role: its capabilities' statements, and the
    consume grant of the queue that triggers it."""
    builder = ControllerStatements(arns)
    statements = [s for c in sorted(FUNCTION_CAPABILITIES[function]) for s in builder.statements(c)]
    queue = getattr(arns, CONSUMED_QUEUES[function]) if function in CONSUMED_QUEUES else None
    if queue:
        statements.append({"Effect": "Allow", "Action": list(CONSUME_ACTIONS), "Resource": queue})
    return {"Version": "2012-10-17", "Statement": statements}


def _queue_arn(cloud: SimulatedCloud, url: str) -> str:
    attributes = cloud.client("sqs").get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    return str(attributes["Attributes"]["QueueArn"])


def stack_arns(cloud: SimulatedCloud, outputs: Mapping[str, str]) -> StackArns:
    res = cloud.resources
    assert res is not None, "start the cloud first"
    account = str(cloud.client("sts").get_caller_identity()["Account"])
    table = outputs[naming.StackOutput.STATE_TABLE_NAME]
    provisioner = outputs[naming.function_output("provisioner")]
    termination_url = outputs.get(naming.StackOutput.TERMINATION_QUEUE_URL)
    return StackArns(
        partition="aws",
        region=cloud.region,
        account=account,
        cluster=cloud.cluster_name,
        state_table=str(cloud.client("dynamodb").describe_table(TableName=table)["Table"]["TableArn"]),
        provisioner_function=str(
            cloud.client("lambda").get_function(FunctionName=provisioner)["Configuration"]["FunctionArn"]
        ),
        node_role=str(
            cloud.client("iam").get_role(RoleName=outputs[naming.StackOutput.NODE_ROLE_NAME])["Role"]["Arn"]
        ),
        interruption_queue=_queue_arn(cloud, outputs[naming.StackOutput.INTERRUPTION_QUEUE_URL]),
        interruption_dead_letter_queue=_queue_arn(cloud, res.dlq_url),
        termination_queue=_queue_arn(cloud, termination_url) if termination_url else None,
    )


def grant_controller_policies(cloud: SimulatedCloud, stack: DeployedStack) -> DeployedStack:
    """Put the stack's controller policy on each seeded function role (again: it replaces itself)."""
    arns = stack_arns(cloud, stack.outputs)
    iam = cloud.client("iam")
    for function, role_arn in stack.function_roles.items():
        iam.put_role_policy(
            RoleName=role_arn.rsplit("/", 1)[-1],
            PolicyName=POLICY_NAME,
            PolicyDocument=json.dumps(controller_policy(function, arns)),
        )
    return stack

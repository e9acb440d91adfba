"""The controller permissions each function's role is granted, as plain IAM policy statements.

Written once, here, and rendered twice: the CDK stack (``infra/iam.py``) grants them with CDK tokens for
its resources, and the local simulator (``serverless_karpenter_sim.stack_policies``) puts them on its
seeded roles with the simulated account's names, so that ``doctor``'s permission check simulates the
very policies a deployed stack holds. They live outside the Lambda layer (no function reads them) and
outside ``infra/`` (the simulator ships without CDK); ``tests/infra/test_sim_policies_match_stack.py``
checks both renderings against each other.

Each function has its own role holding only the capabilities it uses (:data:`FUNCTION_CAPABILITIES`).
One shared role would be simpler, but then the watcher, which runs every minute and only reads pods,
could launch and terminate instances; with one role per function a bug or a compromised dependency in one
handler is limited to what that handler needs.

Karpenter's controller policy (its getting-started CloudFormation template) is the reference: every
action that creates, tags or deletes EC2 resources is conditioned on this cluster's tags; reads are on
``*`` only where EC2 offers no resource-level permission, and limited to the stack's region.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from serverless_karpenter import state_schema
from serverless_karpenter.api import labels

# A policy statement as IAM's JSON has it (Sid, Effect, Action, Resource, Condition).
Statement = dict[str, Any]

# Read-only EC2 calls the catalog, launch and reconcile code makes. EC2 has no resource-level
# permissions for Describe*, so they are granted on "*" and limited to the stack's region. Only what the
# code calls: no DescribeCapacityReservations while capacityReservationSelectorTerms are not resolved.
EC2_DESCRIBE_ACTIONS = (
    "ec2:DescribeAvailabilityZones",
    "ec2:DescribeImages",
    "ec2:DescribeInstances",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeInstanceTypes",
    "ec2:DescribeLaunchTemplates",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSpotPriceHistory",
    "ec2:DescribeSubnets",
)
# Every item call the store, the persisted catalog, the unavailable-offerings cache and Powertools
# Idempotency make; no batch or transaction calls, no Scan, no DescribeTable or other table management.
STATE_ACTIONS = (
    "dynamodb:DeleteItem",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:Query",
    "dynamodb:UpdateItem",
)
LAUNCH_ACTIONS = ("ec2:RunInstances", "ec2:CreateFleet")
# Resources a launch *uses* but does not create: EC2 evaluates request tags only on the resources being
# created (instance, volume, network interface, fleet, launch template, spot request), so these cannot be
# tag-conditioned. AWS's own "tag on create" examples grant them in a separate statement, as Karpenter does.
PRE_EXISTING_LAUNCH_RESOURCE_TYPES = ("image", "snapshot", "security-group", "subnet", "capacity-reservation")
CREATED_LAUNCH_RESOURCE_TYPES = (
    "fleet",
    "instance",
    "volume",
    "network-interface",
    "launch-template",
    "spot-instances-request",
)
# Launch templates are shared by the NodePools of one EC2NodeClass, so they carry the node class tag where
# instances, volumes and fleets carry the NodePool tag.
INSTANCE_LIKE_RESOURCE_TYPES = tuple(t for t in CREATED_LAUNCH_RESOURCE_TYPES if t != "launch-template")
PRE_EXISTING_LAUNCH_RESOURCES_SID = "AllowLaunchWithExistingImagesSubnetsAndSecurityGroups"
# The China partition's EC2 service principal as well, as in Karpenter's policy.
EC2_SERVICE_PRINCIPALS = ("ec2.amazonaws.com", "ec2.amazonaws.com.cn")
# A spec.role's profile is created once and kept on the node class's role, swapped in place when the role
# changes; nothing deletes one, so iam:DeleteInstanceProfile is not granted (see infra/README.md).
INSTANCE_PROFILE_ACTIONS = (
    "iam:AddRoleToInstanceProfile",
    "iam:RemoveRoleFromInstanceProfile",
)
SEND_TERMINATION_WORK_ACTIONS = ("sqs:SendMessage", "sqs:GetQueueUrl", "sqs:GetQueueAttributes")


class Capability(StrEnum):
    """A coherent set of permissions; functions are granted capabilities, never raw statements."""

    KUBERNETES_API = "kubernetes-api"  # DescribeCluster: endpoint and CA for the presigned-token client
    STATE_READ_WRITE = "state-read-write"
    EC2_READ = "ec2-read"
    EC2_LAUNCH = "ec2-launch"  # CreateFleet/RunInstances/CreateLaunchTemplate, tagging on create, PassRole
    EC2_TAG_INSTANCES = "ec2-tag-instances"  # Name / nodeclaim tags on our instances after launch
    EC2_TERMINATE = "ec2-terminate"  # TerminateInstances on our instances
    EC2_DELETE_LAUNCH_TEMPLATES = "ec2-delete-launch-templates"  # on our launch templates
    INSTANCE_PROFILES = "instance-profiles"  # EC2NodeClass.spec.role: managed instance profiles
    # Reading the managed instance profile: resolving an EC2NodeClass with spec.role looks it up (issue 17)
    READ_INSTANCE_PROFILES = "read-instance-profiles"
    SSM_PUBLIC_PARAMETERS = "ssm-public-parameters"  # EKS-optimised AMI ids
    PRICING = "pricing"
    INVOKE_PROVISIONER = "invoke-provisioner"
    SEND_TERMINATION_WORK = "send-termination-work"
    PARK_MALFORMED_INTERRUPTIONS = "park-malformed-interruptions"  # a message no retry can fix, to the DLQ


# Who needs what, by function name (``naming.FUNCTION_NAMES``). The SQS event sources add receive, delete
# and change-visibility on the queue each function consumes; the interruption handler makes that last call
# itself too, to retry a failed message within seconds (tests/infra/test_infra_stack.py checks that the
# grant is there, on that queue only).
FUNCTION_CAPABILITIES: Mapping[str, frozenset[Capability]] = MappingProxyType(
    {
        # Lists pending pods and wakes the provisioner; it never touches the table.
        "watcher": frozenset({Capability.KUBERNETES_API, Capability.INVOKE_PROVISIONER}),
        # The single writer: solves, launches, reconciles the NodeClaim lifecycle and garbage-collects.
        "provisioner": frozenset(
            {
                Capability.KUBERNETES_API,
                Capability.STATE_READ_WRITE,
                Capability.EC2_READ,
                Capability.EC2_LAUNCH,
                Capability.EC2_TAG_INSTANCES,
                Capability.EC2_TERMINATE,
                Capability.EC2_DELETE_LAUNCH_TEMPLATES,
                Capability.INSTANCE_PROFILES,
                Capability.READ_INSTANCE_PROFILES,
                Capability.SSM_PUBLIC_PARAMETERS,
                Capability.PRICING,
            }
        ),
        # Marks claims disrupted, taints nodes and hands drains to the termination function.
        "interruption": frozenset(
            {
                Capability.KUBERNETES_API,
                Capability.STATE_READ_WRITE,
                Capability.EC2_READ,
                Capability.SEND_TERMINATION_WORK,
                Capability.PARK_MALFORMED_INTERRUPTIONS,
            }
        ),
        # Decides what to disrupt (drift needs AMI ids, consolidation needs prices); launches go through
        # the provisioner's lifecycle reconcile, so it has no launch rights, only the right to wake the
        # provisioner for the replacements it writes. It resolves each EC2NodeClass without managing its
        # instance profile (a spec.role's profile is named, not read: the provisioner creates it before a
        # launch), so it needs no IAM rights.
        "disruption": frozenset(
            {
                Capability.KUBERNETES_API,
                Capability.INVOKE_PROVISIONER,
                Capability.STATE_READ_WRITE,
                Capability.EC2_READ,
                Capability.SSM_PUBLIC_PARAMETERS,
                Capability.PRICING,
                Capability.SEND_TERMINATION_WORK,
            }
        ),
        # Drains, then terminates; re-queues itself with delayed messages, and wakes the provisioner so
        # replacements for the drained pods launch while the drain runs.
        "termination": frozenset(
            {
                Capability.KUBERNETES_API,
                Capability.INVOKE_PROVISIONER,
                Capability.STATE_READ_WRITE,
                Capability.EC2_READ,
                Capability.EC2_TERMINATE,
                Capability.SEND_TERMINATION_WORK,
            }
        ),
    }
)


@dataclass(frozen=True)
class PolicyParameters:
    """What the statements name that differs from one stack to another: concrete values in the simulator,
    CDK tokens (strings that synthesize to Ref / Fn::GetAtt) in the stack. ARNs unless said otherwise."""

    partition: str
    region: str
    account: str
    cluster: str  # the cluster's name
    state_table: str
    provisioner_function: str  # unqualified
    node_role: str
    interruption_dead_letter_queue: str
    termination_queue: str | None = None  # None: there is none (the simulated account), nothing names it


def _allow(
    sid: str, actions: Iterable[str], resources: Iterable[str], condition: Mapping[str, Any] | None = None
) -> Statement:
    statement: Statement = {
        "Sid": sid,
        "Effect": "Allow",
        "Action": list(actions),
        "Resource": list(resources),
    }
    if condition:
        statement["Condition"] = dict(condition)
    return statement


class _Statements:
    """The statements of each capability, scoped to one stack's resources."""

    def __init__(self, parameters: PolicyParameters) -> None:
        self.p = parameters
        self.cluster_tag_key = f"{labels.TAG_CLUSTER_PREFIX}{parameters.cluster}"

    # -- helpers -------------------------------------------------------------------------------------

    def _arn(
        self, service: str, resource: str, *, region: str | None = None, account: str | None = None
    ) -> str:
        """``arn:<partition>:<service>:<region>:<account>:<resource>``, in the stack's region and account
        unless told otherwise."""
        region = self.p.region if region is None else region
        account = self.p.account if account is None else account
        return f"arn:{self.p.partition}:{service}:{region}:{account}:{resource}"

    def _ec2_arns(self, resource_types: Iterable[str]) -> list[str]:
        # Images and snapshots may be owned by other accounts (public EKS AMIs): no account in the ARN.
        return [
            self._arn("ec2", f"{t}/*", account="" if t in ("image", "snapshot") else "*")
            for t in resource_types
        ]

    def _request_tags(self, owner_tag: str, create_actions: list[str] | None = None) -> dict[str, Any]:
        """Tags the request must set on what it creates: this cluster's, and ``owner_tag`` (any value)."""
        equals: dict[str, str | list[str]] = {
            f"aws:RequestTag/{self.cluster_tag_key}": "owned",
            f"aws:RequestTag/{labels.TAG_EKS_CLUSTER_NAME}": self.p.cluster,
        }
        if create_actions:
            equals["ec2:CreateAction"] = create_actions
        return {"StringEquals": equals, "StringLike": {f"aws:RequestTag/{owner_tag}": "*"}}

    def _resource_tags(self, owner_tag: str = labels.NODEPOOL) -> dict[str, Any]:
        """Tags an existing resource must carry: this cluster's, and ``owner_tag`` (any value)."""
        return {
            "StringEquals": {f"aws:ResourceTag/{self.cluster_tag_key}": "owned"},
            "StringLike": {f"aws:ResourceTag/{owner_tag}": "*"},
        }

    # -- capabilities --------------------------------------------------------------------------------

    def of(self, capability: Capability) -> list[Statement]:
        builders: dict[Capability, Callable[[], list[Statement]]] = {
            Capability.KUBERNETES_API: self._kubernetes_api,
            Capability.STATE_READ_WRITE: self._state_read_write,
            Capability.EC2_READ: self._ec2_read,
            Capability.EC2_LAUNCH: self._ec2_launch,
            Capability.EC2_TAG_INSTANCES: self._ec2_tag_instances,
            Capability.EC2_TERMINATE: self._ec2_terminate,
            Capability.EC2_DELETE_LAUNCH_TEMPLATES: self._ec2_delete_launch_templates,
            Capability.INSTANCE_PROFILES: self._instance_profiles,
            Capability.READ_INSTANCE_PROFILES: self._read_instance_profiles,
            Capability.SSM_PUBLIC_PARAMETERS: self._ssm_public_parameters,
            Capability.PRICING: self._pricing,
            Capability.INVOKE_PROVISIONER: self._invoke_provisioner,
            Capability.SEND_TERMINATION_WORK: self._send_termination_work,
            Capability.PARK_MALFORMED_INTERRUPTIONS: self._park_malformed_interruptions,
        }
        return builders[capability]()

    def _kubernetes_api(self) -> list[Statement]:
        # The bearer token is an STS GetCallerIdentity URL presigned locally: no STS permission needed.
        return [
            _allow(
                "AllowAPIServerEndpointDiscovery",
                ["eks:DescribeCluster"],
                [self._arn("eks", f"cluster/{self.p.cluster}")],
            )
        ]

    def _state_read_write(self) -> list[Statement]:
        # One ARN per GSI the code queries, not index/*.
        table = self.p.state_table
        indexes = [f"{table}/index/{name}" for name in state_schema.GLOBAL_SECONDARY_INDEXES]
        return [_allow("AllowStateTableReadWrite", STATE_ACTIONS, [table, *indexes])]

    def _ec2_read(self) -> list[Statement]:
        return [
            _allow(
                "AllowRegionalReadActions",
                EC2_DESCRIBE_ACTIONS,
                ["*"],
                {"StringEquals": {"aws:RequestedRegion": self.p.region}},
            )
        ]

    def _ec2_launch(self) -> list[Statement]:
        launch_template = self._ec2_arns(["launch-template"])
        instance_like = self._ec2_arns(INSTANCE_LIKE_RESOURCE_TYPES)
        return [
            _allow(
                PRE_EXISTING_LAUNCH_RESOURCES_SID,
                LAUNCH_ACTIONS,
                self._ec2_arns(PRE_EXISTING_LAUNCH_RESOURCE_TYPES),
            ),
            _allow(
                "AllowLaunchFromOurLaunchTemplates",
                LAUNCH_ACTIONS,
                launch_template,
                self._resource_tags(labels.EC2NODECLASS),
            ),
            _allow(
                "AllowScopedEC2InstanceActionsWithTags",
                LAUNCH_ACTIONS,
                instance_like,
                self._request_tags(labels.NODEPOOL),
            ),
            _allow(
                "AllowScopedLaunchTemplateCreation",
                ["ec2:CreateLaunchTemplate"],
                launch_template,
                self._request_tags(labels.EC2NODECLASS),
            ),
            _allow(
                "AllowScopedResourceCreationTagging",
                ["ec2:CreateTags"],
                instance_like,
                self._request_tags(labels.NODEPOOL, create_actions=["RunInstances", "CreateFleet"]),
            ),
            _allow(
                "AllowScopedLaunchTemplateCreationTagging",
                ["ec2:CreateTags"],
                launch_template,
                self._request_tags(labels.EC2NODECLASS, create_actions=["CreateLaunchTemplate"]),
            ),
            _allow(
                "AllowPassingInstanceRole",
                ["iam:PassRole"],
                [self.p.node_role],
                {"StringEquals": {"iam:PassedToService": list(EC2_SERVICE_PRINCIPALS)}},
            ),
        ]

    def _ec2_tag_instances(self) -> list[Statement]:
        return [
            _allow(
                "AllowScopedResourceTagging",
                ["ec2:CreateTags"],
                self._ec2_arns(["instance"]),
                {
                    **self._resource_tags(),
                    "StringEqualsIfExists": {f"aws:RequestTag/{labels.TAG_EKS_CLUSTER_NAME}": self.p.cluster},
                    "ForAllValues:StringEquals": {
                        "aws:TagKeys": [labels.TAG_EKS_CLUSTER_NAME, labels.NODECLAIM, labels.TAG_NAME]
                    },
                },
            )
        ]

    def _ec2_terminate(self) -> list[Statement]:
        return [
            _allow(
                "AllowScopedInstanceDeletion",
                ["ec2:TerminateInstances"],
                self._ec2_arns(["instance"]),
                self._resource_tags(labels.NODEPOOL),
            )
        ]

    def _ec2_delete_launch_templates(self) -> list[Statement]:
        return [
            _allow(
                "AllowScopedLaunchTemplateDeletion",
                ["ec2:DeleteLaunchTemplate"],
                self._ec2_arns(["launch-template"]),
                self._resource_tags(labels.EC2NODECLASS),
            )
        ]

    def _instance_profiles(self) -> list[Statement]:
        region = self.p.region
        profiles = [self._arn("iam", "instance-profile/*", region="")]
        request_scope = {
            f"aws:RequestTag/{self.cluster_tag_key}": "owned",
            f"aws:RequestTag/{labels.TAG_EKS_CLUSTER_NAME}": self.p.cluster,
            f"aws:RequestTag/{labels.REGION}": region,
        }
        resource_scope = {
            f"aws:ResourceTag/{self.cluster_tag_key}": "owned",
            f"aws:ResourceTag/{labels.REGION}": region,
        }
        return [
            _allow(
                "AllowScopedInstanceProfileCreationActions",
                ["iam:CreateInstanceProfile"],
                profiles,
                {"StringEquals": request_scope, "StringLike": {f"aws:RequestTag/{labels.EC2NODECLASS}": "*"}},
            ),
            _allow(
                "AllowScopedInstanceProfileTagActions",
                ["iam:TagInstanceProfile"],
                profiles,
                {
                    "StringEquals": {**resource_scope, **request_scope},
                    "StringLike": {
                        f"aws:ResourceTag/{labels.EC2NODECLASS}": "*",
                        f"aws:RequestTag/{labels.EC2NODECLASS}": "*",
                    },
                },
            ),
            _allow(
                "AllowScopedInstanceProfileActions",
                INSTANCE_PROFILE_ACTIONS,
                profiles,
                {
                    "StringEquals": resource_scope,
                    "StringLike": {f"aws:ResourceTag/{labels.EC2NODECLASS}": "*"},
                },
            ),
        ]

    def _read_instance_profiles(self) -> list[Statement]:
        profiles = [self._arn("iam", "instance-profile/*", region="")]
        return [_allow("AllowInstanceProfileReadActions", ["iam:GetInstanceProfile"], profiles)]

    def _ssm_public_parameters(self) -> list[Statement]:
        return [
            _allow(
                "AllowSSMReadActions",
                ["ssm:GetParameter"],
                [self._arn("ssm", "parameter/aws/service/*", account="")],
            )
        ]

    def _pricing(self) -> list[Statement]:
        # The Price List API has no resources to scope to.
        return [_allow("AllowPricingReadActions", ["pricing:GetProducts"], ["*"])]

    def _invoke_provisioner(self) -> list[Statement]:
        # The unqualified ARN only: no version or alias is ever invoked.
        return [_allow("AllowInvokeProvisioner", ["lambda:InvokeFunction"], [self.p.provisioner_function])]

    def _send_termination_work(self) -> list[Statement]:
        if self.p.termination_queue is None:
            return []
        return [_allow("AllowSendTerminationWork", SEND_TERMINATION_WORK_ACTIONS, [self.p.termination_queue])]

    def _park_malformed_interruptions(self) -> list[Statement]:
        return [
            _allow(
                "AllowParkMalformedInterruptions",
                ["sqs:SendMessage"],
                [self.p.interruption_dead_letter_queue],
            )
        ]


def function_statements(function: str, parameters: PolicyParameters) -> list[Statement]:
    """Every statement ``function``'s role is granted, capability by capability in sorted order."""
    builder = _Statements(parameters)
    return [s for capability in sorted(FUNCTION_CAPABILITIES[function]) for s in builder.of(capability)]

"""IAM: the node role, and the controller permissions each function is granted, scoped as Karpenter scopes
them.

Each function has its own role holding only the capabilities it uses (:data:`FUNCTION_CAPABILITIES`).
One shared role would be simpler, but then the watcher, which runs every minute and only reads pods,
could launch and terminate instances; with one role per function a bug or a compromised dependency in one
handler is limited to what that handler needs. The cost is five EKS access entries instead of one, all
mapped to the same Kubernetes group.

Karpenter's controller policy (its getting-started CloudFormation template) is the reference: every
action that creates, tags or deletes EC2 resources is conditioned on this cluster's tags; reads are on
``*`` only where EC2 offers no resource-level permission, and limited to the stack's region.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct
from serverless_karpenter.api import labels

from infra.state import StateTable

# The managed policies an EKS node needs (the same four as Karpenter's KarpenterNodeRole).
NODE_MANAGED_POLICIES = (
    "AmazonEKSWorkerNodePolicy",
    "AmazonEKS_CNI_Policy",
    "AmazonEC2ContainerRegistryReadOnly",
    "AmazonSSMManagedInstanceCore",
)

# Read-only EC2 calls the catalog, launch and reconcile code makes. EC2 has no resource-level
# permissions for Describe*, so they are granted on "*" and limited to the stack's region.
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
# Every item call the store and Powertools Idempotency make; no Scan, no table management.
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
PRE_EXISTING_LAUNCH_RESOURCES_SID = "AllowLaunchWithExistingImagesSubnetsAndSecurityGroups"


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
    SSM_PUBLIC_PARAMETERS = "ssm-public-parameters"  # EKS-optimised AMI ids
    PRICING = "pricing"
    INVOKE_PROVISIONER = "invoke-provisioner"
    SEND_TERMINATION_WORK = "send-termination-work"
    PARK_MALFORMED_INTERRUPTIONS = "park-malformed-interruptions"  # a message no retry can fix, to the DLQ


# Who needs what. The SQS event sources add receive, delete and change-visibility on the queue each
# function consumes; the interruption handler makes that last call itself too, to retry a failed message
# within seconds (tests/infra/test_infra_stack.py checks that the grant is there, on that queue only).
FUNCTION_CAPABILITIES: dict[str, frozenset[Capability]] = {
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
    # Decides what to disrupt (drift needs AMI ids, consolidation needs prices); launches go through the
    # provisioner's lifecycle reconcile, so it has no launch rights.
    "disruption": frozenset(
        {
            Capability.KUBERNETES_API,
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


class NodeRole(Construct):
    """The role EC2 nodes run with, and an instance profile for it (``EC2NodeClass.spec.instanceProfile``)."""

    def __init__(self, scope: Construct, construct_id: str, *, role_name: str, import_existing: bool) -> None:
        super().__init__(scope, construct_id)
        if import_existing:
            # Karpenter's own stack may already own KarpenterNodeRole-<cluster>; reuse it by name.
            self.role: iam.IRole = iam.Role.from_role_name(self, "Role", role_name)
        else:
            self.role = iam.Role(
                self,
                "Role",
                role_name=role_name,
                description="Nodes launched by serverless-karpenter",
                assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
                managed_policies=[
                    iam.ManagedPolicy.from_aws_managed_policy_name(p) for p in NODE_MANAGED_POLICIES
                ],
            )
        self.instance_profile = iam.CfnInstanceProfile(self, "InstanceProfile", roles=[self.role.role_name])
        self.created = not import_existing


class ControllerPermissions:
    """Builds the policy statements for each :class:`Capability`, scoped to one cluster's resources."""

    def __init__(
        self,
        scope: Construct,
        *,
        cluster_name: str,
        node_role: iam.IRole,
        state: StateTable,
        termination_queue: sqs.IQueue,
        interruption_dead_letter_queue: sqs.IQueue,
    ) -> None:
        self._stack = Stack.of(scope)
        self._cluster_name = cluster_name
        self._node_role = node_role
        self._state = state
        self._termination_queue = termination_queue
        self._interruption_dead_letter_queue = interruption_dead_letter_queue
        self._provisioner: lambda_.IFunction | None = None

    def set_provisioner(self, provisioner: lambda_.IFunction) -> None:
        self._provisioner = provisioner

    # -- helpers -------------------------------------------------------------------------------------

    @property
    def cluster_tag_key(self) -> str:
        return f"{labels.TAG_CLUSTER_PREFIX}{self._cluster_name}"

    def _ec2_arns(self, resource_types: Iterable[str]) -> list[str]:
        arns = []
        for resource_type in resource_types:
            # Images and snapshots may be owned by other accounts (public EKS AMIs): no account in the ARN.
            account = "" if resource_type in ("image", "snapshot") else "*"
            arns.append(
                self._stack.format_arn(
                    service="ec2", account=account, resource=resource_type, resource_name="*"
                )
            )
        return arns

    def _instance_profile_arn(self) -> str:
        return self._stack.format_arn(
            service="iam", region="", resource="instance-profile", resource_name="*"
        )

    def _request_tags(
        self, owner_tag: str, create_actions: list[str] | None = None
    ) -> dict[str, dict[str, str | list[str]]]:
        """Tags the request must set on what it creates: this cluster's, and ``owner_tag`` (any value)."""
        equals: dict[str, str | list[str]] = {
            f"aws:RequestTag/{self.cluster_tag_key}": "owned",
            f"aws:RequestTag/{labels.TAG_EKS_CLUSTER_NAME}": self._cluster_name,
        }
        if create_actions:
            equals["ec2:CreateAction"] = create_actions
        return {"StringEquals": equals, "StringLike": {f"aws:RequestTag/{owner_tag}": "*"}}

    def _resource_tags(self, owner_tag: str = labels.NODEPOOL) -> dict[str, dict[str, str | list[str]]]:
        """Tags an existing resource must carry: this cluster's, and ``owner_tag`` (any value)."""
        return {
            "StringEquals": {f"aws:ResourceTag/{self.cluster_tag_key}": "owned"},
            "StringLike": {f"aws:ResourceTag/{owner_tag}": "*"},
        }

    # -- capabilities --------------------------------------------------------------------------------

    def statements(self, capability: Capability) -> list[iam.PolicyStatement]:
        builder = {
            Capability.KUBERNETES_API: self._kubernetes_api,
            Capability.STATE_READ_WRITE: self._state_read_write,
            Capability.EC2_READ: self._ec2_read,
            Capability.EC2_LAUNCH: self._ec2_launch,
            Capability.EC2_TAG_INSTANCES: self._ec2_tag_instances,
            Capability.EC2_TERMINATE: self._ec2_terminate,
            Capability.EC2_DELETE_LAUNCH_TEMPLATES: self._ec2_delete_launch_templates,
            Capability.INSTANCE_PROFILES: self._instance_profiles,
            Capability.SSM_PUBLIC_PARAMETERS: self._ssm_public_parameters,
            Capability.PRICING: self._pricing,
            Capability.INVOKE_PROVISIONER: self._invoke_provisioner,
            Capability.SEND_TERMINATION_WORK: self._send_termination_work,
            Capability.PARK_MALFORMED_INTERRUPTIONS: self._park_malformed_interruptions,
        }[capability]
        return builder()

    def _kubernetes_api(self) -> list[iam.PolicyStatement]:
        # The bearer token is an STS GetCallerIdentity URL presigned locally: no STS permission needed.
        return [
            iam.PolicyStatement(
                sid="AllowAPIServerEndpointDiscovery",
                actions=["eks:DescribeCluster"],
                resources=[
                    self._stack.format_arn(
                        service="eks", resource="cluster", resource_name=self._cluster_name
                    )
                ],
            )
        ]

    def _state_read_write(self) -> list[iam.PolicyStatement]:
        return [
            iam.PolicyStatement(
                sid="AllowStateTableReadWrite",
                actions=list(STATE_ACTIONS),
                resources=[self._state.table.table_arn, *self._state.index_arns],
            )
        ]

    def _ec2_read(self) -> list[iam.PolicyStatement]:
        return [
            iam.PolicyStatement(
                sid="AllowRegionalReadActions",
                actions=list(EC2_DESCRIBE_ACTIONS),
                resources=["*"],
                conditions={"StringEquals": {"aws:RequestedRegion": self._stack.region}},
            )
        ]

    def _ec2_launch(self) -> list[iam.PolicyStatement]:
        # Launch templates are shared by the NodePools of one EC2NodeClass, so they carry the node class
        # tag where instances, volumes and fleets carry the NodePool tag.
        instance_like = [t for t in CREATED_LAUNCH_RESOURCE_TYPES if t != "launch-template"]
        return [
            iam.PolicyStatement(
                sid=PRE_EXISTING_LAUNCH_RESOURCES_SID,
                actions=["ec2:RunInstances", "ec2:CreateFleet"],
                resources=self._ec2_arns(PRE_EXISTING_LAUNCH_RESOURCE_TYPES),
            ),
            iam.PolicyStatement(
                sid="AllowLaunchFromOurLaunchTemplates",
                actions=["ec2:RunInstances", "ec2:CreateFleet"],
                resources=self._ec2_arns(["launch-template"]),
                conditions=self._resource_tags(labels.EC2NODECLASS),
            ),
            iam.PolicyStatement(
                sid="AllowScopedEC2InstanceActionsWithTags",
                actions=["ec2:RunInstances", "ec2:CreateFleet"],
                resources=self._ec2_arns(instance_like),
                conditions=self._request_tags(labels.NODEPOOL),
            ),
            iam.PolicyStatement(
                sid="AllowScopedLaunchTemplateCreation",
                actions=["ec2:CreateLaunchTemplate"],
                resources=self._ec2_arns(["launch-template"]),
                conditions=self._request_tags(labels.EC2NODECLASS),
            ),
            iam.PolicyStatement(
                sid="AllowScopedResourceCreationTagging",
                actions=["ec2:CreateTags"],
                resources=self._ec2_arns(instance_like),
                conditions=self._request_tags(
                    labels.NODEPOOL, create_actions=["RunInstances", "CreateFleet"]
                ),
            ),
            iam.PolicyStatement(
                sid="AllowScopedLaunchTemplateCreationTagging",
                actions=["ec2:CreateTags"],
                resources=self._ec2_arns(["launch-template"]),
                conditions=self._request_tags(labels.EC2NODECLASS, create_actions=["CreateLaunchTemplate"]),
            ),
            iam.PolicyStatement(
                sid="AllowPassingInstanceRole",
                actions=["iam:PassRole"],
                resources=[self._node_role.role_arn],
                conditions={
                    "StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]}
                },
            ),
        ]

    def _ec2_tag_instances(self) -> list[iam.PolicyStatement]:
        return [
            iam.PolicyStatement(
                sid="AllowScopedResourceTagging",
                actions=["ec2:CreateTags"],
                resources=self._ec2_arns(["instance"]),
                conditions={
                    **self._resource_tags(),
                    "StringEqualsIfExists": {
                        f"aws:RequestTag/{labels.TAG_EKS_CLUSTER_NAME}": self._cluster_name
                    },
                    "ForAllValues:StringEquals": {
                        "aws:TagKeys": [labels.TAG_EKS_CLUSTER_NAME, labels.NODECLAIM, labels.TAG_NAME]
                    },
                },
            )
        ]

    def _ec2_terminate(self) -> list[iam.PolicyStatement]:
        return [
            iam.PolicyStatement(
                sid="AllowScopedInstanceDeletion",
                actions=["ec2:TerminateInstances"],
                resources=self._ec2_arns(["instance"]),
                conditions=self._resource_tags(labels.NODEPOOL),
            )
        ]

    def _ec2_delete_launch_templates(self) -> list[iam.PolicyStatement]:
        return [
            iam.PolicyStatement(
                sid="AllowScopedLaunchTemplateDeletion",
                actions=["ec2:DeleteLaunchTemplate"],
                resources=self._ec2_arns(["launch-template"]),
                conditions=self._resource_tags(labels.EC2NODECLASS),
            )
        ]

    def _instance_profiles(self) -> list[iam.PolicyStatement]:
        region = self._stack.region
        profile_arn = self._instance_profile_arn()
        request_scope = {
            f"aws:RequestTag/{self.cluster_tag_key}": "owned",
            f"aws:RequestTag/{labels.TAG_EKS_CLUSTER_NAME}": self._cluster_name,
            f"aws:RequestTag/{labels.REGION}": region,
        }
        resource_scope = {
            f"aws:ResourceTag/{self.cluster_tag_key}": "owned",
            f"aws:ResourceTag/{labels.REGION}": region,
        }
        return [
            iam.PolicyStatement(
                sid="AllowScopedInstanceProfileCreationActions",
                actions=["iam:CreateInstanceProfile"],
                resources=[profile_arn],
                conditions={
                    "StringEquals": request_scope,
                    "StringLike": {f"aws:RequestTag/{labels.EC2NODECLASS}": "*"},
                },
            ),
            iam.PolicyStatement(
                sid="AllowScopedInstanceProfileTagActions",
                actions=["iam:TagInstanceProfile"],
                resources=[profile_arn],
                conditions={
                    "StringEquals": {**resource_scope, **request_scope},
                    "StringLike": {
                        f"aws:ResourceTag/{labels.EC2NODECLASS}": "*",
                        f"aws:RequestTag/{labels.EC2NODECLASS}": "*",
                    },
                },
            ),
            iam.PolicyStatement(
                sid="AllowScopedInstanceProfileActions",
                actions=[
                    "iam:AddRoleToInstanceProfile",
                    "iam:RemoveRoleFromInstanceProfile",
                    "iam:DeleteInstanceProfile",
                ],
                resources=[profile_arn],
                conditions={
                    "StringEquals": resource_scope,
                    "StringLike": {f"aws:ResourceTag/{labels.EC2NODECLASS}": "*"},
                },
            ),
            iam.PolicyStatement(
                sid="AllowInstanceProfileReadActions",
                actions=["iam:GetInstanceProfile"],
                resources=[profile_arn],
            ),
        ]

    def _ssm_public_parameters(self) -> list[iam.PolicyStatement]:
        return [
            iam.PolicyStatement(
                sid="AllowSSMReadActions",
                actions=["ssm:GetParameter"],
                resources=[
                    self._stack.format_arn(
                        service="ssm", account="", resource="parameter", resource_name="aws/service/*"
                    )
                ],
            )
        ]

    def _pricing(self) -> list[iam.PolicyStatement]:
        # The Price List API has no resources to scope to.
        return [
            iam.PolicyStatement(
                sid="AllowPricingReadActions", actions=["pricing:GetProducts"], resources=["*"]
            )
        ]

    def _invoke_provisioner(self) -> list[iam.PolicyStatement]:
        if self._provisioner is None:
            raise RuntimeError("the provisioner function must exist before anything is granted to invoke it")
        # The unqualified ARN only (grant_invoke would add ":*" for every version and alias).
        return [
            iam.PolicyStatement(
                sid="AllowInvokeProvisioner",
                actions=["lambda:InvokeFunction"],
                resources=[self._provisioner.function_arn],
            )
        ]

    def _send_termination_work(self) -> list[iam.PolicyStatement]:
        return [
            iam.PolicyStatement(
                sid="AllowSendTerminationWork",
                actions=["sqs:SendMessage", "sqs:GetQueueUrl", "sqs:GetQueueAttributes"],
                resources=[self._termination_queue.queue_arn],
            )
        ]

    def _park_malformed_interruptions(self) -> list[iam.PolicyStatement]:
        return [
            iam.PolicyStatement(
                sid="AllowParkMalformedInterruptions",
                actions=["sqs:SendMessage"],
                resources=[self._interruption_dead_letter_queue.queue_arn],
            )
        ]

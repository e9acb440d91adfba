"""IAM: the node role, and the controller permissions each function is granted.

The statements themselves, and which function holds which capability, are plain data in the core
(:mod:`serverless_karpenter_stack.policies`), shared with the local simulator; here they are rendered with the
stack's resources as CDK tokens. Five functions, five roles: the cost is five EKS access entries instead
of one, each mapped to its own Kubernetes group (``infra/access.py``).
"""

from __future__ import annotations

from aws_cdk import Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct
from serverless_karpenter_stack import policies

from infra.state import StateTable

__all__ = ["NODE_MANAGED_POLICIES", "NODE_MANAGED_POLICY_REASONS", "ControllerPermissions", "NodeRole"]

# The AWS-managed policies an EKS node needs, and why: the four of Karpenter's KarpenterNodeRole (its
# getting-started CloudFormation template), which pulls images with AmazonEC2ContainerRegistryPullOnly
# rather than the wider ReadOnly policy (that one also lists and describes every repository and image).
NODE_MANAGED_POLICY_REASONS: dict[str, str] = {
    "AmazonEKSWorkerNodePolicy": "the kubelet's EC2 and EKS reads, to join the cluster",
    "AmazonEKS_CNI_Policy": "the VPC CNI's network-interface and IP-address management on the node",
    "AmazonEC2ContainerRegistryPullOnly": (
        "pulling images from ECR (GetAuthorizationToken, BatchGetImage, GetDownloadUrlForLayer) and "
        "nothing else"
    ),
    "AmazonSSMManagedInstanceCore": "Session Manager access to the node, instead of SSH",
}
NODE_MANAGED_POLICIES = tuple(NODE_MANAGED_POLICY_REASONS)


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
    """Renders :func:`serverless_karpenter_stack.policies.function_statements` into CDK statements,
    naming this stack's partition, region, account and resources through tokens."""

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

    def _parameters(self) -> policies.PolicyParameters:
        if self._provisioner is None:
            raise RuntimeError("the provisioner function must exist before any statement is built")
        # The stack's own partition, region and account: format_arn's defaults, so the ARNs synthesize as
        # they always have.
        return policies.PolicyParameters(
            partition=self._stack.partition,
            region=self._stack.region,
            account=self._stack.account,
            cluster=self._cluster_name,
            state_table=self._state.table.table_arn,
            provisioner_function=self._provisioner.function_arn,
            node_role=self._node_role.role_arn,
            interruption_dead_letter_queue=self._interruption_dead_letter_queue.queue_arn,
            termination_queue=self._termination_queue.queue_arn,
        )

    def function_statements(self, function: str) -> list[iam.PolicyStatement]:
        """What ``function``'s role is granted, beyond its log group, tracing and event source."""
        return [
            iam.PolicyStatement.from_json(s)
            for s in policies.function_statements(function, self._parameters())
        ]

"""Cluster access through EKS access entries (the cluster's authentication mode must include API).

Each function's role maps to a Kubernetes group of its own (``naming.kubernetes_group``), which
deploy/rbac.yaml binds to a ClusterRole with only the verbs that function's code uses: the watcher, say,
may list and watch pods and nothing else. The node role gets an EC2_LINUX entry so that nodes can join.
"""

from __future__ import annotations

from aws_cdk import aws_eks as eks
from aws_cdk import aws_iam as iam
from constructs import Construct
from serverless_karpenter.naming import kubernetes_group

# Each group must be the subject of its function's ClusterRoleBinding in deploy/rbac.yaml (a test checks it).
__all__ = ["ClusterAccess", "kubernetes_group"]


class ClusterAccess(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster_name: str,
        function_roles: dict[str, iam.IRole],
        node_role: iam.IRole | None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.function_entries: dict[str, eks.CfnAccessEntry] = {}
        for name, role in function_roles.items():
            self.function_entries[name] = eks.CfnAccessEntry(
                self,
                f"{name.capitalize()}AccessEntry",
                cluster_name=cluster_name,
                principal_arn=role.role_arn,
                type="STANDARD",
                kubernetes_groups=[kubernetes_group(name)],
            )
        self.node_entry: eks.CfnAccessEntry | None = None
        if node_role is not None:
            self.node_entry = eks.CfnAccessEntry(
                self,
                "NodeAccessEntry",
                cluster_name=cluster_name,
                principal_arn=node_role.role_arn,
                type="EC2_LINUX",
            )

"""One stack per cluster: everything Karpenter's CloudFormation template, Helm chart and IRSA setup
provided, for the Lambda-based control plane."""

from __future__ import annotations

import os
from typing import Any

from aws_cdk import CfnOutput, Environment, Stack, Tags
from constructs import Construct
from serverless_karpenter.deployment import INTERRUPTION_MAX_RECEIVE_COUNT

from infra.access import ClusterAccess
from infra.config import ClusterConfig
from infra.functions import (
    FUNCTION_SPECS,
    SPECS_BY_NAME,
    ControlPlaneFunctions,
    TerminationWorkQueue,
    queue_visibility,
)
from infra.iam import ControllerPermissions, NodeRole
from infra.interruption import InterruptionQueue
from infra.layers import check_unzipped_sizes
from infra.monitoring import Monitoring
from infra.nag import acknowledge_findings
from infra.network import FunctionNetwork
from infra.state import StateTable

CLUSTER_TAG = "serverless-karpenter/cluster"


def stack_environment(config: ClusterConfig) -> Environment | None:
    """Explicit when the context or the CDK CLI names an account or region; environment-agnostic
    otherwise, so that synth never needs credentials or lookups."""
    account = config.account or os.environ.get("CDK_DEFAULT_ACCOUNT")
    region = config.region or os.environ.get("CDK_DEFAULT_REGION")
    if account is None and region is None:
        return None
    return Environment(account=account, region=region)


class ServerlessKarpenterStack(Stack):
    def __init__(self, scope: Construct, construct_id: str, *, config: ClusterConfig, **kwargs: Any) -> None:
        super().__init__(
            scope,
            construct_id,
            stack_name=config.stack_name,
            description=f"serverless-karpenter control plane for EKS cluster {config.cluster_name}",
            env=stack_environment(config),
            **kwargs,
        )
        self.config = config
        Tags.of(self).add(CLUSTER_TAG, config.cluster_name)

        self.node_role = NodeRole(
            self, "NodeRole", role_name=config.node_role_name, import_existing=config.import_node_role
        )
        self.state = StateTable(self, "State")
        self.interruption = InterruptionQueue(
            self,
            "Interruption",
            cluster_name=config.cluster_name,
            visibility_timeout=queue_visibility(SPECS_BY_NAME["interruption"]),
            max_receive_count=INTERRUPTION_MAX_RECEIVE_COUNT,
        )
        self.termination_work = TerminationWorkQueue(self, "TerminationWork")
        permissions = ControllerPermissions(
            self,
            cluster_name=config.cluster_name,
            node_role=self.node_role.role,
            state=self.state,
            termination_queue=self.termination_work.queue,
            interruption_dead_letter_queue=self.interruption.dead_letter_queue,
        )
        self.network = (
            FunctionNetwork(self, "Network", cluster_name=config.cluster_name, config=config.network)
            if config.network
            else None
        )
        self.control_plane = ControlPlaneFunctions(
            self,
            "Functions",
            config=config,
            permissions=permissions,
            state_table_name=self.state.table.table_name,
            interruption_queue=self.interruption.queue,
            interruption_dead_letter_queue=self.interruption.dead_letter_queue,
            termination_queue=self.termination_work.queue,
            node_role_name=self.node_role.role.role_name,
            network=self.network,
        )
        self.access = ClusterAccess(
            self,
            "ClusterAccess",
            cluster_name=config.cluster_name,
            function_roles=dict(self.control_plane.roles),
            node_role=self.node_role.role if config.node_access_entry else None,
        )
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            cluster_name=config.cluster_name,
            functions=self.control_plane.functions,
            interruption_queue=self.interruption.queue,
            dead_letter_queues={
                "interruption": self.interruption.dead_letter_queue,
                "termination": self.termination_work.dead_letter_queue,
            },
            alarm_email=config.alarm_email,
            dashboard=config.dashboard,
        )
        self.unzipped_sizes = check_unzipped_sizes([spec.name for spec in FUNCTION_SPECS])
        self._outputs()
        self.acknowledgments = acknowledge_findings(self)

    def _outputs(self) -> None:
        outputs = {
            "NodeRoleName": self.node_role.role.role_name,
            "NodeInstanceProfileName": self.node_role.instance_profile.ref,
            "StateTableName": self.state.table.table_name,
            "InterruptionQueueUrl": self.interruption.queue.queue_url,
            "TerminationQueueUrl": self.termination_work.queue.queue_url,
            "AlarmTopicArn": self.monitoring.alarm_topic.topic_arn,
        }
        if self.monitoring.dashboard is not None:
            outputs["DashboardName"] = self.monitoring.dashboard.dashboard_name
        for name, function in self.control_plane.functions.items():
            outputs[f"{name.capitalize()}FunctionName"] = function.function_name
        for key, value in outputs.items():
            CfnOutput(self, key, value=value)

"""Names the CDK stack gives what it deploys, shared by the stack and the tools that find it again
(``doctor``, ``status``).

CloudFormation generates the physical names of the queue, table, functions and roles, so the tools find
them through the stack's outputs: the stack is named from the cluster, and each output key is here.
"""

from __future__ import annotations

from enum import StrEnum

STACK_NAME_PREFIX = "ServerlessKarpenter"
# Tag the stack puts on every resource it creates.
CLUSTER_TAG = "serverless-karpenter/cluster"
FUNCTION_NAMES = ("watcher", "provisioner", "interruption", "disruption", "termination")
DEFAULT_NODE_ROLE_NAME = "KarpenterNodeRole-{clusterName}"  # what Karpenter's own template creates
# EC2 needs it to request spot capacity; an account gets it on its first spot request, unless the caller
# may not create it (ServiceLinkedRoleCreationNotPermitted).
SPOT_SERVICE_LINKED_ROLE = "AWSServiceRoleForEC2Spot"
SPOT_SERVICE = "spot.amazonaws.com"


class StackOutput(StrEnum):
    NODE_ROLE_NAME = "NodeRoleName"
    NODE_INSTANCE_PROFILE_NAME = "NodeInstanceProfileName"
    STATE_TABLE_NAME = "StateTableName"
    INTERRUPTION_QUEUE_URL = "InterruptionQueueUrl"
    TERMINATION_QUEUE_URL = "TerminationQueueUrl"
    DASHBOARD_NAME = "DashboardName"
    ALARM_TOPIC_ARN = "AlarmTopicArn"


def kubernetes_group(function_name: str) -> str:
    """The Kubernetes group a function's EKS access entry maps its role to: one per function, each bound
    by deploy/rbac.yaml to a ClusterRole of the same name with only that function's verbs."""
    if function_name not in FUNCTION_NAMES:
        raise KeyError(f"no function {function_name!r}")
    return f"serverless-karpenter-{function_name}"


def stack_name(cluster_name: str) -> str:
    # Stack names allow letters, digits and hyphens; cluster names may also hold underscores.
    return f"{STACK_NAME_PREFIX}-{cluster_name.replace('_', '-')}"


def function_output(function_name: str) -> str:
    """The stack output holding the physical name of one of :data:`FUNCTION_NAMES`."""
    return f"{function_name.capitalize()}FunctionName"


def node_role_name(cluster_name: str, template: str = DEFAULT_NODE_ROLE_NAME) -> str:
    return template.replace("{clusterName}", cluster_name)

"""The controller permissions the CDK stack grants each function's role, for the simulated account.

The statements are the stack's (:mod:`serverless_karpenter_stack.policies`), the very data ``infra/iam.py``
renders into the template, here rendered over the simulated account's names; ``doctor``'s
Lambda-permissions check then simulates (see :mod:`serverless_karpenter_sim.iam_simulation`) the policies
a deployed stack holds, scoped to the cluster's resources, region and tags.
``tests/infra/test_sim_policies_match_stack.py`` checks the two renderings against each other.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from serverless_karpenter import naming
from serverless_karpenter_stack import policies

if TYPE_CHECKING:
    from serverless_karpenter_sim.cloud import DeployedStack, SimulatedCloud

# The name the seeded roles' inline policy goes by (the stack's is CDK's "<Role>DefaultPolicy...").
POLICY_NAME = "ControllerPermissions"

# What an SQS event source adds to the role of the function it triggers (CDK writes that statement in the
# stack, not the core).
CONSUME_ACTIONS = (
    "sqs:ReceiveMessage",
    "sqs:ChangeMessageVisibility",
    "sqs:GetQueueUrl",
    "sqs:DeleteMessage",
    "sqs:GetQueueAttributes",
)
# The queue each function consumes through an SQS event source (an attribute of StackArns).
CONSUMED_QUEUES = {"interruption": "interruption_queue", "termination": "termination_queue"}


@dataclass(frozen=True, kw_only=True)
class StackArns(policies.PolicyParameters):
    """The stack's resources the statements name, and the queue the event source grants consuming."""

    interruption_queue: str


def controller_policy(function: str, arns: StackArns) -> dict[str, Any]:
    """The policy document the stack gives ``function``'s role: its capabilities' statements, and the
    consume grant of the queue that triggers it."""
    statements = policies.function_statements(function, arns)
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

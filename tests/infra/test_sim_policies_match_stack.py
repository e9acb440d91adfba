"""The function roles' policies, as the stack deploys them, as the simulator seeds them, and as `doctor`
checks them:

- the simulator's roles (``serverless_karpenter_sim.stack_policies``) hold exactly what the template
  grants each function's role, but for CDK's log-group and X-Ray grants: both render the statements of
  ``serverless_karpenter_stack.policies``, the stack with CDK tokens and the simulator with plain names,
  and the simulator adds the consume grant CDK's SQS event sources write; so the simulated account is
  scoped as a deployed one;
- every permission `doctor` requires (``serverless_karpenter.doctor.gather.REQUIRED_PERMISSIONS``) is
  allowed by the synthesized template's policies, as IAM's simulator evaluates them, on the resources and
  with the context the doctor supplies: a correctly deployed stack passes the Lambda-permissions check.

The template's intrinsic functions are resolved to the names CloudFormation would give (each resource
named after its logical id) in an assumed account and region.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from serverless_karpenter import naming
from serverless_karpenter.doctor.gather import REQUIRED_PERMISSIONS, simulation_requests, stack_names
from serverless_karpenter_sim.iam_simulation import ALLOWED, SourcePolicy, evaluate, request_context
from serverless_karpenter_sim.stack_policies import StackArns, controller_policy

from tests.infra.conftest import Synthesized
from tests.infra.helpers import CLUSTERS, as_list, identity_statements_of_role, role_of_function

pytestmark = pytest.mark.infra

REGION, ACCOUNT, PARTITION = "eu-west-1", "210987654321", "aws"
# CDK's grants on the function's log group and for X-Ray tracing: the simulated account has neither.
NOT_SEEDED = ("logs:", "xray:")
PSEUDO = {
    "AWS::Partition": PARTITION,
    "AWS::Region": REGION,
    "AWS::AccountId": ACCOUNT,
    "AWS::URLSuffix": "amazonaws.com",
}


class Resolver:
    """Resolves Ref, Fn::GetAtt and Fn::Join as CloudFormation would, naming each resource after its
    logical id."""

    def __init__(self, template: dict[str, Any]) -> None:
        self.resources = template["Resources"]

    def ref(self, logical_id: str) -> str:
        if logical_id in PSEUDO:
            return PSEUDO[logical_id]
        if self.resources[logical_id]["Type"] == "AWS::SQS::Queue":
            return f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{logical_id}"
        return logical_id

    def arn(self, logical_id: str) -> str:
        kind = self.resources[logical_id]["Type"]
        arns = {
            "AWS::DynamoDB::Table": f"arn:{PARTITION}:dynamodb:{REGION}:{ACCOUNT}:table/{logical_id}",
            "AWS::Lambda::Function": f"arn:{PARTITION}:lambda:{REGION}:{ACCOUNT}:function:{logical_id}",
            "AWS::SQS::Queue": f"arn:{PARTITION}:sqs:{REGION}:{ACCOUNT}:{logical_id}",
            "AWS::IAM::Role": f"arn:{PARTITION}:iam::{ACCOUNT}:role/{logical_id}",
            "AWS::Logs::LogGroup": f"arn:{PARTITION}:logs:{REGION}:{ACCOUNT}:log-group:{logical_id}:*",
        }
        return arns[kind]

    def __call__(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self(v) for v in value]
        if not isinstance(value, dict):
            return value
        if set(value) == {"Ref"}:
            return self.ref(value["Ref"])
        if set(value) == {"Fn::GetAtt"}:
            logical_id, attribute = value["Fn::GetAtt"]
            assert attribute == "Arn", value
            return self.arn(logical_id)
        if set(value) == {"Fn::Join"}:
            separator, parts = value["Fn::Join"]
            return str(separator).join(str(self(p)) for p in parts)
        return {k: self(v) for k, v in value.items()}


def outputs(template: dict[str, Any], resolve: Resolver) -> dict[str, str]:
    return {key: str(resolve(output["Value"])) for key, output in template["Outputs"].items()}


def logical_id(template: dict[str, Any], output: str) -> str:
    return str(template["Outputs"][output]["Value"]["Ref"])


def function_statements(template: dict[str, Any], resolve: Resolver, function: str) -> list[dict[str, Any]]:
    function_id = logical_id(template, naming.function_output(function))
    statements = identity_statements_of_role(template, role_of_function(template, function_id))
    return [resolve(s) for s in statements]


def normalized(statement: dict[str, Any]) -> str:
    """One statement as a comparable string: lists as sorted lists, whatever order they were written in."""
    condition = {
        operator: {key: sorted(as_list(values)) for key, values in block.items()}
        for operator, block in (statement.get("Condition") or {}).items()
    }
    return json.dumps(
        {
            "Sid": statement.get("Sid"),
            "Effect": statement["Effect"],
            "Action": sorted(as_list(statement["Action"])),
            "Resource": sorted(as_list(statement["Resource"])),
            "Condition": condition,
        },
        sort_keys=True,
    )


def simulator_arns(template: dict[str, Any], resolve: Resolver, cluster: str) -> StackArns:
    queue_id = logical_id(template, naming.StackOutput.INTERRUPTION_QUEUE_URL)
    redrive = template["Resources"][queue_id]["Properties"]["RedrivePolicy"]["deadLetterTargetArn"]
    return StackArns(
        partition=PARTITION,
        region=REGION,
        account=ACCOUNT,
        cluster=cluster,
        state_table=resolve.arn(logical_id(template, naming.StackOutput.STATE_TABLE_NAME)),
        provisioner_function=resolve.arn(logical_id(template, naming.function_output("provisioner"))),
        node_role=resolve.arn(logical_id(template, naming.StackOutput.NODE_ROLE_NAME)),
        interruption_queue=resolve.arn(queue_id),
        interruption_dead_letter_queue=str(resolve(redrive)),
        termination_queue=resolve.arn(logical_id(template, naming.StackOutput.TERMINATION_QUEUE_URL)),
    )


@pytest.mark.parametrize("cluster", CLUSTERS)
@pytest.mark.parametrize("function", naming.FUNCTION_NAMES)
def test_simulator_seeds_the_stacks_controller_statements(
    synthesized: Synthesized, cluster: str, function: str
) -> None:
    template = synthesized.templates[cluster]
    resolve = Resolver(template)
    deployed = sorted(
        normalized(s)
        for s in function_statements(template, resolve, function)
        if not all(a.startswith(NOT_SEEDED) for a in as_list(s["Action"]))
    )
    seeded = sorted(
        normalized(s)
        for s in controller_policy(function, simulator_arns(template, resolve, cluster))["Statement"]
    )
    assert seeded == deployed


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_the_deployed_roles_pass_the_doctors_permission_check(synthesized: Synthesized, cluster: str) -> None:
    template = synthesized.templates[cluster]
    resolve = Resolver(template)
    names = stack_names(outputs(template, resolve), cluster, REGION, ACCOUNT, PARTITION)
    for function, permissions in REQUIRED_PERMISSIONS.items():
        policies = [
            SourcePolicy("deployed", "role", {"Statement": function_statements(template, resolve, function)})
        ]
        requests = simulation_requests(permissions, names)
        assert sum(len(actions) for _, _, actions in requests) == len(permissions), "a resource is unnamed"
        for resource, supplied, actions in requests:
            entries = request_context(
                {"ContextKeyName": k, "ContextKeyValues": [v]} for k, v in supplied.items()
            )
            denied = [a for a in actions if evaluate(policies, a, resource, entries).decision != ALLOWED]
            assert denied == [], (function, resource, supplied)

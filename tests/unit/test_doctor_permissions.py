"""`doctor`'s Lambda-permissions check: what it asks iam:SimulatePrincipalPolicy, and what it reports when
the caller or the endpoint cannot answer."""

from __future__ import annotations

from typing import Any, cast

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from serverless_karpenter import naming
from serverless_karpenter.doctor.checks import Status, check_lambda_permissions
from serverless_karpenter.doctor.gather import (
    REQUIRED_PERMISSIONS,
    Gatherer,
    simulation_requests,
    stack_names,
)
from serverless_karpenter_sim.iam_simulation import ALLOWED, SourcePolicy, evaluate, request_context
from serverless_karpenter_sim.stack_policies import StackArns, controller_policy

from tests.integration.doctor_setup import empty_facts

CLUSTER, REGION, ACCOUNT = "demo", "us-east-1", "123456789012"
OUTPUTS = {
    naming.StackOutput.STATE_TABLE_NAME: "state",
    naming.StackOutput.NODE_ROLE_NAME: f"KarpenterNodeRole-{CLUSTER}",
    naming.StackOutput.INTERRUPTION_QUEUE_URL: f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/interruption",
    naming.StackOutput.TERMINATION_QUEUE_URL: f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/termination",
    **{naming.function_output(f): f"ServerlessKarpenter-{CLUSTER}-{f}" for f in naming.FUNCTION_NAMES},
}
ROLES = {f: f"arn:aws:iam::{ACCOUNT}:role/{CLUSTER}-{f}-role" for f in naming.FUNCTION_NAMES}


def gatherer(iam: Any) -> Gatherer:
    unused = cast(Any, None)
    return Gatherer(CLUSTER, REGION, lambda _: unused, None, probe_clients=lambda _: iam)


def stubbed_iam() -> tuple[Any, Stubber]:
    iam = boto3.client("iam", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x")
    return iam, Stubber(iam)


def test_each_permission_is_simulated_on_its_resource_with_its_context() -> None:
    iam, stubber = stubbed_iam()
    allowed = {"EvaluationResults": [], "IsTruncated": False}
    role = ROLES["watcher"]
    stubber.add_response(
        "simulate_principal_policy",
        {
            **allowed,
            "EvaluationResults": [{"EvalActionName": "eks:DescribeCluster", "EvalDecision": "allowed"}],
        },
        {
            "PolicySourceArn": role,
            "ActionNames": ["eks:DescribeCluster"],
            "ResourceArns": [f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/{CLUSTER}"],
        },
    )
    stubber.add_response(
        "simulate_principal_policy",
        {
            **allowed,
            "EvaluationResults": [
                {
                    "EvalActionName": "lambda:InvokeFunction",
                    "EvalDecision": "implicitDeny",
                    "MissingContextValues": ["aws:PrincipalTag/team"],
                }
            ],
        },
        {
            "PolicySourceArn": role,
            "ActionNames": ["lambda:InvokeFunction"],
            "ResourceArns": [
                f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:ServerlessKarpenter-demo-provisioner"
            ],
        },
    )
    with stubber:
        [facts] = gatherer(iam).permissions({"watcher": role}, OUTPUTS, ACCOUNT)
    stubber.assert_no_pending_responses()
    assert facts.denied == ["lambda:InvokeFunction"] and facts.missing_context == ["aws:PrincipalTag/team"]


def test_context_the_stack_conditions_on_is_supplied() -> None:
    names = stack_names(OUTPUTS, CLUSTER, REGION, ACCOUNT, "aws")
    requests = {r: (c, a) for r, c, a in simulation_requests(REQUIRED_PERMISSIONS["provisioner"], names)}
    fleet_context, fleet_actions = requests[f"arn:aws:ec2:{REGION}:{ACCOUNT}:fleet/*"]
    assert fleet_actions == ["ec2:CreateFleet"]
    assert fleet_context[f"aws:RequestTag/kubernetes.io/cluster/{CLUSTER}"] == "owned"
    assert fleet_context["aws:RequestTag/eks:eks-cluster-name"] == CLUSTER
    assert "aws:RequestTag/karpenter.sh/nodepool" in fleet_context
    # Several actions on one resource with one context: one simulation.
    table = requests[f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/state"]
    assert table == ({}, ["dynamodb:PutItem", "dynamodb:Query"])
    assert requests["*"] == ({"aws:RequestedRegion": REGION}, ["ec2:DescribeSubnets"])
    role = requests[f"arn:aws:iam::{ACCOUNT}:role/KarpenterNodeRole-{CLUSTER}"]
    assert role == ({"iam:PassedToService": "ec2.amazonaws.com"}, ["iam:PassRole"])


def test_a_permission_on_a_resource_the_stack_does_not_name_is_left_out() -> None:
    outputs = {k: v for k, v in OUTPUTS.items() if k != naming.StackOutput.TERMINATION_QUEUE_URL}
    names = stack_names(outputs, CLUSTER, REGION, ACCOUNT, "aws")
    actions = [
        a for _, _, actions in simulation_requests(REQUIRED_PERMISSIONS["disruption"], names) for a in actions
    ]
    assert "sqs:SendMessage" not in actions and "eks:DescribeCluster" in actions


def test_the_stacks_policies_grant_every_required_permission() -> None:
    """The controller statements the stack gives each role (as the simulator seeds them) allow what the
    doctor requires, and dropping one of them is noticed."""
    arns = StackArns(
        partition="aws",
        region=REGION,
        account=ACCOUNT,
        cluster=CLUSTER,
        state_table=f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/state",
        provisioner_function=f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:ServerlessKarpenter-demo-provisioner",
        node_role=f"arn:aws:iam::{ACCOUNT}:role/KarpenterNodeRole-{CLUSTER}",
        interruption_queue=f"arn:aws:sqs:{REGION}:{ACCOUNT}:interruption",
        interruption_dead_letter_queue=f"arn:aws:sqs:{REGION}:{ACCOUNT}:interruption-dlq",
        termination_queue=f"arn:aws:sqs:{REGION}:{ACCOUNT}:termination",
    )
    names = stack_names(OUTPUTS, CLUSTER, REGION, ACCOUNT, "aws")
    for function, permissions in REQUIRED_PERMISSIONS.items():
        policies = [SourcePolicy("stack", "role", controller_policy(function, arns))]
        requests = simulation_requests(permissions, names)
        assert sum(len(actions) for _, _, actions in requests) == len(permissions), function
        for resource, supplied, actions in requests:
            entries = request_context(
                {"ContextKeyName": k, "ContextKeyValues": [v]} for k, v in supplied.items()
            )
            for action in actions:
                assert evaluate(policies, action, resource, entries).decision == ALLOWED, (function, action)
    watcher_only = [SourcePolicy("stack", "role", controller_policy("watcher", arns))]
    [(resource, supplied, actions)] = simulation_requests(
        [p for p in REQUIRED_PERMISSIONS["provisioner"] if p.action == "ec2:CreateFleet"], names
    )
    entries = request_context({"ContextKeyName": k, "ContextKeyValues": [v]} for k, v in supplied.items())
    assert evaluate(watcher_only, "ec2:CreateFleet", resource, entries).decision != ALLOWED


@pytest.mark.parametrize(
    ("code", "status", "reason"),
    [
        # A real account whose caller may not simulate: reported as not run, never as a pass or a failure.
        ("AccessDenied", 403, "the caller may not call SimulatePrincipalPolicy (AccessDenied)"),
        ("NotImplemented", 501, "SimulatePrincipalPolicy is not implemented by this endpoint"),
    ],
)
def test_a_caller_or_endpoint_that_cannot_simulate_is_not_a_pass(code: str, status: int, reason: str) -> None:
    iam, stubber = stubbed_iam()
    stubber.add_client_error("simulate_principal_policy", service_error_code=code, http_status_code=status)
    with stubber:  # one attempt: every other function is reported without asking again
        permissions = gatherer(iam).permissions(ROLES, OUTPUTS, ACCOUNT)
    stubber.assert_no_pending_responses()
    assert [p.function for p in permissions] == list(ROLES)
    assert all(p.denied is None for p in permissions)
    facts = empty_facts()
    facts.permissions = permissions
    results = check_lambda_permissions(facts)
    assert {r.status for r in results} == {Status.SKIPPED}
    assert all(
        r.summary.endswith(f"not simulated (iam:SimulatePrincipalPolicy unavailable: {reason})")
        for r in results
    )


def test_other_errors_are_not_hidden() -> None:
    iam, stubber = stubbed_iam()
    stubber.add_client_error(
        "simulate_principal_policy", service_error_code="Throttling", http_status_code=400
    )
    with stubber, pytest.raises(ClientError):
        gatherer(iam).permissions({"watcher": ROLES["watcher"]}, OUTPUTS, ACCOUNT)

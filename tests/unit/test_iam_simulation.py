"""The simulator's iam:SimulatePrincipalPolicy: IAM's evaluation of identity policies."""

from __future__ import annotations

from typing import Any

import pytest
from serverless_karpenter_sim.iam_simulation import (
    ALLOWED,
    EXPLICIT_DENY,
    IMPLICIT_DENY,
    SourcePolicy,
    UnsupportedCondition,
    evaluate,
    request_context,
    simulate,
)

INSTANCE = "arn:aws:ec2:us-east-1:123456789012:instance/i-0abc"


def policy(*statements: dict[str, Any], name: str = "inline") -> SourcePolicy:
    return SourcePolicy(name, "role", {"Version": "2012-10-17", "Statement": list(statements)})


def allow(action: Any, resource: Any = "*", **extra: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": action, "Resource": resource, **extra}


def deny(action: Any, resource: Any = "*", **extra: Any) -> dict[str, Any]:
    return {"Effect": "Deny", "Action": action, "Resource": resource, **extra}


def entries(**values: str | list[str]) -> dict[str, list[str]]:
    """ContextEntries, keyed ``aws_RequestedRegion`` for ``aws:RequestedRegion``."""
    return request_context(
        {"ContextKeyName": key.replace("_", ":", 1), "ContextKeyValues": v if isinstance(v, list) else [v]}
        for key, v in values.items()
    )


def test_allow_matches_the_action() -> None:
    result = evaluate([policy(allow("sqs:SendMessage"))], "sqs:SendMessage")
    assert result.decision == ALLOWED and [p.id for p in result.matched] == ["inline"]


def test_no_policy_is_an_implicit_deny() -> None:
    assert evaluate([], "sqs:SendMessage").decision == IMPLICIT_DENY
    assert evaluate([policy(allow("sqs:ReceiveMessage"))], "sqs:SendMessage").decision == IMPLICIT_DENY


def test_explicit_deny_overrides_allow_in_any_policy() -> None:
    policies = [policy(allow("ec2:*"), name="broad"), policy(deny("ec2:TerminateInstances"), name="guard")]
    result = evaluate(policies, "ec2:TerminateInstances", INSTANCE)
    assert result.decision == EXPLICIT_DENY and [p.id for p in result.matched] == ["guard"]
    assert evaluate(policies, "ec2:RunInstances").decision == ALLOWED


def test_wildcard_actions_ignore_case() -> None:
    policies = [policy(allow("ec2:Describe*"))]
    assert evaluate(policies, "ec2:DescribeSubnets").decision == ALLOWED
    assert evaluate(policies, "EC2:describeinstances").decision == ALLOWED
    assert evaluate(policies, "ec2:CreateFleet").decision == IMPLICIT_DENY
    assert evaluate([policy(allow("ec2:Describe?ubnets"))], "ec2:DescribeSubnets").decision == ALLOWED
    assert evaluate([policy(allow("*"))], "anything:AtAll").decision == ALLOWED


def test_not_action_matches_every_other_action() -> None:
    policies = [policy({"Effect": "Allow", "NotAction": ["iam:*", "ec2:Terminate*"], "Resource": "*"})]
    assert evaluate(policies, "sqs:SendMessage").decision == ALLOWED
    assert evaluate(policies, "iam:PassRole").decision == IMPLICIT_DENY
    assert evaluate(policies, "ec2:TerminateInstances").decision == IMPLICIT_DENY


def test_resources_match_with_wildcards_and_mind_case() -> None:
    policies = [policy(allow("ec2:TerminateInstances", "arn:aws:ec2:us-east-1:*:instance/*"))]
    assert evaluate(policies, "ec2:TerminateInstances", INSTANCE).decision == ALLOWED
    assert evaluate(
        policies, "ec2:TerminateInstances", INSTANCE.replace("us-east-1", "eu-west-1")
    ).decision == (IMPLICIT_DENY)
    assert evaluate(policies, "ec2:TerminateInstances", INSTANCE.upper()).decision == IMPLICIT_DENY
    # Without a resource the simulation asks about "*", which a statement naming resources does not grant.
    assert evaluate(policies, "ec2:TerminateInstances").decision == IMPLICIT_DENY


def test_not_resource() -> None:
    policies = [
        policy({"Effect": "Deny", "Action": "s3:*", "NotResource": "arn:aws:s3:::ours/*"}, allow("s3:*"))
    ]
    assert evaluate(policies, "s3:GetObject", "arn:aws:s3:::ours/key").decision == ALLOWED
    assert evaluate(policies, "s3:GetObject", "arn:aws:s3:::theirs/key").decision == EXPLICIT_DENY


def test_a_condition_without_its_context_does_not_grant() -> None:
    policies = [
        policy(allow("ec2:DescribeSubnets", Condition={"StringEquals": {"aws:RequestedRegion": "us-east-1"}}))
    ]
    missing = evaluate(policies, "ec2:DescribeSubnets")
    assert missing.decision == IMPLICIT_DENY and missing.missing_context == ("aws:RequestedRegion",)
    # Condition keys are case-insensitive; their values are not.
    assert evaluate(
        policies, "ec2:DescribeSubnets", context=entries(aws_requestedregion="us-east-1")
    ).decision == (ALLOWED)
    assert evaluate(
        policies, "ec2:DescribeSubnets", context=entries(aws_RequestedRegion="US-EAST-1")
    ).decision == (IMPLICIT_DENY)


def test_every_operator_and_key_must_hold_any_value_may_match() -> None:
    condition = {
        "StringEquals": {"aws:RequestTag/owner": ["me", "you"], "aws:RequestTag/env": "prod"},
        "StringLike": {"aws:RequestTag/pool": "team-*"},
    }
    policies = [policy(allow("ec2:RunInstances", Condition=condition))]
    tags = {"aws_RequestTag/owner": "you", "aws_RequestTag/env": "prod", "aws_RequestTag/pool": "team-a"}
    assert evaluate(policies, "ec2:RunInstances", context=entries(**tags)).decision == ALLOWED
    for key, wrong in (("aws_RequestTag/owner", "them"), ("aws_RequestTag/pool", "other")):
        assert evaluate(policies, "ec2:RunInstances", context=entries(**{**tags, key: wrong})).decision == (
            IMPLICIT_DENY
        )


@pytest.mark.parametrize(
    ("condition", "supplied", "holds"),
    [
        # A negated operator holds when the key is absent; IfExists and ForAllValues too.
        ({"StringNotEquals": {"aws:PrincipalTag/team": "red"}}, {}, True),
        ({"StringNotEquals": {"aws:PrincipalTag/team": "red"}}, {"aws_PrincipalTag/team": "red"}, False),
        ({"StringEqualsIfExists": {"aws:RequestTag/a": "x"}}, {}, True),
        ({"StringEqualsIfExists": {"aws:RequestTag/a": "x"}}, {"aws_RequestTag/a": "y"}, False),
        ({"ForAllValues:StringEquals": {"aws:TagKeys": ["Name", "team"]}}, {}, True),
        (
            {"ForAllValues:StringEquals": {"aws:TagKeys": ["Name", "team"]}},
            {"aws_TagKeys": ["Name", "x"]},
            False,
        ),
        ({"ForAllValues:StringEquals": {"aws:TagKeys": ["Name", "team"]}}, {"aws_TagKeys": ["team"]}, True),
        ({"ForAnyValue:StringEquals": {"aws:TagKeys": "team"}}, {}, False),
        ({"ForAnyValue:StringEquals": {"aws:TagKeys": "team"}}, {"aws_TagKeys": ["x", "team"]}, True),
        ({"Null": {"aws:RequestTag/a": "true"}}, {}, True),
        ({"Null": {"aws:RequestTag/a": "false"}}, {}, False),
        ({"Bool": {"aws:SecureTransport": True}}, {"aws_SecureTransport": "true"}, True),
        ({"NumericLessThan": {"s3:max-keys": "10"}}, {"s3_max-keys": "9"}, True),
        ({"NumericLessThan": {"s3:max-keys": "10"}}, {"s3_max-keys": "ten"}, False),
        (
            {"DateGreaterThan": {"aws:CurrentTime": "2020-01-01T00:00:00Z"}},
            {"aws_CurrentTime": "2021-06-01T00:00:00Z"},
            True,
        ),
        ({"IpAddress": {"aws:SourceIp": "10.0.0.0/16"}}, {"aws_SourceIp": "10.0.3.4"}, True),
        ({"NotIpAddress": {"aws:SourceIp": "10.0.0.0/16"}}, {"aws_SourceIp": "10.0.3.4"}, False),
        (
            {"ArnLike": {"aws:SourceArn": "arn:aws:events:*:123456789012:rule/*"}},
            {"aws_SourceArn": "arn:aws:events:us-east-1:123456789012:rule/r"},
            True,
        ),
        (
            {"ArnNotLike": {"aws:SourceArn": "arn:aws:events:*:*:rule/*"}},
            {"aws_SourceArn": "arn:aws:sqs:us-east-1:1:q"},
            True,
        ),
        (
            {"ArnNotLike": {"aws:SourceArn": "arn:aws:events:*:*:rule/*"}},
            {"aws_SourceArn": "arn:aws:events:us-east-1:1:rule/r"},
            False,
        ),
        (
            {"ArnEquals": {"aws:SourceArn": "arn:aws:events:us-east-1:1:rule/r"}},
            {"aws_SourceArn": "arn:aws:events:us-east-1:1:rule/other"},
            False,
        ),
        ({"StringEqualsIgnoreCase": {"aws:RequestTag/a": "Prod"}}, {"aws_RequestTag/a": "PROD"}, True),
    ],
)
def test_condition_operators(condition: dict[str, Any], supplied: dict[str, Any], holds: bool) -> None:
    policies = [policy(allow("ec2:CreateTags", Condition=condition))]
    decision = evaluate(policies, "ec2:CreateTags", context=entries(**supplied)).decision
    assert decision == (ALLOWED if holds else IMPLICIT_DENY)


def test_a_conditional_deny_needs_its_condition_to_hold() -> None:
    policies = [
        policy(
            allow("sqs:*"),
            deny("sqs:DeleteQueue", Condition={"StringNotEquals": {"aws:PrincipalTag/role": "admin"}}),
        )
    ]
    assert evaluate(policies, "sqs:DeleteQueue").decision == EXPLICIT_DENY  # absent key: "not admin" holds
    admin = entries(**{"aws_PrincipalTag/role": "admin"})
    assert evaluate(policies, "sqs:DeleteQueue", context=admin).decision == ALLOWED


def test_unknown_condition_operator_is_refused() -> None:
    policies = [policy(allow("sqs:*", Condition={"StringSortOf": {"aws:RequestTag/a": "x"}}))]
    with pytest.raises(UnsupportedCondition):
        evaluate(policies, "sqs:SendMessage")


def test_permissions_boundary_must_allow_too() -> None:
    policies = [policy(allow("*"))]
    boundary = [policy({"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"}, name="boundary")]
    inside = evaluate(policies, "ec2:RunInstances", boundary=boundary)
    assert inside.decision == ALLOWED and inside.allowed_by_boundary is True
    outside = evaluate(policies, "iam:CreateRole", boundary=boundary)
    assert outside.decision == IMPLICIT_DENY and outside.allowed_by_boundary is False
    denying = [policy(allow("*"), deny("ec2:*"), name="boundary")]
    denied = evaluate(policies, "ec2:RunInstances", boundary=denying)
    assert denied.decision == EXPLICIT_DENY and [p.id for p in denied.matched] == ["boundary"]
    # A boundary grants nothing by itself.
    assert evaluate([], "ec2:RunInstances", boundary=boundary).decision == IMPLICIT_DENY


def test_response_without_resources() -> None:
    policies = [policy(allow("ec2:Describe*"), deny("ec2:DescribeImages"))]
    response = simulate(
        policies, None, ["ec2:DescribeSubnets", "ec2:DescribeImages", "s3:GetObject"], None, []
    )
    assert response["IsTruncated"] is False
    assert [
        (r["EvalActionName"], r["EvalResourceName"], r["EvalDecision"]) for r in response["EvaluationResults"]
    ] == [
        ("ec2:DescribeSubnets", "*", ALLOWED),
        ("ec2:DescribeImages", "*", EXPLICIT_DENY),
        ("s3:GetObject", "*", IMPLICIT_DENY),
    ]
    assert response["EvaluationResults"][1]["MatchedStatements"] == [
        {"SourcePolicyId": "inline", "SourcePolicyType": "role"}
    ]
    assert all("ResourceSpecificResults" not in r for r in response["EvaluationResults"])


def test_response_with_resources_is_the_most_restrictive_per_action() -> None:
    ours = "arn:aws:ec2:us-east-1:1:instance/*"
    policies = [
        policy(allow("ec2:TerminateInstances", ours, Condition={"StringEquals": {"aws:ResourceTag/o": "me"}}))
    ]
    mine, theirs = "arn:aws:ec2:us-east-1:1:instance/i-1", "arn:aws:ec2:us-east-1:2:instance/i-2"
    tagged = [{"ContextKeyName": "aws:ResourceTag/o", "ContextKeyValues": ["me"], "ContextKeyType": "string"}]
    [one] = simulate(policies, None, ["ec2:TerminateInstances"], [mine], tagged)["EvaluationResults"]
    assert one["EvalDecision"] == ALLOWED and one["EvalResourceName"] == mine
    [both] = simulate(policies, None, ["ec2:TerminateInstances"], [mine, theirs], [])["EvaluationResults"]
    assert both["EvalDecision"] == IMPLICIT_DENY and "EvalResourceName" not in both
    assert both["MissingContextValues"] == ["aws:ResourceTag/o"]
    assert [(r["EvalResourceName"], r["EvalResourceDecision"]) for r in both["ResourceSpecificResults"]] == [
        (mine, IMPLICIT_DENY),
        (theirs, IMPLICIT_DENY),
    ]

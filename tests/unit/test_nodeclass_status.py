"""EC2NodeClass conditions as Karpenter v1.14 writes them (issue 21): each resolution's condition, the
ValidationSucceeded and PlacementGroupReady it added, and their root Ready."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from serverless_karpenter.adapters.nodeclass_status import nodeclass_conditions

NOW = datetime(2026, 1, 1, tzinfo=UTC)
AMI_ERROR = 'EC2NodeClass "default": spec.amiSelectorTerms: no AMI resolves'


def by_type(conditions: list[dict[str, object]]) -> dict[str, tuple[object, object]]:
    return {str(c["type"]): (c["status"], c["reason"]) for c in conditions}


def test_a_resolved_class_is_ready_with_every_dependent_true() -> None:
    conditions = nodeclass_conditions(None, None, NOW, 2)
    assert [c["type"] for c in conditions] == sorted(c["type"] for c in conditions)
    assert by_type(conditions) == {
        kind: ("True", kind)
        for kind in (
            "AMIsReady",
            "InstanceProfileReady",
            "PlacementGroupReady",
            "Ready",
            "SecurityGroupsReady",
            "SubnetsReady",
            "ValidationSucceeded",
        )
    }
    assert all(c["observedGeneration"] == 2 for c in conditions)


def test_a_failed_part_is_false_the_ones_after_it_unknown_and_ready_names_them() -> None:
    conditions = nodeclass_conditions(AMI_ERROR, None, NOW, 1)
    assert by_type(conditions) == {
        "SubnetsReady": ("True", "SubnetsReady"),
        "SecurityGroupsReady": ("True", "SecurityGroupsReady"),
        "AMIsReady": ("False", "AMINotFound"),
        "InstanceProfileReady": ("Unknown", "AwaitingReconciliation"),
        "ValidationSucceeded": ("False", "DependenciesNotReady"),
        "PlacementGroupReady": ("True", "PlacementGroupReady"),
        "Ready": ("False", "UnhealthyDependents"),
    }
    ready = next(c for c in conditions if c["type"] == "Ready")
    assert set(str(ready["message"]).split(", ")) == {
        "AMIsReady=False",
        "InstanceProfileReady=Unknown",
        "ValidationSucceeded=False",
    }
    # The same failure later keeps each condition's transition time; fixing it moves only the changed ones.
    later = NOW + timedelta(minutes=5)
    again = nodeclass_conditions(AMI_ERROR, {"conditions": conditions}, later, 1)
    assert again == conditions
    fixed = {c["type"]: c for c in nodeclass_conditions(None, {"conditions": conditions}, later, 1)}
    assert fixed["SubnetsReady"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert fixed["AMIsReady"]["lastTransitionTime"] == "2026-01-01T00:05:00Z"
    assert (fixed["Ready"]["status"], fixed["Ready"]["message"]) == ("True", "")


def test_a_failure_no_field_names_is_a_failed_validation_with_every_part_unknown() -> None:
    conditions = by_type(nodeclass_conditions("AccessDenied: ec2:DescribeSubnets", None, NOW, 1))
    assert conditions["ValidationSucceeded"] == ("False", "ResolutionFailed")
    assert conditions["SubnetsReady"] == ("Unknown", "AwaitingReconciliation")
    assert conditions["Ready"] == ("False", "UnhealthyDependents")

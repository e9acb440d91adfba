"""The status conditions the provisioner writes on a NodePool after validating it (issue 17)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from serverless_karpenter.provisioning.nodepool_validation import (
    MAX_CONDITION_MESSAGE,
    conditions_after_validation,
    split_usable,
)

from tests.crd_cases import NODEPOOL, merge

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def with_conditions(conditions: list[dict[str, Any]] | None, generation: int = 1) -> dict[str, Any]:
    pool = merge(NODEPOOL, {"metadata": {"generation": generation}})
    if conditions is not None:
        pool["status"] = {"conditions": conditions}
    return pool


def by_type(conditions: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    assert conditions is not None
    return {c["type"]: c for c in conditions}


def test_an_invalid_nodepool_gets_validation_and_ready_false_once() -> None:
    kept = {
        "type": "NodeClassReady",
        "status": "True",
        "reason": "NodeClassReady",
        "message": "",
        "lastTransitionTime": "2025-12-31T00:00:00Z",
    }
    written = conditions_after_validation(with_conditions([kept]), "spec.weight: too heavy", NOW)
    conditions = by_type(written)
    assert conditions["NodeClassReady"] == kept
    assert conditions["ValidationSucceeded"] == {
        "type": "ValidationSucceeded",
        "status": "False",
        "reason": "NodePoolValidationFailed",
        "message": "spec.weight: too heavy",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "observedGeneration": 1,
    }
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"], conditions["Ready"]["message"]) == (
        "False",
        "UnhealthyDependents",
        "ValidationSucceeded=False",
    )
    # The next pass, with the same problem, writes nothing.
    assert conditions_after_validation(with_conditions(written), "spec.weight: too heavy", NOW) is None
    # A new generation is said again, keeping the time of the transition.
    again = by_type(
        conditions_after_validation(
            with_conditions(written, 2), "spec.weight: too heavy", NOW + timedelta(hours=1)
        )
    )
    assert again["ValidationSucceeded"]["observedGeneration"] == 2
    assert again["ValidationSucceeded"]["lastTransitionTime"] == "2026-01-01T00:00:00Z"


def test_a_nodepool_valid_again_says_so_and_one_never_invalid_is_left_alone() -> None:
    invalid = conditions_after_validation(with_conditions(None), "bad", NOW)
    fixed = by_type(conditions_after_validation(with_conditions(invalid), None, NOW + timedelta(minutes=5)))
    assert (fixed["ValidationSucceeded"]["status"], fixed["Ready"]["status"]) == ("True", "True")
    assert fixed["Ready"]["lastTransitionTime"] == "2026-01-01T00:05:00Z"
    assert conditions_after_validation(with_conditions(None), None, NOW) is None


def test_a_long_problem_fits_the_crds_message_limit() -> None:
    written = by_type(conditions_after_validation(with_conditions(None), "x" * 40_000, NOW))
    assert len(written["ValidationSucceeded"]["message"]) == MAX_CONDITION_MESSAGE


def test_split_usable_keeps_the_valid_and_names_the_problem_of_the_others() -> None:
    bad = merge(NODEPOOL, {"metadata": {"name": "bad"}, "spec": {"weight": 500}})
    usable, invalid = split_usable([NODEPOOL, bad])
    assert usable == [NODEPOOL]
    assert [i.name for i in invalid] == ["bad"] and "weight" in invalid[0].problem

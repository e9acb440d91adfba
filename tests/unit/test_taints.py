"""Taint and toleration matching, with Kubernetes semantics."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kubernetes import client as k8s
from serverless_karpenter.scheduling.taints import (
    EQUAL,
    EXISTS,
    NO_EXECUTE,
    NO_SCHEDULE,
    PREFER_NO_SCHEDULE,
    Taint,
    Toleration,
    all_untolerated,
    format_taint,
    merge_taints,
    taints_from_dicts,
    tolerates,
    tolerations_from_dicts,
    untolerated,
)

GPU = Taint("dedicated", "gpu", NO_SCHEDULE)


@pytest.mark.parametrize(
    ("taint", "text"),
    [
        (GPU, "dedicated=gpu:NoSchedule"),
        (Taint("karpenter.sh/disrupted", "", NO_SCHEDULE), "karpenter.sh/disrupted:NoSchedule"),
        (Taint("k", "v", NO_EXECUTE), "k=v:NoExecute"),
    ],
)
def test_format_taint(taint: Taint, text: str) -> None:
    assert format_taint(taint) == text
    assert str(taint) == text


def test_taint_from_dict() -> None:
    assert Taint.from_dict({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}) == GPU
    assert Taint.from_dict({"key": "k", "effect": "NoExecute", "timeAdded": "2024-01-01T00:00:00Z"}) == Taint(
        "k", "", NO_EXECUTE
    )
    assert Taint.from_dict(k8s.V1Taint(key="dedicated", value="gpu", effect="NoSchedule")) == GPU
    assert taints_from_dicts([{"key": "a", "effect": "NoSchedule"}, GPU.to_dict()]) == (
        Taint("a", "", NO_SCHEDULE),
        GPU,
    )
    assert taints_from_dicts(None) == ()


def test_taint_to_dict_round_trip() -> None:
    assert GPU.to_dict() == {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    assert Taint("k", "", NO_SCHEDULE).to_dict() == {"key": "k", "effect": "NoSchedule"}
    assert Taint.from_dict(GPU.to_dict()) == GPU


def test_toleration_from_dict() -> None:
    assert Toleration.from_dict(
        {"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
    ) == Toleration("k", EXISTS, "", NO_EXECUTE, 300)
    # A missing operator means Equal.
    assert Toleration.from_dict({"key": "k", "value": "v"}) == Toleration("k", EQUAL, "v", "")
    assert Toleration.from_dict(
        k8s.V1Toleration(key="k", operator="Exists", effect="NoExecute", toleration_seconds=30)
    ) == Toleration("k", EXISTS, "", NO_EXECUTE, 30)
    from_object = Toleration.from_dict(SimpleNamespace(key="k", operator=None, value="v", effect=None))
    assert from_object == Toleration("k", EQUAL, "v", "")
    assert tolerations_from_dicts([{"operator": "Exists"}]) == (Toleration(operator=EXISTS),)
    assert tolerations_from_dicts(None) == ()


def test_toleration_to_dict_round_trip() -> None:
    toleration = Toleration("k", EXISTS, "", NO_EXECUTE, 300)
    assert toleration.to_dict() == {
        "key": "k",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    }
    assert Toleration.from_dict(toleration.to_dict()) == toleration
    assert Toleration.from_dict(Toleration(operator=EXISTS).to_dict()) == Toleration(operator=EXISTS)


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        # Equal: key and value must match
        (Toleration("dedicated", EQUAL, "gpu", NO_SCHEDULE), GPU, True),
        (Toleration("dedicated", EQUAL, "cpu", NO_SCHEDULE), GPU, False),
        (Toleration("other", EQUAL, "gpu", NO_SCHEDULE), GPU, False),
        (Toleration("dedicated", EQUAL, "", NO_SCHEDULE), GPU, False),
        (Toleration("k", EQUAL, "", NO_SCHEDULE), Taint("k", "", NO_SCHEDULE), True),
        # An empty operator is Equal
        (Toleration("dedicated", "", "gpu", NO_SCHEDULE), GPU, True),
        (Toleration("dedicated", "", "cpu", NO_SCHEDULE), GPU, False),
        # Exists: any value of the key
        (Toleration("dedicated", EXISTS, "", NO_SCHEDULE), GPU, True),
        (Toleration("other", EXISTS, "", NO_SCHEDULE), GPU, False),
        # An empty key with Exists tolerates every taint
        (Toleration("", EXISTS), GPU, True),
        (Toleration("", EXISTS), Taint("anything", "x", NO_EXECUTE), True),
        (Toleration("", EXISTS, "", NO_EXECUTE), GPU, False),
        # An empty key with Equal matches any key with the same value (ToleratesTaint as written)
        (Toleration("", EQUAL, "gpu"), GPU, True),
        (Toleration("", EQUAL, "cpu"), GPU, False),
        # An empty effect matches every effect
        (Toleration("dedicated", EQUAL, "gpu", ""), GPU, True),
        (Toleration("dedicated", EQUAL, "gpu", ""), Taint("dedicated", "gpu", NO_EXECUTE), True),
        (Toleration("dedicated", EQUAL, "gpu", ""), Taint("dedicated", "gpu", PREFER_NO_SCHEDULE), True),
        # A set effect must be the same
        (Toleration("dedicated", EQUAL, "gpu", NO_EXECUTE), GPU, False),
        (Toleration("dedicated", EXISTS, "", PREFER_NO_SCHEDULE), GPU, False),
        # Operators we do not implement match nothing
        (Toleration("dedicated", "Gt", "1", NO_SCHEDULE), Taint("dedicated", "5", NO_SCHEDULE), False),
    ],
)
def test_toleration_matching(toleration: Toleration, taint: Taint, expected: bool) -> None:
    assert toleration.tolerates(taint) is expected
    assert tolerates([toleration], taint) is expected


def test_tolerates_needs_only_one_matching_toleration() -> None:
    assert tolerates([Toleration("x", EXISTS), Toleration("dedicated", EXISTS)], GPU)
    assert not tolerates([], GPU)


NODE_TAINTS = [
    Taint("soft", "", PREFER_NO_SCHEDULE),
    GPU,
    Taint("evict", "now", NO_EXECUTE),
]


@pytest.mark.parametrize(
    ("tolerations", "first", "everything"),
    [
        ([], GPU, [GPU, NODE_TAINTS[2]]),
        ([Toleration("dedicated", EQUAL, "gpu", NO_SCHEDULE)], NODE_TAINTS[2], [NODE_TAINTS[2]]),
        ([Toleration("dedicated", EXISTS), Toleration("evict", EXISTS)], None, []),
        ([Toleration("", EXISTS)], None, []),
        # NoSchedule and NoExecute are separate: tolerating one effect does not tolerate the other
        ([Toleration("", EXISTS, "", NO_EXECUTE)], GPU, [GPU]),
    ],
)
def test_untolerated_skips_prefer_no_schedule(
    tolerations: list[Toleration], first: Taint | None, everything: list[Taint]
) -> None:
    assert untolerated(tolerations, NODE_TAINTS) == first
    assert untolerated(iter(tolerations), iter(NODE_TAINTS)) == first
    assert all_untolerated(tolerations, NODE_TAINTS) == everything


def test_prefer_no_schedule_never_blocks_unless_asked() -> None:
    soft = [Taint("soft", "", PREFER_NO_SCHEDULE)]
    assert untolerated([], soft) is None
    assert untolerated([], soft, include_prefer_no_schedule=True) == soft[0]
    assert all_untolerated([], soft, include_prefer_no_schedule=True) == soft
    assert untolerated([Toleration("soft", EXISTS)], soft, include_prefer_no_schedule=True) is None
    assert not soft[0].blocks_scheduling()
    assert soft[0].blocks_scheduling(include_prefer_no_schedule=True)
    assert GPU.blocks_scheduling()
    assert untolerated([], []) is None


def test_merge_taints_keeps_base_on_key_and_effect_clash() -> None:
    base = [GPU]
    extra = [
        Taint("dedicated", "other", NO_SCHEDULE),  # same key and effect: base wins
        Taint("dedicated", "gpu", NO_EXECUTE),  # another effect: added
        Taint("new", "", NO_SCHEDULE),
        Taint("new", "again", NO_SCHEDULE),  # clashes with the one just added
    ]
    assert merge_taints(base, extra) == (
        GPU,
        Taint("dedicated", "gpu", NO_EXECUTE),
        Taint("new", "", NO_SCHEDULE),
    )
    assert GPU.matches(Taint("dedicated", "x", NO_SCHEDULE))
    assert not GPU.matches(Taint("dedicated", "gpu", NO_EXECUTE))


def test_taints_are_frozen_and_hashable() -> None:
    with pytest.raises(AttributeError):
        GPU.key = "x"  # type: ignore[misc]
    assert len({GPU, Taint("dedicated", "gpu", NO_SCHEDULE)}) == 1
    assert len({Toleration("k", EXISTS), Toleration("k", EXISTS)}) == 1

"""The requirements algebra, checked against Karpenter's semantics."""

from __future__ import annotations

import itertools
import random
from types import SimpleNamespace

import pytest
from kubernetes import client as k8s
from serverless_karpenter.api import labels as wk
from serverless_karpenter.scheduling.requirements import (
    DOES_NOT_EXIST,
    EXISTS,
    IN,
    NOT_IN,
    UNBOUNDED_LEN,
    Requirement,
    Requirements,
    is_restricted_node_label,
    parse_int,
    preferred_node_affinity_terms,
    required_node_affinity_terms,
)

K = "example.com/key"
ZONE = wk.ZONE


def req(operator: str, *values: str, key: str = K, min_values: int | None = None) -> Requirement:
    return Requirement(key, operator, list(values), min_values)


def inter(*requirements: Requirement) -> Requirement:
    result = requirements[0]
    for requirement in requirements[1:]:
        result = result.intersection(requirement)
    return result


# -- a single requirement ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requirement", "operator", "text", "length"),
    [
        (req(IN, "b", "a"), IN, f"{K} In [a b]", 2),
        (req(NOT_IN, "spot", key=wk.CAPACITY_TYPE), NOT_IN, "karpenter.sh/capacity-type NotIn [spot]", None),
        (req(EXISTS), EXISTS, f"{K} Exists", UNBOUNDED_LEN),
        (req(DOES_NOT_EXIST), DOES_NOT_EXIST, f"{K} DoesNotExist", 0),
        (req("Gt", "4"), EXISTS, f"{K} Gt 4", UNBOUNDED_LEN),
        (req("Lt", "10"), EXISTS, f"{K} Lt 10", UNBOUNDED_LEN),
        (req("Gte", "4"), EXISTS, f"{K} Gt 3", UNBOUNDED_LEN),
        (req("Lte", "10"), EXISTS, f"{K} Lt 11", UNBOUNDED_LEN),
        (req(IN, "1", min_values=2), IN, f"{K} In [1] minValues 2", 1),
        (req(EXISTS, min_values=3), EXISTS, f"{K} Exists minValues 3", UNBOUNDED_LEN),
        (
            req(IN, "c7i.4xlarge", "c7i.2xlarge", key=wk.INSTANCE_TYPE),
            IN,
            "node.kubernetes.io/instance-type In [c7i.2xlarge c7i.4xlarge]",
            2,
        ),
        (req(IN, *"gfedcba"), IN, f"{K} In [a b c d e and 2 others]", 7),
        (req(IN), DOES_NOT_EXIST, f"{K} DoesNotExist", 0),
    ],
)
def test_operator_string_and_len(
    requirement: Requirement, operator: str, text: str, length: int | None
) -> None:
    assert requirement.operator() == operator
    assert str(requirement) == text
    assert repr(requirement) == f"Requirement({text})"
    if length is not None:
        assert requirement.len() == length


def test_not_in_len_counts_down_from_unbounded() -> None:
    assert req(NOT_IN, "a", "b").len() == UNBOUNDED_LEN - 2


def test_values_are_the_finite_set() -> None:
    assert req(IN, "a", "b").values() == frozenset({"a", "b"})
    assert req(NOT_IN, "a").values() == frozenset({"a"})
    assert req(EXISTS).values() == frozenset()


def test_deprecated_keys_are_normalized() -> None:
    assert req(IN, "us-east-1a", key="failure-domain.beta.kubernetes.io/zone").key == ZONE
    assert req(IN, "amd64", key="beta.kubernetes.io/arch").key == wk.ARCH
    assert Requirement.exists("beta.kubernetes.io/instance-type").key == wk.INSTANCE_TYPE


@pytest.mark.parametrize(
    ("operator", "values", "error"),
    [
        ("Gt", ["four"], ValueError),
        ("Gt", ["1", "2"], ValueError),
        ("Lt", [], ValueError),
        ("Lt", ["1.5"], ValueError),
        ("Equals", ["a"], ValueError),
        (IN, "abc", TypeError),
    ],
)
def test_invalid_requirements_are_refused(
    operator: str, values: list[str] | str, error: type[Exception]
) -> None:
    with pytest.raises(error):
        Requirement(K, operator, values)


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("5", 5),
        ("-5", -5),
        ("+5", 5),
        ("007", 7),
        ("9223372036854775807", 9223372036854775807),
        ("9223372036854775808", None),
        (" 5", None),
        ("1_000", None),
        ("\u0663", None),  # an Arabic-Indic digit: Python's int() takes it, Go's Atoi does not
        ("", None),
        ("1e3", None),
    ],
)
def test_parse_int_follows_go_atoi(text: str, number: int | None) -> None:
    assert parse_int(text) == number


@pytest.mark.parametrize(
    ("requirement", "value", "allowed"),
    [
        (req(IN, "a", "b"), "a", True),
        (req(IN, "a", "b"), "c", False),
        (req(NOT_IN, "a"), "a", False),
        (req(NOT_IN, "a"), "b", True),
        (req(EXISTS), "anything", True),
        (req(DOES_NOT_EXIST), "anything", False),
        (req("Gt", "4"), "5", True),
        (req("Gt", "4"), "4", False),
        (req("Gt", "4"), "+5", True),
        (req("Gt", "4"), "abc", False),
        (req("Lt", "4"), "3", True),
        (req("Lt", "4"), "4", False),
        (req("Lt", "4"), "-10", True),
        (req("Lt", "4"), "3.5", False),
        (req("Gte", "4"), "4", True),
        (req("Lte", "4"), "4", True),
        (req("Lte", "4"), "5", False),
    ],
)
def test_has(requirement: Requirement, value: str, allowed: bool) -> None:
    assert requirement.has(value) is allowed


# -- intersections ----------------------------------------------------------------------------------

INTERSECTIONS = [
    # In with In
    (req(IN, "a", "b"), req(IN, "b", "c"), req(IN, "b")),
    (req(IN, "a"), req(IN, "b"), req(DOES_NOT_EXIST)),
    # In with NotIn
    (req(IN, "a", "b"), req(NOT_IN, "a"), req(IN, "b")),
    (req(IN, "a"), req(NOT_IN, "a", "b"), req(DOES_NOT_EXIST)),
    # NotIn with NotIn
    (req(NOT_IN, "a"), req(NOT_IN, "b"), req(NOT_IN, "a", "b")),
    (req(NOT_IN, "a"), req(NOT_IN, "a"), req(NOT_IN, "a")),
    # Exists and DoesNotExist
    (req(EXISTS), req(DOES_NOT_EXIST), req(DOES_NOT_EXIST)),
    (req(EXISTS), req(EXISTS), req(EXISTS)),
    (req(EXISTS), req(IN, "a"), req(IN, "a")),
    (req(EXISTS), req(NOT_IN, "a"), req(NOT_IN, "a")),
    (req(DOES_NOT_EXIST), req(DOES_NOT_EXIST), req(DOES_NOT_EXIST)),
    (req(DOES_NOT_EXIST), req(NOT_IN, "a"), req(DOES_NOT_EXIST)),
    (req(DOES_NOT_EXIST), req(IN, "a"), req(DOES_NOT_EXIST)),
    # Gt/Lt with In values: non-integers and out-of-range values go, the bounds go with them
    (req(IN, "1", "5", "10", "x"), req("Gt", "4"), req(IN, "5", "10")),
    (req(IN, "1", "5", "10"), req("Lt", "6"), req(IN, "1", "5")),
    (req(IN, "1", "2"), req("Gt", "4"), req(DOES_NOT_EXIST)),
    (req(IN, "5"), inter(req("Gt", "4"), req("Lt", "6")), req(IN, "5")),
    # Gt with Lt
    (req("Gt", "4"), req("Lt", "5"), req(DOES_NOT_EXIST)),
    (req("Gt", "5"), req("Lt", "3"), req(DOES_NOT_EXIST)),
    (req("Gt", "4"), req("Gt", "8"), req("Gt", "8")),
    (req("Lt", "4"), req("Lt", "2"), req("Lt", "2")),
    # Bounds with NotIn: excluded values outside the bounds are dropped
    (req(NOT_IN, "3", "7"), req("Gt", "4"), inter(req("Gt", "4"), req(NOT_IN, "7"))),
    (req(NOT_IN, "3"), req("Gt", "4"), req("Gt", "4")),
    (req(NOT_IN, "x"), req("Gt", "4"), req("Gt", "4")),
    # DoesNotExist from conflicting bounds keeps minValues
    (req("Gt", "9", min_values=2), req("Lt", "3"), req(DOES_NOT_EXIST, min_values=2)),
    # minValues: the larger wins
    (req(IN, "a", "b", min_values=2), req(EXISTS, min_values=3), req(IN, "a", "b", min_values=3)),
    (req(IN, "a", "b", min_values=2), req(EXISTS), req(IN, "a", "b", min_values=2)),
]


@pytest.mark.parametrize(("left", "right", "expected"), INTERSECTIONS)
def test_intersection(left: Requirement, right: Requirement, expected: Requirement) -> None:
    assert left.intersection(right) == expected
    assert right.intersection(left) == expected
    assert left.has_intersection(right) is (expected.len() > 0)
    assert right.has_intersection(left) is (expected.len() > 0)


def test_bounded_range_renders_both_bounds() -> None:
    both = inter(req("Gt", "4"), req("Lt", "10"))
    assert str(both) == f"{K} Gt 4 Lt 10"
    assert both.operator() == EXISTS
    assert str(inter(both, req(NOT_IN, "7", "20"))) == f"{K} NotIn [7] Gt 4 Lt 10"
    assert [both.has(v) for v in ("4", "5", "9", "10")] == [False, True, True, False]


def test_two_complements_with_room_always_intersect_as_in_karpenter() -> None:
    # Only 5 lies in (4, 6) and it is excluded, yet Karpenter's HasIntersection says yes.
    excluded = inter(req("Gt", "4"), req("Lt", "6"))
    assert excluded.has_intersection(req(NOT_IN, "5"))
    assert excluded.intersection(req(NOT_IN, "5")).any() is None


@pytest.mark.parametrize(
    ("requirement", "value"),
    [
        (req(IN, "b", "a"), "a"),
        (req(DOES_NOT_EXIST), None),
        (req(EXISTS), "0"),
        (req(NOT_IN, "0", "1"), "2"),
        (req("Gt", "4"), "5"),
        (req("Lt", "0"), "-1"),
        (req("Lt", "-3"), "-4"),
        (inter(req("Gt", "4"), req("Lt", "7"), req(NOT_IN, "5")), "6"),
        (inter(req("Gt", "4"), req("Lt", "6"), req(NOT_IN, "5")), None),
    ],
)
def test_any(requirement: Requirement, value: str | None) -> None:
    assert requirement.any() == value


def test_requirement_equality_and_hash() -> None:
    assert req(IN, "a", "b") == req(IN, "b", "a")
    assert hash(req(IN, "a", "b")) == hash(req(IN, "b", "a"))
    assert req(IN, "a") != req(IN, "a", min_values=1)
    assert req(IN, "a") != req(IN, "a", key="other")
    assert req(IN, "a") != "a"


# -- building Requirements --------------------------------------------------------------------------


def test_from_node_selector_requirements_accepts_dicts_and_objects() -> None:
    requirements = Requirements.from_node_selector_requirements(
        [
            {"key": ZONE, "operator": "In", "values": ["a", "b"], "minValues": 2},
            SimpleNamespace(key=ZONE, operator="NotIn", values=["b"], min_values=None),
            SimpleNamespace(key=wk.INSTANCE_CPU, operator="Gt", values=["4"], min_values=None),
            {"key": wk.ARCH, "operator": "Exists"},
        ]
    )
    assert requirements[ZONE] == req(IN, "a", key=ZONE, min_values=2)
    assert requirements[wk.INSTANCE_CPU] == req("Gt", "4", key=wk.INSTANCE_CPU)
    assert requirements[wk.ARCH].operator() == EXISTS
    assert len(requirements) == 3
    assert Requirements.from_node_selector_requirements(None) == Requirements()


def test_from_labels_and_node_selector() -> None:
    labels = {ZONE: "us-east-1a", "team": "ml"}
    expected = Requirements([req(IN, "us-east-1a", key=ZONE), req(IN, "ml", key="team")])
    assert Requirements.from_labels(labels) == expected
    assert Requirements.from_node_selector(labels) == expected
    assert Requirements.from_labels(None) == Requirements()


POD = {
    "metadata": {"name": "p"},
    "spec": {
        "nodeSelector": {"team": "ml"},
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["a", "b"]}]},
                        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["c"]}]},
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 1,
                        "preference": {
                            "matchExpressions": [{"key": ZONE, "operator": "In", "values": ["a"]}]
                        },
                    },
                    {
                        "weight": 50,
                        "preference": {
                            "matchExpressions": [
                                {"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["spot"]}
                            ]
                        },
                    },
                    {
                        "weight": 50,
                        "preference": {
                            "matchExpressions": [{"key": wk.ARCH, "operator": "In", "values": ["arm64"]}]
                        },
                    },
                ],
            }
        },
    },
}


def test_from_pod_takes_node_selector_and_first_required_term() -> None:
    expected = Requirements([req(IN, "ml", key="team"), req(IN, "a", "b", key=ZONE)])
    assert Requirements.from_pod(POD) == expected
    assert Requirements.from_pod(POD["spec"]) == expected


def test_from_pod_other_required_term() -> None:
    requirements = Requirements.from_pod(POD, required_term=1)
    assert requirements[ZONE] == req(IN, "c", key=ZONE)
    assert ZONE not in Requirements.from_pod(POD, required_term=2)


def test_from_pod_adds_the_heaviest_preferred_term_when_asked() -> None:
    requirements = Requirements.from_pod(POD, include_preferred=True)
    # The first of the two weight-50 terms wins; the weight-1 zone preference is not added.
    assert requirements[wk.CAPACITY_TYPE] == req(IN, "spot", key=wk.CAPACITY_TYPE)
    assert wk.ARCH not in requirements
    assert requirements[ZONE] == req(IN, "a", "b", key=ZONE)


def test_from_pod_without_affinity() -> None:
    assert Requirements.from_pod({"spec": {"containers": []}}) == Requirements()
    assert Requirements.from_pod({"spec": {"affinity": {"podAffinity": {}}}}) == Requirements()
    assert required_node_affinity_terms({"spec": {}}) == []
    assert preferred_node_affinity_terms({"spec": {}}) == []


def test_from_pod_accepts_kubernetes_client_objects() -> None:
    pod = k8s.V1Pod(
        spec=k8s.V1PodSpec(
            containers=[],
            node_selector={"team": "ml"},
            affinity=k8s.V1Affinity(
                node_affinity=k8s.V1NodeAffinity(
                    required_during_scheduling_ignored_during_execution=k8s.V1NodeSelector(
                        node_selector_terms=[
                            k8s.V1NodeSelectorTerm(
                                match_expressions=[
                                    k8s.V1NodeSelectorRequirement(key=ZONE, operator="NotIn", values=["a"])
                                ]
                            )
                        ]
                    )
                )
            ),
        )
    )
    assert Requirements.from_pod(pod) == Requirements([req(IN, "ml", key="team"), req(NOT_IN, "a", key=ZONE)])


def test_affinity_term_helpers() -> None:
    terms = required_node_affinity_terms(POD)
    assert terms == [Requirements([req(IN, "a", "b", key=ZONE)]), Requirements([req(IN, "c", key=ZONE)])]
    weights = [weight for weight, _ in preferred_node_affinity_terms(POD)]
    assert weights == [50, 50, 1]
    assert wk.CAPACITY_TYPE in preferred_node_affinity_terms(POD)[0][1]


def test_add_and_merged_leave_the_original_alone() -> None:
    base = Requirements([req(IN, "a", "b", key=ZONE)])
    added = base.add(req(IN, "b", "c", key=ZONE), req(EXISTS, key="team"))
    assert base == Requirements([req(IN, "a", "b", key=ZONE)])
    assert added[ZONE] == req(IN, "b", key=ZONE)
    assert "team" in added
    merged = base.merged(Requirements([req(NOT_IN, "a", key=ZONE)]))
    assert merged[ZONE] == req(IN, "b", key=ZONE)
    assert base[ZONE] == req(IN, "a", "b", key=ZONE)
    assert base.merged(Requirements()) is base
    assert Requirements().merged(base) is base
    assert base.add(req(EXISTS, key="x")).without("x") == base


def test_mapping_protocol_and_get() -> None:
    requirements = Requirements([req(IN, "a", key=ZONE), req(EXISTS, key="team")])
    assert set(requirements) == {ZONE, "team"}
    assert set(requirements.keys()) == {ZONE, "team"}
    assert dict(requirements.items())[ZONE] == req(IN, "a", key=ZONE)
    assert len(list(requirements.values())) == 2
    assert requirements.has(ZONE)
    assert not requirements.has("other")
    assert requirements.get(ZONE) == req(IN, "a", key=ZONE)
    assert requirements.get("other") == Requirement("other", EXISTS)
    with pytest.raises(KeyError):
        requirements["other"]


def test_requirements_equality_and_hash() -> None:
    a = Requirements([req(IN, "a", key=ZONE), req(EXISTS, key="team")])
    b = Requirements([req(EXISTS, key="team"), req(IN, "a", key=ZONE)])
    assert a == b
    assert hash(a) == hash(b)
    assert len({a, b}) == 1
    assert a != Requirements([req(IN, "a", key=ZONE)])
    assert a != {ZONE: req(IN, "a", key=ZONE)}


def test_requirements_str_is_sorted_and_hides_hostname() -> None:
    requirements = Requirements(
        [req(IN, "a", key=ZONE), req(IN, "h", key=wk.HOSTNAME), req(NOT_IN, "spot", key=wk.CAPACITY_TYPE)]
    )
    assert str(requirements) == "karpenter.sh/capacity-type NotIn [spot], topology.kubernetes.io/zone In [a]"


# -- compatibility ----------------------------------------------------------------------------------

NODEPOOL = Requirements(
    [
        req(IN, "us-east-1b", "us-east-1c", key=ZONE),
        req(IN, "spot", "on-demand", key=wk.CAPACITY_TYPE),
        req(IN, "ml", key="team"),
        req(DOES_NOT_EXIST, key="example.com/absent"),
    ]
)


@pytest.mark.parametrize(
    ("incoming", "reason"),
    [
        # Defined keys must intersect.
        (Requirements([req(IN, "us-east-1b", key=ZONE)]), None),
        (
            Requirements([req(IN, "us-east-1a", key=ZONE)]),
            'key "topology.kubernetes.io/zone": requires In [us-east-1a], allowed In [us-east-1b us-east-1c]',
        ),
        (Requirements([req(NOT_IN, "us-east-1b", key=ZONE)]), None),
        (
            Requirements([req(NOT_IN, "us-east-1b", "us-east-1c", key=ZONE)]),
            'key "topology.kubernetes.io/zone": requires NotIn [us-east-1b us-east-1c], '
            "allowed In [us-east-1b us-east-1c]",
        ),
        (
            Requirements([req(DOES_NOT_EXIST, key="team")]),
            'key "team": requires DoesNotExist, allowed In [ml]',
        ),
        # Both sides reduce to NotIn/DoesNotExist: an empty intersection is fine.
        (Requirements([req(DOES_NOT_EXIST, key="example.com/absent")]), None),
        (Requirements([req(NOT_IN, "x", key="example.com/absent")]), None),
        (
            Requirements([req(IN, "x", key="example.com/absent")]),
            'key "example.com/absent": requires In [x], allowed DoesNotExist',
        ),
        (
            Requirements([req(EXISTS, key="example.com/absent")]),
            'key "example.com/absent": requires Exists, allowed DoesNotExist',
        ),
        # Undefined well-known labels are allowed, whatever the operator.
        (Requirements([req(IN, "arm64", key=wk.ARCH)]), None),
        (Requirements([req("Gt", "4", key=wk.INSTANCE_CPU)]), None),
        # Undefined custom labels: only NotIn / DoesNotExist may pass.
        (Requirements([req(NOT_IN, "x", key="custom")]), None),
        (Requirements([req(DOES_NOT_EXIST, key="custom")]), None),
        (Requirements([req(IN, "x", key="custom")]), 'label "custom" does not have known values'),
        (Requirements([req(EXISTS, key="custom")]), 'label "custom" does not have known values'),
        (Requirements([req("Gt", "1", key="custom")]), 'label "custom" does not have known values'),
        # An undefined-key error is reported alone, even after an intersection failure.
        (
            Requirements([req(IN, "us-east-1a", key=ZONE), req(IN, "x", key="custom")]),
            'label "custom" does not have known values',
        ),
        # Intersection failures are all reported.
        (
            Requirements([req(IN, "us-east-1a", key=ZONE), req(IN, "reserved", key=wk.CAPACITY_TYPE)]),
            'key "topology.kubernetes.io/zone": requires In [us-east-1a], '
            "allowed In [us-east-1b us-east-1c]; "
            'key "karpenter.sh/capacity-type": requires In [reserved], allowed In [on-demand spot]',
        ),
        # A near miss of a well-known label gets a hint.
        (
            Requirements([req(IN, "x", key="example.com/capacity-type")]),
            'label "example.com/capacity-type" does not have known values '
            '(typo of "karpenter.sh/capacity-type"?)',
        ),
        (
            Requirements([req(IN, "x", key="nodepool")]),
            'label "nodepool" does not have known values (typo of "karpenter.sh/nodepool"?)',
        ),
    ],
)
def test_compatible(incoming: Requirements, reason: str | None) -> None:
    assert NODEPOOL.compatible(incoming) == reason
    assert NODEPOOL.is_compatible(incoming) is (reason is None)


def test_compatible_without_allowed_undefined_labels() -> None:
    incoming = Requirements([req(IN, "arm64", key=wk.ARCH)])
    assert NODEPOOL.compatible(incoming, allow_undefined=frozenset()) == (
        'label "kubernetes.io/arch" does not have known values'
    )
    assert not NODEPOOL.is_compatible(incoming, allow_undefined=frozenset())
    # An explicitly allowed custom label passes, but still must intersect when both define it.
    assert NODEPOOL.compatible(Requirements([req(IN, "x", key="custom")]), allow_undefined={"custom"}) is None


def test_compatible_hint_from_own_keys() -> None:
    incoming = Requirements([req(IN, "x", key="tea")])
    assert NODEPOOL.compatible(incoming, allow_undefined=frozenset()) == (
        'label "tea" does not have known values (typo of "team"?)'
    )


def test_intersects_ignores_keys_only_one_side_defines() -> None:
    assert NODEPOOL.intersects(Requirements([req(IN, "x", key="custom")])) is None
    assert Requirements([req(IN, "x", key="custom")]).intersects(NODEPOOL) is None
    assert NODEPOOL.intersects(Requirements([req(IN, "other", key="team")])) == (
        'key "team": requires In [other], allowed In [ml]'
    )


# -- labels -----------------------------------------------------------------------------------------


def test_labels_follow_karpenter() -> None:
    requirements = Requirements(
        [
            req(IN, "us-east-1a", key=ZONE),  # well-known: the instance type and offering set it
            req(IN, "default", key=wk.NODEPOOL),  # well-known too
            req(IN, "h", key=wk.HOSTNAME),  # restricted
            req(IN, "x", key="karpenter.sh/custom"),  # restricted domain
            req(IN, "x", key="sub.kubernetes.io/custom"),  # restricted domain, by suffix
            req(IN, "spot", key="node.kubernetes.io/lifecycle"),  # an allowed sub-domain
            req(IN, "ml", key="team"),
            req(IN, "b", "a", key="multi"),
            req(EXISTS, key="present"),
            req("Gt", "10", key="big"),
            req(DOES_NOT_EXIST, key="absent"),
            req(NOT_IN, "0", key="not-zero"),
        ]
    )
    assert requirements.labels() == {
        "node.kubernetes.io/lifecycle": "spot",
        "team": "ml",
        "multi": "a",
        "present": "0",
        "big": "11",
        "not-zero": "1",
    }


def test_single_valued_labels_keep_well_known_keys() -> None:
    requirements = Requirements(
        [req(IN, "us-east-1a", key=ZONE), req(IN, "a", "b", key="multi"), req(NOT_IN, "x", key="n")]
    )
    assert requirements.single_valued_labels() == {ZONE: "us-east-1a"}


@pytest.mark.parametrize(
    ("key", "restricted"),
    [
        (ZONE, True),
        (wk.HOSTNAME, True),
        ("karpenter.sh/anything", True),
        ("karpenter.k8s.aws/anything", True),
        ("kubernetes.io/custom", True),
        ("node.kubernetes.io/custom", False),
        ("node-restriction.kubernetes.io/custom", False),
        ("kops.k8s.io/custom", False),
        ("example.com/custom", False),
        ("team", False),
    ],
)
def test_is_restricted_node_label(key: str, restricted: bool) -> None:
    assert is_restricted_node_label(key) is restricted


@pytest.mark.parametrize(
    ("requirement", "labels", "reason"),
    [
        (req(IN, "a", "b"), {K: "a"}, None),
        (req(IN, "a", "b"), {K: "c"}, f'label "{K}"="c" does not satisfy In [a b]'),
        (req(IN, "a"), {}, f'label "{K}" is missing, requires In [a]'),
        (req(NOT_IN, "a"), {}, None),
        (req(NOT_IN, "a"), {K: "a"}, f'label "{K}"="a" does not satisfy NotIn [a]'),
        (req(EXISTS), {K: ""}, None),
        (req(EXISTS), {}, f'label "{K}" is missing, requires Exists'),
        (req(DOES_NOT_EXIST), {}, None),
        (req(DOES_NOT_EXIST), {K: "a"}, f'label "{K}"="a" does not satisfy DoesNotExist'),
        (req("Gt", "4"), {K: "5"}, None),
        (req("Gt", "4"), {K: "abc"}, f'label "{K}"="abc" does not satisfy Gt 4'),
        (req("Gt", "4"), {}, f'label "{K}" is missing, requires Gt 4'),
        # A NotIn narrowed by a bound needs the label, as the Gt expression does in Kubernetes.
        (inter(req(NOT_IN, "7"), req("Gt", "4")), {}, f'label "{K}" is missing, requires NotIn [7] Gt 4'),
    ],
)
def test_matches_labels(requirement: Requirement, labels: dict[str, str], reason: str | None) -> None:
    assert Requirements([requirement]).matches_labels(labels) == reason


def test_matches_labels_checks_every_requirement() -> None:
    requirements = Requirements([req(IN, "a", key=ZONE), req(IN, "amd64", key=wk.ARCH)])
    assert requirements.matches_labels({ZONE: "a", wk.ARCH: "amd64", "other": "x"}) is None
    assert requirements.matches_labels({ZONE: "a", wk.ARCH: "arm64"}) == (
        'label "kubernetes.io/arch"="arm64" does not satisfy In [amd64]'
    )


# -- minValues --------------------------------------------------------------------------------------

FAMILY = wk.INSTANCE_FAMILY
INSTANCE_TYPES = [
    {FAMILY: "c5", wk.INSTANCE_TYPE: "c5.large"},
    {FAMILY: "c5", wk.INSTANCE_TYPE: "c5.xlarge"},
    {FAMILY: "m5", wk.INSTANCE_TYPE: "m5.large"},
    {FAMILY: "r5", wk.INSTANCE_TYPE: "r5.large"},
    {wk.INSTANCE_TYPE: "unlabelled"},
]


def test_has_min_values() -> None:
    assert not NODEPOOL.has_min_values()
    assert Requirements([req(EXISTS, key=FAMILY, min_values=2)]).has_min_values()


@pytest.mark.parametrize(
    ("requirements", "reason", "prefix"),
    [
        (Requirements([req(IN, "a", key=FAMILY)]), None, 0),
        (Requirements([req(EXISTS, key=FAMILY, min_values=3)]), None, 4),
        (Requirements([req(EXISTS, key=FAMILY, min_values=2)]), None, 3),
        (Requirements([req(EXISTS, key=wk.INSTANCE_TYPE, min_values=5)]), None, 5),
        (
            Requirements([req(EXISTS, key=FAMILY, min_values=4)]),
            'minValues requirement is not met for label(s) "karpenter.k8s.aws/instance-family" (3 of 4)',
            None,
        ),
        # Values the requirement does not allow do not count.
        (
            Requirements([req(IN, "c5", "m5", "x5", key=FAMILY, min_values=3)]),
            'minValues requirement is not met for label(s) "karpenter.k8s.aws/instance-family" (2 of 3)',
            None,
        ),
        (
            Requirements(
                [req(EXISTS, key=FAMILY, min_values=4), req(EXISTS, key=wk.INSTANCE_TYPE, min_values=9)]
            ),
            'minValues requirement is not met for label(s) "karpenter.k8s.aws/instance-family" (3 of 4), '
            '"node.kubernetes.io/instance-type" (5 of 9)',
            None,
        ),
        (
            Requirements(
                [req(EXISTS, key=FAMILY, min_values=2), req(EXISTS, key=wk.INSTANCE_TYPE, min_values=4)]
            ),
            None,
            4,
        ),
    ],
)
def test_min_values(requirements: Requirements, reason: str | None, prefix: int | None) -> None:
    assert requirements.check_min_values(INSTANCE_TYPES) == reason
    assert requirements.check_min_values(iter(INSTANCE_TYPES)) == reason
    assert requirements.min_values_prefix(INSTANCE_TYPES) == prefix


def test_min_values_with_no_instance_types() -> None:
    requirements = Requirements([req(EXISTS, key=FAMILY, min_values=1)])
    assert requirements.check_min_values([]) == (
        'minValues requirement is not met for label(s) "karpenter.k8s.aws/instance-family" (0 of 1)'
    )
    assert requirements.min_values_prefix([]) is None


# -- serialization ----------------------------------------------------------------------------------


def test_to_node_selector_requirements() -> None:
    requirements = Requirements(
        [
            req(IN, "b", "a", key=ZONE, min_values=2),
            inter(req(NOT_IN, "7", key=wk.INSTANCE_CPU), req("Gt", "4", key=wk.INSTANCE_CPU)),
            req(EXISTS, key="present"),
            req(DOES_NOT_EXIST, key="absent"),
        ]
    )
    assert requirements.to_node_selector_requirements() == [
        {"key": ZONE, "operator": "In", "values": ["a", "b"], "minValues": 2},
        {"key": wk.INSTANCE_CPU, "operator": "NotIn", "values": ["7"]},
        {"key": wk.INSTANCE_CPU, "operator": "Gt", "values": ["4"]},
        {"key": "present", "operator": "Exists"},
        {"key": "absent", "operator": "DoesNotExist"},
    ]
    again = Requirements.from_node_selector_requirements(requirements.to_node_selector_requirements())
    assert again == requirements


# -- properties -------------------------------------------------------------------------------------

# hypothesis is not in the project's venv, so these properties run over an exhaustive family of
# requirements (every operator, and intersections that reach bounded NotIn, ranges and filtered In sets).
UNIVERSE = ["a", "b", "c", "-2", "-1", "0", "1", "2", "3", "4", "5", "6", "8", "13", "+3", "007", "x1"]


def family(key: str) -> list[Requirement]:
    base = [
        Requirement(key, IN, ["a"]),
        Requirement(key, IN, ["a", "b", "3"], 2),
        Requirement(key, IN, ["1", "5", "13", "x1", "007"]),
        Requirement(key, NOT_IN, ["a"]),
        Requirement(key, NOT_IN, ["5", "6", "b"], 1),
        Requirement(key, EXISTS),
        Requirement(key, EXISTS, None, 3),
        Requirement(key, DOES_NOT_EXIST),
        Requirement(key, "Gt", ["4"]),
        Requirement(key, "Gt", ["-2"]),
        Requirement(key, "Lt", ["6"]),
        Requirement(key, "Lt", ["0"]),
    ]
    composed = [left.intersection(right) for left, right in itertools.combinations(base, 2)]
    return list(dict.fromkeys(base + composed))


FAMILY_K = family(K)


def test_family_reaches_every_shape() -> None:
    shapes = {(r.operator(), r.has_bounds()) for r in FAMILY_K}
    assert {(IN, False), (NOT_IN, False), (NOT_IN, True), (EXISTS, False), (EXISTS, True)} <= shapes
    assert (DOES_NOT_EXIST, False) in shapes


def test_intersection_allows_exactly_what_both_allow() -> None:
    for left, right in itertools.product(FAMILY_K, repeat=2):
        both = left.intersection(right)
        for value in UNIVERSE:
            assert both.has(value) == (left.has(value) and right.has(value)), (left, right, value)
        assert both == right.intersection(left), (left, right)
        assert left.has_intersection(right) == (both.len() > 0), (left, right)


def test_intersection_is_associative() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        first, second, third = rng.choice(FAMILY_K), rng.choice(FAMILY_K), rng.choice(FAMILY_K)
        assert first.intersection(second).intersection(third) == first.intersection(
            second.intersection(third)
        ), (first, second, third)


def test_any_value_is_allowed_and_labels_match() -> None:
    for requirement in FAMILY_K:
        value = requirement.any()
        if value is not None:
            assert requirement.has(value), requirement
            assert Requirements([requirement]).matches_labels({K: value}) is None
        elif not requirement.complement:
            assert requirement.len() == 0
        for candidate in UNIVERSE:
            matched = Requirements([requirement]).matches_labels({K: candidate}) is None
            assert matched == requirement.has(candidate), (requirement, candidate)


def test_node_selector_round_trip() -> None:
    for requirement in FAMILY_K:
        again = Requirements.from_node_selector_requirements(
            Requirements([requirement]).to_node_selector_requirements()
        )[K]
        assert again == requirement


@pytest.mark.parametrize("key", [ZONE, K])
def test_is_compatible_agrees_with_compatible(key: str) -> None:
    options = [[], *([r] for r in family(key))]
    for existing, incoming in itertools.product(options, repeat=2):
        mine, theirs = Requirements(existing), Requirements(incoming)
        reason = mine.compatible(theirs)
        assert mine.is_compatible(theirs) == (reason is None), (mine, theirs)
        if not existing and incoming:
            # An undefined key: a well-known one passes, a custom one only for NotIn/DoesNotExist.
            expected_ok = key == ZONE or theirs[key].operator() in (NOT_IN, DOES_NOT_EXIST)
            assert (reason is None) == expected_ok, (mine, theirs)
        if existing and incoming:
            # A defined key: some value in common, or both sides reduce to NotIn/DoesNotExist.
            both_absent = {mine[key].operator(), theirs[key].operator()} <= {NOT_IN, DOES_NOT_EXIST}
            common = any(mine[key].has(v) and theirs[key].has(v) for v in UNIVERSE)
            if common or both_absent:
                assert reason is None, (mine, theirs)

"""NodePool, NodeClaim and the shared pieces: Karpenter v1 manifests in, the same manifests out."""

from __future__ import annotations

import copy
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from serverless_karpenter.api import (
    ManifestError,
    NodeClaim,
    NodeClaimPhase,
    NodePool,
    format_duration,
    parse_duration,
)

# Karpenter v1 "Getting Started with Karpenter" (step 12, create the NodePool and EC2NodeClass), with the
# shell variables filled in the way the guide's script fills them.
GETTING_STARTED_NODEPOOL = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      requirements:
        - key: kubernetes.io/arch
          operator: In
          values: ["amd64"]
        - key: kubernetes.io/os
          operator: In
          values: ["linux"]
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["on-demand"]
        - key: karpenter.k8s.aws/instance-category
          operator: In
          values: ["c", "m", "r"]
        - key: karpenter.k8s.aws/instance-generation
          operator: Gt
          values: ["2"]
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
      expireAfter: 720h # 30 * 24h = 720h
  limits:
    cpu: 1000
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 1m
"""

# A NodePool as `kubectl get nodepool default -o yaml` returns it: server fields, defaults and status.
SERVER_NODEPOOL = """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  annotations:
    karpenter.sh/nodepool-hash: "6821555240594823858"
    karpenter.sh/nodepool-hash-version: v3
    kubectl.kubernetes.io/last-applied-configuration: |
      {"apiVersion":"karpenter.sh/v1","kind":"NodePool","metadata":{"name":"default"}}
  creationTimestamp: "2024-08-20T12:00:00Z"
  generation: 3
  name: default
  resourceVersion: "123456"
  uid: 5f1c2e1a-7d7e-4c5b-9a49-0a1b2c3d4e5f
  managedFields:
  - apiVersion: karpenter.sh/v1
    fieldsType: FieldsV1
    manager: kubectl-client-side-apply
    operation: Update
spec:
  disruption:
    budgets:
    - nodes: 10%
    - nodes: "0"
      schedule: "0 9 * * mon-fri"
      duration: 8h
      reasons: [Drifted, Underutilized]
    consolidateAfter: 1m
    consolidationPolicy: WhenEmptyOrUnderutilized
  limits:
    cpu: 1000
    memory: 1000Gi
  template:
    metadata:
      labels:
        team: payments
        node.kubernetes.io/pool: general
      annotations:
        example.com/owner: platform
    spec:
      expireAfter: 720h
      terminationGracePeriod: 48h
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
      requirements:
      - key: kubernetes.io/arch
        operator: In
        values:
        - amd64
        - arm64
      - key: karpenter.k8s.aws/instance-family
        operator: In
        values: [m5, m5d, c5, c5d, c4, r4]
        minValues: 5
      - key: karpenter.k8s.aws/instance-cpu
        operator: Lt
        values: ["65"]
      - key: example.com/gpu
        operator: DoesNotExist
      taints:
      - key: example.com/special-taint
        value: "true"
        effect: NoSchedule
      startupTaints:
      - key: ebs.csi.aws.com/agent-not-ready
        effect: NoExecute
  weight: 10
status:
  conditions:
  - lastTransitionTime: "2024-08-20T12:00:05Z"
    message: ""
    observedGeneration: 3
    reason: Ready
    status: "True"
    type: Ready
  nodeClassObservedGeneration: 1
  resources:
    cpu: "4"
    ephemeral-storage: 20959212Ki
    memory: 15950136Ki
    nodes: "2"
    pods: "58"
"""

# A NodeClaim as Karpenter writes it.
SERVER_NODECLAIM = """
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  annotations:
    karpenter.k8s.aws/ec2nodeclass-hash: "15535182697325354914"
    karpenter.sh/nodepool-hash: "6821555240594823858"
  creationTimestamp: "2024-08-20T12:01:00Z"
  finalizers:
  - karpenter.sh/termination
  generateName: default-
  labels:
    karpenter.sh/capacity-type: on-demand
    karpenter.sh/nodepool: default
    node.kubernetes.io/instance-type: c6a.large
    topology.kubernetes.io/zone: us-west-2a
  name: default-abcde
  ownerReferences:
  - apiVersion: karpenter.sh/v1
    blockOwnerDeletion: true
    kind: NodePool
    name: default
    uid: 5f1c2e1a-7d7e-4c5b-9a49-0a1b2c3d4e5f
  resourceVersion: "123999"
  uid: 0d3b1a56-2b1e-4f3c-8d8e-9a9b9c9d9e9f
spec:
  expireAfter: 720h
  nodeClassRef:
    group: karpenter.k8s.aws
    kind: EC2NodeClass
    name: default
  requirements:
  - key: karpenter.sh/nodepool
    operator: In
    values: [default]
  - key: node.kubernetes.io/instance-type
    operator: In
    values: [c6a.large, c5.large]
  resources:
    requests:
      cpu: 1150m
      pods: "5"
status:
  allocatable:
    cpu: 1930m
    ephemeral-storage: 17Gi
    memory: 3114Mi
    pods: "29"
  capacity:
    cpu: "2"
    memory: 3788Mi
    pods: "29"
  conditions:
  - lastTransitionTime: "2024-08-20T12:01:40Z"
    message: ""
    reason: Initialized
    status: "True"
    type: Initialized
  imageID: ami-0123456789abcdef0
  lastPodEventTime: "2024-08-20T12:02:00Z"
  nodeName: ip-192-168-1-10.us-west-2.compute.internal
  providerID: aws:///us-west-2a/i-0123456789abcdef0
"""


def load(text: str) -> dict[str, Any]:
    doc = yaml.safe_load(text)
    assert isinstance(doc, dict)
    return doc


def minimal_nodepool(**spec_overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "default"},
        "spec": {
            "template": {
                "spec": {
                    "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}],
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                }
            }
        },
    }
    doc["spec"].update(spec_overrides)
    return doc


def with_requirement(requirement: dict[str, Any]) -> dict[str, Any]:
    doc = minimal_nodepool()
    doc["spec"]["template"]["spec"]["requirements"].append(requirement)
    return doc


def error_of(doc: dict[str, Any]) -> ManifestError:
    with pytest.raises(ManifestError) as info:
        NodePool.from_manifest(doc)
    return info.value


# --- loading real manifests ---------------------------------------------------------------------------


def test_getting_started_nodepool_loads_unchanged_with_defaults() -> None:
    doc = load(GETTING_STARTED_NODEPOOL)
    original = copy.deepcopy(doc)

    pool = NodePool.model_validate(doc)

    assert doc == original, "validation must not mutate the caller's manifest"
    assert pool.name == "default"
    assert pool.spec.template.spec.expire_after == "720h"
    assert pool.expire_after_timedelta() == timedelta(hours=720)
    assert pool.spec.disruption.consolidation_policy == "WhenEmptyOrUnderutilized"
    assert pool.consolidate_after_timedelta() == timedelta(minutes=1)
    assert [b.nodes for b in pool.spec.disruption.budgets] == ["10%"]
    assert pool.spec.weight is None and pool.weight_or_zero() == 0
    assert pool.parsed_limits() == {"cpu": 1_000_000}
    gen = pool.spec.template.spec.requirements[4]
    assert (gen.key, gen.operator, gen.values) == ("karpenter.k8s.aws/instance-generation", "Gt", ["2"])
    assert pool.spec.template.spec.node_class_ref.kind == "EC2NodeClass"


def test_minimal_nodepool_gets_karpenter_defaults() -> None:
    pool = NodePool.from_manifest(minimal_nodepool())

    assert pool.spec.template.spec.expire_after == "720h"
    assert pool.spec.disruption.consolidate_after == "0s"
    assert pool.consolidate_after_timedelta() == timedelta(0)
    assert pool.spec.disruption.consolidation_policy == "WhenEmptyOrUnderutilized"
    assert [b.model_dump(exclude_none=True) for b in pool.spec.disruption.budgets] == [{"nodes": "10%"}]
    assert pool.termination_grace_period_timedelta() is None
    manifest = pool.to_manifest()
    assert manifest["spec"]["disruption"] == {
        "consolidateAfter": "0s",
        "consolidationPolicy": "WhenEmptyOrUnderutilized",
        "budgets": [{"nodes": "10%"}],
    }
    assert manifest["spec"]["template"]["spec"]["expireAfter"] == "720h"
    assert "status" not in manifest and "limits" not in manifest["spec"]


def test_server_nodepool_round_trips_exactly() -> None:
    doc = load(SERVER_NODEPOOL)

    pool = NodePool.model_validate(doc)

    assert pool.to_manifest() == doc
    assert NodePool.model_validate(pool.to_manifest()) == pool
    assert pool.metadata.resource_version == "123456"
    assert pool.metadata.uid == "5f1c2e1a-7d7e-4c5b-9a49-0a1b2c3d4e5f"
    assert pool.weight_or_zero() == 10
    assert pool.termination_grace_period_timedelta() == timedelta(hours=48)
    scheduled = pool.spec.disruption.budgets[1]
    assert scheduled.duration_timedelta() == timedelta(hours=8)
    assert scheduled.applies_to("Drifted") and not scheduled.applies_to("Empty")
    assert pool.spec.disruption.budgets[0].applies_to("Empty")
    assert pool.spec.template.spec.requirements[1].min_values == 5
    ready = pool.condition("Ready")
    assert ready is not None and ready.status == "True"
    assert pool.status.node_class_observed_generation == 1


def test_nodeclaim_from_karpenter_round_trips() -> None:
    doc = load(SERVER_NODECLAIM)

    claim = NodeClaim.from_manifest(doc)

    assert claim.to_manifest() == doc
    assert claim.status.provider_id == "aws:///us-west-2a/i-0123456789abcdef0"
    assert claim.status.image_id == "ami-0123456789abcdef0"
    assert claim.status.node_name == "ip-192-168-1-10.us-west-2.compute.internal"
    assert claim.parsed_requests() == {"cpu": 1150, "pods": 5}
    assert claim.parsed_allocatable()["memory"] == 3114 * 2**20
    assert claim.parsed_capacity()["cpu"] == 2000
    assert claim.is_condition_true("Initialized") and not claim.is_condition_true("Drifted")
    assert claim.expire_after_timedelta() == timedelta(hours=720)
    assert claim.metadata.finalizers == ["karpenter.sh/termination"]
    # Karpenter's own requirement on the NodePool label is fine on a NodeClaim.
    assert claim.spec.requirements[0].key == "karpenter.sh/nodepool"


def test_models_built_in_code_dump_to_manifests() -> None:
    pool = NodePool.model_validate(minimal_nodepool())
    pool.spec.weight = 50
    rebuilt = NodePool.model_validate(pool.to_manifest())
    assert rebuilt.spec.weight == 50
    assert rebuilt.to_manifest()["apiVersion"] == "karpenter.sh/v1"
    assert rebuilt.to_manifest()["kind"] == "NodePool"


def test_nodeclaim_phases_are_the_durable_states() -> None:
    assert [p.value for p in NodeClaimPhase] == [
        "Pending",
        "Launched",
        "Registered",
        "Initialized",
        "Disrupting",
        "Draining",
        "Terminating",
        "Terminated",
    ]
    assert NodeClaimPhase("Launched") is NodeClaimPhase.LAUNCHED
    assert NodeClaimPhase.INITIALIZED.is_live and not NodeClaimPhase.DRAINING.is_live
    assert NodeClaimPhase.TERMINATED.is_terminal


# --- the error a user sees ----------------------------------------------------------------------------


def test_bad_operator_is_one_line_naming_object_field_and_rule() -> None:
    doc = load(GETTING_STARTED_NODEPOOL)
    doc["spec"]["template"]["spec"]["requirements"][0]["operator"] = "Equals"

    err = error_of(doc)

    assert str(err) == (
        'NodePool "default": spec.template.spec.requirements[0].operator: '
        "must be one of In, NotIn, Exists, DoesNotExist, Gt, Lt (got 'Equals')"
    )
    assert "\n" not in str(err)
    assert (err.kind, err.name, err.field) == (
        "NodePool",
        "default",
        "spec.template.spec.requirements[0].operator",
    )
    assert len(err.errors) == 1


def test_weight_zero_is_one_line() -> None:
    err = error_of(minimal_nodepool(weight=0))
    assert str(err) == 'NodePool "default": spec.weight: must be between 1 and 100 (got 0)'
    assert err.field == "spec.weight"
    assert err.rule == "must be between 1 and 100 (got 0)"


def test_several_errors_are_counted_and_all_kept() -> None:
    doc = minimal_nodepool(weight=101)
    doc["spec"]["template"]["spec"]["requirements"][0]["operator"] = "Equals"
    doc["spec"]["disruption"] = {"consolidationPolicy": "Sometimes"}

    err = error_of(doc)

    assert str(err).endswith(" (and 2 more errors)")
    assert [e.field for e in err.errors] == [
        "spec.template.spec.requirements[0].operator",
        "spec.disruption.consolidationPolicy",
        "spec.weight",
    ]


def test_typo_is_caught_with_a_suggestion() -> None:
    err = error_of(minimal_nodepool(disruption={"consolidationPolicyy": "WhenEmpty"}))
    assert err.field == "spec.disruption.consolidationPolicyy"
    assert "did you mean 'consolidationPolicy'" in err.rule


def test_missing_fields_are_named() -> None:
    doc = minimal_nodepool()
    del doc["spec"]["template"]["spec"]["nodeClassRef"]
    del doc["metadata"]["name"]
    err = error_of(doc)
    assert {e.field: e.rule for e in err.errors} == {
        "metadata.name": "is required",
        "spec.template.spec.nodeClassRef": "is required",
    }
    assert str(err).startswith("NodePool (unnamed): ")


def test_wrong_types_speak_plainly() -> None:
    err = error_of(minimal_nodepool(weight="5", template=5))
    assert {e.field: e.rule for e in err.errors} == {
        "spec.template": "must be a mapping (got 5)",
        "spec.weight": "must be an integer (got '5')",
    }


def test_pydantic_error_still_raised_by_model_validate() -> None:
    with pytest.raises(ValidationError):
        NodePool.model_validate(minimal_nodepool(weight=0))


# --- requirements ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requirement", "field", "rule_part"),
    [
        (
            {"key": "example.com/a", "operator": "In"},
            "requirements[1].values",
            "operator In needs at least one",
        ),
        ({"key": "example.com/a", "operator": "In", "values": []}, "requirements[1].values", "at least one"),
        (
            {"key": "example.com/a", "operator": "Gt", "values": ["1", "2"]},
            "requirements[1].values",
            "exactly one",
        ),
        (
            {"key": "example.com/a", "operator": "Lt", "values": ["1.5"]},
            "requirements[1].values",
            "non-negative",
        ),
        ({"key": "example.com/a", "operator": "Gt", "values": ["big"]}, "requirements[1].values", "integer"),
        (
            {"key": "example.com/a", "operator": "Exists", "values": ["x"]},
            "requirements[1].values",
            "no values",
        ),
        (
            {"key": "example.com/a", "operator": "DoesNotExist", "values": ["x"]},
            "requirements[1].values",
            "no values",
        ),
        (
            {"key": "example.com/a", "operator": "In", "values": ["a", "b"], "minValues": 3},
            "requirements[1].minValues",
            "must not exceed the number of values",
        ),
        (
            {"key": "example.com/a", "operator": "Exists", "minValues": 51},
            "requirements[1].minValues",
            "between 1 and 50 (got 51)",
        ),
        (
            {"key": "example.com/a", "operator": "In", "values": ["ok", "not ok"]},
            "requirements[1].values[1]",
            "'not ok'",
        ),
        ({"key": "Example.com/a", "operator": "Exists"}, "requirements[1].key", "DNS subdomain"),
        ({"key": "a/b/c", "operator": "Exists"}, "requirements[1].key", "DNS subdomain"),
        ({"key": "example.com/", "operator": "Exists"}, "requirements[1].key", "must not be empty"),
        (
            {"key": "example.com/a", "operator": "In", "values": [2]},
            "requirements[1].values[0]",
            "must be a string",
        ),
    ],
)
def test_requirement_rules(requirement: dict[str, Any], field: str, rule_part: str) -> None:
    err = error_of(with_requirement(requirement))
    assert err.field == f"spec.template.spec.{field}"
    assert rule_part in err.rule


@pytest.mark.parametrize(
    "requirement",
    [
        {"key": "example.com/a", "operator": "NotIn", "values": ["x"]},
        {"key": "example.com/a", "operator": "Exists"},
        {"key": "example.com/a", "operator": "DoesNotExist"},
        {"key": "karpenter.k8s.aws/instance-cpu", "operator": "Gt", "values": ["0"]},
        {"key": "karpenter.k8s.aws/instance-family", "operator": "Exists", "minValues": 3},
        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.large"], "minValues": 1},
        {"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["us-west-2d"]},
        {"key": "failure-domain.beta.kubernetes.io/zone", "operator": "Exists"},
        {"key": "node-restriction.kubernetes.io/team", "operator": "Exists"},
        {"key": "kops.k8s.io/instancegroup", "operator": "Exists"},
        {"key": "team", "operator": "In", "values": [""]},
    ],
)
def test_valid_requirements_are_accepted(requirement: dict[str, Any]) -> None:
    NodePool.from_manifest(with_requirement(requirement))


@pytest.mark.parametrize(
    ("key", "rule_part"),
    [
        ("kubernetes.io/hostname", "restricted"),
        ("karpenter.sh/nodepool", "Karpenter sets it"),
        ("karpenter.sh/custom", "'karpenter.sh' is restricted"),
        ("example.kubernetes.io/foo", "'kubernetes.io' is restricted"),
        ("k8s.io/foo", "'k8s.io' is restricted"),
        ("karpenter.k8s.aws/made-up", "'karpenter.k8s.aws' is restricted"),
    ],
)
def test_restricted_labels_rejected_in_requirements(key: str, rule_part: str) -> None:
    err = error_of(with_requirement({"key": key, "operator": "Exists"}))
    assert err.field == "spec.template.spec.requirements[1].key"
    assert rule_part in err.rule


@pytest.mark.parametrize(
    ("key", "rule_part"),
    [
        ("karpenter.sh/nodepool", "Karpenter sets it"),
        ("kubernetes.io/hostname", "restricted"),
        ("karpenter.sh/registered", "restricted"),
        ("kubernetes.io/custom", "'kubernetes.io' is restricted"),
    ],
)
def test_restricted_labels_rejected_in_template_labels(key: str, rule_part: str) -> None:
    doc = minimal_nodepool()
    doc["spec"]["template"]["metadata"] = {"labels": {"team": "a", key: "x"}}
    err = error_of(doc)
    assert err.field == f"spec.template.metadata.labels[{key}]"
    assert rule_part in err.rule


def test_template_label_values_and_allowed_domains() -> None:
    doc = minimal_nodepool()
    doc["spec"]["template"]["metadata"] = {
        "labels": {"node.kubernetes.io/pool": "a", "karpenter.sh/capacity-type": "spot", "team": "-bad"}
    }
    err = error_of(doc)
    assert [e.field for e in err.errors] == ["spec.template.metadata.labels[team]"]
    assert "(got '-bad')" in err.rule


def test_at_most_100_requirements() -> None:
    doc = minimal_nodepool()
    doc["spec"]["template"]["spec"]["requirements"] = [
        {"key": f"example.com/k{i}", "operator": "Exists"} for i in range(101)
    ]
    err = error_of(doc)
    assert err.field == "spec.template.spec.requirements"
    assert "at most 100" in err.rule


# --- taints -------------------------------------------------------------------------------------------


def test_taint_effect_and_duplicates() -> None:
    doc = minimal_nodepool()
    doc["spec"]["template"]["spec"]["taints"] = [{"key": "example.com/a", "effect": "NoWay"}]
    err = error_of(doc)
    assert err.field == "spec.template.spec.taints[0].effect"
    assert "NoSchedule, PreferNoSchedule, NoExecute" in err.rule

    doc["spec"]["template"]["spec"]["taints"] = [{"key": "example.com/a", "effect": "NoSchedule"}]
    doc["spec"]["template"]["spec"]["startupTaints"] = [
        {"key": "example.com/b", "effect": "NoSchedule"},
        {"key": "example.com/a", "value": "x", "effect": "NoSchedule"},
    ]
    err = error_of(doc)
    assert err.field == "spec.template.spec.startupTaints[1]"
    assert "duplicate taint example.com/a:NoSchedule (also at taints[0])" in err.rule


# --- disruption -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("nodes", ["0", "5", "100", "0%", "10%", "100%"])
def test_budget_nodes_accepted(nodes: str) -> None:
    NodePool.from_manifest(minimal_nodepool(disruption={"budgets": [{"nodes": nodes}]}))


@pytest.mark.parametrize(
    ("budget", "field", "rule_part"),
    [
        ({"nodes": "101%"}, "nodes", "percentage"),
        ({"nodes": "ten"}, "nodes", "(got 'ten')"),
        ({"nodes": "1", "schedule": "@daily"}, "duration", "'schedule' and 'duration' must be set together"),
        ({"nodes": "1", "duration": "1h"}, "schedule", "must be set together"),
        ({"nodes": "1", "schedule": "61 * * * *", "duration": "1h"}, "schedule", "not a valid cron"),
        ({"nodes": "1", "schedule": "* * *", "duration": "1h"}, "schedule", "5 fields"),
        ({"nodes": "1", "schedule": "@every 5m", "duration": "1h"}, "schedule", "@daily"),
        ({"nodes": "1", "schedule": "TZ=UTC 0 * * * *", "duration": "1h"}, "schedule", "time zones"),
        ({"nodes": "1", "schedule": "@daily", "duration": "30s"}, "duration", "hours and minutes only"),
        ({"nodes": "1", "reasons": ["Expired"]}, "reasons[0]", "Underutilized, Empty, Drifted"),
    ],
)
def test_budget_rules(budget: dict[str, Any], field: str, rule_part: str) -> None:
    err = error_of(minimal_nodepool(disruption={"budgets": [{"nodes": "10%"}, budget]}))
    assert err.field == f"spec.disruption.budgets[1].{field}"
    assert rule_part in err.rule


@pytest.mark.parametrize(
    ("schedule", "duration"),
    [("@daily", "10m"), ("@yearly", "1h30m"), ("0 9 * * mon-fri", "8h"), ("*/15 * * * *", "5m0s")],
)
def test_budget_schedules_accepted(schedule: str, duration: str) -> None:
    pool = NodePool.from_manifest(
        minimal_nodepool(disruption={"budgets": [{"nodes": "0", "schedule": schedule, "duration": duration}]})
    )
    assert pool.spec.disruption.budgets[0].schedule == schedule


def test_never_is_allowed_where_karpenter_allows_it() -> None:
    doc = minimal_nodepool(disruption={"consolidateAfter": "Never", "consolidationPolicy": "WhenEmpty"})
    doc["spec"]["template"]["spec"]["expireAfter"] = "Never"
    pool = NodePool.from_manifest(doc)
    assert pool.expire_after_timedelta() is None
    assert pool.consolidate_after_timedelta() is None

    doc["spec"]["template"]["spec"]["terminationGracePeriod"] = "Never"
    err = error_of(doc)
    assert err.field == "spec.template.spec.terminationGracePeriod"


@pytest.mark.parametrize("bad", ["1d", "30", "1.5h", "", "never", "-1h"])
def test_expire_after_rejects_other_durations(bad: str) -> None:
    doc = minimal_nodepool()
    doc["spec"]["template"]["spec"]["expireAfter"] = bad
    err = error_of(doc)
    assert err.field == "spec.template.spec.expireAfter"
    assert "such as 720h" in err.rule


def test_limits_are_quantities() -> None:
    err = error_of(minimal_nodepool(limits={"cpu": "1000", "memory": "lots", "nvidia.com/gpu": 4}))
    assert err.field == "spec.limits[memory]"
    assert "quantity" in err.rule and "(got 'lots')" in err.rule


# --- hashes -----------------------------------------------------------------------------------------------


def test_template_hash_tracks_drift_fields_only() -> None:
    base = NodePool.from_manifest(load(SERVER_NODEPOOL))
    same = load(SERVER_NODEPOOL)
    same["spec"]["template"]["spec"]["requirements"].pop()
    same["spec"]["template"]["spec"]["expireAfter"] = "720h0m0s"
    same["spec"]["weight"] = 99
    same["spec"]["limits"] = {"cpu": 1}
    same["spec"]["disruption"]["budgets"] = [{"nodes": "1"}]
    same["metadata"]["annotations"] = {}
    assert NodePool.from_manifest(same).template_hash() == base.template_hash()

    for change in (
        lambda d: d["spec"]["template"]["metadata"]["labels"].update(team="search"),
        lambda d: d["spec"]["template"]["spec"]["taints"].append(
            {"key": "example.com/b", "effect": "NoExecute"}
        ),
        lambda d: d["spec"]["template"]["spec"].update(expireAfter="24h"),
        lambda d: d["spec"]["template"]["spec"].update(terminationGracePeriod="1h"),
        lambda d: d["spec"]["template"]["spec"]["nodeClassRef"].update(name="other"),
    ):
        changed = load(SERVER_NODEPOOL)
        change(changed)
        assert NodePool.from_manifest(changed).template_hash() != base.template_hash()


def test_template_hash_ignores_taint_order_and_is_stable() -> None:
    doc = minimal_nodepool()
    taints = [
        {"key": "example.com/a", "effect": "NoSchedule"},
        {"key": "example.com/b", "effect": "NoExecute"},
    ]
    doc["spec"]["template"]["spec"]["taints"] = taints
    first = NodePool.from_manifest(doc).template_hash()
    doc["spec"]["template"]["spec"]["taints"] = list(reversed(taints))
    assert NodePool.from_manifest(doc).template_hash() == first
    assert first.isdigit()
    # Pinned: the hash is stamped on NodeClaims, so it must not change between releases by accident.
    assert NodePool.from_manifest(minimal_nodepool()).template_hash() == "567980743748890933"


# --- durations --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("720h", timedelta(hours=720)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("10m", timedelta(minutes=10)),
        ("30s", timedelta(seconds=30)),
        ("0s", timedelta(0)),
        ("0", timedelta(0)),
        ("1.5h", timedelta(minutes=90)),
        ("300ms", timedelta(milliseconds=300)),
        ("1h0m0s", timedelta(hours=1)),
        ("Never", None),
    ],
)
def test_parse_duration(text: str, expected: timedelta | None) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("bad", ["", "1d", "h", "10", "1h 30m", "never", "-5m"])
def test_parse_duration_rejects(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(hours=720), "720h0m0s"),
        (timedelta(minutes=90, seconds=5), "1h30m5s"),
        (timedelta(seconds=90), "1m30s"),
        (timedelta(0), "0s"),
        (timedelta(milliseconds=1500), "1.5s"),
        (timedelta(milliseconds=300), "300ms"),
        (None, "Never"),
    ],
)
def test_format_duration_is_go_style_and_round_trips(value: timedelta | None, text: str) -> None:
    assert format_duration(value) == text
    assert parse_duration(text) == value


def test_importing_the_api_stays_light() -> None:
    """croniter and the kubernetes client load only when a manifest needs them (cold starts)."""
    code = (
        "import sys, serverless_karpenter.api as api\n"
        "api.NodePool.from_manifest({'apiVersion': 'karpenter.sh/v1', 'kind': 'NodePool',"
        " 'metadata': {'name': 'a'}, 'spec': {'template': {'spec': {'requirements': [],"
        " 'nodeClassRef': {'group': 'g', 'kind': 'k', 'name': 'n'}}}}})\n"
        "print(sorted(m for m in ('croniter', 'kubernetes') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_nulls_mean_unset_as_on_the_api_server() -> None:
    doc = load(
        """
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
  labels:
spec:
  weight:
  template:
    metadata:
      labels:
    spec:
      taints:
      requirements:
        - key: example.com/team
          operator: Exists
          values:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
"""
    )
    pool = NodePool.from_manifest(doc)
    assert pool.spec.weight is None
    assert pool.spec.template.metadata.labels == {}
    assert pool.spec.template.spec.requirements[0].values == []

    doc["spec"]["template"]["spec"]["nodeClassRef"] = None
    err = error_of(doc)
    assert (err.field, err.rule) == ("spec.template.spec.nodeClassRef", "is required")


def test_datetimes_from_the_kubernetes_client_become_rfc3339() -> None:
    doc = load(SERVER_NODECLAIM)
    doc["metadata"]["creationTimestamp"] = datetime(2024, 8, 20, 12, 1, tzinfo=UTC)
    claim = NodeClaim.from_manifest(doc)
    assert claim.to_manifest()["metadata"]["creationTimestamp"] == "2024-08-20T12:01:00Z"

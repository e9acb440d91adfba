"""Every sample in tests/data/events drives its documented action (issue 6's table), on fakes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from serverless_karpenter.api import labels as wk
from serverless_karpenter.clock import ManualClock, to_rfc3339
from serverless_karpenter.config import Settings
from serverless_karpenter.interruption.actions import SPOT_WARNING, Action, handle, spot_deadline
from serverless_karpenter.interruption.messages import parse_message
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.observability import MetricName, metrics
from serverless_karpenter.provisioning.context import ControlPlane
from serverless_karpenter.termination.terminator import REPLACE_FIRST_UNTIL

from tests.unit import test_termination_drain as drain

SAMPLES = Path(__file__).parent.parent / "data" / "events"
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class FakeInstance:
    state: str


class FakeStore:
    def __init__(self, records: list[NodeClaimRecord]) -> None:
        self.records = {r.name: r for r in records}

    def find_by_instance_id(self, instance_id: str) -> NodeClaimRecord | None:
        return next((r for r in self.records.values() if r.instance_id == instance_id), None)

    def get(self, name: str) -> NodeClaimRecord | None:
        return self.records.get(name)

    def save(self, record: NodeClaimRecord) -> NodeClaimRecord:
        saved = record.model_copy(update={"version": record.version + 1})
        self.records[record.name] = saved
        return saved


@dataclass
class FakeKube:
    nodes: dict[str, dict[str, Any]]
    events: list[tuple[str, str]] = field(default_factory=list)  # (object name, reason)
    recorded: list[tuple[str, str, str]] = field(default_factory=list)  # (reason, message, type)
    deleted: list[str] = field(default_factory=list)

    def get_node(self, name: str) -> dict[str, Any] | None:
        return self.nodes.get(name)

    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        node = self.nodes[name]
        node["metadata"].setdefault("labels", {}).update(patch.get("metadata", {}).get("labels", {}))
        if "spec" in patch:
            node.setdefault("spec", {}).update(patch["spec"])
        return node

    def delete_node(self, name: str) -> None:
        self.deleted.append(name)
        if name in self.nodes:
            self.nodes[name]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"

    def remove_node_finalizer(self, node: dict[str, Any], finalizer: str) -> None:
        self.nodes.pop(node["metadata"]["name"], None)

    def record_event(
        self, obj: dict[str, Any], reason: str, message: str, event_type: str = "Normal"
    ) -> None:
        self.events.append((obj["metadata"]["name"], reason))
        self.recorded.append((reason, message, event_type))


@dataclass
class FakeLauncher:
    instances: dict[str, FakeInstance]
    terminated: list[str] = field(default_factory=list)

    def describe(self, instance_id: str) -> FakeInstance | None:
        return self.instances.get(instance_id)

    def terminate(self, ids: list[str]) -> None:
        self.terminated.extend(ids)


@dataclass
class FakeOfferings:
    marked: list[tuple[str, str, str]] = field(default_factory=list)

    def mark_unavailable(self, capacity_type: str, instance_type: str, zone: str, reason: str) -> None:
        self.marked.append((capacity_type, instance_type, zone))


@dataclass
class World:
    plane: ControlPlane
    store: FakeStore
    kube: FakeKube
    launcher: FakeLauncher
    offerings: FakeOfferings


def world(instance_id: str, instance_state: str = "running", rebalance: str = "event") -> World:
    record = NodeClaimRecord(
        name="default-abcde",
        nodepool="default",
        nodeclass="default",
        state=NodeClaimState.INITIALIZED,
        instance_id=instance_id,
        instance_type="m5.large",
        zone="us-east-1a",
        capacity_type="spot",
        node_name="ip-10-0-0-1.ec2.internal",
        created_at=NOW - timedelta(hours=1),
    )
    node = {
        "metadata": {"name": record.node_name, "finalizers": [wk.TERMINATION_FINALIZER], "labels": {}},
        "spec": {"taints": []},
    }
    store = FakeStore([record])
    kube = FakeKube({record.node_name or "": node})
    launcher = FakeLauncher({instance_id: FakeInstance(instance_state)})
    offerings = FakeOfferings()
    settings = Settings(cluster_name="test", interruption_rebalance=rebalance)
    plane = ControlPlane(
        settings=settings,
        clock=ManualClock(NOW),
        kube=cast(Any, kube),
        store=cast(Any, store),
        launcher=cast(Any, launcher),
        resolver=cast(Any, None),
        instance_types=cast(Any, offerings),
    )
    return World(plane, store, kube, launcher, offerings)


def sample(name: str) -> Any:
    return parse_message((SAMPLES / name).read_text())


NODE = "ip-10-0-0-1.ec2.internal"
TERMINATING = (NODE, "TerminatingOnInterruption")


def tainted(w: World) -> bool:
    node = w.kube.nodes["ip-10-0-0-1.ec2.internal"]
    return any(t["key"] == wk.DISRUPTED_TAINT_KEY for t in node["spec"]["taints"]) and node["metadata"][
        "labels"
    ].get(wk.EXCLUDE_FROM_LB)


@pytest.mark.parametrize(
    ("name", "reason", "event"),
    [
        ("spot-interruption-warning.json", "SpotInterrupted", "SpotInterrupted"),
        ("aws-health-scheduled-change.json", "ScheduledChange", "InstanceUnhealthy"),
        (
            "capacity-reservation-interruption-warning.json",
            "CapacityReservationInterrupted",
            "CapacityReservationInstanceInterrupted",
        ),
    ],
)
def test_cordon_and_drain_samples_taint_and_delete_the_node(name: str, reason: str, event: str) -> None:
    message = sample(name)
    instance_id = message.instance_ids()[0]
    w = world(instance_id)
    outcome = handle(w.plane, message)
    assert outcome.actions == {instance_id: Action.CORDON_AND_DRAIN}
    record = w.store.records["default-abcde"]
    assert record.state == NodeClaimState.DISRUPTING and record.disruption_reason == reason
    # Karpenter's Events: the kind's, then the deletion's; not the disruption controller's
    # DisruptionTerminating, which its interruption controller never records.
    assert w.kube.events == [(NODE, event), TERMINATING]
    assert all(t == "Warning" for _, _, t in w.kube.recorded)
    assert tainted(w)
    assert w.kube.deleted == ["ip-10-0-0-1.ec2.internal"]  # our finalizer drains it from here
    assert w.launcher.terminated == []  # terminated only after the drain
    if name.startswith("spot"):
        assert w.offerings.marked == [("spot", "m5.large", "us-east-1a")]
        # The sample's time is years before NOW: its two minutes count from receipt (see below).
        assert record.drain_deadline == NOW + SPOT_WARNING
    else:
        assert w.offerings.marked == []


def test_rebalance_recommendation_is_an_event_by_default() -> None:
    message = sample("rebalance-recommendation.json")
    w = world(message.instance_ids()[0])
    assert handle(w.plane, message).actions == {message.instance_ids()[0]: Action.EVENT}
    assert w.kube.events == [(NODE, "SpotRebalanceRecommendation")]
    assert w.kube.recorded == [
        ("SpotRebalanceRecommendation", "Spot rebalance recommendation was triggered", "Normal")
    ]
    assert w.store.records["default-abcde"].state == NodeClaimState.INITIALIZED
    assert w.kube.deleted == [] and not tainted(w)


def test_rebalance_recommendation_with_replace_drains_after_the_replacement() -> None:
    message = sample("rebalance-recommendation.json")
    w = world(message.instance_ids()[0], rebalance="replace")
    assert handle(w.plane, message).actions == {message.instance_ids()[0]: Action.CORDON_AND_DRAIN}
    record = w.store.records["default-abcde"]
    assert record.state == NodeClaimState.DISRUPTING
    assert REPLACE_FIRST_UNTIL in record.annotations  # evictions wait for the replacement
    assert tainted(w)
    assert w.kube.events == [(NODE, "SpotRebalanceRecommendation"), TERMINATING]


def test_state_change_pending_is_no_action() -> None:
    message = sample("instance-state-change-pending.json")
    w = world(message.instance_ids()[0], instance_state="pending")
    assert handle(w.plane, message).actions == {"i-abcd1111": Action.NO_ACTION}
    assert w.store.records["default-abcde"].state == NodeClaimState.INITIALIZED
    assert w.kube.deleted == [] and w.launcher.terminated == [] and not tainted(w)
    assert w.kube.events == []


@pytest.mark.parametrize("state", ["running", "pending"])
def test_other_states_are_no_action(state: str) -> None:
    body = json.loads((SAMPLES / "instance-state-change-pending.json").read_text())
    body["detail"]["state"] = state
    message = parse_message(json.dumps(body))
    w = world("i-abcd1111")
    assert handle(w.plane, message).actions == {"i-abcd1111": Action.NO_ACTION}


def test_state_change_terminated_cleans_up_at_once_when_the_instance_is_gone() -> None:
    message = sample("instance-state-change-terminated.json")
    w = world(message.instance_ids()[0], instance_state="terminated")
    assert handle(w.plane, message).actions == {message.instance_ids()[0]: Action.CLEAN_UP}
    assert w.kube.nodes == {}  # Node deleted and its finalizer removed
    assert w.kube.events == [(NODE, "InstanceTerminating"), TERMINATING]
    record = w.store.records["default-abcde"]
    assert record.state == NodeClaimState.TERMINATED and record.terminated_at is not None


@pytest.mark.parametrize("state", ["stopping", "stopped"])
def test_state_change_stopping_cordons_and_drains(state: str) -> None:
    body = json.loads((SAMPLES / "instance-state-change-terminated.json").read_text())
    body["detail"]["state"] = state
    message = parse_message(json.dumps(body))
    w = world(message.instance_ids()[0], instance_state=state)
    assert handle(w.plane, message).actions == {message.instance_ids()[0]: Action.CORDON_AND_DRAIN}
    assert tainted(w) and w.kube.deleted
    assert w.kube.events == [(NODE, "InstanceStopping"), TERMINATING]
    assert w.kube.recorded[0] == ("InstanceStopping", "Instance is stopping", "Warning")


def test_instances_that_are_not_ours_are_acknowledged(capsys: pytest.CaptureFixture[str]) -> None:
    metrics.clear_metrics()
    message = sample("spot-interruption-warning.json")
    w = world("i-someone-else")
    assert handle(w.plane, message).actions == {"i-0123456789": Action.FOREIGN}
    assert w.kube.deleted == [] and w.offerings.marked == []
    assert "ignoring message for an instance we do not manage" in capsys.readouterr().out
    assert MetricName.INTERRUPTION_FOREIGN in metrics.metric_set  # flushed by the handler's decorator
    metrics.clear_metrics()


def test_an_unknown_kind_is_acknowledged_with_a_metric(capsys: pytest.CaptureFixture[str]) -> None:
    body = json.loads((SAMPLES / "spot-interruption-warning.json").read_text())
    body["detail-type"] = "EC2 Something New"
    w = world("i-0123456789")
    assert handle(w.plane, parse_message(json.dumps(body))).actions == {"": Action.UNKNOWN}
    out = capsys.readouterr().out
    assert '"Kind"' in out and "Unknown" in out  # InterruptionMessages{Kind=Unknown}, flushed at once
    assert w.kube.deleted == []


def test_a_repeated_warning_does_not_restart_the_drain_but_tightens_its_deadline() -> None:
    message = sample("spot-interruption-warning.json")
    w = world("i-0123456789")
    w.store.records["default-abcde"] = w.store.records["default-abcde"].model_copy(
        update={"state": NodeClaimState.DRAINING, "disruption_reason": "Underutilized"}
    )
    w.kube.nodes[NODE]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    handle(w.plane, message)
    record = w.store.records["default-abcde"]
    assert record.state == NodeClaimState.DRAINING and record.disruption_reason == "Underutilized"
    assert record.drain_deadline == NOW + SPOT_WARNING
    # The node was already going: the warning is told, but the deletion was not its doing.
    assert w.kube.events == [(NODE, "SpotInterrupted")]


def test_a_warning_for_a_node_already_being_deleted_records_the_kind_only() -> None:
    message = sample("aws-health-scheduled-change.json")
    w = world(message.instance_ids()[0])
    w.kube.nodes[NODE]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    handle(w.plane, message)
    assert w.kube.events == [(NODE, "InstanceUnhealthy")]
    assert w.kube.recorded == [
        ("InstanceUnhealthy", "An unhealthy warning was triggered for the instance", "Warning")
    ]


def spot_warning(sent_at: datetime, instance_id: str = "i-0123456789") -> Any:
    body = json.loads((SAMPLES / "spot-interruption-warning.json").read_text())
    body["time"] = to_rfc3339(sent_at)
    body["detail"]["instance-id"] = instance_id
    return parse_message(json.dumps(body))


@pytest.mark.parametrize(
    ("sent_at", "deadline"),
    [
        # Replayed, or redriven from a DLQ, an hour on: two minutes from receipt, not already past.
        (NOW - timedelta(hours=1), NOW + SPOT_WARNING),
        # Delivered a few seconds after it was sent, as usual: still two minutes from receipt.
        (NOW - timedelta(seconds=5), NOW + SPOT_WARNING),
        # Stamped ahead of our clock: never earlier than its own time's two minutes.
        (NOW + timedelta(seconds=3), NOW + timedelta(seconds=3) + SPOT_WARNING),
    ],
    ids=["replayed-an-hour-on", "delivered-5s-late", "stamped-ahead-of-our-clock"],
)
def test_a_spot_warnings_two_minutes_count_from_its_receipt(sent_at: datetime, deadline: datetime) -> None:
    assert spot_deadline(sent_at, NOW) == deadline
    w = world("i-0123456789")
    assert handle(w.plane, spot_warning(sent_at)).actions == {"i-0123456789": Action.CORDON_AND_DRAIN}
    assert w.store.records["default-abcde"].drain_deadline == deadline


def test_a_replayed_spot_warning_evicts_first_and_forces_no_pod_before_receipt_plus_its_grace() -> None:
    """An hour-old warning, through the terminator: the pods are evicted through their (refusing) PDB,
    and each is deleted past it only at the deadline minus its own grace period, given all of it."""
    w = drain.world(drain.pod("app", grace=30), drain.pod("db", grace=60))
    # Not being deleted yet: the warning starts it.
    w.store.records["victim"] = w.record().model_copy(
        update={"state": NodeClaimState.INITIALIZED, "disruption_reason": None, "deletion_requested_at": None}
    )
    del w.cluster.nodes[drain.NODE]["metadata"]["deletionTimestamp"]
    w.cluster.refuse.update({"app", "db"})  # their PDB allows no disruption
    received = w.clock.now()
    handle(w.plane, spot_warning(received - timedelta(hours=1), "i-victim"))
    assert w.record().drain_deadline == received + SPOT_WARNING

    forced: dict[str, tuple[timedelta, int | None]] = {}  # pod -> (when after receipt, grace granted)
    while w.clock.now() <= received + SPOT_WARNING:
        w.terminator().reconcile()
        for name, grace in w.cluster.deletions:
            forced.setdefault(name, (w.clock.now() - received, grace))
        w.clock.advance(1)
    assert w.cluster.eviction_attempts[:2] == ["app", "db"]  # evicted first, as the PDB allows
    assert forced == {"db": (timedelta(seconds=60), 60), "app": (timedelta(seconds=90), 30)}
    assert all(after >= timedelta(seconds=grace or 0) for after, grace in forced.values())

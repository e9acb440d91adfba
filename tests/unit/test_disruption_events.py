"""The Events a disruption pass records on Nodes and NodePools: pure, from the methods' evaluation."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from types import SimpleNamespace
from typing import Any, cast

import pytest
from serverless_karpenter.disruption import methods as m
from serverless_karpenter.disruption.candidates import Options, Snapshot, candidates
from serverless_karpenter.disruption.usecases import record_blocked
from serverless_karpenter.lifecycle import nodeclaim_writer

from tests.unit.test_disruption_core import (
    EXTRA,
    NOW,
    TYPES,
    FakeType,
    pod,
    pool_manifest,
    record,
    snapshot,
)


@dataclass
class Recorder:
    events: list[tuple[str, str, str, str]] = field(
        default_factory=list
    )  # (kind/name, reason, message, type)
    nodeclaims: list[dict[str, Any]] = field(default_factory=list)
    lists: int = 0

    def list_nodeclaims(self) -> list[dict[str, Any]]:
        self.lists += 1
        return self.nodeclaims

    def record_event(
        self,
        obj: dict[str, Any],
        reason: str,
        message: str,
        event_type: str = "Normal",
        *,
        dedupe_seconds: float | None = None,
    ) -> None:
        what = f"{obj.get('kind', 'Node')}/{obj['metadata']['name']}"
        self.events.append((what, reason, message, event_type))


@pytest.fixture(autouse=True)
def _extra_types() -> Any:
    nodeclaim_writer._REFERENCES.clear()  # what a warm Lambda remembers of the claims, per test
    yield
    EXTRA.clear()


def recorded(snap: Snapshot, options: Options | None = None) -> Recorder:
    """One pass's evaluation of ``snap`` through the disruption use case, with each record's NodeClaim."""
    pool, _ = candidates(snap)
    claims = [
        {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": r.name, "uid": f"uid-{r.name}"},
        }
        for r in snap.records
    ]
    kube = Recorder(nodeclaims=claims)
    evaluation = m.evaluate(snap, pool, options or Options())
    assert evaluation.command is None, "nothing should be decided in these cases"
    record_blocked(cast(Any, SimpleNamespace(kube=kube, clock=None)), snap, pool, evaluation)
    return kube


def events(snap: Snapshot, options: Options | None = None) -> list[tuple[str, str, str, str]]:
    """The Events one pass records on Nodes and NodePools (each Node's is on its NodeClaim too)."""
    return [e for e in recorded(snap, options).events if not e[0].startswith("NodeClaim/")]


def test_no_cheaper_replacement_is_unconsolidatable() -> None:
    only_same = [FakeType("m.large", 2, 0.096), FakeType("n.large", 2, 0.096)]
    EXTRA.extend(only_same)
    a = record("a", only_same[0])
    # n.large at the same price is no cheaper; m.large is the node's own type.
    assert events(snapshot([a], [pod("p", a, cpu="1")], types=only_same)) == [
        ("Node/node-a", "Unconsolidatable", "Can't replace with a cheaper node", "Normal")
    ]


def test_spot_to_spot_disabled_and_too_few_spot_types() -> None:
    many = [FakeType(f"s{i}.large", 2, 0.1, spot_price=0.02 + i * 0.001) for i in range(10)]
    current = FakeType("cur.xlarge", 4, 0.2, spot_price=0.08)
    EXTRA.extend([current, *many])
    a = record("a", current, capacity_type="spot")
    snap = snapshot([a], [pod("p", a, cpu="1")], types=[current, *many])
    assert [e[2] for e in events(snap)] == [
        "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node"
    ]
    assert [e[2] for e in events(snap, Options(spot_to_spot=True))] == [
        "SpotToSpotConsolidation requires 15 cheaper instance type options than the current candidate "
        "to consolidate, got 10"
    ]


def test_pods_that_would_need_two_nodes() -> None:
    big = record("big", TYPES[1])  # m.xlarge; the NodePool now offers only 2-cpu types
    pods = [pod("p1", big, cpu="1500m"), pod("p2", big, cpu="1500m")]
    snap = snapshot([big], pods, types=[TYPES[0], TYPES[2]])
    assert [e[1:3] for e in events(snap)] == [
        ("Unconsolidatable", "Can't remove without creating 2 candidates")
    ]


def test_nodepool_policy_and_consolidate_after_never() -> None:
    a = record("a", TYPES[1])
    when_empty = snapshot(
        [a], [pod("p", a, cpu="1")], manifest=pool_manifest(consolidationPolicy="WhenEmpty")
    )
    assert [e[2] for e in events(when_empty)] == ['NodePool "default" has non-empty consolidation disabled']
    never = pool_manifest(consolidateAfter="Never")
    empty = record("empty", TYPES[0])
    snap = snapshot([a, empty], [pod("p", a, cpu="1")], manifest=never)
    assert sorted(e[:3] for e in events(snap)) == [
        ("Node/node-a", "Unconsolidatable", 'NodePool "default" has consolidation disabled'),
        ("Node/node-empty", "Unconsolidatable", 'NodePool "default" has consolidation disabled'),
    ]


def test_one_event_per_node_and_disruption_blocked_first() -> None:
    only_same = [FakeType("m.large", 2, 0.096)]
    EXTRA.extend(only_same)
    a = record("a", only_same[0])
    pdb = {
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 0},
    }
    snap = snapshot([a], [pod("p", a, cpu="1")], types=only_same, pdbs=[pdb])
    [(what, reason, message, _)] = events(snap)
    assert (what, reason) == ("Node/node-a", "DisruptionBlocked")
    assert message.startswith("Cannot disrupt Node: pdb default/web prevents pod evictions")
    # Karpenter publishes it on the NodeClaim too, with the same message; a cold function reads the
    # claims once.
    nodeclaim_writer._REFERENCES.clear()
    kube = recorded(snap)
    assert [e for e in kube.events if e[0] == "NodeClaim/a"] == [("NodeClaim/a", reason, message, "Normal")]
    assert kube.lists == 1
    # The next pass of the warm function knows the claim's uid: it reads nothing.
    again = recorded(snap)
    assert [e[0] for e in again.events] == ["Node/node-a", "NodeClaim/a"] and again.lists == 0


def test_unconsolidatable_is_on_the_nodeclaim_too_and_claims_are_read_once_a_pass() -> None:
    never = pool_manifest(consolidateAfter="Never")
    a, b = record("a", TYPES[0]), record("b", TYPES[0])
    kube = recorded(snapshot([a, b], [], manifest=never))
    message = 'NodePool "default" has consolidation disabled'
    assert sorted(e[:3] for e in kube.events) == [
        ("Node/node-a", "Unconsolidatable", message),
        ("Node/node-b", "Unconsolidatable", message),
        ("NodeClaim/a", "Unconsolidatable", message),
        ("NodeClaim/b", "Unconsolidatable", message),
    ]
    assert kube.lists == 1


def test_nodes_merely_too_young_or_recently_changed_get_no_event() -> None:
    young = record("young", TYPES[1], age=timedelta(minutes=5))
    busy = record("busy", TYPES[1])
    pods = [pod("p", young, cpu="1"), pod("q", busy, cpu="1", started=NOW - timedelta(seconds=20))]
    # The minimum node age is ours and off by default; on, a young node gets no Event, as a recent pod
    # event under consolidateAfter gets none.
    assert events(snapshot([young, busy], pods), Options(min_node_age=timedelta(minutes=10))) == []

"""Capacity reservations held per NodeClaim (scheduling/reservations.py) and DRA pods (scheduling/dra.py),
beyond the ports of Karpenter's suite in test_karpenter_suite_core_reserved.py."""

from __future__ import annotations

from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.catalog import Offering
from serverless_karpenter.scheduling.daemonsets import daemonset_pod, node_daemons
from serverless_karpenter.scheduling.requirements import Requirement, Requirements
from serverless_karpenter.scheduling.reservations import ReservationShortfall
from serverless_karpenter.scheduling.scheduler import choose_offering, offering_filter
from serverless_karpenter.solver import improve

from tests.builders import owner_reference
from tests.unit.karpenter_suite_helpers_core import (
    GI,
    FakeType,
    claim_for,
    daemonset,
    default_offerings,
    existing_node,
    node_affinity,
    node_labels,
    nodepool,
    not_scheduled,
    schedule,
    upod,
)


def with_reservations(it: FakeType, *rooms: tuple[str, int]) -> FakeType:
    """``it`` with a capacity reservation per (id, room) in test-zone-1, nearly free."""
    extra = tuple(
        Offering("test-zone-1", wk.CAPACITY_TYPE_RESERVED, it.price / 100_000, True, None, rid, room)
        for rid, room in rooms
    )
    return FakeType(it.name, it.cpu, it.memory, it.pods, offering_list=(*default_offerings(it.price), *extra))


LARGE = FakeType("large-instance-type", cpu=6, memory=6 * GI)
MEDIUM = with_reservations(FakeType("medium-instance-type", cpu=3, memory=3 * GI), ("r-medium", 1))
SMALL = with_reservations(FakeType("small-instance-type", cpu=2, memory=2 * GI), ("r-small", 1))
TYPES = (LARGE, MEDIUM, SMALL)


def anti_hostname(name: str, cpu: str) -> dict[str, Any]:
    return upod(
        name,
        cpu,
        labels={"app": "test"},
        affinity={
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "test"}}, "topologyKey": wk.HOSTNAME}
                ]
            }
        },
    )


def test_a_claim_holding_reservations_launches_into_them_only() -> None:
    """The first claim could launch into either reservation and holds both (Karpenter reserves
    pessimistically); the second has only the room the first left: r-b's second instance."""
    pods = [anti_hostname(f"p{i}", "1") for i in range(3)]
    small = with_reservations(FakeType("small-instance-type", cpu=2, memory=2 * GI), ("r-a", 1), ("r-b", 2))
    result = schedule(pods, [nodepool(types=(small,))])
    assert len(result.new_nodeclaims) == 2 and not_scheduled(result, pods[2])
    first, second = result.new_nodeclaims
    assert first.requirements.get(wk.CAPACITY_RESERVATION_ID).values() == {"r-a", "r-b"}
    assert second.requirements.get(wk.CAPACITY_RESERVATION_ID).values() == {"r-b"}
    for claim in result.new_nodeclaims:
        assert claim.requirements.get(wk.CAPACITY_TYPE).values() == {wk.CAPACITY_TYPE_RESERVED}
        chosen = choose_offering(claim)
        assert chosen is not None and chosen.capacity_type == wk.CAPACITY_TYPE_RESERVED
    assert "could not be reserved" in result.unschedulable["default/p2"]["default"]


def test_the_held_reservation_decides_the_offering() -> None:
    small = with_reservations(FakeType("small-instance-type", cpu=2, memory=2 * GI), ("r-a", 1), ("r-b", 1))
    held = Requirements([Requirement(wk.CAPACITY_RESERVATION_ID, "In", ("r-b",))])
    allowed = offering_filter(held)
    assert [o.reservation_id for o in small.offerings if allowed(o)] == ["r-b"]
    # Spot and on-demand offerings have no reservation id: a NotIn admits them, an In does not.
    others = offering_filter(Requirements([Requirement(wk.CAPACITY_RESERVATION_ID, "NotIn", ("r-a",))]))
    assert {o.capacity_type for o in small.offerings if others(o)} == {"spot", "on-demand", "reserved"}


def test_a_narrowed_claim_gives_back_the_reservation_it_can_no_longer_use() -> None:
    """a (1800m) holds both reservations; c (1800m) waits; b (1000m) joins a's claim, which then fits only
    medium and large, so the small reservation is freed and c, tried again, takes it."""
    a, c = anti_hostname("a", "1800m"), anti_hostname("c", "1800m")
    b = upod("b", "1")
    result = schedule([a, b, c], [nodepool(types=TYPES)])
    assert claim_for(result, a) is claim_for(result, b)
    assert claim_for(result, a).requirements.get(wk.CAPACITY_RESERVATION_ID).values() == {"r-medium"}
    assert claim_for(result, c).requirements.get(wk.CAPACITY_RESERVATION_ID).values() == {"r-small"}
    assert node_labels(result, c)[wk.INSTANCE_TYPE] == "small-instance-type"


def test_a_pod_that_would_take_a_claims_reservations_away_stays_off_it() -> None:
    """Two 1800m pods fit together only on the large type, which has no reservation: the second does not
    join the reserved claim (and, the reservations being held, waits)."""
    pods = [upod(f"p{i}", "1800m") for i in range(2)]
    result = schedule(pods, [nodepool(types=TYPES)])
    assert len(result.new_nodeclaims) == 1 and not_scheduled(result, pods[1])
    assert "could not be reserved" in result.unschedulable["default/p1"]["default"]


def test_disruption_simulates_with_fallback_to_other_capacity() -> None:
    """Without fallback only the first pod is planned (the reservations are held); with it, the others
    go to spot or on-demand capacity."""
    pods = [anti_hostname(f"p{i}", "1800m") for i in range(3)]
    result = schedule(pods, [nodepool(types=TYPES)], reserved_fallback=True)
    assert not result.unschedulable and len(result.new_nodeclaims) == 3
    reserved = [c for c in result.new_nodeclaims if wk.CAPACITY_RESERVATION_ID in c.requirements]
    assert len(reserved) == 1
    # As Karpenter's, the others keep every capacity type their NodePool allows (the launch finds the
    # reservations full).
    assert claim_for(result, pods[0]) is reserved[0]
    # A claim that narrows past its reservations falls back too, giving them back.
    together = schedule(
        [upod(f"q{i}", "1800m") for i in range(2)], [nodepool(types=TYPES)], reserved_fallback=True
    )
    assert len(together.new_nodeclaims) == 1
    assert wk.CAPACITY_RESERVATION_ID not in together.new_nodeclaims[0].requirements


def test_a_nodepool_without_reserved_capacity_type_holds_nothing() -> None:
    on_demand = [{"key": wk.CAPACITY_TYPE, "operator": "In", "values": ["on-demand"]}]
    pods = [anti_hostname(f"p{i}", "1") for i in range(3)]
    result = schedule(pods, [nodepool(requirements=on_demand, types=TYPES)])
    assert len(result.new_nodeclaims) == 3 and not result.unschedulable
    assert all(wk.CAPACITY_RESERVATION_ID not in c.requirements for c in result.new_nodeclaims)


def test_a_reservation_without_room_defers_the_pods_that_could_use_it() -> None:
    full = with_reservations(FakeType("small-instance-type", cpu=2, memory=2 * GI), ("r-full", 0))
    result = schedule([upod("p", "1")], [nodepool(types=(full,))])
    reason = result.unschedulable["default/p"]["default"]
    assert isinstance(reason, ReservationShortfall) and not result.new_nodeclaims


def test_dra_pods_are_refused_whatever_their_place_in_the_batch() -> None:
    """Pods are sorted by size before scheduling: the refusal follows the DRA pod, not its position."""
    big, dra, small = upod("big", "2"), upod("dra", "1500m"), upod("small", "500m")
    dra["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "gpu"}]
    result = schedule([small, dra, big], [nodepool()])
    assert set(result.unschedulable) == {"default/dra"}
    assert "Dynamic Resource Allocation" in result.unschedulable["default/dra"]["default"]
    assert not any("default/dra" in c.pods for c in result.new_nodeclaims)


def test_dra_pods_do_not_go_to_existing_nodes_either() -> None:
    dra = upod("dra", "1")
    dra["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    node = existing_node("node-a", {wk.ZONE: "test-zone-1"}, {"cpu": 4000, "memory": 4 * GI, "pods": 10})
    result = schedule([dra], [nodepool()], [node])
    assert not result.existing and not_scheduled(result, dra)


def test_a_dra_daemonset_takes_no_room_on_existing_nodes() -> None:
    template = upod("dra-daemon", "3")
    template["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "gpu"}]
    template["metadata"]["ownerReferences"] = [owner_reference("DaemonSet", "dra-daemon")]
    pod = daemonset_pod(daemonset("dra-daemon", template))
    assert node_daemons([pod], {wk.ZONE: "test-zone-1"}, ()) == []


def test_the_solver_does_not_repack_past_a_reservations_room() -> None:
    """py, held to type a, takes a's one reserved instance; the solver would repack p0 and p1 (on b) onto
    c and a reserved a, planning the reservation twice. It keeps such NodePools' claims as they are."""
    a = with_reservations(FakeType("a-type", cpu=4, memory=4 * GI), ("r-a", 1))
    b, c = FakeType("b-type", cpu=8, memory=8 * GI), FakeType("c-type", cpu=6, memory=6 * GI)
    pool = nodepool(types=(a, b, c))
    py = upod("py", "1", affinity=node_affinity([(wk.INSTANCE_TYPE, "In", ["a-type"])]))
    pods = [upod("p0", "5"), upod("p1", "1"), py]
    result, _ = improve(schedule(pods, [pool]), [pool], 1.0, pods)
    chosen = [choose_offering(claim) for claim in result.new_nodeclaims]
    assert sum(1 for o in chosen if o is not None and o.capacity_type == wk.CAPACITY_TYPE_RESERVED) == 1

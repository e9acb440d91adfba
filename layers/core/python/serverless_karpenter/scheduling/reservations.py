"""Capacity reservations as the scheduler holds them (Karpenter's ``ReservationManager`` and
``NodeClaim.offeringsToReserve``).

A reserved offering says how many instances its reservation still has room for. Each new NodeClaim holds
every reservation it could launch into (pessimistically: CreateFleet chooses among them later), so a
reservation is never planned more often than it has room. A reservation offered by several NodePools or
instance types is one count: the smallest any of its offerings reports (they may have been read at
different moments).

The provisioner schedules strictly: a pod that could use a reserved offering, none of which has room left,
is deferred (no fallback to spot or on-demand, no lighter NodePool, no relaxed preference) until the
reservations free up; a pod that would take its claim's last reservation away stays off that claim.
Disruption simulates with fallback, as Karpenter's does: such a claim simply holds no reservation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.scheduling.requirements import Requirement, Requirements


class ReservationShortfall(str):
    """Why a pod cannot join or open a claim for want of reserved capacity: the pod is to wait, never to
    have its preferences relaxed or to fall back to a lighter NodePool."""


NO_ROOM = ReservationShortfall(
    "one or more instance types with compatible reserved offerings are available, but could not be reserved"
)
WOULD_LOSE = ReservationShortfall(
    "satisfying updated nodeclaim constraints would remove all compatible reserved offering options"
)


class Reservations:
    """The room each capacity reservation has left in one scheduling pass."""

    def __init__(self, instance_types: Iterable[Any], *, strict: bool = True) -> None:
        self.strict = strict
        self.room: dict[str, int] = {}
        # Each type's reserved offerings, looked up per claim on the hot path.
        self._reserved: dict[int, tuple[Any, ...]] = {}
        for it in instance_types:
            offerings = tuple(
                o
                for o in it.offerings
                if o.capacity_type == wk.CAPACITY_TYPE_RESERVED and getattr(o, "reservation_id", None)
            )
            if not offerings:
                continue
            self._reserved[id(it)] = offerings
            for o in offerings:
                count = getattr(o, "reservation_capacity", 0)
                self.room[o.reservation_id] = min(self.room.get(o.reservation_id, count), count)

    def __bool__(self) -> bool:
        return bool(self._reserved)

    def to_reserve(
        self, held: frozenset[str], instance_types: Iterable[Any], allowed: Callable[[Any], bool]
    ) -> frozenset[str] | ReservationShortfall:
        """The reservations a claim holding ``held`` would hold with these options, whose offerings
        ``allowed`` admits (its requirements); a shortfall when strict scheduling refuses it."""
        compatible = False
        found: set[str] = set()
        for it in instance_types:
            for o in self._reserved.get(id(it), ()):
                if not allowed(o):
                    continue
                compatible = True
                if o.reservation_id in held or self.room[o.reservation_id] > 0:
                    found.add(o.reservation_id)
        if self.strict:
            if compatible and not found:
                return NO_ROOM
            if held and not found:
                return WOULD_LOSE
        return frozenset(found)

    def hold(self, held: frozenset[str], reserved: frozenset[str]) -> None:
        """A claim that held ``held`` now holds ``reserved``: take the new ones, free the dropped ones."""
        for rid in reserved - held:
            self.room[rid] -= 1
            assert self.room[rid] >= 0, f"reservation {rid} over-reserved"
        for rid in held - reserved:
            self.room[rid] += 1


def offers_reserved(instance_types: Iterable[Any]) -> bool:
    """Whether any of these types has a reserved offering (whose room the scheduler alone counts)."""
    return any(
        o.capacity_type == wk.CAPACITY_TYPE_RESERVED and getattr(o, "reservation_id", None)
        for it in instance_types
        for o in it.offerings
    )


def reserved_requirements(requirements: Requirements, reserved: frozenset[str]) -> Requirements:
    """A claim's requirements once it holds ``reserved`` (Karpenter's FinalizeScheduling): it launches as
    reserved capacity into those reservations only, so two claims never launch into one instance's room."""
    return requirements.add(
        Requirement(wk.CAPACITY_TYPE, "In", (wk.CAPACITY_TYPE_RESERVED,)),
        Requirement(wk.CAPACITY_RESERVATION_ID, "In", tuple(sorted(reserved))),
    )

"""Status conditions as Karpenter's objects carry them (awslabs/operatorpkg's ``status.ConditionSet``).

One root condition (``Ready``) summarises its dependents: True once every dependent is True at the
object's generation; False, reason ``UnhealthyDependents``, once any dependent is False at that
generation; Unknown, reason ``ReconcilingDependents``, otherwise. Its message names the dependents that
hold it back (``NodeClassReady=False, ValidationSucceeded=Unknown``), the most recently changed first.
A condition keeps its ``lastTransitionTime`` while its status stays the same; reason, message and
``observedGeneration`` follow each write. Conditions are kept sorted by type, as kubectl shows them.
Conditions another controller wrote (``NodeRegistrationHealthy`` by Karpenter before a migration) are
kept as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from serverless_karpenter.clock import to_rfc3339

READY = "Ready"
TRUE, FALSE, UNKNOWN = "True", "False", "Unknown"
UNHEALTHY_DEPENDENTS = "UnhealthyDependents"
RECONCILING_DEPENDENTS = "ReconcilingDependents"
MAX_MESSAGE = 32768  # the CRDs' maxLength for a condition's message


@dataclass(frozen=True)
class Wanted:
    """A dependent condition as this pass judges it. A True one's reason is its type (SetTrue)."""

    type: str
    status: str
    reason: str = ""
    message: str = ""

    @classmethod
    def true(cls, type_: str) -> Wanted:
        return cls(type_, TRUE, type_, "")


def _set(
    previous: Mapping[str, Any] | None, wanted: Wanted, generation: int | None, now: datetime
) -> dict[str, Any]:
    unchanged = previous is not None and previous.get("status") == wanted.status
    condition: dict[str, Any] = {
        "type": wanted.type,
        "status": wanted.status,
        "reason": wanted.reason or wanted.type,
        "message": wanted.message[:MAX_MESSAGE],
        "lastTransitionTime": str(previous["lastTransitionTime"])
        if unchanged and previous is not None and previous.get("lastTransitionTime")
        else to_rfc3339(now),
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    return condition


def _root(dependents: Sequence[Mapping[str, Any]], generation: int | None) -> Wanted:
    unhealthy = [
        c
        for c in dependents
        if c.get("status") != TRUE or (generation is not None and c.get("observedGeneration") != generation)
    ]
    if not unhealthy:
        return Wanted.true(READY)
    failing_now = any(
        c.get("status") == FALSE and (generation is None or c.get("observedGeneration") == generation)
        for c in unhealthy
    )
    # Most recent transition first, as operatorpkg sorts them (ties keep the dependents' order).
    ordered = sorted(unhealthy, key=lambda c: str(c.get("lastTransitionTime") or ""), reverse=True)
    message = ", ".join(f"{c['type']}={c['status']}" for c in ordered)
    if failing_now:
        return Wanted(READY, FALSE, UNHEALTHY_DEPENDENTS, message)
    return Wanted(READY, UNKNOWN, RECONCILING_DEPENDENTS, message)


def with_conditions(
    previous: Sequence[Mapping[str, Any]] | None,
    dependents: Sequence[Wanted],
    generation: int | None,
    now: datetime,
) -> list[dict[str, Any]]:
    """The conditions after setting ``dependents`` and recomputing the root ``Ready`` from them."""
    before = {str(c.get("type")): c for c in previous or [] if isinstance(c, Mapping)}
    written = [_set(before.get(w.type), w, generation, now) for w in dependents]
    root = _set(before.get(READY), _root(written, generation), generation, now)
    mine = {w.type for w in dependents} | {READY}
    kept = [dict(c) for t, c in before.items() if t not in mine]
    return sorted([*kept, *written, root], key=lambda c: str(c.get("type")))


def same_conditions(a: Sequence[Mapping[str, Any]] | None, b: Sequence[Mapping[str, Any]] | None) -> bool:
    """Whether two condition lists say the same (order aside): no write is needed between them."""

    def key(conditions: Sequence[Mapping[str, Any]] | None) -> list[tuple[Any, ...]]:
        return sorted(
            (
                str(c.get("type")),
                c.get("status"),
                c.get("reason") or "",
                c.get("message") or "",
                c.get("observedGeneration"),
                c.get("lastTransitionTime"),
            )
            for c in conditions or []
        )

    return key(a) == key(b)

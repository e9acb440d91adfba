"""Taints and tolerations with the Kubernetes matching rules (``Toleration.ToleratesTaint``).

Scheduling policy: ``NoSchedule`` and ``NoExecute`` taints (and any effect we do not know) keep a pod that
does not tolerate them off a node. ``PreferNoSchedule`` taints never block: the kube-scheduler only
scores them. Karpenter is stricter at first (it treats every taint as blocking, then relaxes by
tolerating ``PreferNoSchedule`` when a pod cannot be placed); ``include_prefer_no_schedule=True``
gives that strict first pass.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from serverless_karpenter.scheduling.requirements import field_of

NO_SCHEDULE = "NoSchedule"
PREFER_NO_SCHEDULE = "PreferNoSchedule"
NO_EXECUTE = "NoExecute"

EQUAL = "Equal"
EXISTS = "Exists"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    @classmethod
    def from_dict(cls, data: Any) -> Taint:
        """From a Kubernetes taint dict, or an object with the same attributes (``timeAdded`` is dropped)."""
        return cls(
            key=field_of(data, "key") or "",
            value=field_of(data, "value") or "",
            effect=field_of(data, "effect") or "",
        )

    def to_dict(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        return out

    def matches(self, other: Taint) -> bool:
        """The same taint for merging purposes: key and effect equal (Kubernetes ``MatchTaint``)."""
        return self.key == other.key and self.effect == other.effect

    def blocks_scheduling(self, *, include_prefer_no_schedule: bool = False) -> bool:
        return include_prefer_no_schedule or self.effect != PREFER_NO_SCHEDULE

    def __str__(self) -> str:
        return format_taint(self)


# Karpenter's KnownEphemeralTaints: taints a node carries while it starts, which Karpenter waits to see
# gone before it calls the node initialized (the node lifecycle controller's not-ready and unreachable,
# the cloud provider's uninitialized, and our unregistered taint).
KNOWN_EPHEMERAL_TAINTS = (
    Taint("node.kubernetes.io/not-ready", "", NO_SCHEDULE),
    Taint("node.kubernetes.io/not-ready", "", NO_EXECUTE),
    Taint("node.kubernetes.io/unreachable", "", NO_SCHEDULE),
    Taint("node.cloudprovider.kubernetes.io/uninitialized", "true", NO_SCHEDULE),
    Taint("karpenter.sh/unregistered", "", NO_EXECUTE),
)
# Taint families whose key ends in a controller's own suffix (the Node Readiness Controller's rules).
KNOWN_EPHEMERAL_TAINT_PREFIXES = ("readiness.k8s.io/",)


def is_known_ephemeral(taint: Taint) -> bool:
    """Karpenter's IsKnownEphemeralTaint (key and effect, or a known key prefix)."""
    return any(taint.matches(known) for known in KNOWN_EPHEMERAL_TAINTS) or taint.key.startswith(
        KNOWN_EPHEMERAL_TAINT_PREFIXES
    )


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = EQUAL
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    @classmethod
    def from_dict(cls, data: Any) -> Toleration:
        """From a Kubernetes toleration dict, or an object with the same attributes."""
        seconds = field_of(data, "tolerationSeconds", "toleration_seconds")
        return cls(
            key=field_of(data, "key") or "",
            # An empty operator means Equal.
            operator=field_of(data, "operator") or EQUAL,
            value=field_of(data, "value") or "",
            effect=field_of(data, "effect") or "",
            toleration_seconds=None if seconds is None else int(seconds),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"operator": self.operator}
        if self.key:
            out["key"] = self.key
        if self.value:
            out["value"] = self.value
        if self.effect:
            out["effect"] = self.effect
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out

    def tolerates(self, taint: Taint) -> bool:
        """Kubernetes ``ToleratesTaint``: an empty effect matches every effect, an empty key every key;
        ``Exists`` matches any value, ``Equal`` the same value. Other operators (the alpha ``Gt``/``Lt``)
        match nothing, as with their feature gate off."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == EXISTS:
            return True
        if self.operator in (EQUAL, ""):
            return self.value == taint.value
        return False


def taints_from_dicts(items: Iterable[Any] | None) -> tuple[Taint, ...]:
    return tuple(Taint.from_dict(item) for item in items or ())


def tolerations_from_dicts(items: Iterable[Any] | None) -> tuple[Toleration, ...]:
    return tuple(Toleration.from_dict(item) for item in items or ())


def tolerates(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    """Whether any of ``tolerations`` tolerates ``taint`` (whatever its effect)."""
    return any(toleration.tolerates(taint) for toleration in tolerations)


def untolerated(
    tolerations: Iterable[Toleration],
    taints: Iterable[Taint],
    *,
    include_prefer_no_schedule: bool = False,
) -> Taint | None:
    """The first taint that keeps a pod with ``tolerations`` off the node, or None when it may schedule.

    ``PreferNoSchedule`` taints are skipped unless ``include_prefer_no_schedule`` (see the module doc).
    """
    tolerations = tuple(tolerations)
    for taint in taints:
        if not include_prefer_no_schedule and taint.effect == PREFER_NO_SCHEDULE:
            continue
        if not any(toleration.tolerates(taint) for toleration in tolerations):
            return taint
    return None


def all_untolerated(
    tolerations: Iterable[Toleration],
    taints: Iterable[Taint],
    *,
    include_prefer_no_schedule: bool = False,
) -> list[Taint]:
    """Every taint ``untolerated`` would consider, that is not tolerated (for complete messages)."""
    tolerations = tuple(tolerations)
    return [
        taint
        for taint in taints
        if (include_prefer_no_schedule or taint.effect != PREFER_NO_SCHEDULE)
        and not any(toleration.tolerates(taint) for toleration in tolerations)
    ]


def merge_taints(base: Iterable[Taint], extra: Iterable[Taint]) -> tuple[Taint, ...]:
    """``base`` plus each taint of ``extra`` whose key and effect ``base`` lacks (Karpenter's ``Merge``)."""
    merged = list(base)
    for taint in extra:
        if not any(taint.matches(existing) for existing in merged):
            merged.append(taint)
    return tuple(merged)


def format_taint(taint: Taint) -> str:
    """``key=value:effect``, or ``key:effect`` when the value is empty."""
    if taint.value:
        return f"{taint.key}={taint.value}:{taint.effect}"
    return f"{taint.key}:{taint.effect}"

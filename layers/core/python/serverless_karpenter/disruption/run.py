"""What one disruption invocation did, pass by pass: the handler's response and the simulator's record."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class DisruptionRun:
    leader: bool = True
    expired: list[str] = field(default_factory=list)
    decided: list[str] = field(default_factory=list)  # "method: action nodeclaims"
    executed: list[str] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    replacements: list[str] = field(default_factory=list)
    untainted: list[str] = field(default_factory=list)  # nodes whose orphaned disrupted taint was removed
    passes: int = 0
    # When the next pass is due, in seconds (the loop sleeps that long; the simulator schedules it).
    next_pass_seconds: float = 10.0
    # No candidate and no command: the loop ends and the schedule's next invocation looks again, so
    # a cluster without nodes pays for one short pass a minute, not a loop (Lambda bills the sleep).
    idle: bool = False

    @property
    def acted(self) -> bool:
        return bool(self.expired or self.decided or self.executed or self.aborted or self.replacements)

    def absorb(self, other: DisruptionRun) -> None:
        for name in ("expired", "decided", "executed", "aborted", "replacements", "untainted"):
            getattr(self, name).extend(getattr(other, name))
        self.passes += other.passes
        self.next_pass_seconds = other.next_pass_seconds
        self.idle = other.idle

    def to_json(self) -> dict[str, Any]:
        return {
            "leader": self.leader,
            "passes": self.passes,
            "nextPassSeconds": self.next_pass_seconds,
            "idle": self.idle,
            "expired": self.expired,
            "decided": self.decided,
            "executed": self.executed,
            "aborted": self.aborted,
            "replacements": self.replacements,
            "untainted": self.untainted,
        }

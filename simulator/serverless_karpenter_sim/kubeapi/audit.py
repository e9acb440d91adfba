"""What the simulator checks its invariants against: evictions and PodDisruptionBudget violations.

Not a client API; the simulator reads ``server.audit`` in-process.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class BudgetViolation:
    """A pod deletion or eviction that took a budget from satisfied to violated."""

    namespace: str
    budget: str
    pod: str
    via: str  # "delete" | "eviction" | "deletecollection"
    at: datetime
    healthy_before: int
    healthy_after: int
    desired_healthy: int


@dataclass(frozen=True)
class EvictionRecord:
    namespace: str
    pod: str
    allowed: bool
    code: int
    at: datetime
    budget: str | None
    node: str | None = None  # the node the pod was bound to
    owner: str | None = None  # the uid of its controller (ownerReferences[controller=true])


class Audit:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.request_count: Counter[str] = Counter()
        self.evictions_allowed = 0
        self.evictions_refused = 0  # 429s from a budget, and 500s for a pod under several budgets
        self.pdb_violations = 0
        self.violations: list[BudgetViolation] = []
        self.evictions: list[EvictionRecord] = []

    def count_request(self, verb: str) -> None:
        with self._lock:
            self.request_count[verb] += 1

    def record_eviction(self, record: EvictionRecord) -> None:
        with self._lock:
            if record.allowed:
                self.evictions_allowed += 1
            else:
                self.evictions_refused += 1
            self.evictions.append(record)

    def record_violation(self, violation: BudgetViolation) -> None:
        with self._lock:
            self.pdb_violations += 1
            self.violations.append(violation)

    def reset(self) -> None:
        with self._lock:
            self.request_count.clear()
            self.evictions_allowed = self.evictions_refused = self.pdb_violations = 0
            self.violations.clear()
            self.evictions.clear()

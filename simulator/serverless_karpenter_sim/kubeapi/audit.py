"""What the simulator checks its invariants against: evictions and PodDisruptionBudget violations, and the
requests each user sends (kube-apiserver's audit log, counted), to measure a client's load on the server.

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
        # (user, verb, resource): who loads the server with what, as an audit log's records would say.
        self.requests_by_user: Counter[tuple[str, str, str]] = Counter()
        self.evictions_allowed = 0
        self.evictions_refused = 0  # 429s from a budget, and 500s for a pod under several budgets
        self.pdb_violations = 0
        self.violations: list[BudgetViolation] = []
        self.evictions: list[EvictionRecord] = []

    def count_request(self, verb: str, user: str = "", resource: str = "") -> None:
        with self._lock:
            self.request_count[verb] += 1
            self.requests_by_user[(user, verb, resource)] += 1

    def requests_of(self, user_contains: str) -> Counter[tuple[str, str]]:
        """(verb, resource) counts of the users whose name contains ``user_contains``."""
        with self._lock:
            out: Counter[tuple[str, str]] = Counter()
            for (user, verb, resource), count in self.requests_by_user.items():
                if user_contains in user:
                    out[(verb, resource)] += count
            return out

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
            self.requests_by_user.clear()
            self.evictions_allowed = self.evictions_refused = self.pdb_violations = 0
            self.violations.clear()
            self.evictions.clear()

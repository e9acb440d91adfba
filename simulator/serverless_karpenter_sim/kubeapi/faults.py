"""Fault injection for the simulated API server.

A rule matches requests by verb and resource (``"*"`` for any; subresources are spelled
``"pods/eviction"``) and optionally namespace and name. A matching request is answered with:

- an HTTP status (500, 503, 409, 429, ...) carrying a proper ``Status`` body;
- ``"timeout"``: the server holds the request ``delay_seconds`` (wall clock) and then closes the
  connection without answering. A client whose read timeout is shorter sees a read timeout (and hangs
  up, which ends the hold early and counts in the rule's ``client_timeouts``); any other sees the
  connection dropped;
- ``"drop"``: the server starts a successful answer and closes the connection mid-body (a list's JSON
  is cut in half, a watch stream is cut inside its first chunk).

Note that urllib3, under the kubernetes client, transparently retries idempotent requests (GET, PUT,
DELETE) after a dropped connection, up to 3 times by default: a ``times=1`` "timeout" on a get is
absorbed by that retry, as it would be against a real server.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

FaultStatus = int | str  # an HTTP status, "timeout" or "drop"

VERBS = frozenset({"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "*"})


@dataclass
class FaultRule:
    verb: str
    resource: str
    status: FaultStatus
    times: int | None  # None: until cleared
    namespace: str | None = None
    name: str | None = None
    delay_seconds: float = 0.0
    retry_after: int | None = None
    message: str | None = None
    injected: int = 0
    client_timeouts: int = 0  # "timeout" requests whose client hung up before the hold ended

    def matches(self, verb: str, resource: str, namespace: str | None, name: str | None) -> bool:
        return (
            self.verb in ("*", verb)
            and self.resource in ("*", resource)
            and (self.namespace is None or self.namespace == namespace)
            and (self.name is None or self.name == name)
        )

    @property
    def exhausted(self) -> bool:
        return self.times is not None and self.injected >= self.times


class FaultInjector:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self.counts: Counter[tuple[str, str, str]] = Counter()  # (verb, resource, status) -> injected

    def add(
        self,
        *,
        verb: str = "*",
        resource: str = "*",
        status: FaultStatus = 500,
        times: int | None = 1,
        namespace: str | None = None,
        name: str | None = None,
        delay_seconds: float = 0.0,
        retry_after: int | None = None,
        message: str | None = None,
    ) -> FaultRule:
        if verb not in VERBS:
            raise ValueError(f"unknown verb {verb!r}; one of {sorted(VERBS)}")
        if isinstance(status, str) and status not in ("timeout", "drop"):
            raise ValueError(f"status must be an HTTP code, 'timeout' or 'drop', not {status!r}")
        if isinstance(status, int) and not 400 <= status <= 599:
            raise ValueError(f"an injected HTTP status must be an error (4xx/5xx), not {status}")
        rule = FaultRule(verb, resource, status, times, namespace, name, delay_seconds, retry_after, message)
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()

    def take(self, verb: str, resource: str, namespace: str | None, name: str | None) -> FaultRule | None:
        """The first live rule matching this request, counted as injected."""
        with self._lock:
            if not self._rules:
                return None
            for rule in self._rules:
                if not rule.exhausted and rule.matches(verb, resource, namespace, name):
                    rule.injected += 1
                    self.counts[(verb, resource, str(rule.status))] += 1
                    return rule
            return None

    def client_gave_up(self, rule: FaultRule) -> None:
        """A held "timeout" request's client hung up first: its own read timeout fired."""
        with self._lock:
            rule.client_timeouts += 1

    @property
    def injected(self) -> int:
        with self._lock:
            return sum(self.counts.values())

    @property
    def rules(self) -> list[FaultRule]:
        with self._lock:
            return list(self._rules)

"""The unavailable-offerings cache: offerings EC2 recently refused (InsufficientInstanceCapacity, ...).

Karpenter keeps these for 3 minutes and stops planning onto them meanwhile. The catalog reads the cache
through the :class:`UnavailableOfferings` protocol at query time, so a cached catalog stays current.
This module has the in-memory cache; a DynamoDB-backed one that all Lambdas share lives in the adapters.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Protocol

from serverless_karpenter.cache import UNAVAILABLE_OFFERINGS_TTL
from serverless_karpenter.clock import Clock

DEFAULT_UNAVAILABLE_TTL_SECONDS = UNAVAILABLE_OFFERINGS_TTL.total_seconds()

_ANY = "*"


class UnavailableOfferings(Protocol):
    def is_unavailable(self, capacity_type: str, instance_type: str, zone: str) -> bool: ...


class NoUnavailableOfferings:
    """Nothing is ever unavailable."""

    def is_unavailable(self, capacity_type: str, instance_type: str, zone: str) -> bool:
        return False


class InMemoryUnavailableOfferings:
    """Marks that expire after a TTL measured on the given clock.

    Besides one offering, a whole capacity type (spot everywhere, e.g. after a spot service-linked role
    error) or a whole zone for a capacity type can be marked, as in Karpenter.
    """

    def __init__(self, clock: Clock, ttl_seconds: float = DEFAULT_UNAVAILABLE_TTL_SECONDS) -> None:
        self._clock = clock
        self._ttl = timedelta(seconds=ttl_seconds)
        self._expiry: dict[tuple[str, str, str], datetime] = {}
        self._lock = threading.Lock()
        self._seq = 0

    @property
    def seq_num(self) -> int:
        """Bumped on every mark, so callers can tell that availability may have changed."""
        return self._seq

    def frozen(self) -> InMemoryUnavailableOfferings:
        """As the DynamoDB cache's: this one reads no table, so it is its own."""
        return self

    # ``reason`` is what the DynamoDB cache records with a mark; it takes the same arguments, so callers
    # need not know which cache they have. This one keeps no reasons.

    def mark_unavailable(
        self,
        capacity_type: str,
        instance_type: str,
        zone: str,
        reason: str = "",
        ttl_seconds: float | None = None,
    ) -> None:
        self._mark((capacity_type, instance_type, zone), ttl_seconds)

    def mark_capacity_type_unavailable(
        self, capacity_type: str, reason: str = "", ttl_seconds: float | None = None
    ) -> None:
        self._mark((capacity_type, _ANY, _ANY), ttl_seconds)

    def mark_zone_unavailable(
        self, capacity_type: str, zone: str, reason: str = "", ttl_seconds: float | None = None
    ) -> None:
        self._mark((capacity_type, _ANY, zone), ttl_seconds)

    def _mark(self, key: tuple[str, str, str], ttl_seconds: float | None) -> None:
        ttl = self._ttl if ttl_seconds is None else timedelta(seconds=ttl_seconds)
        with self._lock:
            self._expiry[key] = self._clock.now() + ttl
            self._seq += 1

    def is_unavailable(self, capacity_type: str, instance_type: str, zone: str) -> bool:
        if not self._expiry:
            return False
        now = self._clock.now()
        with self._lock:
            for key in (
                (capacity_type, instance_type, zone),
                (capacity_type, _ANY, zone),
                (capacity_type, _ANY, _ANY),
            ):
                expiry = self._expiry.get(key)
                if expiry is None:
                    continue
                if expiry > now:
                    return True
                del self._expiry[key]
        return False

    def clear(self) -> None:
        with self._lock:
            self._expiry.clear()
            self._seq += 1

    def __len__(self) -> int:
        now = self._clock.now()
        with self._lock:
            return sum(1 for expiry in self._expiry.values() if expiry > now)

"""Instance type facts from EC2, cached in process for 5 minutes and persisted in DynamoDB.

A warm Lambda re-describes at most every 5 minutes. A cold one first reads the facts another
invocation stored in the table's ``CATALOG`` partition (one GetItem instead of a dozen
DescribeInstanceTypes pages) and uses them while they are younger than ``persisted_max_age``. When EC2
cannot be read, the last facts are kept; with none at all, the bundled snapshot is the fallback.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from serverless_karpenter.adapters.persisted import PersistedBlobs
from serverless_karpenter.cache import INSTANCE_TYPES_TTL, PERSISTED_CATALOG_MAX_AGE
from serverless_karpenter.catalog.live import CatalogFacts
from serverless_karpenter.catalog.snapshot import BUNDLED_REGIONS, CatalogSnapshot, bundled_snapshot
from serverless_karpenter.clock import Clock
from serverless_karpenter.observability import logger

if TYPE_CHECKING:  # the stubs are a development dependency only
    from mypy_boto3_ec2 import EC2Client

CACHE_TTL = INSTANCE_TYPES_TTL
PERSISTED_MAX_AGE = PERSISTED_CATALOG_MAX_AGE


def catalog_sort_key(region: str) -> str:
    return f"instance-types#{region}"


class LiveCatalogSource:
    def __init__(
        self,
        ec2: EC2Client,
        region: str,
        clock: Clock,
        *,
        persisted: PersistedBlobs | None = None,
        cache_ttl: timedelta = CACHE_TTL,
        persisted_max_age: timedelta = PERSISTED_MAX_AGE,
    ) -> None:
        self._ec2 = ec2
        self.region = region
        self._clock = clock
        self._persisted = persisted
        self._cache_ttl = cache_ttl
        self._persisted_max_age = persisted_max_age
        self._lock = threading.Lock()
        self._facts: CatalogFacts | None = None
        self._snapshot: CatalogSnapshot | None = None
        self._checked_at: datetime | None = None
        self.source = "none"  # "ec2", "dynamodb", or "bundled": where the current facts came from
        self.describe_calls = 0

    def snapshot(self) -> CatalogSnapshot:
        """The current facts as a catalog snapshot (parsed once per refresh)."""
        now = self._clock.now()
        with self._lock:
            if (
                self._snapshot is not None
                and self._checked_at is not None
                and now - self._checked_at < self._cache_ttl
            ):
                return self._snapshot
            if self._facts is None:
                persisted = self._read_persisted()
                if persisted is not None and now - persisted.fetched_at < self._persisted_max_age:
                    self._install(persisted, "dynamodb", checked_at=persisted.fetched_at)
                    if now - persisted.fetched_at < self._cache_ttl:
                        assert self._snapshot is not None
                        return self._snapshot
            fresh = self._describe()
            if fresh is not None:
                self._install(fresh, "ec2", checked_at=now)
                self._write_persisted(fresh)
            elif self._facts is not None:
                self._checked_at = now  # keep the last facts; try EC2 again after the cache TTL
            elif self.region in BUNDLED_REGIONS:
                self._snapshot, self._checked_at, self.source = bundled_snapshot(self.region), now, "bundled"
            else:
                raise RuntimeError(f"cannot describe instance types in {self.region} and have no fallback")
            assert self._snapshot is not None
            return self._snapshot

    def _install(self, facts: CatalogFacts, source: str, *, checked_at: datetime) -> None:
        self._facts = facts
        self._snapshot = facts.snapshot()
        self._checked_at = checked_at
        self.source = source

    def _describe(self) -> CatalogFacts | None:
        try:
            self.describe_calls += 1
            types: list[dict[str, Any]] = []
            # The domain reads the API's shape as plain dicts (the bundled snapshot has the same shape).
            for types_page in self._ec2.get_paginator("describe_instance_types").paginate():
                types.extend(dict(t) for t in types_page.get("InstanceTypes") or ())
            offerings: list[dict[str, Any]] = []
            for offerings_page in self._ec2.get_paginator("describe_instance_type_offerings").paginate(
                LocationType="availability-zone"
            ):
                offerings.extend(dict(o) for o in offerings_page.get("InstanceTypeOfferings") or ())
            zones = self._ec2.describe_availability_zones().get("AvailabilityZones") or []
        except (ClientError, BotoCoreError) as error:
            logger.warning("cannot describe instance types", extra={"error": str(error)})
            return None
        return CatalogFacts.from_describe(self.region, self._clock.now(), types, offerings, zones)

    def _read_persisted(self) -> CatalogFacts | None:
        if self._persisted is None:
            return None
        data = self._persisted.read(catalog_sort_key(self.region))
        if data is None:
            return None
        try:
            return CatalogFacts.from_bytes(data)
        except (KeyError, ValueError, OSError) as error:  # OSError: a corrupt gzip stream
            logger.warning("cannot read the persisted catalog", extra={"error": str(error)})
            return None

    def _write_persisted(self, facts: CatalogFacts) -> None:
        if self._persisted is not None:
            self._persisted.write(
                catalog_sort_key(self.region),
                facts.to_bytes(),
                expires_at=facts.fetched_at + self._persisted_max_age * 4,
            )

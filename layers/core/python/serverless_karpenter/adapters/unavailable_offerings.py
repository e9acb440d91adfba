"""The unavailable-offerings cache in DynamoDB, shared by every Lambda of the cluster.

An offering EC2 refused with an insufficient-capacity error (or a spot interruption) is one item in the
``UNAVAILABLE_OFFERING`` partition, sort key ``capacity-type#instance-type#zone`` (``*`` for "any"), with
``expires_at`` = now + 3 minutes. DynamoDB's TTL deletes expired items eventually (it may lag by hours),
so readers compare ``expires_at`` with their clock and never trust presence alone.

Reads use an in-memory view loaded by one Query of the partition; the view is reloaded when it is older
than ``refresh_seconds`` (so an invocation does one Query, and a long-running poller still sees other
writers' marks). Marks are written through to the table and to the view at once.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from botocore.exceptions import BotoCoreError, ClientError

from serverless_karpenter import state_schema as schema
from serverless_karpenter.cache import UNAVAILABLE_OFFERINGS_REFRESH
from serverless_karpenter.catalog.unavailable import DEFAULT_UNAVAILABLE_TTL_SECONDS
from serverless_karpenter.clock import Clock
from serverless_karpenter.observability import logger

if TYPE_CHECKING:  # the stubs are a development dependency only
    from mypy_boto3_dynamodb import DynamoDBClient

ANY = "*"
DEFAULT_REFRESH_SECONDS = UNAVAILABLE_OFFERINGS_REFRESH.total_seconds()
# TTL attributes are whole epoch seconds (rounded up); readers use the exact expiry kept beside it.
PRECISE_EXPIRY = "expires_at_precise"


def sort_key(capacity_type: str, instance_type: str, zone: str) -> str:
    return f"{capacity_type}#{instance_type}#{zone}"


class DynamoDBUnavailableOfferings:
    def __init__(
        self,
        dynamodb: DynamoDBClient,
        table_name: str,
        clock: Clock,
        *,
        ttl_seconds: float = DEFAULT_UNAVAILABLE_TTL_SECONDS,
        refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
    ) -> None:
        self._ddb = dynamodb
        self._table = table_name
        self._clock = clock
        self._ttl = timedelta(seconds=ttl_seconds)
        self._refresh = timedelta(seconds=refresh_seconds)
        self._view: dict[str, datetime] = {}
        self._local: dict[str, datetime] = {}
        self._loaded_at: datetime | None = None
        self._lock = threading.Lock()
        self.queries = 0  # how many Queries this instance made (tests and metrics read it)

    def refresh(self) -> None:
        """Reload the view with one (paginated) Query of the partition."""
        now = self._clock.now()
        view: dict[str, datetime] = {}
        pages = self._ddb.get_paginator("query").paginate(
            TableName=self._table,
            KeyConditionExpression="#pk = :pk",
            ExpressionAttributeNames={"#pk": schema.PARTITION_KEY},
            ExpressionAttributeValues={":pk": {"S": schema.UNAVAILABLE_OFFERING_PARTITION}},
        )
        try:
            for page in pages:
                for item in page.get("Items", []):
                    stamp = item.get(PRECISE_EXPIRY) or item[schema.TTL_ATTRIBUTE]
                    expiry = datetime.fromtimestamp(float(stamp["N"]), tz=now.tzinfo)
                    if expiry > now:
                        view[item[schema.SORT_KEY]["S"]] = expiry
        except (ClientError, BotoCoreError) as error:
            # Keep the last view (a partial read is no view) and try again at the next read: a throttled
            # cache must not stop provisioning, and CreateFleet reports any capacity error again anyway.
            logger.warning("cannot read unavailable offerings", extra={"error": str(error)})
            with self._lock:
                self._loaded_at = now
            return
        with self._lock:
            self.queries += 1
            # Marks made here stay in the view even if writing them to the table failed.
            self._view = {**{k: e for k, e in self._local.items() if e > now}, **view}
            self._loaded_at = now

    def invalidate(self) -> None:
        """Make the next read query the table again (call at the start of an invocation)."""
        with self._lock:
            self._loaded_at = None

    def _current(self) -> dict[str, datetime]:
        now = self._clock.now()
        with self._lock:
            stale = self._loaded_at is None or now - self._loaded_at >= self._refresh
        if stale:
            self.refresh()
        return self._view

    def frozen(self) -> UnavailableAt:
        """The marks as they stand now, for one read of many offerings (a catalog's schedulable types ask
        about thousands): the view and the time taken once rather than per offering."""
        return UnavailableAt(self._current(), self._clock.now())

    def is_unavailable(self, capacity_type: str, instance_type: str, zone: str) -> bool:
        view = self._current()
        return bool(view) and _marked(view, self._clock.now(), capacity_type, instance_type, zone)

    def mark_unavailable(
        self,
        capacity_type: str,
        instance_type: str,
        zone: str,
        reason: str = "",
        ttl_seconds: float | None = None,
    ) -> None:
        self._mark(sort_key(capacity_type, instance_type, zone), reason, ttl_seconds)

    def mark_capacity_type_unavailable(
        self, capacity_type: str, reason: str = "", ttl_seconds: float | None = None
    ) -> None:
        self._mark(sort_key(capacity_type, ANY, ANY), reason, ttl_seconds)

    def mark_zone_unavailable(
        self, capacity_type: str, zone: str, reason: str = "", ttl_seconds: float | None = None
    ) -> None:
        self._mark(sort_key(capacity_type, ANY, zone), reason, ttl_seconds)

    def _mark(self, key: str, reason: str, ttl_seconds: float | None) -> None:
        now = self._clock.now()
        expiry = now + (self._ttl if ttl_seconds is None else timedelta(seconds=ttl_seconds))
        with self._lock:
            self._view = {**self._view, key: expiry}
            self._local[key] = expiry
        try:
            self._put(key, reason, expiry)
        except (ClientError, BotoCoreError) as error:
            # This invocation still avoids the offering; others learn of it from their own failure.
            logger.warning(
                "cannot share an unavailable offering", extra={"offering": key, "error": str(error)}
            )

    def _put(self, key: str, reason: str, expiry: datetime) -> None:
        self._ddb.put_item(
            TableName=self._table,
            Item={
                schema.PARTITION_KEY: {"S": schema.UNAVAILABLE_OFFERING_PARTITION},
                schema.SORT_KEY: {"S": key},
                schema.TTL_ATTRIBUTE: {"N": str(int(expiry.timestamp()) + 1)},
                PRECISE_EXPIRY: {"N": repr(expiry.timestamp())},
                "reason": {"S": reason or "unknown"},
            },
        )


class UnavailableAt:
    """:meth:`DynamoDBUnavailableOfferings.frozen`: its marks and the time, fixed."""

    __slots__ = ("_now", "_view")

    def __init__(self, view: dict[str, datetime], now: datetime) -> None:
        self._view = view
        self._now = now

    def is_unavailable(self, capacity_type: str, instance_type: str, zone: str) -> bool:
        return bool(self._view) and _marked(self._view, self._now, capacity_type, instance_type, zone)


def _marked(
    view: dict[str, datetime], now: datetime, capacity_type: str, instance_type: str, zone: str
) -> bool:
    """Whether a mark unexpired at ``now`` covers the offering: its own, its zone's for the capacity type,
    or the whole capacity type's."""
    for key in (
        sort_key(capacity_type, instance_type, zone),
        sort_key(capacity_type, ANY, zone),
        sort_key(capacity_type, ANY, ANY),
    ):
        expiry = view.get(key)
        if expiry is not None and expiry > now:
            return True
    return False

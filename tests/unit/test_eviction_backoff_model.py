"""The eviction back-off a drain keeps in its NodeClaim record is a typed model whose JSON is the one the
untyped code wrote: annotations on live records still parse, and what is written now reads back the same."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from serverless_karpenter.clock import parse_rfc3339
from serverless_karpenter.termination.backoff import EVICTION_BACKOFF, EvictionBackoff, PodBackoff
from serverless_karpenter.termination.terminator import EVICTION_BACKOFF as TERMINATOR_BACKOFF

from tests.unit.test_termination_drain import pod, world

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

# Written by the code before the model (json.dumps of {"ns/pod": {"attempts": n, "next": rfc3339}},
# keys sorted), as found on live records.
OLD_ANNOTATION = (
    '{"default/app": {"attempts": 2, "next": "2026-03-01T12:00:10Z"}, '
    '"kube-system/dns": {"attempts": 4, "next": "2026-03-01T12:00:30Z"}}'
)


def test_an_annotation_written_by_the_old_code_parses_and_writes_back_byte_for_byte() -> None:
    backoff = EvictionBackoff.from_annotation(OLD_ANNOTATION)
    assert backoff.pods == {
        "default/app": PodBackoff(attempts=2, next=NOW + timedelta(seconds=10)),
        "kube-system/dns": PodBackoff(attempts=4, next=NOW + timedelta(seconds=30)),
    }
    assert backoff.to_annotation() == OLD_ANNOTATION


def test_what_is_written_now_is_what_the_old_code_reads() -> None:
    backoff = EvictionBackoff()
    backoff.refused("default/app", NOW)
    backoff.refused("default/app", NOW)
    raw = backoff.to_annotation()
    assert raw is not None
    # The old reader: json.loads, then int(entry["attempts"]) and parse_rfc3339(str(entry["next"])).
    entry = json.loads(raw)["default/app"]
    assert int(entry["attempts"]) == 2
    assert parse_rfc3339(str(entry["next"])) == NOW + timedelta(seconds=10)
    assert EvictionBackoff.from_annotation(raw) == backoff


def test_the_delay_doubles_from_five_seconds_up_to_thirty() -> None:
    backoff = EvictionBackoff()
    delays = []
    for _ in range(5):
        backoff.refused("default/app", NOW)
        delays.append((backoff.pods["default/app"].next - NOW).total_seconds())
    assert delays == [5, 10, 20, 30, 30]
    assert backoff.blocked("default/app", NOW + timedelta(seconds=29))
    assert not backoff.blocked("default/app", NOW + timedelta(seconds=30))
    backoff.clear("default/app")
    assert backoff.to_annotation() is None


@pytest.mark.parametrize(
    "raw",
    [None, "", "not json", "[]", '"text"', '{"default/app": {"attempts": 1}}', '{"default/app": 3}'],
)
def test_what_cannot_be_read_is_forgotten_rather_than_failing_the_drain(raw: str | None) -> None:
    assert EvictionBackoff.from_annotation(raw).pods == {}


def test_a_mixed_annotation_keeps_the_entries_that_read() -> None:
    raw = '{"a/bad": {"next": "soon"}, "a/good": {"attempts": "3", "next": "2026-03-01T12:00:30+00:00"}}'
    assert EvictionBackoff.from_annotation(raw).pods == {
        "a/good": PodBackoff(attempts=3, next=NOW + timedelta(seconds=30))
    }


def test_a_live_record_with_an_old_annotation_keeps_backing_off_and_then_evicts() -> None:
    assert TERMINATOR_BACKOFF == EVICTION_BACKOFF
    w = world(pod("app"))  # its clock starts at 2026-01-01T00:00:00Z
    old = OLD_ANNOTATION.replace("2026-03-01T12:", "2026-01-01T00:")
    record = w.record()
    w.store.save(record.model_copy(update={"annotations": {**record.annotations, EVICTION_BACKOFF: old}}))
    [progress] = w.terminator().reconcile()
    assert progress.blocked == ["default/app"] and w.cluster.eviction_attempts == []
    # The pod no longer on the node is forgotten; the one still there keeps its entry until evicted.
    assert json.loads(w.record().annotations[EVICTION_BACKOFF]).keys() == {"default/app"}
    w.clock.advance(10)
    [progress] = w.terminator().reconcile()
    assert progress.evicted == ["default/app"]
    assert EVICTION_BACKOFF not in w.record().annotations

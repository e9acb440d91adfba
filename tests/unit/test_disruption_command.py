"""The disruption command persisted on NodeClaim records: typed, and the annotation's format unchanged, so
records written before the model (or by an older version during a rollout) still parse."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from serverless_karpenter.disruption.candidates import in_command, pending_command
from serverless_karpenter.disruption.command import (
    COMMAND_ANNOTATION,
    STAGE_REPLACING,
    DisruptionCommand,
    parse_command,
    read_command,
    with_command,
)
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState

# Written by the use case before the model existed (json.dumps(marker, sort_keys=True)): a decision...
VALIDATING = (
    '{"action": "replace", "candidates": ["default-a1b2c", "default-d3e4f"], '
    '"decided_at": "2026-11-25T02:57:15.123456+00:00", "detail": "replace with m5.large $0.0960/h, '
    'saving $0.0960/h", "id": "5f3a9c1e", "method": "multi-node consolidation", "stage": "validating"}'
)
# ... and the same command once its replacements were requested.
REPLACING = (
    '{"action": "replace", "candidates": ["default-a1b2c", "default-d3e4f"], '
    '"decided_at": "2026-11-25T02:57:15.123456+00:00", "detail": "replace with m5.large $0.0960/h, '
    'saving $0.0960/h", "id": "5f3a9c1e", "method": "multi-node consolidation", '
    '"replacements": ["default-x9y8z"], "replacing_since": "2026-11-25T02:57:31Z", "stage": "replacing"}'
)


def record(annotation: str | None) -> NodeClaimRecord:
    return NodeClaimRecord(
        name="default-a1b2c",
        nodepool="default",
        nodeclass="default",
        state=NodeClaimState.INITIALIZED,
        created_at=datetime(2026, 11, 25, 2, 0, tzinfo=UTC),
        annotations={COMMAND_ANNOTATION: annotation} if annotation is not None else {},
    )


def test_a_command_written_before_the_model_parses_typed() -> None:
    command = read_command(record(VALIDATING))

    assert command is not None
    assert command.id == "5f3a9c1e"
    assert command.method == "multi-node consolidation"
    assert command.action == "replace"
    assert command.candidates == ["default-a1b2c", "default-d3e4f"]
    assert command.decided_at == datetime(2026, 11, 25, 2, 57, 15, 123456, tzinfo=UTC)
    assert command.validating and not command.replacing
    assert command.replacements is None and command.replacing_since is None


def test_a_replacing_command_written_before_the_model_parses_typed() -> None:
    command = read_command(record(REPLACING))

    assert command is not None and command.replacing
    assert command.replacements == ["default-x9y8z"]
    assert command.replacing_since == datetime(2026, 11, 25, 2, 57, 31, tzinfo=UTC)


def test_the_model_writes_the_annotation_as_it_was_written_before() -> None:
    for annotation in (VALIDATING, REPLACING):
        command = parse_command(annotation)
        assert command is not None
        assert command.to_annotation() == annotation


def test_moving_to_replacing_writes_what_the_old_code_wrote() -> None:
    decided = parse_command(VALIDATING)
    assert decided is not None

    replacing = decided.model_copy(
        update={
            "stage": STAGE_REPLACING,
            "replacements": ["default-x9y8z"],
            # The pass's clock, to the microsecond: the annotation keeps seconds, as Kubernetes' timestamps.
            "replacing_since": datetime(2026, 11, 25, 2, 57, 31, 654321, tzinfo=UTC),
        }
    )

    assert replacing.to_annotation() == REPLACING


def test_what_is_not_a_command_reads_as_none() -> None:
    for annotation in ("not json", "[1, 2]", '{"stage": "replacing"}', '{"id": "x"}', ""):
        assert read_command(record(annotation)) is None
        assert pending_command(record(annotation)) is None
        assert not in_command(record(annotation))
    assert read_command(record(None)) is None


def test_keys_it_does_not_know_are_kept() -> None:
    raw = json.dumps(
        {"id": "c1", "method": "drift", "stage": "validating", "future": {"x": 1}}, sort_keys=True
    )
    command = parse_command(raw)

    assert command is not None
    assert json.loads(command.to_annotation())["future"] == {"x": 1}


def test_the_json_view_is_the_annotations_object() -> None:
    assert pending_command(record(REPLACING)) == json.loads(REPLACING)


def test_with_command_replaces_or_drops_the_annotation_only() -> None:
    rec = record(VALIDATING).model_copy(
        update={"annotations": {COMMAND_ANNOTATION: VALIDATING, "other": "kept"}}
    )
    command = DisruptionCommand(id="c2", method="emptiness", action="delete", candidates=[rec.name])

    assert with_command(rec, None) == {"other": "kept"}
    written = with_command(rec, command)
    assert written["other"] == "kept"
    assert read_command(rec.model_copy(update={"annotations": written})) == command

"""The disruption command as it outlives an invocation: a JSON annotation on each of its candidates'
NodeClaim records, read back by every later pass (and by ``explain node`` and the simulator's checks).

One model for writing and reading it. The annotation's format is the one written before this model
existed (the same keys, the same timestamp formats), so records written by an older version parse and an
older version could read what this one writes; keys this model does not know are kept.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_serializer

from serverless_karpenter.clock import to_rfc3339
from serverless_karpenter.lifecycle.model import NodeClaimRecord

COMMAND_ANNOTATION = "serverless-karpenter.io/disruption-command"

# Validated ``validation_delay`` after the decision (consolidation, emptiness), then replacing while the
# replacements launch and initialize; drift and delete commands go straight on.
STAGE_VALIDATING = "validating"
STAGE_REPLACING = "replacing"


class DisruptionCommand(BaseModel):
    # Frozen: a parsed command is shared by every reader of the same annotation (``read_command``'s cache).
    model_config = ConfigDict(frozen=True, extra="allow")

    id: str
    method: str  # the method's name (``methods.types``), which gives the budget reason
    action: str | None = None  # "delete" or "replace"
    candidates: list[str] = []
    decided_at: datetime | None = None
    stage: str = STAGE_VALIDATING
    detail: str = ""
    # Set when the command moves to ``replacing``: the replacements' NodeClaim names and since when.
    replacements: list[str] | None = None
    replacing_since: datetime | None = None

    @field_serializer("decided_at")
    def _decided_at(self, value: datetime | None) -> str | None:
        return value.isoformat() if value is not None else None  # as first written: ISO with offset

    @field_serializer("replacing_since")
    def _replacing_since(self, value: datetime | None) -> str | None:
        return to_rfc3339(value) if value is not None else None  # as first written: RFC 3339, seconds

    @property
    def validating(self) -> bool:
        return self.stage == STAGE_VALIDATING

    @property
    def replacing(self) -> bool:
        return self.stage == STAGE_REPLACING

    def to_json(self) -> dict[str, Any]:
        """The annotation's JSON object (keys without a value left out, as before the model)."""
        return self.model_dump(mode="json", exclude_none=True)

    def to_annotation(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)


@functools.lru_cache(maxsize=4096)
def parse_command(raw: str) -> DisruptionCommand | None:
    """The command in an annotation's value, or None when it is not one (a pass reads every record's
    annotation several times; each distinct value is parsed once a container)."""
    try:
        return DisruptionCommand.model_validate_json(raw)
    except (ValidationError, ValueError):
        return None


def read_command(record: NodeClaimRecord) -> DisruptionCommand | None:
    raw = record.annotations.get(COMMAND_ANNOTATION)
    return parse_command(raw) if raw else None


def with_command(record: NodeClaimRecord, command: DisruptionCommand | None) -> dict[str, str]:
    """The record's annotations with ``command`` in place of any it carries (none: dropped)."""
    annotations = {k: v for k, v in record.annotations.items() if k != COMMAND_ANNOTATION}
    if command is not None:
        annotations[COMMAND_ANNOTATION] = command.to_annotation()
    return annotations

"""The eviction back-off a drain remembers between passes, typed.

Per pod: how many times a PodDisruptionBudget refused its eviction (429), and when to ask again. A pass
keeps it in the NodeClaim record's ``serverless-karpenter.io/eviction-backoff`` annotation as JSON, so a
drain's next pass (another invocation, maybe another Lambda version) resumes it. The JSON is the one the
untyped code wrote (``{"ns/pod": {"attempts": 2, "next": "2026-03-01T12:00:10Z"}}``, keys sorted), so
annotations on live records parse, and an older version still reads what this one writes.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_serializer, field_validator

from serverless_karpenter.clock import parse_rfc3339, to_rfc3339

EVICTION_BACKOFF = "serverless-karpenter.io/eviction-backoff"
# A PDB that refuses an eviction (429) is asked again after 5 s, then 10, 20, 30, 30...
BACKOFF_BASE = timedelta(seconds=5)
BACKOFF_MAX = timedelta(seconds=30)


class PodBackoff(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    attempts: int = Field(default=0, ge=0)
    next: datetime  # no eviction is asked for this pod before then

    @field_validator("next", mode="before")
    @classmethod
    def _rfc3339(cls, value: Any) -> Any:
        return parse_rfc3339(value) if isinstance(value, str) else value

    @field_serializer("next")
    def _as_rfc3339(self, value: datetime) -> str:
        return to_rfc3339(value)

    def after_refusal(self, now: datetime) -> PodBackoff:
        attempts = self.attempts + 1
        return PodBackoff(attempts=attempts, next=now + min(BACKOFF_BASE * 2 ** (attempts - 1), BACKOFF_MAX))


class EvictionBackoff(BaseModel):
    """Every pod of one node that is backing off, by ``namespace/name``."""

    pods: dict[str, PodBackoff] = Field(default_factory=dict)

    @classmethod
    def from_annotation(cls, raw: str | None) -> EvictionBackoff:
        """What ``raw`` holds; what cannot be read is forgotten (the worst that costs is one eviction asked
        for early, which the PDB refuses again)."""
        try:
            value = json.loads(raw) if raw else {}
        except ValueError:
            return cls()
        if not isinstance(value, dict):
            return cls()
        pods = {}
        for key, entry in value.items():
            try:
                pods[str(key)] = PodBackoff.model_validate(entry)
            except ValidationError:
                continue
        return cls(pods=pods)

    def to_annotation(self) -> str | None:
        """The annotation's value; None when no pod backs off (the annotation goes)."""
        if not self.pods:
            return None
        return json.dumps({k: v.model_dump(mode="json") for k, v in self.pods.items()}, sort_keys=True)

    def blocked(self, pod_key: str, now: datetime) -> bool:
        entry = self.pods.get(pod_key)
        return entry is not None and now < entry.next

    def refused(self, pod_key: str, now: datetime) -> None:
        """A PDB refused the pod's eviction: wait twice as long as last time (5 s first, 30 s at most)."""
        self.pods[pod_key] = self.pods.get(pod_key, PodBackoff(next=now)).after_refusal(now)

    def clear(self, pod_key: str) -> None:
        self.pods.pop(pod_key, None)

    def keep_only(self, pod_keys: Collection[str]) -> None:
        """Forget the pods no longer on the node."""
        self.pods = {k: v for k, v in self.pods.items() if k in pod_keys}

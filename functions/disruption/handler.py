"""Placeholder written by the infra work so the stack synthesizes; the real disruption handler replaces it."""

from __future__ import annotations

from typing import Any


def lambda_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    raise NotImplementedError("the disruption handler is not written yet")

"""NodeOverlay (karpenter.sh/v1alpha1) applied to instance types: prices and extended resources.

An overlay selects offerings by its requirements, read against the instance type's labels plus the
offering's (zone, capacity type). For each offering the matching overlay with the highest weight that
sets a price wins (ties: by name), and only that one applies: overlays do not stack. Capacity works the
same way per instance type: the heaviest matching overlay that adds capacity adds its resources.
Overlays reflect Savings Plans, Reserved Instances and private pricing, so placement honours them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from serverless_karpenter.api.nodeoverlay import NodeOverlay
from serverless_karpenter.catalog.offerings import Offering
from serverless_karpenter.scheduling.requirements import Requirements
from serverless_karpenter.scheduling.resources import ResourceList


class Overlays:
    """Parsed overlays in precedence order (heaviest first, then by name)."""

    def __init__(self, overlays: Iterable[NodeOverlay]) -> None:
        ordered = sorted(overlays, key=lambda o: (-o.weight_or_zero(), o.metadata.name or ""))
        self._entries = [
            (o, Requirements.from_node_selector_requirements([r.model_dump() for r in o.spec.requirements]))
            for o in ordered
        ]

    @classmethod
    def from_manifests(cls, manifests: Iterable[Mapping[str, Any]]) -> Overlays:
        """Valid overlays from raw objects; invalid ones are skipped (the API server validated them)."""
        parsed = []
        for manifest in manifests:
            try:
                parsed.append(NodeOverlay.model_validate(manifest))
            except ValueError:
                continue
        return cls(parsed)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def price_overlay(self, labels: Mapping[str, str]) -> NodeOverlay | None:
        for overlay, requirements in self._entries:
            if overlay.adjusts_price() and requirements.matches_labels(labels) is None:
                return overlay
        return None

    def offerings(self, labels: Mapping[str, str], offerings: Sequence[Offering]) -> list[Offering]:
        """The offerings with overlay prices applied."""
        out = []
        for offering in offerings:
            overlay = self.price_overlay({**labels, **offering.labels()})
            out.append(
                offering if overlay is None else replace(offering, price=overlay.apply_price(offering.price))
            )
        return out

    def capacity(self, labels: Mapping[str, str]) -> ResourceList:
        """Extended resources the heaviest matching capacity overlay adds to the type."""
        for overlay, requirements in self._entries:
            if overlay.spec.capacity and requirements.matches_labels(labels) is None:
                return overlay.parsed_capacity()
        return {}

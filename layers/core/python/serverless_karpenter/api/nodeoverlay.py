"""NodeOverlay (karpenter.sh/v1alpha1): change the price of, or add extended resources to, instance types."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import AfterValidator, BeforeValidator, field_validator, model_validator

from serverless_karpenter.api import labels
from serverless_karpenter.api.common import (
    Condition,
    Int,
    LenientModel,
    NodeSelectorRequirement,
    ObjectMeta,
    Quantity,
    ResourceModel,
    SpecModel,
    between,
    check_requirement_count,
    omitempty,
    parse_quantities,
    quantity_map_problems,
    requirement_key_problems,
)
from serverless_karpenter.api.errors import Loc, RuleError, raise_problems, show

# Capacity may only add extended resources; the standard ones come from the instance type.
STANDARD_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})

_PRICE = re.compile(r"^\d+(\.\d+)?$")
# A signed absolute change (+0.01, -0.5), an increase in percent (+10%), or a decrease of at most 100%.
_PRICE_ADJUSTMENT = re.compile(r"^(?:[+-]\d*\.?\d+|\+\d*\.?\d+%|-\d{1,2}(?:\.\d+)?%|-100%)$")


def _number_as_text(value: Any) -> Any:
    # YAML turns an unquoted `price: 0.5` into a float; the CRD wants text, and the text is what we keep.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


def _check_price(price: str) -> str:
    if not _PRICE.fullmatch(price):
        raise RuleError(f"must be a non-negative decimal price such as 0.25 (got {show(price)})")
    return price


def _check_price_adjustment(adjustment: str) -> str:
    if not _PRICE_ADJUSTMENT.fullmatch(adjustment):
        raise RuleError(
            "must be a signed amount such as +0.01 or -0.5, or a percentage such as +10% or -20% "
            f"(a decrease of at most 100%) (got {show(adjustment)})"
        )
    return adjustment


def overlay_label_restriction(key: str) -> str | None:
    """NodeOverlays may select on every label a NodePool may, and on ``karpenter.sh/nodepool`` too."""
    return labels.is_restricted_label(key)


class OverlayRequirement(NodeSelectorRequirement):
    @model_validator(mode="after")
    def _not_in_has_values(self) -> Self:
        if self.operator == "NotIn" and not self.values:
            raise RuleError("operator NotIn needs at least one value", at=("values",))
        return self


class NodeOverlaySpec(SpecModel):
    requirements: Annotated[list[OverlayRequirement], AfterValidator(check_requirement_count)]
    price: Annotated[str, BeforeValidator(_number_as_text), AfterValidator(_check_price)] | None = None
    price_adjustment: (
        Annotated[str, BeforeValidator(_number_as_text), AfterValidator(_check_price_adjustment)] | None
    ) = None
    capacity: dict[str, Quantity] = omitempty(dict)
    weight: Annotated[Int, between(1, 10000)] | None = None

    @field_validator("requirements")
    @classmethod
    def _requirement_keys_allowed(cls, requirements: list[OverlayRequirement]) -> list[OverlayRequirement]:
        raise_problems(requirement_key_problems(requirements, overlay_label_restriction))
        return requirements

    @field_validator("capacity")
    @classmethod
    def _extended_only(cls, capacity: dict[str, Any]) -> dict[str, Any]:
        problems: list[tuple[Loc, str]] = quantity_map_problems(capacity, non_negative=True)
        problems += [
            ((name,), f"only extended resources may be added; {name!r} comes from the instance type")
            for name in capacity
            if name in STANDARD_RESOURCES
        ]
        raise_problems(problems)
        return capacity

    @model_validator(mode="after")
    def _one_price_rule(self) -> Self:
        if self.price is not None and self.price_adjustment is not None:
            raise RuleError("cannot set both 'price' and 'priceAdjustment'", at=("priceAdjustment",))
        return self


class NodeOverlayStatus(LenientModel):
    conditions: list[Condition] = omitempty(list)


class NodeOverlay(ResourceModel):
    """A Karpenter NodeOverlay (alpha)."""

    API_VERSION: ClassVar[str] = "karpenter.sh/v1alpha1"
    KIND: ClassVar[str] = "NodeOverlay"

    api_version: Literal["karpenter.sh/v1alpha1"] = "karpenter.sh/v1alpha1"
    kind: Literal["NodeOverlay"] = "NodeOverlay"
    metadata: ObjectMeta
    spec: NodeOverlaySpec
    status: NodeOverlayStatus = omitempty(NodeOverlayStatus)

    def weight_or_zero(self) -> int:
        return self.spec.weight or 0

    def parsed_capacity(self) -> dict[str, int]:
        return parse_quantities(self.spec.capacity)

    def adjusts_price(self) -> bool:
        return self.spec.price is not None or self.spec.price_adjustment is not None

    def apply_price(self, price: float) -> float:
        """The price after this overlay: replaced by ``price`` or moved by ``priceAdjustment``, at least 0."""
        if self.spec.price is not None:
            return float(self.spec.price)
        adjustment = self.spec.price_adjustment
        if adjustment is None:
            return price
        if adjustment.endswith("%"):
            factor = 1 + Decimal(adjustment[:-1]) / 100
            adjusted = Decimal(str(price)) * factor
        else:
            adjusted = Decimal(str(price)) + Decimal(adjustment)
        return max(0.0, float(adjusted))

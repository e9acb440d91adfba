"""Validation of Node taints, Pod tolerations and affinity operators, as ``pkg/apis/core/validation``
words it. Each function yields every problem it finds, with the field path upstream gives it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from . import selectors
from .field_errors import FieldError, forbidden, go_quoted, invalid_value, not_supported, required

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_OPERATORS = ("Equal", "Exists")


def _label_name_errors(key: Any, field: str) -> Iterator[FieldError]:
    why = selectors.qualified_name_error(str(key or ""))
    if why:
        yield invalid_value(field, str(key or ""), why)


def _effect_errors(effect: Any, field: str, *, allow_empty: bool) -> Iterator[FieldError]:
    if not effect:
        if not allow_empty:
            yield required(field)
        return
    if effect not in TAINT_EFFECTS:
        yield not_supported(field, effect, TAINT_EFFECTS)


def _go_taint(taint: Mapping[str, Any]) -> str:
    """``%#v`` of a core.Taint, as a Duplicate message shows it."""
    added = taint.get("timeAdded")
    return (
        f"core.Taint{{Key:{go_quoted(taint.get('key') or '')}, Value:{go_quoted(taint.get('value') or '')}, "
        f"Effect:{go_quoted(taint.get('effect') or '')}, TimeAdded:{'<nil>' if added is None else added}}}"
    )


def taint_errors(taints: Any) -> Iterator[FieldError]:
    seen: set[tuple[str, str]] = set()
    for i, taint in enumerate(taints or []):
        path = f"spec.taints[{i}]"
        if not isinstance(taint, dict):
            yield invalid_value(path, str(taint), "must be an object")
            continue
        yield from _label_name_errors(taint.get("key"), f"{path}.key")
        why = selectors.label_value_error(str(taint.get("value") or ""))
        if why:
            yield invalid_value(f"{path}.value", str(taint.get("value")), why)
        yield from _effect_errors(taint.get("effect"), f"{path}.effect", allow_empty=False)
        pair = (str(taint.get("key") or ""), str(taint.get("effect") or ""))
        if pair in seen:
            yield FieldError(
                "FieldValueDuplicate",
                path,
                f"Duplicate value: {_go_taint(taint)}: taints must be unique by key and effect pair",
            )
            continue
        seen.add(pair)


def _go_toleration(toleration: Mapping[str, Any]) -> str:
    seconds = toleration.get("tolerationSeconds")
    return (
        f"core.Toleration{{Key:{go_quoted(toleration.get('key') or '')}, "
        f"Operator:{go_quoted(toleration.get('operator') or '')}, "
        f"Value:{go_quoted(toleration.get('value') or '')}, "
        f"Effect:{go_quoted(toleration.get('effect') or '')}, "
        f"TolerationSeconds:{'(*int64)(nil)' if seconds is None else f'(*int64)({seconds})'}}}"
    )


def toleration_errors(tolerations: Any) -> Iterator[FieldError]:
    for i, toleration in enumerate(tolerations or []):
        path = f"spec.tolerations[{i}]"
        if not isinstance(toleration, dict):
            yield invalid_value(path, str(toleration), "must be an object")
            continue
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or ""
        value = toleration.get("value") or ""
        effect = toleration.get("effect") or ""
        if key:
            yield from _label_name_errors(key, f"{path}.key")
        elif operator != "Exists":
            yield invalid_value(
                f"{path}.operator",
                operator,
                'operator must be Exists when `key` is empty, which means "match all values and all keys"',
            )
        if toleration.get("tolerationSeconds") is not None and effect != "NoExecute":
            yield invalid_value(
                f"{path}.effect", effect, "effect must be 'NoExecute' when `tolerationSeconds` is set"
            )
        if operator in ("Equal", ""):
            why = selectors.label_value_error(str(value))
            if why:
                yield invalid_value(f"{path}.operator", str(value), why)
        elif operator == "Exists":
            if value:
                yield FieldError(
                    "FieldValueInvalid",
                    f"{path}.operator",
                    f"Invalid value: {_go_toleration(toleration)}: "
                    "value must be empty when `operator` is 'Exists'",
                )
        else:
            yield not_supported(f"{path}.operator", operator, TOLERATION_OPERATORS)
        yield from _effect_errors(effect, f"{path}.effect", allow_empty=True)


def _requirement_errors(requirement: Any, path: str, *, numeric: bool) -> Iterator[FieldError]:
    """A node selector requirement (``numeric``: Gt and Lt allowed) or a label selector requirement."""
    if not isinstance(requirement, dict):
        yield invalid_value(path, str(requirement), "must be an object")
        return
    operator = requirement.get("operator") or ""
    values = requirement.get("values") or []
    if operator in ("In", "NotIn"):
        if not values:
            yield required(f"{path}.values", "must be specified when `operator` is 'In' or 'NotIn'")
    elif operator in ("Exists", "DoesNotExist"):
        if values:
            yield forbidden(
                f"{path}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
            )
    elif numeric and operator in ("Gt", "Lt"):
        if len(values) != 1:
            yield required(f"{path}.values", "must be specified single value when `operator` is 'Lt' or 'Gt'")
    else:
        yield invalid_value(f"{path}.operator", operator, "not a valid selector operator")
    yield from _label_name_errors(requirement.get("key"), f"{path}.key")


def _label_selector_errors(selector: Any, path: str) -> Iterator[FieldError]:
    if isinstance(selector, dict):
        for j, requirement in enumerate(selector.get("matchExpressions") or []):
            yield from _requirement_errors(requirement, f"{path}.matchExpressions[{j}]", numeric=False)


def _node_term_errors(term: Any, path: str) -> Iterator[FieldError]:
    if not isinstance(term, dict):
        return
    for j, requirement in enumerate(term.get("matchExpressions") or []):
        yield from _requirement_errors(requirement, f"{path}.matchExpressions[{j}]", numeric=True)


def affinity_errors(affinity: Any) -> Iterator[FieldError]:
    if not isinstance(affinity, dict):
        return
    node = affinity.get("nodeAffinity") or {}
    base = "spec.affinity.nodeAffinity"
    selector = node.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    for i, term in enumerate(selector.get("nodeSelectorTerms") or []):
        yield from _node_term_errors(
            term, f"{base}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}]"
        )
    for i, preferred in enumerate(node.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
        if isinstance(preferred, dict):
            yield from _node_term_errors(
                preferred.get("preference"),
                f"{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference",
            )
    for which in ("podAffinity", "podAntiAffinity"):
        terms = affinity.get(which) or {}
        base = f"spec.affinity.{which}"
        for i, term in enumerate(terms.get("requiredDuringSchedulingIgnoredDuringExecution") or []):
            if isinstance(term, dict):
                yield from _label_selector_errors(
                    term.get("labelSelector"),
                    f"{base}.requiredDuringSchedulingIgnoredDuringExecution[{i}].labelSelector",
                )
        for i, weighted in enumerate(terms.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
            term = (weighted or {}).get("podAffinityTerm") if isinstance(weighted, dict) else None
            if isinstance(term, dict):
                yield from _label_selector_errors(
                    term.get("labelSelector"),
                    f"{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}].podAffinityTerm.labelSelector",
                )

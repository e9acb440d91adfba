"""Field errors as kube-apiserver's validation reports them (``k8s.io/apimachinery/.../field``): a
cause per error, and a 422 ``Invalid`` whose message aggregates them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .errors import ApiError
from .kinds import Kind

Obj = dict[str, Any]


@dataclass(frozen=True)
class FieldError:
    """One ``field.Error``: its type (the cause's reason), path, and the message after the path."""

    reason: str
    field: str
    body: str

    def __str__(self) -> str:
        return f"{self.field}: {self.body}" if self.field else self.body


def go_quoted(value: Any) -> str:
    """Go's ``%q`` for the strings and ``%v`` for the numbers a message shows."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return "null" if value is None else str(value)


def invalid_value(field: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", field, f"Invalid value: {go_quoted(value)}: {detail}")


def not_supported(field: str, value: Any, supported: tuple[str, ...]) -> FieldError:
    listed = ", ".join(f'"{v}"' for v in supported)
    body = f"Unsupported value: {go_quoted(value)}: supported values: {listed}"
    return FieldError("FieldValueNotSupported", field, body)


def required(field: str, detail: str = "") -> FieldError:
    return FieldError("FieldValueRequired", field, "Required value" + (f": {detail}" if detail else ""))


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", field, f"Forbidden: {detail}")


def invalid_object(kind: Kind, name: str, errors: list[FieldError]) -> ApiError:
    """kube-apiserver's ``NewInvalid``: the kind qualified by its group (``NodePool.karpenter.sh``, but
    ``Node``), one cause per distinct error, the message aggregating them."""
    unique = list(dict.fromkeys(errors))
    messages = [str(e) for e in unique]
    aggregate = messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"
    qualified = f"{kind.kind}.{kind.group}" if kind.group else kind.kind
    details: Obj = {
        "name": name,
        "kind": kind.kind,
        "causes": [{"reason": e.reason, "message": e.body, "field": e.field} for e in unique],
    }
    if kind.group:
        details["group"] = kind.group
    return ApiError(422, f'{qualified} "{name}" is invalid: {aggregate}', details=details)

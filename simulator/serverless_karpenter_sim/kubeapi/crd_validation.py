"""A structural schema applied to a custom resource as kube-apiserver applies it: pruning, defaulting, and
validation by the OpenAPI keywords and the CEL ``x-kubernetes-validations``.

Each pass returns a new value and never mutates its input, since stored objects share subtrees.

Validation ratchets as kube-apiserver (1.33) does on update: a value equal to the old value at the same
path (through object properties and map keys) is not validated again, so an object stored before a rule
existed can still have its status written. Errors are worded as upstream's ``field.Error``\\s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from serverless_karpenter.clock import parse_rfc3339

from .crd_cel import INT64_MAX, INT64_MIN, RuleError, compile_rule, go_regex
from .field_errors import FieldError

Schema = Mapping[str, Any]
MISSING: Any = object()  # no old value at this path (a create, or a path that did not exist)


@dataclass
class Findings:
    errors: list[FieldError] = field(default_factory=list)
    type_errors: int = 0

    def add(self, reason: str, path: str, detail: str) -> None:
        self.errors.append(FieldError(reason, path, detail))


def go_quote(value: Any) -> str:
    """A value as Go's ``%q``/``%v`` shows it in ``Invalid value: ...``."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer" if INT64_MIN <= value <= INT64_MAX else "number"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _type_ok(schema: Schema, actual: str) -> bool:
    if schema.get("x-kubernetes-int-or-string"):
        return actual in ("integer", "string")
    wanted = schema.get("type")
    if wanted is None:
        return True
    if wanted == "number":
        return actual in ("integer", "number")
    return bool(actual == wanted)


# --- pruning and defaulting -----------------------------------------------------------------------------


def prune(schema: Schema, value: Any, path: str, unknown: list[str]) -> Any:
    """``value`` without the fields its schema does not declare; their paths are added to ``unknown``."""
    if isinstance(value, dict):
        properties: Mapping[str, Schema] = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields")) or extra is True
        out: dict[str, Any] = {}
        for key, item in value.items():
            sub = properties.get(key)
            if sub is None and isinstance(extra, Mapping):
                sub = extra
            if sub is None:
                if keep_unknown:
                    out[key] = item
                else:
                    unknown.append(_child(path, key))
                continue
            out[key] = prune(sub, item, _child(path, key), unknown)
        return out if len(out) != len(value) or any(out[k] is not value[k] for k in out) else value
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        items = [prune(schema["items"], item, f"{path}[{i}]", unknown) for i, item in enumerate(value)]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    return value


def default(schema: Schema, value: Any) -> Any:
    """``value`` with its schema's defaults filled in, and null non-nullable fields defaulted or dropped."""
    if isinstance(value, dict):
        properties: Mapping[str, Schema] = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        out = dict(value)
        changed = False
        for key, sub in properties.items():
            if key in out and out[key] is None and not sub.get("nullable"):
                del out[key]
                changed = True
            if key not in out and "default" in sub:
                out[key] = json.loads(json.dumps(sub["default"]))
                changed = True
        for key, item in out.items():
            item_schema = properties.get(key) or (extra if isinstance(extra, Mapping) else None)
            if item_schema is not None:
                defaulted = default(item_schema, item)
                changed = changed or defaulted is not item
                out[key] = defaulted
        return out if changed else value
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        items = [default(schema["items"], item) for item in value]
        return items if any(a is not b for a, b in zip(items, value, strict=True)) else value
    return value


# --- validation -----------------------------------------------------------------------------------------


def validate(schema: Schema, value: Any, old: Any, path: str, found: Findings) -> None:
    """Check ``value`` (and everything under it) against ``schema``; ``old`` is the value it replaces."""
    if old is not MISSING and value == old:
        return  # ratcheting: an unchanged value is not validated again
    actual = _json_type(value)
    if not _type_ok(schema, actual):
        wanted = "integer-or-string" if schema.get("x-kubernetes-int-or-string") else schema.get("type")
        found.add(
            "FieldValueTypeInvalid",
            path,
            f'Invalid value: "{actual}": {path} in body must be of type {wanted}: "{actual}"',
        )
        found.type_errors += 1
        return
    enum = schema.get("enum")
    if enum is not None and value not in enum:
        supported = ", ".join(go_quote(v) for v in enum)
        found.add(
            "FieldValueNotSupported",
            path,
            f"Unsupported value: {go_quote(value)}: supported values: {supported}",
        )
    if isinstance(value, str):
        _validate_string(schema, value, path, found)
    elif actual in ("integer", "number"):
        _validate_number(schema, value, path, found)
    elif isinstance(value, list):
        _validate_array(schema, value, path, found)
    elif isinstance(value, dict):
        _validate_object(schema, value, old, path, found)


def _validate_string(schema: Schema, value: str, path: str, found: Findings) -> None:
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        found.add("FieldValueTooLong", path, f"Too long: may not be more than {schema['maxLength']} bytes")
    if "minLength" in schema and len(value) < schema["minLength"]:
        found.add(
            "FieldValueInvalid",
            path,
            f"Invalid value: {go_quote(value)}: {path} in body should be at least {schema['minLength']} "
            "chars long",
        )
    pattern = schema.get("pattern")
    if pattern is not None and go_regex(pattern).search(value) is None:
        found.add(
            "FieldValueInvalid",
            path,
            f"Invalid value: {go_quote(value)}: {path} in body should match '{pattern}'",
        )
    if schema.get("format") == "date-time" and not schema.get("x-kubernetes-int-or-string"):
        try:
            parse_rfc3339(value)
        except ValueError:
            found.add(
                "FieldValueInvalid",
                path,
                f"Invalid value: {go_quote(value)}: {path} in body must be of type date-time: "
                f"{go_quote(value)}",
            )


def _validate_number(schema: Schema, value: float, path: str, found: Findings) -> None:
    if "maximum" in schema and value > schema["maximum"]:
        found.add(
            "FieldValueInvalid",
            path,
            f"Invalid value: {go_quote(value)}: {path} in body should be less than or equal to "
            f"{schema['maximum']}",
        )
    if "minimum" in schema and value < schema["minimum"]:
        found.add(
            "FieldValueInvalid",
            path,
            f"Invalid value: {go_quote(value)}: {path} in body should be greater than or equal to "
            f"{schema['minimum']}",
        )


def _validate_array(schema: Schema, value: list[Any], path: str, found: Findings) -> None:
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        found.add(
            "FieldValueTooMany", path, f"Too many: {len(value)}: must have at most {schema['maxItems']} items"
        )
    if "minItems" in schema and len(value) < schema["minItems"]:
        found.add(
            "FieldValueInvalid",
            path,
            f"Invalid value: {len(value)}: {path} in body should have at least {schema['minItems']} items",
        )
    items = schema.get("items")
    if isinstance(items, Mapping):
        for index, item in enumerate(value):  # atomic lists do not correlate items with the old list
            validate(items, item, MISSING, f"{path}[{index}]", found)


def _validate_object(schema: Schema, value: dict[str, Any], old: Any, path: str, found: Findings) -> None:
    for name in schema.get("required") or ():
        if name not in value:
            found.add("FieldValueRequired", _child(path, name), "Required value")
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        found.add(
            "FieldValueTooMany",
            path,
            f"Too many: {len(value)}: must have at most {schema['maxProperties']} items",
        )
    properties: Mapping[str, Schema] = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    old_map = old if isinstance(old, dict) else {}
    for key, item in sorted(value.items()):  # upstream lists field errors in path order
        if key in properties:
            validate(properties[key], item, old_map.get(key, MISSING), _child(path, key), found)
        elif isinstance(extra, Mapping):
            validate(extra, item, old_map.get(key, MISSING), f"{path}[{key}]", found)


def validate_rules(schema: Schema, value: Any, old: Any, path: str, found: Findings) -> None:
    """The CEL ``x-kubernetes-validations`` at every level, innermost last, as a second pass."""
    if old is not MISSING and value == old:
        return
    if isinstance(value, dict):
        properties: Mapping[str, Schema] = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        old_map = old if isinstance(old, dict) else {}
        for key, item in sorted(value.items()):  # upstream lists field errors in path order
            if key in properties:
                validate_rules(properties[key], item, old_map.get(key, MISSING), _child(path, key), found)
            elif isinstance(extra, Mapping):
                validate_rules(extra, item, old_map.get(key, MISSING), f"{path}[{key}]", found)
    elif isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        for index, item in enumerate(value):
            validate_rules(schema["items"], item, MISSING, f"{path}[{index}]", found)
    for rule in schema.get("x-kubernetes-validations") or ():
        _check_rule(schema, rule, value, old, path, found)


_REASONS = {
    "FieldValueInvalid": "Invalid value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueRequired": "Required value",
    "FieldValueDuplicate": "Duplicate value",
}


def _check_rule(
    schema: Schema, rule: Mapping[str, Any], value: Any, old: Any, path: str, found: Findings
) -> None:
    compiled = compile_rule(str(rule["rule"]))
    if compiled.transition and old is MISSING:
        return  # transition rules run on update only, where the old value exists
    shown_type = "object" if schema.get("x-kubernetes-int-or-string") is None else "string"
    shown_type = str(schema.get("type") or shown_type)
    where = _child(path, str(rule["fieldPath"]).lstrip(".")) if rule.get("fieldPath") else path
    try:
        holds = compiled.holds(value, None if old is MISSING else old)
    except RuleError as err:
        found.add(
            "FieldValueInvalid",
            where,
            f'Invalid value: "{shown_type}": {err} evaluating rule: {compiled.text}',
        )
        return
    if holds:
        return
    message = str(rule.get("message") or f"failed rule: {compiled.text}")
    reason = str(rule.get("reason") or "FieldValueInvalid")
    if reason == "FieldValueInvalid":
        found.add(reason, where, f'Invalid value: "{shown_type}": {message}')
    else:
        found.add(reason, where, f"{_REASONS.get(reason, reason)}: {message}")

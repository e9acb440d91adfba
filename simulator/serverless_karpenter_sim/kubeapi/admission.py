"""Admission for built-in objects: the mutating plugins and the validation kube-apiserver runs on Nodes and
Pods, answered as upstream answers them.

Mutating, on create only (as the plugins are):
- TaintNodesByCondition: a new Node carries ``node.kubernetes.io/not-ready:NoSchedule`` until the node
  lifecycle controller sees it Ready;
- DefaultTolerationSeconds: a new Pod that does not tolerate them gets the ``not-ready`` and
  ``unreachable`` NoExecute tolerations with ``tolerationSeconds: 300``.

Validating (``pkg/apis/core/validation``): Node taints (key, value, effect, unique by key and effect),
Pod tolerations (key, operator, value, effect, tolerationSeconds only with NoExecute), node and pod
affinity operators, quantities (requests, limits, overhead, capacity, allocatable) and the total size of
annotations. Every problem of an object is reported at once, as one 422 ``Invalid`` with a cause per
field, worded as the apiserver words it. A quantity that does not parse never reaches validation
upstream: decoding fails first and the answer is a 400.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.utils import parse_quantity

from . import selectors
from .errors import ApiError, bad_request
from .kinds import Kind

Obj = dict[str, Any]

NOT_READY_TAINT_KEY = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT_KEY = "node.kubernetes.io/unreachable"
# The DefaultTolerationSeconds plugin's --default-not-ready-toleration-seconds and
# --default-unreachable-toleration-seconds.
DEFAULT_TOLERATION_SECONDS = 300
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_OPERATORS = ("Equal", "Exists")
ANNOTATIONS_TOTAL_LIMIT = 256 * 1024  # bytes of keys and values together
QUANTITY_FORMAT_ERROR = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


@dataclass(frozen=True)
class FieldError:
    """One ``field.Error``: its type (the cause's reason), path, and the message after the path."""

    reason: str
    field: str
    body: str

    def __str__(self) -> str:
        return f"{self.field}: {self.body}"


def _quoted(value: Any) -> str:
    """Go's ``%q`` for the strings and ``%v`` for the numbers a message shows."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return "null" if value is None else str(value)


def invalid_value(field: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", field, f"Invalid value: {_quoted(value)}: {detail}")


def not_supported(field: str, value: Any, supported: tuple[str, ...]) -> FieldError:
    listed = ", ".join(f'"{v}"' for v in supported)
    body = f"Unsupported value: {_quoted(value)}: supported values: {listed}"
    return FieldError("FieldValueNotSupported", field, body)


def required(field: str, detail: str = "") -> FieldError:
    return FieldError("FieldValueRequired", field, "Required value" + (f": {detail}" if detail else ""))


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", field, f"Forbidden: {detail}")


def invalid_object(kind: Kind, name: str, errors: list[FieldError]) -> ApiError:
    """kube-apiserver's ``NewInvalid``: one cause per distinct error, the message aggregating them."""
    unique = list(dict.fromkeys(errors))
    messages = [str(e) for e in unique]
    aggregate = messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"
    details: Obj = {
        "name": name,
        "kind": kind.kind,
        "causes": [{"reason": e.reason, "message": e.body, "field": e.field} for e in unique],
    }
    if kind.group:
        details["group"] = kind.group
    return ApiError(422, f'{kind.kind} "{name}" is invalid: {aggregate}', details=details)


def _is_core(kind: Kind, plural: str) -> bool:
    return not kind.group and kind.plural == plural


# --- mutating admission ----------------------------------------------------------------------------------


def admit_create(kind: Kind, obj: Obj) -> None:
    """The mutating plugins that act on creation; ``obj`` is the fresh dict about to be stored."""
    if _is_core(kind, "nodes"):
        _taint_new_node_not_ready(obj)
    elif _is_core(kind, "pods"):
        _add_default_tolerations(obj)


def _taint_new_node_not_ready(node: Obj) -> None:
    spec = node.get("spec")
    spec = dict(spec) if isinstance(spec, dict) else {}
    taints = list(spec.get("taints") or [])
    if not any(
        isinstance(t, dict) and t.get("key") == NOT_READY_TAINT_KEY and t.get("effect") == "NoSchedule"
        for t in taints
    ):
        taints.append({"key": NOT_READY_TAINT_KEY, "effect": "NoSchedule"})
    spec["taints"] = taints
    node["spec"] = spec


def _tolerates_no_execute(tolerations: list[Any], key: str) -> bool:
    return any(
        isinstance(t, dict)
        and (t.get("key") or "") in (key, "")
        and (t.get("effect") or "") in ("NoExecute", "")
        for t in tolerations
    )


def _add_default_tolerations(pod: Obj) -> None:
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    tolerations = list(spec.get("tolerations") or [])
    added = [
        {
            "key": key,
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
        }
        for key in (NOT_READY_TAINT_KEY, UNREACHABLE_TAINT_KEY)
        if not _tolerates_no_execute(tolerations, key)
    ]
    if added:
        pod["spec"] = {**spec, "tolerations": [*tolerations, *added]}


# --- validation ------------------------------------------------------------------------------------------


def validate(kind: Kind, obj: Obj, old: Obj | None) -> None:
    """Raise the apiserver's answer for what is wrong with a Node or Pod (and any object's annotations).

    On update only what changed is looked at again, as the parts upstream validates on update."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    _check_quantities(kind, obj, old)
    errors = list(_annotation_errors(obj, old))
    if _is_core(kind, "nodes"):
        if old is None or (obj.get("spec") or {}).get("taints") != (old.get("spec") or {}).get("taints"):
            errors.extend(_taint_errors((obj.get("spec") or {}).get("taints")))
    elif _is_core(kind, "pods") and (old is None or obj.get("spec") != old.get("spec")):
        spec = obj.get("spec") or {}
        errors.extend(_toleration_errors(spec.get("tolerations")))
        errors.extend(_affinity_errors(spec.get("affinity")))
    if errors:
        raise invalid_object(kind, name, errors)


def _annotation_errors(obj: Obj, old: Obj | None) -> Iterator[FieldError]:
    annotations = (obj.get("metadata") or {}).get("annotations")
    if not isinstance(annotations, dict):
        return
    if old is not None and annotations == (old.get("metadata") or {}).get("annotations"):
        return
    size = sum(len(str(k).encode()) + len(str(v).encode()) for k, v in annotations.items())
    if size > ANNOTATIONS_TOTAL_LIMIT:
        yield FieldError(
            "FieldValueTooLong",
            "metadata.annotations",
            f"Too long: may not be more than {ANNOTATIONS_TOTAL_LIMIT} bytes",
        )


def _check_quantities(kind: Kind, obj: Obj, old: Obj | None) -> None:
    """Quantities fail decoding upstream (a 400); negative requests and limits are a 422."""
    if _is_core(kind, "nodes"):
        status = obj.get("status") or {}
        lists = [(f"status.{f}", status.get(f)) for f in ("capacity", "allocatable")]
    elif _is_core(kind, "pods"):
        spec = obj.get("spec") or {}
        if old is not None and spec == old.get("spec"):
            return
        lists = [("spec.overhead", spec.get("overhead"))]
        for group in ("initContainers", "containers"):
            for i, container in enumerate(spec.get(group) or []):
                resources = (container or {}).get("resources") or {} if isinstance(container, dict) else {}
                for part in ("requests", "limits"):
                    lists.append((f"spec.{group}[{i}].resources.{part}", resources.get(part)))
    else:
        return
    errors: list[FieldError] = []
    for path, values in lists:
        if not isinstance(values, Mapping):
            continue
        for resource, text in values.items():
            try:
                quantity = parse_quantity(text)
            except (ValueError, TypeError) as err:
                raise bad_request(
                    f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}: '
                    f"{QUANTITY_FORMAT_ERROR}"
                ) from err
            if quantity < 0:
                errors.append(
                    invalid_value(f"{path}[{resource}]", str(text), "must be greater than or equal to 0")
                )
    if errors:
        name = str((obj.get("metadata") or {}).get("name") or "")
        raise invalid_object(kind, name, errors)


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
        f"core.Taint{{Key:{_quoted(taint.get('key') or '')}, Value:{_quoted(taint.get('value') or '')}, "
        f"Effect:{_quoted(taint.get('effect') or '')}, TimeAdded:{'<nil>' if added is None else added}}}"
    )


def _taint_errors(taints: Any) -> Iterator[FieldError]:
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
        f"core.Toleration{{Key:{_quoted(toleration.get('key') or '')}, "
        f"Operator:{_quoted(toleration.get('operator') or '')}, "
        f"Value:{_quoted(toleration.get('value') or '')}, "
        f"Effect:{_quoted(toleration.get('effect') or '')}, "
        f"TolerationSeconds:{'(*int64)(nil)' if seconds is None else f'(*int64)({seconds})'}}}"
    )


def _toleration_errors(tolerations: Any) -> Iterator[FieldError]:
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


def _affinity_errors(affinity: Any) -> Iterator[FieldError]:
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

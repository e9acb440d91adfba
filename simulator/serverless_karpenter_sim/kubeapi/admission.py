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

from collections.abc import Iterator, Mapping
from typing import Any

from kubernetes.utils import parse_quantity

from .builtin_validation import affinity_errors, taint_errors, toleration_errors
from .errors import bad_request
from .field_errors import FieldError, invalid_object, invalid_value
from .kinds import Kind

Obj = dict[str, Any]

NOT_READY_TAINT_KEY = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT_KEY = "node.kubernetes.io/unreachable"
# The DefaultTolerationSeconds plugin's --default-not-ready-toleration-seconds and
# --default-unreachable-toleration-seconds.
DEFAULT_TOLERATION_SECONDS = 300
ANNOTATIONS_TOTAL_LIMIT = 256 * 1024  # bytes of keys and values together
QUANTITY_FORMAT_ERROR = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


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
            errors.extend(taint_errors((obj.get("spec") or {}).get("taints")))
    elif _is_core(kind, "pods") and (old is None or obj.get("spec") != old.get("spec")):
        spec = obj.get("spec") or {}
        errors.extend(toleration_errors(spec.get("tolerations")))
        errors.extend(affinity_errors(spec.get("affinity")))
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
                resources = container.get("resources") or {} if isinstance(container, dict) else {}
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

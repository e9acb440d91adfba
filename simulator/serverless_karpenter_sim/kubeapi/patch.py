"""The three PATCH flavours the API server accepts, applied without mutating the stored object.

- JSON merge patch (RFC 7386): ``null`` deletes, maps merge, everything else (lists too) replaces.
- JSON patch (RFC 6902): delegated to the ``jsonpatch`` package.
- Strategic merge patch: a merge patch that knows which lists merge by key, for the fields whose Go
  types carry ``patchStrategy:"merge"`` upstream, plus the ``$patch``, ``$deleteFromPrimitiveList`` and
  ``$setElementOrder`` directives. Lists without a strategy upstream (tolerations, taints,
  containerStatuses, ...) are replaced whole, as upstream.

Results share unchanged subtrees with the original, which is safe because stored objects are never
mutated in place.
"""

from __future__ import annotations

from typing import Any

import jsonpatch
import jsonpointer

from .errors import ApiError, bad_request

Obj = dict[str, Any]

_CONTAINER_LISTS = frozenset({"containers", "initContainers", "ephemeralContainers"})

# Merge keys by field name; "ports" depends on its parent (container ports vs service ports).
_MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "env": "name",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "conditions": "type",
    "ownerReferences": "uid",
    "addresses": "type",
    "podIPs": "ip",
    "hostIPs": "ip",
    "resourceClaims": "name",
    "schedulingGates": "name",
}
# Lists of scalars that merge as sets.
SET_LISTS = frozenset({"finalizers"})


def merge_key(path: tuple[str, ...]) -> str | None:
    last = path[-1]
    if last == "ports":
        return "containerPort" if len(path) >= 2 and path[-2] in _CONTAINER_LISTS else "port"
    return _MERGE_KEYS.get(last)


# --- RFC 7386 ---------------------------------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return patch
    result: Obj = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- RFC 6902 ---------------------------------------------------------------------------------------------


def json_patch(target: Obj, operations: Any) -> Obj:
    if not isinstance(operations, list):
        raise bad_request("json patch must be a list of operations")
    try:
        result = jsonpatch.apply_patch(target, operations, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as err:
        raise ApiError(422, f"the server rejected our request due to an error in our request: {err}") from err
    except (TypeError, KeyError, ValueError) as err:
        raise bad_request(f"invalid json patch: {err}") from err
    if not isinstance(result, dict):
        raise ApiError(422, "json patch must leave an object")
    return result


# --- strategic merge patch --------------------------------------------------------------------------------

_DIRECTIVE = "$patch"
_DELETE_FROM_PRIMITIVE = "$deleteFromPrimitiveList/"
_SET_ORDER = "$setElementOrder/"
_RETAIN_KEYS = "$retainKeys"


def strategic_merge_patch(target: Obj, patch: Any) -> Obj:
    if not isinstance(patch, dict):
        raise bad_request("strategic merge patch must be a JSON object")
    result = _merge_map(target, patch, ())
    return result if result is not None else {}


def _strip_directives(value: Any) -> Any:
    """A patch value placed where nothing existed: keep data, drop directives."""
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$") and v is not None}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value if not (isinstance(v, dict) and _DIRECTIVE in v)]
    return value


def _merge_map(original: Any, patch: Obj, path: tuple[str, ...]) -> Obj | None:
    directive = patch.get(_DIRECTIVE)
    if directive == "delete":
        return None
    if directive == "replace":
        return _strip_directives({k: v for k, v in patch.items() if k != _DIRECTIVE})
    if directive is not None:
        raise bad_request(f"Unknown patch type: {directive}")
    result: Obj = dict(original) if isinstance(original, dict) else {}
    retain = patch.get(_RETAIN_KEYS)
    for key, value in patch.items():
        if key in (_DIRECTIVE, _RETAIN_KEYS) or key.startswith(_SET_ORDER):
            continue
        if key.startswith(_DELETE_FROM_PRIMITIVE):
            field = key[len(_DELETE_FROM_PRIMITIVE) :]
            if isinstance(result.get(field), list) and isinstance(value, list):
                drop = set(map(_hashable, value))
                result[field] = [v for v in result[field] if _hashable(v) not in drop]
            continue
        if value is None:
            result.pop(key, None)
            continue
        child_path = (*path, key)
        current = result.get(key)
        if isinstance(value, dict):
            merged = (
                _merge_map(current, value, child_path)
                if isinstance(current, dict)
                else _merge_map({}, value, child_path)
            )
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _merge_list(current, value, child_path)
        else:
            result[key] = value
    if isinstance(retain, list):
        keep = set(retain)
        result = {k: v for k, v in result.items() if k in keep}
    return result


def _hashable(value: Any) -> Any:
    return repr(value) if isinstance(value, (dict, list)) else value


def _merge_list(original: Any, patch: list[Any], path: tuple[str, ...]) -> list[Any]:
    field = path[-1]
    if field in SET_LISTS and not any(isinstance(v, dict) for v in patch):
        base = list(original) if isinstance(original, list) else []
        seen = set(map(_hashable, base))
        for item in patch:
            if _hashable(item) not in seen:
                base.append(item)
                seen.add(_hashable(item))
        return base
    key = merge_key(path)
    if key is None or not isinstance(original, list):
        return list(_strip_directives(patch))
    if any(isinstance(v, dict) and v.get(_DIRECTIVE) == "replace" for v in patch):
        return [_strip_directives(v) for v in patch if not (isinstance(v, dict) and _DIRECTIVE in v)]
    result = list(original)
    for item in patch:
        if not isinstance(item, dict):
            raise bad_request(f"strategic merge patch: list {'.'.join(path)} holds objects keyed by {key!r}")
        if key not in item:
            raise bad_request(f"map: {item} does not contain declared merge key: {key}")
        index = next(
            (i for i, cur in enumerate(result) if isinstance(cur, dict) and cur.get(key) == item[key]), None
        )
        if item.get(_DIRECTIVE) == "delete":
            if index is not None:
                del result[index]
            continue
        if index is None:
            result.append(_strip_directives(item))
        else:
            merged = _merge_map(result[index], item, path)
            if merged is None:
                del result[index]
            else:
                result[index] = merged
    return result

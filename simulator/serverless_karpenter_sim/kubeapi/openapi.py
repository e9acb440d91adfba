"""``/openapi/v3``: the OpenAPI v3 documents kube-apiserver publishes, one per group/version, for the kinds
the simulated server holds.

kubectl reads them before it writes: ``apply``/``create``/``replace`` look for the ``fieldValidation``
parameter on the kind's PATCH operation (found by its ``x-kubernetes-group-version-kind``) and, finding it,
leave validation to the server (``fieldValidation=Strict``, see :mod:`.field_validation`); ``apply`` reads
``x-kubernetes-patch-merge-key`` to compute strategic merge patches; ``explain`` prints the schemas.

Schemas: our CRDs' ``openAPIV3Schema`` from ``deploy/crds`` (``metadata`` being ObjectMeta, as upstream
publishes it); built-in kinds from the official python client's models (``openapi_types`` and
``attribute_map`` are generated from upstream's own OpenAPI), with the list merge keys :mod:`.patch` applies.
"""

from __future__ import annotations

import copy
import hashlib
import re
from functools import cache
from typing import Any

from kubernetes.client import models

from . import codec, kinds
from .crd_files import crd_version
from .kinds import Kind
from .patch import SET_LISTS, merge_key

Obj = dict[str, Any]
REF_PREFIX = "#/components/schemas/"
OBJECT_META = "V1ObjectMeta"
_PRIMITIVES: dict[str, Obj] = {
    "str": {"type": "string"},
    "int": {"type": "integer", "format": "int64"},
    "float": {"type": "number", "format": "double"},
    "bool": {"type": "boolean"},
    "datetime": {"type": "string", "format": "date-time"},
    "date": {"type": "string", "format": "date"},
    "bytes": {"type": "string", "format": "byte"},
    "object": {},  # IntOrString, RawExtension, JSON: anything
}
_CONTAINER_MODELS = frozenset({"V1Container", "V1EphemeralContainer"})
_SUBRESOURCE_MODELS = {"eviction": ("policy", "v1", "Eviction"), "binding": ("", "v1", "Binding")}
_SUBRESOURCE_MODELS["scale"] = ("autoscaling", "v1", "Scale")
_WRITE_PARAMETERS = ("dryRun", "fieldManager", "fieldValidation")


def _ref(name: str) -> Obj:
    return {"$ref": REF_PREFIX + name}


def _query(name: str) -> Obj:
    return {"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": True}}


def _path_parameter(name: str) -> Obj:
    return {"name": name, "in": "path", "required": True, "schema": {"type": "string", "uniqueItems": True}}


# --- built-in schemas from the python client's models --------------------------------------------------


def model_class_name(group: str, version: str, kind: str) -> str | None:
    """The python client's model for a kind: ``CoreV1Event``/``EventsV1Event`` where the name is shared
    between groups, ``V1Pod`` otherwise."""
    prefix = (group.split(".", maxsplit=1)[0] or "core").capitalize()
    for name in (f"{prefix}{version.capitalize()}{kind}", f"{version.capitalize()}{kind}"):
        if hasattr(models, name):
            return name
    return None


def _type_schema(type_name: str, field: str, owner: str, refs: set[str]) -> Obj:
    if type_name in _PRIMITIVES:
        return dict(_PRIMITIVES[type_name])
    if match := re.fullmatch(r"[Ll]ist\[(.+)\]", type_name):
        schema: Obj = {"type": "array", "items": _type_schema(match[1], field, owner, refs)}
        key = merge_key(("containers", field) if owner in _CONTAINER_MODELS else (field,))
        if key:
            schema.update({"x-kubernetes-patch-merge-key": key, "x-kubernetes-patch-strategy": "merge"})
        elif field in SET_LISTS:
            schema["x-kubernetes-patch-strategy"] = "merge"
        return schema
    if match := re.fullmatch(r"[Dd]ict\(?\[?str, (.+?)[\])]", type_name):
        return {"type": "object", "additionalProperties": _type_schema(match[1], field, owner, refs)}
    refs.add(type_name)
    return _ref(type_name)


def _model_schema(name: str, refs: set[str]) -> Obj:
    model = getattr(models, name)
    properties = {
        model.attribute_map[attribute]: _type_schema(type_name, model.attribute_map[attribute], name, refs)
        for attribute, type_name in model.openapi_types.items()
    }
    schema: Obj = {"type": "object", "properties": properties}
    description = (model.__doc__ or "").split("Attributes:", 1)[0].strip()
    if description and not description.startswith("NOTE:"):
        schema["description"] = " ".join(description.split())
    return schema


def _with_models(schemas: dict[str, Obj], roots: set[str]) -> None:
    """Add the models named in ``roots``, and every model they refer to, to ``schemas``."""
    pending = set(roots)
    while pending:
        name = pending.pop()
        if name in schemas:
            continue
        refs: set[str] = set()
        schemas[name] = _model_schema(name, refs)
        pending |= refs - schemas.keys()


def _gvk(group: str, version: str, kind: str) -> Obj:
    return {"group": group, "version": version, "kind": kind}


# --- CRD schemas -------------------------------------------------------------------------------------


def crd_schema_name(group: str, version: str, kind: str) -> str:
    return ".".join([*reversed(group.split(".")), version, kind])


def _crd_schema(kind: Kind) -> Obj:
    crd = crd_version(kind.group, kind.version, kind.plural)
    schema: Obj = (
        copy.deepcopy(crd.schema) if crd else {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    )
    properties: Obj = schema.setdefault("properties", {})
    properties["metadata"] = _ref(OBJECT_META)
    properties.setdefault("apiVersion", {"type": "string"})
    properties.setdefault("kind", {"type": "string"})
    return schema


# --- documents ------------------------------------------------------------------------------------------


_MODEL_NAME = re.compile(r"(?P<prefix>[A-Z][a-z]+)?(?P<version>V\d+(?:alpha\d+|beta\d+)?)(?P<type>[A-Z]\w*)")


def published_name(model: str) -> str:
    """The name a model's schema is published under, upstream-style: ``V1ContainerPort`` as
    ``io.k8s.api.v1.ContainerPort`` (``kubectl explain`` shows the last part)."""
    match = _MODEL_NAME.fullmatch(model)
    if match is None:
        return model
    prefix = f"{match['prefix'].lower()}." if match["prefix"] else ""
    return f"io.k8s.api.{prefix}{match['version'].lower()}.{match['type']}"


def _model_of(kind: Kind) -> str:
    name = model_class_name(kind.group, kind.version, kind.kind)
    if name is None:
        raise LookupError(f"the python client has no model for {kind.api_version} {kind.kind}")
    return name


def schema_name(kind: Kind) -> str:
    if kind.custom:
        return crd_schema_name(kind.group, kind.version, kind.kind)
    return published_name(_model_of(kind))


def _renamed(value: Any, names: dict[str, str]) -> Any:
    """``value`` with every reference to a model by its class name made to its published name."""
    if isinstance(value, dict):
        out = {key: _renamed(item, names) for key, item in value.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.removeprefix(REF_PREFIX) in names:
            out["$ref"] = REF_PREFIX + names[ref.removeprefix(REF_PREFIX)]
        return out
    if isinstance(value, list):
        return [_renamed(item, names) for item in value]
    return value


def _operation(action: str, gvk: Obj, body: str, *, writes: bool, params: tuple[str, ...] = ()) -> Obj:
    operation: Obj = {
        "operationId": f"{action}{gvk['kind']}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
        "parameters": [_query(p) for p in (*params, *(_WRITE_PARAMETERS if writes else ()))],
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": _ref(body)}}}},
    }
    if writes:
        content = (
            ["application/json"]
            if action != "patch"
            else [
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/apply-patch+yaml",
            ]
        )
        body_schema = _ref(body) if action != "patch" else {"type": "object"}
        operation["requestBody"] = {
            "required": True,
            "content": {c: {"schema": body_schema} for c in content},
        }
    return operation


def _paths_for(kind: Kind, name: str, schemas: dict[str, Obj]) -> dict[str, Obj]:
    gvk = _gvk(kind.group, kind.version, kind.kind)
    base = f"/api/{kind.version}" if not kind.group else f"/apis/{kind.group}/{kind.version}"
    scoped = f"{base}/namespaces/{{namespace}}/{kind.plural}" if kind.namespaced else f"{base}/{kind.plural}"
    scope_parameters = [_path_parameter("namespace")] if kind.namespaced else []
    list_name = f"{name}List" if f"{name}List" in schemas else name
    listing = ("labelSelector", "fieldSelector", "limit", "continue", "resourceVersion", "watch")
    paths: dict[str, Obj] = {
        scoped: {
            "get": _operation("list", gvk, list_name, writes=False, params=listing),
            "post": _operation("post", gvk, name, writes=True),
            "delete": _operation("deletecollection", gvk, name, writes=False, params=("labelSelector",)),
            "parameters": scope_parameters,
        },
        f"{scoped}/{{name}}": {
            "get": _operation("get", gvk, name, writes=False),
            "put": _operation("put", gvk, name, writes=True),
            "patch": _operation("patch", gvk, name, writes=True),
            "delete": _operation("delete", gvk, name, writes=False, params=("gracePeriodSeconds", "dryRun")),
            "parameters": [*scope_parameters, _path_parameter("name")],
        },
    }
    if kind.namespaced:
        paths[f"{base}/{kind.plural}"] = {
            "get": _operation("list", gvk, list_name, writes=False, params=listing)
        }
    for sub in sorted(kind.subresources):
        item = f"{scoped}/{{name}}/{sub}"
        parameters = [*scope_parameters, _path_parameter("name")]
        if sub in _SUBRESOURCE_MODELS:
            group, version, sub_kind = _SUBRESOURCE_MODELS[sub]
            sub_gvk = _gvk(group, version, sub_kind)
            sub_name = model_class_name(group, version, sub_kind) or name
            _with_models(schemas, {sub_name})
            schemas[sub_name]["x-kubernetes-group-version-kind"] = [sub_gvk]
            if sub == "scale":
                paths[item] = {
                    "get": _operation("get", sub_gvk, sub_name, writes=False),
                    "put": _operation("put", sub_gvk, sub_name, writes=True),
                    "patch": _operation("patch", sub_gvk, sub_name, writes=True),
                    "parameters": parameters,
                }
            else:
                paths[item] = {
                    "post": _operation("post", sub_gvk, sub_name, writes=True),
                    "parameters": parameters,
                }
        else:
            paths[item] = {
                "get": _operation("get", gvk, name, writes=False),
                "put": _operation("put", gvk, name, writes=True),
                "patch": _operation("patch", gvk, name, writes=True),
                "parameters": parameters,
            }
    return paths


def _document(group: str, version: str) -> Obj | None:
    served = [k for k in kinds.KINDS if k.group == group and k.version == version]
    if not served:
        return None
    schemas: dict[str, Obj] = {}
    _with_models(schemas, {OBJECT_META})
    paths: dict[str, Obj] = {}
    for kind in served:
        name = schema_name(kind) if kind.custom else _model_of(kind)
        if kind.custom:
            schemas[name] = _crd_schema(kind)
            schemas[f"{name}List"] = {
                "type": "object",
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "metadata": _ref("V1ListMeta"),
                    "items": {"type": "array", "items": _ref(name)},
                },
            }
            _with_models(schemas, {"V1ListMeta"})
        else:
            _with_models(schemas, {name, *([f"{name}List"] if hasattr(models, f"{name}List") else [])})
        schemas[name] = {
            **schemas[name],
            "x-kubernetes-group-version-kind": [_gvk(group, version, kind.kind)],
        }
        if f"{name}List" in schemas:
            list_gvk = [_gvk(group, version, kind.list_kind)]
            schemas[f"{name}List"] = {**schemas[f"{name}List"], "x-kubernetes-group-version-kind": list_gvk}
        paths.update(_paths_for(kind, name, schemas))
    names = {name: published_name(name) for name in schemas if hasattr(models, name)}
    published = {names.get(name, name): schema for name, schema in schemas.items()}
    major, minor = "1", "33"
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": f"v{major}.{minor}.0"},
        "paths": _renamed(paths, names),
        "components": {"schemas": _renamed(dict(sorted(published.items())), names)},
    }


def _path_of(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


@cache
def _documents() -> dict[str, tuple[Obj, bytes, str]]:
    """Every group/version's document, as served (bytes) and its hash, by its path under /openapi/v3/."""
    out: dict[str, tuple[Obj, bytes, str]] = {}
    for group, versions in kinds.group_versions().items():
        for version in versions:
            document = _document(group, version)
            if document is None:
                continue
            body = codec.dumps(document)
            out[_path_of(group, version)] = (document, body, hashlib.sha512(body).hexdigest().upper()[:128])
    return out


def index() -> Obj:
    """``GET /openapi/v3``: where each group/version's document is, with a hash that changes with it."""
    return {
        "paths": {
            path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
            for path, (_, _, digest) in _documents().items()
        }
    }


def document_body(path: str) -> bytes | None:
    """``GET /openapi/v3/<path>``, serialized; None when no group/version lives there."""
    entry = _documents().get(path.strip("/"))
    return entry[1] if entry else None


def schemas_for(kind: Kind) -> tuple[Obj, dict[str, Obj]]:
    """The kind's schema and the components its references resolve against."""
    document, _, _ = _documents()[_path_of(kind.group, kind.version)]
    components: dict[str, Obj] = document["components"]["schemas"]
    return components[schema_name(kind)], components

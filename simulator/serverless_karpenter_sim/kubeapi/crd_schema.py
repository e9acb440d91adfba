"""Our CRDs, enforced: the schemas in ``deploy/crds`` (the files a user applies) drive what the simulated API
server accepts for NodePools, EC2NodeClasses and NodeOverlays.

On every create and update of a custom resource whose CRD is there, as kube-apiserver does:
1. unknown fields are pruned (``x-kubernetes-preserve-unknown-fields`` keeps them). The request's
   ``fieldValidation`` decides what else happens: ``Strict`` (kubectl's default) refuses the request with
   400 BadRequest ``strict decoding error: unknown field "spec.foo"``; ``Warn`` (the server's default for
   other clients) answers a ``Warning`` header per field; ``Ignore`` says nothing;
2. defaults are filled in (also on read, so an object stored before a default existed reads defaulted);
3. the object is validated by the OpenAPI keywords, then by the CEL ``x-kubernetes-validations`` (skipped,
   as upstream, when a value has the wrong type). Any error answers 422 Invalid naming each field path.

:func:`stored_unvalidated` is the one way around this: it stands for an object stored before the CRD had its
rules (or while it had none), which the API server keeps serving as it is.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from . import crd_validation
from .crd_validation import MISSING, Findings
from .errors import bad_request
from .field_errors import invalid_object
from .kinds import Kind

Obj = dict[str, Any]
CRD_DIRECTORY = Path(__file__).resolve().parents[3] / "deploy" / "crds"
FIELD_VALIDATION_MODES = ("Strict", "Warn", "Ignore")
_NOT_CHECKED = (
    "some validation rules were not checked because the object was invalid; correct the existing errors to "
    "complete validation"
)

_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, when built with it
_field_validation: contextvars.ContextVar[str] = contextvars.ContextVar("field_validation", default="Warn")
_warnings: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("crd_warnings", default=None)
_bypass: contextvars.ContextVar[bool] = contextvars.ContextVar("crd_bypass", default=False)


@dataclass(frozen=True)
class CrdSchema:
    group: str
    version: str
    plural: str
    kind: str
    root: Mapping[str, Any]
    source: Path


def _load(path: Path) -> list[CrdSchema]:
    document = yaml.load(path.read_text(), Loader=_YAML_LOADER)
    spec = document["spec"]
    return [
        CrdSchema(
            spec["group"],
            version["name"],
            spec["names"]["plural"],
            spec["names"]["kind"],
            version["schema"]["openAPIV3Schema"],
            path,
        )
        for version in spec["versions"]
    ]


@cache
def schemas(directory: Path = CRD_DIRECTORY) -> dict[tuple[str, str, str], CrdSchema]:
    found: dict[tuple[str, str, str], CrdSchema] = {}
    for path in sorted(directory.glob("*.yaml")):
        for crd in _load(path):
            found[(crd.group, crd.version, crd.plural)] = crd
    return found


def schema_for(kind: Kind) -> CrdSchema | None:
    if not kind.custom:
        return None
    return schemas().get((kind.group, kind.version, kind.plural))


# --- the request's context ------------------------------------------------------------------------------


@contextlib.contextmanager
def request_context(field_validation: str | None) -> Iterator[list[str]]:
    """The ``fieldValidation`` of one request; yields the warnings it collects for the answer's headers."""
    mode = field_validation or "Warn"
    if mode not in FIELD_VALIDATION_MODES:
        raise bad_request(
            f"fieldValidation parameter unsupported: {mode}; the supported values are: Ignore, Warn, Strict"
        )
    warnings: list[str] = []
    mode_token = _field_validation.set(mode)
    warnings_token = _warnings.set(warnings)
    try:
        yield warnings
    finally:
        _field_validation.reset(mode_token)
        _warnings.reset(warnings_token)


@contextlib.contextmanager
def stored_unvalidated() -> Iterator[None]:
    """Writes in this block store custom resources as they are, as objects kept from before the rules."""
    token = _bypass.set(True)
    try:
        yield
    finally:
        _bypass.reset(token)


# --- admission ------------------------------------------------------------------------------------------


def admit(kind: Kind, obj: Obj, old: Obj | None) -> Obj:
    """``obj`` pruned and defaulted, after it passed its CRD's schema and rules; raises 400 or 422."""
    crd = schema_for(kind)
    if crd is None or _bypass.get():
        return obj
    root = crd.root
    unknown: list[str] = []
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    pruned = crd_validation.prune(root, body, "", unknown)
    if unknown:
        _report_unknown(kind, unknown)
    defaulted = crd_validation.default(root, pruned)
    new = {**{k: obj[k] for k in ("apiVersion", "kind", "metadata") if k in obj}, **defaulted}
    old_body: Any = MISSING
    if old is not None:
        old_body = {k: v for k, v in old.items() if k not in ("apiVersion", "kind", "metadata")}
    found = Findings()
    schema_without_meta = {
        **root,
        "properties": {k: v for k, v in (root.get("properties") or {}).items() if k != "metadata"},
    }
    crd_validation.validate(schema_without_meta, defaulted, old_body, "", found)
    if found.type_errors:
        found.add("InternalError", "<nil>", f"Internal error: {_NOT_CHECKED}")
    else:
        crd_validation.validate_rules(schema_without_meta, defaulted, old_body, "", found)
    if found.errors:
        raise invalid_object(kind, str((obj.get("metadata") or {}).get("name") or ""), found.errors)
    return new


def present(kind: Kind, obj: Obj) -> Obj:
    """``obj`` as read: defaulted by its CRD, as the API server defaults what it reads from etcd."""
    crd = schema_for(kind)
    if crd is None:
        return obj
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    defaulted = crd_validation.default(crd.root, body)
    if defaulted is body:
        return obj
    return {**{k: obj[k] for k in ("apiVersion", "kind", "metadata") if k in obj}, **defaulted}


def _report_unknown(kind: Kind, unknown: list[str]) -> None:
    mode = _field_validation.get()
    if mode == "Strict":
        fields = ", ".join(f'unknown field "{path}"' for path in unknown)
        raise bad_request(
            f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}: '
            f"strict decoding error: {fields}"
        )
    warnings = _warnings.get()
    if mode == "Warn" and warnings is not None:
        warnings.extend(f'unknown field "{path}"' for path in unknown)

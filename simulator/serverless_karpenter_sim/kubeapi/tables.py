"""Server-side Table output (``Accept: application/json;as=Table;v=v1;g=meta.k8s.io``): what ``kubectl get``
prints is the server's columns, not kubectl's.

Built-in kinds get the columns kube-apiserver's printers give them (Node: NAME STATUS ROLES AGE VERSION;
Pod: NAME READY STATUS RESTARTS AGE; ...), custom resources their CRD's ``additionalPrinterColumns`` from
``deploy/crds``, and any other kind NAME and AGE (for CRDs) or NAME and CREATED AT. Ages are measured on the
server's clock, the simulation's virtual one, against which every timestamp it holds was made.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from . import printers
from .crd_files import crd_version
from .jsonpath import JsonPathError, find
from .kinds import Kind

Obj = dict[str, Any]


def wants_table(accept: str | None) -> bool:
    """Whether the client asked for a meta.k8s.io Table (kubectl lists JSON after it, as a fallback)."""
    for media in (accept or "").split(","):
        parameters = {
            p.split("=", 1)[0].strip().lower(): p.partition("=")[2].strip() for p in media.split(";")[1:]
        }
        if (
            parameters.get("as") == "Table"
            and parameters.get("g") == "meta.k8s.io"
            and parameters.get("v")
            in (
                "v1",
                "v1beta1",
            )
        ):
            return True
    return False


def _column(name: str, type_: str, description: str = "", priority: int = 0, format_: str = "") -> Obj:
    return {"name": name, "type": type_, "format": format_, "description": description, "priority": priority}


def _custom_columns(kind: Kind) -> tuple[Obj, ...]:
    crd = crd_version(kind.group, kind.version, kind.plural)
    return crd.printer_columns if crd is not None else ()


def _custom_cell(obj: Obj, column: Obj, now: datetime) -> Any:
    try:
        found = find(obj, column["jsonPath"])
    except JsonPathError:
        return None
    if not found or found[0] is None:
        return None
    value = found[0]
    if column.get("type") == "date":
        return printers.age(value, now)
    if column.get("type") == "string" and not isinstance(value, str):
        return printers.json_text(value)
    return value


def _definitions_and_cells(kind: Kind, now: datetime) -> tuple[list[Obj], Callable[[Obj], list[Any]]]:
    name_column = _column("Name", "string", "Name must be unique within a namespace.", format_="name")
    printer = printers.BUILT_IN.get((kind.group, kind.plural))
    if printer is not None:
        columns = [
            name_column,
            *(_column(c.name, c.type, c.description, c.priority) for c in printer.columns),
        ]
        return columns, lambda obj: [printers.name(obj), *printer.cells(obj, now)]
    if kind.custom:
        custom = _custom_columns(kind)
        if not custom:
            custom = ({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},)
        columns = [name_column] + [
            _column(c["name"], c.get("type", "string"), c.get("description", ""), int(c.get("priority", 0)))
            for c in custom
        ]
        return columns, lambda obj: [printers.name(obj), *(_custom_cell(obj, c, now) for c in custom)]
    created = _column("Created At", "date", "When the object was created.")
    return [name_column, created], lambda obj: [
        printers.name(obj),
        (obj.get("metadata") or {}).get("creationTimestamp"),
    ]


def _row_object(obj: Obj, include: str) -> Obj | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata") or {},
    }


def table(
    kind: Kind,
    objects: Iterable[Obj],
    now: datetime,
    *,
    list_metadata: Mapping[str, Any] | None = None,
    include_object: str | None = None,
) -> Obj:
    """A meta.k8s.io/v1 Table of ``objects``; ``include_object`` is the request's ``includeObject``
    (``None``, ``Metadata``, the default, or ``Object``)."""
    columns, cells = _definitions_and_cells(kind, now)
    include = include_object or "Metadata"
    rows = []
    for obj in objects:
        row: Obj = {"cells": cells(obj)}
        embedded = _row_object(obj, include)
        if embedded is not None:
            row["object"] = embedded
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": dict(list_metadata or {}),
        "columnDefinitions": columns,
        "rows": rows,
    }

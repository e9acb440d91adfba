"""Manifest files for ``plan``: read as kubectl reads them, checked as the API server would admit them.

Files and folders become :class:`Source` objects (an object and where it was written). YAML is read
strictly (a key twice in one mapping is an error, timestamps stay strings) and a document that is not an
object, an alias bomb, a recursive alias or nesting deeper than any manifest is refused. :func:`select`
keeps the kinds and apiVersions scheduling reads, validates each (``scheduling.manifest_validation``),
lets the later of two same-named objects win as ``kubectl apply`` does, and lists what it left out.
Every problem is a :class:`PlanError`: one line naming the file, the object, the field and the rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from serverless_karpenter.api.errors import ManifestError, show
from serverless_karpenter.scheduling.inputs import MAX_PODS, NotAnObject, flatten, pod_count
from serverless_karpenter.scheduling.manifest_validation import (
    CORE_KINDS,
    KARPENTER_KINDS,
    display_name,
    group,
    read_kind,
    validate,
)

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
READ_KINDS = {**CORE_KINDS, **KARPENTER_KINDS}


class PlanError(Exception):
    """A problem with the inputs, reported as one line and exit code 2."""


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in MANIFEST_SUFFIXES)
        if not files:
            raise PlanError(f"{path}: no {', '.join(MANIFEST_SUFFIXES)} files in the folder")
        return files
    if path.is_file():
        return [path]
    raise PlanError(f"{path}: no such file or folder")


@dataclass
class Source:
    """An object from the manifests, and where it was written (for errors and the list of ignored)."""

    obj: dict[str, Any]
    file: Path
    document: int  # 1-based, counting every document of the file

    def where(self) -> str:
        return f"{self.file}: document {self.document}"


class _StrictLoader(yaml.SafeLoader):
    """YAML as kubectl reads it: a key twice in one mapping is an error (PyYAML would keep the last one
    silently), and timestamps stay strings (JSON has no timestamps; a label value like 2024-01-01 is a
    string to the API server)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                if key_node.value in seen:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"mapping key {key_node.value!r} already defined", key_node.start_mark
                    )
                seen.add(key_node.value)
        return super().construct_mapping(node, deep=deep)


def _timestamp_as_text(loader: _StrictLoader, node: yaml.Node) -> str:
    assert isinstance(node, yaml.ScalarNode)
    return str(loader.construct_scalar(node))


_StrictLoader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_as_text)

# No manifest nests this deep; deeper (or a recursive alias) would exhaust Python's stack further on.
_MAX_DEPTH = 100
# Aliases may repeat a node, but a document that expands to this many values and ten times its own size
# is an alias bomb ("billion laughs"): refused before anything walks the expansion.
_MAX_EXPANDED = 1_000_000


def _check_shape(doc: Any) -> str | None:
    """Why a loaded document cannot be walked safely (too deep, recursive, an alias bomb), or None."""
    sizes: dict[int, int] = {}

    def size(value: Any, depth: int) -> int:
        if not isinstance(value, dict | list):
            return 1
        if depth > _MAX_DEPTH:
            raise RecursionError
        known = sizes.get(id(value))
        if known is not None:
            return known
        children = value.values() if isinstance(value, dict) else value
        total = 1 + sum(size(child, depth + 1) for child in children)
        sizes[id(value)] = total
        return total

    try:
        expanded = size(doc, 0)
    except RecursionError:
        return f"nested deeper than {_MAX_DEPTH} levels (or a recursive alias)"
    if expanded > _MAX_EXPANDED and expanded > 10 * len(sizes):
        return f"aliases expand it to {expanded} values: refused as an alias bomb"
    return None


def _documents(file: Path) -> list[Any]:
    try:
        text = file.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise PlanError(f"{file}: not UTF-8 text (byte {error.start}): not a manifest") from None
    except OSError as error:
        raise PlanError(f"{file}: cannot read: {error.strerror or error}") from None
    try:
        return list(yaml.load_all(text, Loader=_StrictLoader))
    except yaml.YAMLError as error:
        first = " ".join(str(error).split()) if str(error) else type(error).__name__
        raise PlanError(f"{file}: not valid YAML: {first}") from None
    except RecursionError:
        raise PlanError(f"{file}: not valid YAML: nested deeper than Python can read") from None


def load_sources(paths: Iterable[str]) -> list[Source]:
    """Every object of the files and folders, in order; a document that is not an object is an error."""
    out: list[Source] = []
    for raw in paths:
        for file in _files(Path(raw)):
            for index, doc in enumerate(_documents(file), start=1):
                problem = _check_shape(doc)
                if problem:
                    raise PlanError(f"{file}: document {index}: {problem}")
                try:
                    objects = flatten([doc])
                except NotAnObject as error:
                    raise PlanError(f"{file}: document {index}: {str(error).partition(': ')[2]}") from None
                out.extend(Source(obj, file, index) for obj in objects)
    return out


def _object_label(obj: Mapping[str, Any]) -> str:
    name = display_name(obj)
    return f' object "{name}"' if name else " object"


def select(sources: Sequence[Source]) -> tuple[list[Source], list[dict[str, str]]]:
    """The objects scheduling reads, validated, and the ones left out (with why). Of two objects with
    one kind and name the later wins, as with ``kubectl apply -f`` of both."""
    kept: dict[tuple[str, ...], Source] = {}
    unnamed: list[Source] = []
    ignored: list[dict[str, str]] = []
    for source in sources:
        obj = source.obj
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if kind is None or kind == "":
            raise PlanError(f"{source.where()}:{_object_label(obj)}: kind: is required")
        for field_name, value in (("kind", kind), ("apiVersion", api_version)):
            if value is not None and not isinstance(value, str):
                got = f"must be a string (got {show(value)})"
                raise PlanError(f"{source.where()}:{_object_label(obj)}: {field_name}: {got}")
        if not read_kind(api_version, kind):
            ignored.append(_ignored(source, _why_ignored(str(kind), api_version)))
            continue
        try:
            validate(obj)
        except ManifestError as error:
            raise PlanError(f"{source.file}: {error}") from None
        name = display_name(obj)
        meta = obj.get("metadata") or {}
        if not meta.get("name"):  # a Pod with only a generateName: the API server names each one anew
            unnamed.append(source)
            continue
        key = (group(str(api_version)), str(kind), str(name))
        if key in kept:
            ignored.append(
                _ignored(kept.pop(key), f"replaced by a later {kind} of the same name ({source.where()})")
            )
        kept[key] = source
    position = {id(source): index for index, source in enumerate(sources)}
    ordered = sorted([*kept.values(), *unnamed], key=lambda s: position[id(s)])
    return ordered, ignored


def _why_ignored(kind: str, api_version: str | None) -> str:
    expected = READ_KINDS.get(kind)
    if expected is None:
        return "not a kind plan reads"
    missing = "no apiVersion" if api_version is None else f"apiVersion {api_version}"
    return f"{missing}: plan reads {kind} of {expected} only"


def _ignored(source: Source, reason: str) -> dict[str, str]:
    obj = source.obj
    return {
        "kind": str(obj.get("kind")),
        "apiVersion": str(obj.get("apiVersion") or ""),
        "name": display_name(obj) or "",
        "file": str(source.file),
        "reason": reason,
    }


def check_pod_count(sources: Sequence[Source]) -> None:
    total = 0
    for source in sources:
        total += pod_count(source.obj)
        if total > MAX_PODS:
            obj = source.obj
            raise PlanError(
                f'{source.file}: {obj.get("kind")} "{display_name(obj)}": spec: with it the manifests ask '
                f"for more than {MAX_PODS} pods, more than plan simulates"
            )

"""The CustomResourceDefinitions the simulated server holds: ``deploy/crds``, the same files a user applies
to a real cluster."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

CRD_DIRECTORY = Path(__file__).resolve().parents[3] / "deploy" / "crds"


@dataclass(frozen=True)
class CrdVersion:
    """One served version of a CRD: its schema and printer columns."""

    group: str
    version: str
    kind: str
    plural: str
    schema: dict[str, Any]
    printer_columns: tuple[dict[str, Any], ...]


@cache
def crd_versions() -> dict[tuple[str, str, str], CrdVersion]:
    """Every served version in ``deploy/crds``, by (group, version, plural)."""
    out: dict[tuple[str, str, str], CrdVersion] = {}
    for path in sorted(CRD_DIRECTORY.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if not document or document.get("kind") != "CustomResourceDefinition":
                continue
            spec = document["spec"]
            names = spec["names"]
            for version in spec["versions"]:
                if not version.get("served", True):
                    continue
                key = (spec["group"], version["name"], names["plural"])
                out[key] = CrdVersion(
                    group=spec["group"],
                    version=version["name"],
                    kind=names["kind"],
                    plural=names["plural"],
                    schema=(version.get("schema") or {}).get("openAPIV3Schema") or {},
                    printer_columns=tuple(version.get("additionalPrinterColumns") or ()),
                )
    return out


def crd_version(group: str, version: str, plural: str) -> CrdVersion | None:
    return crd_versions().get((group, version, plural))

"""Server-side field validation: the ``fieldValidation`` query parameter of create, update and patch.

kubectl (``--validate=strict``, its default) finds the parameter in ``/openapi/v3`` and sends
``fieldValidation=Strict`` instead of validating on its side; kube-apiserver then refuses a body with a
field its schema does not declare (400, ``strict decoding error: unknown field "spec.foo"``). ``Warn``
answers the same findings as ``Warning`` headers and writes; ``Ignore`` (and no parameter, as the python
client sends) says nothing.

Fields are checked against the kind's published OpenAPI schema (:mod:`.openapi`): for a patch, the fields
the patch sets (``$``-directives and deletions aside), which are the only ones it can add.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import ApiError, bad_request
from .kinds import Kind
from .openapi import REF_PREFIX, schemas_for

Obj = dict[str, Any]
STRICT, WARN, IGNORE = "Strict", "Warn", "Ignore"
DIRECTIVES = (STRICT, WARN, IGNORE)


def unknown_fields(value: Any, schema: Obj, components: Mapping[str, Obj], path: str = "") -> list[str]:
    """The paths, upstream-style (``spec.containers[0].foo``), of fields in ``value`` that ``schema`` does
    not declare."""
    while "$ref" in schema:
        schema = components[schema["$ref"].removeprefix(REF_PREFIX)]
    found: list[str] = []
    if isinstance(value, dict):
        properties: Obj | None = schema.get("properties")
        additional = schema.get("additionalProperties")
        preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        for key, item in value.items():
            if key.startswith("$") or item is None:  # strategic merge directives, and deletions
                continue
            where = f"{path}.{key}" if path else key
            if properties is not None and key in properties:
                found += unknown_fields(item, properties[key], components, where)
            elif isinstance(additional, dict):
                found += unknown_fields(item, additional, components, where)
            elif properties is not None and not preserve and additional is not True:
                found.append(where)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            found += unknown_fields(item, schema["items"], components, f"{path}[{index}]")
    return found


def check(kind: Kind, directive: str | None, body: Any) -> list[str]:
    """Apply ``directive`` to a write's body: raise 400 for Strict, return the warnings for Warn."""
    if directive is None or directive == IGNORE:
        return []
    if directive not in DIRECTIVES:
        raise bad_request(
            f'fieldValidation directive "{directive}" is not supported: use one of {", ".join(DIRECTIVES)}'
        )
    if not isinstance(body, dict):
        return []
    schema, components = schemas_for(kind)
    findings = [f'unknown field "{path}"' for path in unknown_fields(body, schema, components)]
    if findings and directive == STRICT:
        raise ApiError(
            400,
            f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}: '
            f"strict decoding error: {', '.join(findings)}",
            reason="BadRequest",
        )
    return findings

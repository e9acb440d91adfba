"""What the API server does for kubectl beyond the REST the control plane uses: ``/openapi/v3``
(:mod:`.openapi`), server-side field validation (:mod:`.field_validation`) and Table output
(:mod:`.tables`). The server calls these hooks; each answers in kube-apiserver's terms."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from email.message import Message
from typing import Any

import yaml
from serverless_karpenter.clock import Clock

from . import codec, field_validation, openapi, tables
from .errors import ApiError
from .kinds import Kind
from .store import APPLY_PATCH, JSON_PATCH, Entry, Page, Result

Headers = tuple[tuple[str, str], ...]


def openapi_body(segments: Sequence[str]) -> bytes:
    """``GET /openapi/v3`` and ``/openapi/v3/<group-version path>``; 404 for anything else (there is no v2:
    kubectl 1.27+ reads v3, and falls back to v2 only when v3 is missing)."""
    if not segments or segments[0] != "v3":
        raise ApiError(404, "the server could not find the requested resource")
    if len(segments) == 1:
        return codec.dumps(openapi.index())
    body = openapi.document_body("/".join(segments[1:]))
    if body is None:
        raise ApiError(404, "the server could not find the requested resource")
    return body


def _patch_body(content_type: str, raw: bytes) -> Any:
    media = content_type.split(";", maxsplit=1)[0].strip()
    if media == JSON_PATCH or not raw:
        return None  # operations, not an object: what they add is checked nowhere upstream either
    try:
        return yaml.safe_load(raw.decode()) if media == APPLY_PATCH else codec.loads(raw)
    except (ValueError, yaml.YAMLError):
        return None  # the store answers the malformed body with its own error


def field_warnings(
    method: str,
    kind: Kind | None,
    subresource: str | None,
    params: Mapping[str, str],
    headers: Message,
    raw: bytes,
) -> Headers:
    """Apply the request's ``fieldValidation`` to a create, update or patch of an object (or its status):
    raise 400 on Strict, return ``Warning`` headers on Warn."""
    if method not in ("POST", "PUT", "PATCH") or kind is None or subresource not in (None, "status"):
        return ()
    directive = params.get("fieldValidation")
    if directive is None:
        return ()
    if method == "PATCH":
        body = _patch_body(headers.get("Content-Type") or "", raw)
    else:
        try:
            body = codec.loads(raw) if raw else None
        except ValueError:
            return ()  # the handler answers a body it cannot read (400, or 415 for protobuf)
    found = field_validation.check(kind, directive, body)
    return tuple(("Warning", warning_value(finding)) for finding in found)


def warning_value(text: str) -> str:
    """An RFC 7234 ``Warning`` header value, code 299 as kube-apiserver sends: the text quoted, its quotes
    escaped."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'299 - "{escaped}"'


def wants_table(headers: Message) -> bool:
    return tables.wants_table(headers.get("Accept"))


def _object(result: Result) -> dict[str, Any]:
    return result.obj if isinstance(result, Entry) else result


def list_table(kind: Kind, page: Page, clock: Clock, params: Mapping[str, str]) -> dict[str, Any]:
    metadata: dict[str, Any] = {"resourceVersion": str(page.resource_version)}
    if page.continue_token:
        metadata["continue"] = page.continue_token
        metadata["remainingItemCount"] = page.remaining
    return tables.table(
        kind,
        [_object(item) for item in page.items],
        clock.now(),
        list_metadata=metadata,
        include_object=params.get("includeObject"),
    )


def get_table(kind: Kind, result: Result, clock: Clock, params: Mapping[str, str]) -> dict[str, Any]:
    obj = _object(result)
    version = (obj.get("metadata") or {}).get("resourceVersion")
    return tables.table(
        kind,
        [obj],
        clock.now(),
        list_metadata={"resourceVersion": version} if version else {},
        include_object=params.get("includeObject"),
    )


class TableWatchEncoder:
    """Watch events for a client that asked for Tables: each object a one-row Table, the column definitions
    in the first event only (kubectl keeps them from there); bookmarks and errors as they are."""

    def __init__(self, kind: Kind, clock: Clock, params: Mapping[str, str]) -> None:
        self.kind = kind
        self.clock = clock
        self.include_object = params.get("includeObject")
        self.sent_columns = False

    def line(self, event_type: str, result: Result) -> bytes:
        obj = _object(result)
        if event_type in ("ERROR", "BOOKMARK"):
            return codec.dumps({"type": event_type, "object": obj}) + b"\n"
        table = tables.table(self.kind, [obj], self.clock.now(), include_object=self.include_object)
        if self.sent_columns:
            table["columnDefinitions"] = []
        self.sent_columns = True
        return codec.dumps({"type": event_type, "object": table}) + b"\n"

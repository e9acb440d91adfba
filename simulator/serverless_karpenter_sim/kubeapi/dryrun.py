"""Where a write asks for ``dryRun``: the query string of any write, and the body of those whose options
travel in it (a DELETE's DeleteOptions, an Eviction's deleteOptions), as kube-apiserver reads them.

The only directive upstream knows is ``All``; anything else is refused before the write runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from . import codec
from .errors import bad_request

ALL = "All"


def _body_directives(method: str, subresource: str | None, raw: bytes) -> list[Any]:
    if not raw or not (method == "DELETE" or (method == "POST" and subresource == "eviction")):
        return []
    try:
        body = codec.loads(raw)
    except ValueError:
        return []  # the handler reports the malformed body
    if not isinstance(body, dict):
        return []
    options = body if method == "DELETE" else body.get("deleteOptions")
    directives = options.get("dryRun") if isinstance(options, dict) else None
    if directives is None:
        return []
    return list(directives) if isinstance(directives, list) else [directives]


def requested(method: str, subresource: str | None, params: Mapping[str, str], raw: bytes) -> bool:
    """Whether this write is a dry run; raises 400 for a directive other than ``All``."""
    if method == "GET":
        return False
    directives: list[Any] = _body_directives(method, subresource, raw)
    if params.get("dryRun") is not None:
        directives.append(params["dryRun"])
    for directive in directives:
        if directive != ALL:
            raise bad_request(f'unsupported dry run directive: "{directive}"; the only one is "{ALL}"')
    return bool(directives)

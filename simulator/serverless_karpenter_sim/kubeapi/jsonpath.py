"""The subset of Kubernetes JSONPath that CRD ``additionalPrinterColumns`` use: ``.field``, ``['key']`` (dots
escaped as ``\\.`` in a key, as in ``.metadata.labels['karpenter\\.sh/nodepool']``, or in a field, as
Karpenter's NodeClaim CRD writes ``.metadata.labels.karpenter\\.sh/capacity-type``), ``[N]``, ``[*]``, and
filters ``[?(@.a.b=="v")]`` / ``!=``."""

from __future__ import annotations

import re
from typing import Any

_STEP = re.compile(
    r"""\.(?P<field>(?:\\.|[A-Za-z0-9_$/-])+)
      | \[\s*(?P<quote>['"])(?P<key>(?:\\.|(?!(?P=quote)).)*)(?P=quote)\s*\]
      | \[(?P<index>-?\d+|\*)\]
      | \[\?\(@(?P<filter_path>(?:\.[A-Za-z0-9_$-]+)+)\s*(?P<op>==|!=)\s*
        (?P<fquote>['"])(?P<value>.*?)(?P=fquote)\)\]
    """,
    re.VERBOSE,
)


class JsonPathError(ValueError):
    """An expression outside the supported subset."""


def _steps(expression: str) -> list[re.Match[str]]:
    text = expression.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    text = text.removeprefix("$")
    steps, position = [], 0
    while position < len(text):
        match = _STEP.match(text, position)
        if match is None:
            raise JsonPathError(f"unsupported JSONPath {expression!r} at {text[position:]!r}")
        steps.append(match)
        position = match.end()
    return steps


def _field(value: Any, path: str) -> Any:
    for name in path.strip(".").split("."):
        if not isinstance(value, dict) or name not in value:
            return None
        value = value[name]
    return value


def find(obj: Any, expression: str) -> list[Any]:
    """Every value ``expression`` selects in ``obj``, in order."""
    current = [obj]
    for step in _steps(expression):
        found: list[Any] = []
        for value in current:
            if step["field"] is not None or step["key"] is not None:
                raw = step["field"] if step["field"] is not None else step["key"]
                key = re.sub(r"\\(.)", r"\1", raw)
                if isinstance(value, dict) and key in value:
                    found.append(value[key])
            elif step["index"] is not None and isinstance(value, list):
                if step["index"] == "*":
                    found.extend(value)
                elif -len(value) <= int(step["index"]) < len(value):
                    found.append(value[int(step["index"])])
            elif step["filter_path"] is not None and isinstance(value, list):
                for item in value:
                    matches = str(_field(item, step["filter_path"])) == step["value"]
                    if matches == (step["op"] == "=="):
                        found.append(item)
        current = found
    return current

"""JSON in and out; orjson when it is installed, the standard library otherwise."""

from __future__ import annotations

import json
from typing import Any

try:
    import orjson

    def dumps(value: Any) -> bytes:
        return orjson.dumps(value)

    def loads(raw: bytes | str) -> Any:
        return orjson.loads(raw)

except ImportError:  # pragma: no cover - depends on the environment

    def dumps(value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def loads(raw: bytes | str) -> Any:
        return json.loads(raw)

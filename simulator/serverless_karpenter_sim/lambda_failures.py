"""What went wrong inside each simulated Lambda invocation, for the invariants to page on.

Three kinds of failure are collected, per invocation:

- ``access-denied``: AWS refused a call (a botocore ``ClientError`` whose code is AccessDenied,
  AccessDeniedException, UnauthorizedOperation or UnauthorizedAccess);
- ``forbidden``: the Kubernetes API server answered 403 (a ``kubernetes`` ``ApiException``);
- ``exception``: the handler raised anything else (an unhandled exception: Lambda reports the invocation
  as failed).

Each is caught whether the handler raised it, or handled it and logged it at warning level or above: a
permission we lack is a deployment bug even when the code copes with it (a handled 403 on a list is a
node we never see). Injected crashes (``crashpoints.InjectedCrash``) are a BaseException and are not
failures of the handler: they stand for the Lambda being killed.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from botocore.exceptions import ClientError
from kubernetes.client.exceptions import ApiException

ACCESS_DENIED = "access-denied"
FORBIDDEN = "forbidden"
EXCEPTION = "exception"
# AWS's codes for "your identity may not do this" (EC2 spells it UnauthorizedOperation).
ACCESS_DENIED_CODES = frozenset(
    {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedAccess"}
)
# How those errors read once formatted into a log line: botocore's "An error occurred (AccessDenied)",
# and the kubernetes client's "(403)\nReason: Forbidden" (or a status field of 403 in structured extras).
_ACCESS_DENIED_TEXT = re.compile(r"\b(?:" + "|".join(sorted(ACCESS_DENIED_CODES)) + r")\b")
_FORBIDDEN_TEXT = re.compile(r"\(403\)|Reason: Forbidden|\"(?:status|code|status_code)\": ?403\b")
PAGING_LOG_LEVELS = frozenset({"WARNING", "ERROR", "CRITICAL"})
_DETAIL_CHARS = 300
# Receives (kind, detail) for each failure a ScanningLog finds.
OnFailure = Callable[[str, str], None]


@dataclass
class LambdaFailure:
    function: str
    request_id: str
    at: float  # virtual seconds since the runtime started
    kind: str  # ACCESS_DENIED, FORBIDDEN or EXCEPTION
    detail: str
    logged: bool  # handled and logged, rather than raised
    # Raised in an invocation where an injected fault took effect (a throttle, a 5xx): the fault's own
    # consequence, which the scenario exists to show the control plane recovering from. Never set for
    # access-denied and forbidden, which page whatever caused them.
    caused_by_fault: bool = False

    @property
    def pages(self) -> bool:
        return not self.caused_by_fault

    def describe(self) -> str:
        how = "logged" if self.logged else "raised"
        return f"{self.function} at t={self.at:.0f}s {how} {self.kind}: {self.detail}"


def classify(error: BaseException) -> tuple[str, str]:
    """The kind of a raised error, looking through its causes, and a one-line detail."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ClientError):
            code = str(current.response.get("Error", {}).get("Code", ""))
            if code in ACCESS_DENIED_CODES:
                return ACCESS_DENIED, _one_line(current)
        if isinstance(current, ApiException) and current.status == 403:
            return FORBIDDEN, _one_line(current)
        current = current.__cause__ or current.__context__
    return EXCEPTION, _one_line(error)


def classify_log_line(line: str) -> tuple[str, str] | None:
    """The kind of failure a JSON log line at warning level or above reports, if any."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or str(record.get("level", "")).upper() not in PAGING_LOG_LEVELS:
        return None
    for kind, pattern in ((ACCESS_DENIED, _ACCESS_DENIED_TEXT), (FORBIDDEN, _FORBIDDEN_TEXT)):
        if pattern.search(line):
            return kind, _where(record, pattern)
    return None


def _where(record: dict[str, object], pattern: re.Pattern[str]) -> str:
    """The log line's message and the field that carries the error, in one line."""
    message = str(record.get("message", ""))
    for key, value in record.items():
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        if key != "message" and pattern.search(text):
            return " ".join(f"{message} ({key}: {text})".split())[:_DETAIL_CHARS]
    return message[:_DETAIL_CHARS]


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}"[:_DETAIL_CHARS]


class ScanningLog(io.TextIOBase):
    """The stream a handler's stdout goes to during one invocation: passes everything to ``log`` and
    reports each complete line that logs an access failure to ``on_failure``."""

    def __init__(self, log: TextIO, on_failure: OnFailure) -> None:
        super().__init__()
        self._log = log
        self._on_failure = on_failure
        self._partial = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._log.write(text)
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        for line in lines:
            found = classify_log_line(line)
            if found is not None:
                self._on_failure(*found)
        return len(text)

    def flush(self) -> None:
        self._log.flush()

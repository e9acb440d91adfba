"""API errors, rendered as ``kind: Status`` bodies exactly as the real API server shapes them.

The python client turns any non-2xx answer into ``ApiException(status=code)`` and keeps the body, so
callers that branch on ``reason`` (AlreadyExists vs Conflict, both 409) see what they would see on EKS.
"""

from __future__ import annotations

from typing import Any

REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details
        self.retry_after = retry_after

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        details = dict(self.details or {})
        if self.retry_after:
            details["retryAfterSeconds"] = self.retry_after
        if details:
            body["details"] = details
        return body


def qualified_resource(plural: str, group: str) -> str:
    """``pods``, ``deployments.apps``: how upstream names a resource in messages."""
    return f"{plural}.{group}" if group else plural


def _details(plural: str, group: str, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return details


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        404, f'{qualified_resource(plural, group)} "{name}" not found', details=_details(plural, group, name)
    )


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'{qualified_resource(plural, group)} "{name}" already exists',
        reason="AlreadyExists",
        details=_details(plural, group, name),
    )


def conflict(plural: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {qualified_resource(plural, group)} "{name}": {why}',
        details=_details(plural, group, name),
    )


STALE_OBJECT = "the object has been modified; please apply your changes to the latest version and try again"


def invalid(kind: str, group: str, name: str, field: str, detail: str) -> ApiError:
    """422 with one cause; ``detail`` is the upstream ``Invalid value: ...`` / ``Forbidden: ...`` text."""
    details = {
        "name": name,
        "kind": kind,
        "causes": [{"reason": "FieldValueInvalid", "message": detail, "field": field}],
    }
    if group:
        details["group"] = group
    return ApiError(422, f'{kind} "{name}" is invalid: {field}: {detail}', details=details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


def gone(message: str) -> ApiError:
    return ApiError(410, message, reason="Expired")


def method_not_allowed(
    message: str = "the server does not allow this method on the requested resource",
) -> ApiError:
    return ApiError(405, message)


def unsupported_media_type(content_type: str) -> ApiError:
    return ApiError(
        415,
        f"the body of the request was in an unknown format - accepted media types include: "
        f"application/json-patch+json, application/merge-patch+json, "
        f"application/strategic-merge-patch+json, application/apply-patch+yaml "
        f"(got {content_type!r})",
    )


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized")

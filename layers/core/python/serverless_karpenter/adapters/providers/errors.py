"""AWS's refusals and failures as the control plane's errors, so that only the adapters know botocore.

Every provider translates a botocore ``ClientError`` at its boundary into a :class:`CloudError` carrying
what callers branch on: the error ``code`` (InsufficientInstanceCapacity, InvalidInstanceID.NotFound,
UnauthorizedOperation, a throttling code...) and the ``operation``. A :class:`CloudError` still *is* a
``ClientError`` (same ``response``, same message), so whatever reads the SDK's shape keeps working: the
simulator's access-denied invariant, an operator's log search, tests that read ``response``. The original
error is kept as ``__cause__``.

An endpoint that gave no answer botocore could read (connection refused, timeout, an HTML error page) is
an :class:`EndpointUnanswered`, raised only where a caller asked for it (:func:`translated`): elsewhere
botocore's own error still propagates, as the retry policy and the handlers expect.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

from botocore.exceptions import BotoCoreError, ClientError
from botocore.parsers import ResponseParserError

P = ParamSpec("P")
R = TypeVar("R")

# The codes AWS answers when a caller sends too many requests (botocore's adaptive retry already retried).
THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "ProvisionedThroughputExceededException",
        "SlowDown",
    }
)
# The codes of a caller its IAM policy does not allow the call (EC2 says UnauthorizedOperation).
ACCESS_DENIED_CODES = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})
# What an endpoint answers for an API it does not implement (an emulator such as moto lacks some).
NOT_IMPLEMENTED_CODES = frozenset({"NotImplemented", "InternalFailure", "404", "501"})


class CloudError(ClientError):
    """An AWS call that was refused or failed, with the code callers branch on."""

    def __init__(self, response: Any, operation: str) -> None:
        super().__init__(response, operation)
        details = self.response.get("Error") or {}
        self.code: str = str(details.get("Code") or "")
        self.message: str = str(details.get("Message") or "")
        self.operation: str = operation

    @property
    def status(self) -> int | None:
        """The HTTP status of the answer, when AWS gave one."""
        metadata = self.response.get("ResponseMetadata")
        status = metadata.get("HTTPStatusCode") if metadata else None
        return int(status) if status is not None else None

    @property
    def not_found(self) -> bool:
        """The resource named does not exist (InvalidInstanceID.NotFound, NoSuchEntity, ParameterNotFound,
        ResourceNotFoundException, InvalidLaunchTemplateName.NotFoundException...)."""
        return "NotFound" in self.code or self.code == "NoSuchEntity"

    @property
    def access_denied(self) -> bool:
        return self.code in ACCESS_DENIED_CODES

    @property
    def throttled(self) -> bool:
        return self.code in THROTTLING_CODES

    @property
    def not_implemented(self) -> bool:
        return self.code in NOT_IMPLEMENTED_CODES or self.status in (404, 501)


class EndpointUnanswered(Exception):
    """The endpoint gave no answer the SDK could read: no connection, a timeout, an unparseable page."""

    def __init__(self, operation: str, error: Exception) -> None:
        super().__init__(f"{operation}: the endpoint could not answer ({type(error).__name__}): {error}")
        self.operation = operation
        self.kind = type(error).__name__


def translate(error: ClientError) -> CloudError:
    """``error`` as a :class:`CloudError` (itself when it already is one)."""
    if isinstance(error, CloudError):
        return error
    translated = CloudError(error.response, getattr(error, "operation_name", "") or "")
    translated.__cause__ = error
    return translated


@contextmanager
def translating() -> Iterator[None]:
    """Raise a ``ClientError`` from the block as its :class:`CloudError`."""
    try:
        yield
    except CloudError:
        raise
    except ClientError as error:
        raise translate(error) from error


def translates(method: Callable[P, R]) -> Callable[P, R]:
    """A provider method whose ``ClientError`` leaves as :class:`CloudError` (the providers' boundary)."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with translating():
            return method(*args, **kwargs)

    return wrapper


class _Paginator:
    def __init__(self, paginator: Any, name: str, unanswered: bool) -> None:
        self._paginator = paginator
        self._name = name
        self._unanswered = unanswered

    def paginate(self, **kwargs: Any) -> Iterator[Any]:
        with _translating_call(self._name, self._unanswered):
            yield from self._paginator.paginate(**kwargs)


@contextmanager
def _translating_call(operation: str, unanswered: bool) -> Iterator[None]:
    try:
        with translating():
            yield
    except (BotoCoreError, ResponseParserError) as error:
        if not unanswered:
            raise
        raise EndpointUnanswered(operation, error) from error


class TranslatedClient:
    """A boto3 client whose calls (and paginators) raise :class:`CloudError`, and with ``unanswered``
    :class:`EndpointUnanswered` for an endpoint that gave no readable answer: for adapters whose every call
    is one SDK call (the state store) or that call many services directly (the doctor), where a provider
    per call would be ceremony."""

    def __init__(self, client: Any, unanswered: bool) -> None:
        self._client = client
        self._unanswered = unanswered

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if name == "get_paginator":
            return lambda operation: _Paginator(attribute(operation), operation, self._unanswered)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            with _translating_call(name, self._unanswered):
                return attribute(*args, **kwargs)

        return call


def translated(client: Any, *, unanswered: bool = True) -> TranslatedClient:
    """``client`` translating its errors; ``unanswered=False`` leaves botocore's transport errors as they
    are (for callers whose retry or fallback handles them)."""
    return client if isinstance(client, TranslatedClient) else TranslatedClient(client, unanswered)

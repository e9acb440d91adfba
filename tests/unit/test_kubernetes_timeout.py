"""Every Kubernetes API request carries a connect and a read timeout: a Lambda must not hang on a stuck
API server."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import urllib3
from kubernetes import client as k8s
from serverless_karpenter.adapters.kubernetes import (
    CONNECT_TIMEOUT_ENV,
    READ_TIMEOUT_ENV,
    KubernetesError,
    KubernetesGateway,
    call,
)
from serverless_karpenter.clock import ManualClock
from serverless_karpenter.config import Settings


class Recorder:
    """An API method: records the keyword arguments the gateway passes to the client."""

    def __init__(self, error: Exception | None = None) -> None:
        self.kwargs: dict[str, Any] = {}
        self.error = error

    def __call__(self, *args: Any, **kwargs: Any) -> SimpleNamespace:
        self.kwargs = kwargs
        if self.error is not None:
            raise self.error
        return SimpleNamespace(data=b'{"kind": "NodeList", "items": []}')


@pytest.fixture(autouse=True)
def _defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CONNECT_TIMEOUT_ENV, raising=False)
    monkeypatch.delenv(READ_TIMEOUT_ENV, raising=False)


def test_requests_have_a_connect_and_a_read_timeout_by_default() -> None:
    api = Recorder()
    assert call(api) == {"kind": "NodeList", "items": []}
    assert api.kwargs["_request_timeout"] == (5.0, 30.0)


def test_the_timeouts_come_from_the_environment_through_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CONNECT_TIMEOUT_ENV, "2")
    monkeypatch.setenv(READ_TIMEOUT_ENV, "0.5")
    settings = Settings(cluster_name="c")
    gateway = KubernetesGateway(k8s.ApiClient(), ManualClock(), timeouts=settings.kubernetes_timeouts)
    api = Recorder()
    monkeypatch.setattr(gateway.core, "read_node", api)
    gateway.get_node("n1")
    assert api.kwargs["_request_timeout"] == (2.0, 0.5)


@pytest.mark.parametrize("value", ["0", "-1", "soon"])
def test_a_timeout_that_is_not_a_positive_number_is_refused(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(READ_TIMEOUT_ENV, value)
    with pytest.raises(ValueError, match=READ_TIMEOUT_ENV):
        Settings(cluster_name="c")


def test_a_timed_out_request_is_a_transient_failure() -> None:
    pool = urllib3.HTTPConnectionPool("127.0.0.1")
    timeout = urllib3.exceptions.ReadTimeoutError(pool, "/api/v1/nodes", "Read timed out. (read timeout=1)")
    with pytest.raises(KubernetesError) as error:
        call(Recorder(timeout))
    assert error.value.status is None and error.value.transient
    assert "ReadTimeoutError" in str(error.value)

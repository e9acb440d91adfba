"""Unit-level fixtures: moto in this process, with test credentials and no endpoint override."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from serverless_karpenter.adapters import aws


@pytest.fixture
def mocked_aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """moto's in-process AWS, with the adapters' cached sessions dropped before and after."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    aws.reset_sessions()
    with mock_aws():
        yield
    aws.reset_sessions()


@pytest.fixture
def sqs(mocked_aws: None) -> Any:
    return boto3.client("sqs", region_name="us-east-1")

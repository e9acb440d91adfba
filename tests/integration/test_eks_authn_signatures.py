"""The EKS token authenticator remembers a token's signature check (a pure function of token and key), and
still judges expiry on every request."""

from __future__ import annotations

import time
from typing import Any

import pytest
from serverless_karpenter.adapters.eks_token import presigned_token
from serverless_karpenter_sim import eks_authn
from serverless_karpenter_sim.cloud import REGION
from serverless_karpenter_sim.cluster_access import grant_function_access
from serverless_karpenter_sim.eks_authn import EksTokenAuthenticator

from tests.integration.test_kubeapi_rbac_gateway import CLUSTER, Cluster, cluster  # noqa: F401

pytestmark = pytest.mark.integration


def test_a_token_s_signature_is_checked_once_and_its_age_every_time(
    cluster: Cluster,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checks: list[str] = []
    real = eks_authn.signature_holds

    def counted(query: Any, secret_key: str) -> bool:
        checks.append(secret_key)
        return real(query, secret_key)

    monkeypatch.setattr(eks_authn, "signature_holds", counted)
    credentials = grant_function_access(cluster.cloud, "watcher")
    token = presigned_token(CLUSTER, REGION, cluster.session(credentials))
    wall = [time.time()]
    authenticator = EksTokenAuthenticator(CLUSTER, REGION, lambda: None, wall_clock=lambda: wall[0])
    first = authenticator.authenticate(token)
    assert first is not None
    assert authenticator.authenticate(token) == first
    assert len(checks) == 1
    forged = presigned_token(
        CLUSTER, REGION, cluster.session({**credentials, "AWS_SECRET_ACCESS_KEY": "not-the-secret"})
    )
    assert authenticator.authenticate(forged) is None
    assert authenticator.authenticate(forged) is None  # a refusal is remembered too
    assert len(checks) == 2
    wall[0] += 15 * 60 + 5  # fifteen minutes after signing: refused, whatever was remembered
    assert authenticator.authenticate(token) is None

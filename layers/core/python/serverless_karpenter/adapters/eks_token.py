"""EKS bearer tokens: a presigned STS GetCallerIdentity URL naming the cluster (aws-iam-authenticator).

Presigning is local (no call to STS), so it works in the simulator with dummy credentials, and a
token is good for 15 minutes; :class:`TokenSource` refreshes it a minute before that.

The URL names the regional STS endpoint under the region's partition's DNS suffix, as botocore's
partition data has it: ``amazonaws.com``, ``amazonaws.com.cn`` in the China regions, and so on. EKS's
authenticator accepts only its own partition's STS hosts.
"""

from __future__ import annotations

import base64
import functools
import time
from collections.abc import Callable
from datetime import datetime, timedelta

import boto3
from botocore.loaders import create_loader
from botocore.model import ServiceId
from botocore.regions import EndpointResolver
from botocore.signers import RequestSigner

from serverless_karpenter.adapters import aws

TOKEN_PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
PRESIGN_SECONDS = 60
TOKEN_LIFETIME = timedelta(minutes=15)
REFRESH_BEFORE = timedelta(minutes=1)


@functools.cache
def _endpoint_resolver() -> EndpointResolver:
    # botocore's own endpoints data, loaded once, on the first token: not at import.
    return EndpointResolver(create_loader().load_data("endpoints"))


def sts_host(region: str) -> str:
    """The regional STS endpoint's host, in ``region``'s partition (``sts.cn-north-1.amazonaws.com.cn``).

    A region botocore does not list yet is placed in its partition by the partition's region pattern.
    """
    resolver = _endpoint_resolver()
    partition = resolver.get_partition_for_region(region)
    return f"sts.{region}.{resolver.get_partition_dns_suffix(partition)}"


def presigned_token(cluster_name: str, region: str, session: boto3.session.Session | None = None) -> str:
    session = session or aws.shared_session(region)
    credentials = session.get_credentials()
    if credentials is None:
        raise RuntimeError("no AWS credentials to sign the EKS token with")
    signer = RequestSigner(ServiceId("sts"), region, "sts", "v4", credentials, session.events)
    request = {
        "method": "GET",
        "url": f"https://{sts_host(region)}/?Action=GetCallerIdentity&Version=2011-06-15",
        "body": {},
        "headers": {CLUSTER_ID_HEADER: cluster_name},
        "context": {},
    }
    url = signer.generate_presigned_url(
        request, region_name=region, expires_in=PRESIGN_SECONDS, operation_name=""
    )
    encoded = base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
    return TOKEN_PREFIX + encoded


def decode_token(token: str) -> str:
    """The presigned URL inside a token (for tests and `doctor`)."""
    if not token.startswith(TOKEN_PREFIX):
        raise ValueError(f"not an EKS token: missing {TOKEN_PREFIX!r}")
    body = token[len(TOKEN_PREFIX) :]
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()


class TokenSource:
    """The bearer token of the credentials signing now, kept until a minute before it expires.

    The credentials are ``session``'s when given (those the function's other AWS clients were made with),
    else the shared session's. Tokens are kept per access key: a token names the identity that signed it,
    and credentials rotate (a Lambda's role session is renewed; the local simulator signs as whichever
    function is running), so its Kubernetes identity is always its IAM role's.
    """

    def __init__(
        self,
        cluster_name: str,
        region: str,
        now: Callable[[], datetime],
        session: boto3.session.Session | None = None,
        signing_clock: Callable[[], float] = time.time,
    ) -> None:
        self._cluster = cluster_name
        self._region = region
        self._now = now
        self._session = session
        # botocore stamps the signature (X-Amz-Date) from the system clock, and STS judges it on its own:
        # a token's age is measured on that clock as well as on ``now``. They are one clock in a Lambda;
        # in a simulation whose virtual clock falls behind the wall clock (a slow host), a token kept for
        # 14 virtual minutes was past its 15 real ones, and refused (401).
        self._signing_clock = signing_clock
        self._tokens: dict[str, tuple[str, datetime, float]] = {}

    def token(self) -> str:
        now = self._now()
        signed_now = self._signing_clock()
        session = self._session or aws.shared_session(self._region)
        credentials = session.get_credentials()
        key = str(credentials.get_frozen_credentials().access_key or "") if credentials is not None else ""
        kept = self._tokens.get(key)
        refresh_after = (TOKEN_LIFETIME - REFRESH_BEFORE).total_seconds()
        if (
            kept is None
            or now >= kept[1] + TOKEN_LIFETIME - REFRESH_BEFORE
            or signed_now - kept[2] >= refresh_after
        ):
            kept = (presigned_token(self._cluster, self._region, session), now, signed_now)
            lifetime = TOKEN_LIFETIME.total_seconds()
            self._tokens = {
                k: v
                for k, v in self._tokens.items()
                if now < v[1] + TOKEN_LIFETIME and signed_now - v[2] < lifetime
            }
            self._tokens[key] = kept
        return kept[0]

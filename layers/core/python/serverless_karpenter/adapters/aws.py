"""boto3 clients with the project's one retry policy.

botocore's adaptive mode retries throttling and transient errors with client-side rate limiting, which
is what a control plane that bursts CreateFleet and DescribeInstances calls needs. ``AWS_ENDPOINT_URL``
(honoured by botocore itself) points every client at moto in the local simulation, so no code path
differs between the two.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any, Literal, overload

import boto3
import botocore.loaders
import botocore.session
from botocore.config import Config
from botocore.credentials import CredentialProvider, CredentialResolver, Credentials

if TYPE_CHECKING:  # the stubs are a development dependency only
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_eks import EKSClient
    from mypy_boto3_iam import IAMClient
    from mypy_boto3_lambda import LambdaClient
    from mypy_boto3_pricing import PricingClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_ssm import SSMClient
    from mypy_boto3_sts import STSClient

RETRY_CONFIG = Config(
    retries={"mode": "adaptive", "max_attempts": 8},
    connect_timeout=5,
    read_timeout=30,
    user_agent_extra="serverless-karpenter",
)

# What the control plane calls through, for X-Ray to patch when tracing is on: AWS APIs (botocore) and the
# Kubernetes API (the kubernetes client's urllib3 sits on http.client, which X-Ray's "httplib" patch covers).
# Powertools' default, patch_all, imports every library X-Ray can patch that is installed (requests,
# sqlite3, httpx...) to patch it.
TRACED_MODULES = ("botocore", "httplib")

# For calls that have a fallback, so that waiting on them would only delay the caller: the Pricing API
# (persisted and bundled prices). It has no VPC endpoint in most regions, so from a VPC without NAT it
# cannot even connect: the same adaptive policy, bounded to one retry and short timeouts, fails in
# seconds instead of holding the provisioner for minutes of connect timeouts.
FALLBACK_CONFIG = RETRY_CONFIG.merge(
    Config(retries={"mode": "adaptive", "total_max_attempts": 2}, connect_timeout=2, read_timeout=10)
)


# Credentials every session is to sign with instead of the environment's; None: the environment's (a
# deployed Lambda: its role's session credentials). The local simulator runs every function in one
# process, so it installs credentials that sign as whichever function is running (issue 17).
_credentials: Credentials | None = None


class _GivenCredentials(CredentialProvider):
    METHOD = "given"

    def __init__(self, credentials: Credentials) -> None:
        super().__init__()
        self._credentials = credentials

    def load(self) -> Credentials:
        return self._credentials


@cache
def _session(region: str) -> boto3.session.Session:
    return new_session(region)


@cache
def _data_loader() -> botocore.loaders.Loader:
    """One loader of botocore's service models for every session of the process: a session's own loader
    would read and parse each service's JSON model again (an EC2 model is megabytes), which a process
    that makes sessions afresh (the simulator, per simulation) pays each time. Loaders only read."""
    return botocore.loaders.create_loader()


def new_session(region: str) -> boto3.session.Session:
    """A new session, signing with the installed credentials (:func:`use_credentials`) if any."""
    core = botocore.session.get_session()
    core.register_component("data_loader", _data_loader())
    if _credentials is not None:
        core.register_component("credential_provider", CredentialResolver([_GivenCredentials(_credentials)]))
    session = boto3.session.Session(region_name=region, botocore_session=core)
    # boto3 appends its resource models' folder to the loader's search path for each session it makes:
    # on the shared loader, keep it once.
    paths = _data_loader().search_paths
    paths[:] = list(dict.fromkeys(paths))
    return session


def shared_session(region: str) -> boto3.session.Session:
    """The process's session for ``region``, the one :func:`client` makes clients from (its credentials
    are the function's)."""
    return _session(region)


def use_credentials(credentials: Credentials | None) -> None:
    """Sign every session made from now on with ``credentials`` (None: the environment's)."""
    global _credentials
    _credentials = credentials
    reset_sessions()


# The process's clients, by (service, region, has_fallback).
_clients: dict[tuple[str, str, bool], Any] = {}


# Typed by the mypy_boto3 stubs for each service the control plane calls (Any for the rest).
@overload
def client(service: Literal["dynamodb"], region: str, *, has_fallback: bool = False) -> DynamoDBClient: ...
@overload
def client(service: Literal["ec2"], region: str, *, has_fallback: bool = False) -> EC2Client: ...
@overload
def client(service: Literal["eks"], region: str, *, has_fallback: bool = False) -> EKSClient: ...
@overload
def client(service: Literal["iam"], region: str, *, has_fallback: bool = False) -> IAMClient: ...
@overload
def client(service: Literal["lambda"], region: str, *, has_fallback: bool = False) -> LambdaClient: ...
@overload
def client(service: Literal["pricing"], region: str, *, has_fallback: bool = False) -> PricingClient: ...
@overload
def client(service: Literal["sqs"], region: str, *, has_fallback: bool = False) -> SQSClient: ...
@overload
def client(service: Literal["ssm"], region: str, *, has_fallback: bool = False) -> SSMClient: ...
@overload
def client(service: Literal["sts"], region: str, *, has_fallback: bool = False) -> STSClient: ...
@overload
def client(service: str, region: str, *, has_fallback: bool = False) -> Any: ...
def client(service: str, region: str, *, has_fallback: bool = False) -> Any:
    """The process's client for ``service`` in ``region``, made once and reused by every warm
    invocation: creating one builds its whole class (an EC2 client's ~600 operations), which costs more
    than most calls made with it. botocore clients are thread-safe.

    ``has_fallback``: the caller does without the answer (:data:`FALLBACK_CONFIG`)."""
    key = (service, region, has_fallback)
    found = _clients.get(key)
    if found is None:
        config = FALLBACK_CONFIG if has_fallback else RETRY_CONFIG
        found = _clients[key] = _session(region).client(service, config=config)  # type: ignore[call-overload]
    return found


def cached_clients() -> list[Any]:
    """The clients :func:`client` has made (the simulator hooks its faults into them)."""
    return list(_clients.values())


def reset_sessions() -> None:
    """Forget cached sessions and clients (the simulator changes endpoints between runs)."""
    _session.cache_clear()
    _clients.clear()

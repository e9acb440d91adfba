"""EKS authentication of ``k8s-aws-v1.`` bearer tokens, for the simulated API server.

On EKS, aws-iam-authenticator takes the presigned STS ``GetCallerIdentity`` URL inside the token, has STS
check it (with the ``x-k8s-aws-id`` header naming the cluster, which the signature covers), and maps the
caller's IAM principal to a Kubernetes user and groups: through the cluster's access entries first, then,
in a ``CONFIG_MAP`` or ``API_AND_CONFIG_MAP`` cluster, through the ``aws-auth`` ConfigMap. This does the
same against the simulated account (moto in this process):

- the URL must be STS's, for ``GetCallerIdentity``, signed with SigV4 over ``host`` and ``x-k8s-aws-id``;
  its host must be an STS endpoint of the cluster's partition (``sts.<region>.amazonaws.com.cn`` in
  China; the global ``sts.amazonaws.com`` in the commercial partition only), as aws-iam-authenticator
  allows;
- the signature must verify with the secret of the access key it names, for this cluster's name, so a
  token made for another cluster or with made-up credentials is refused;
- it is good for 15 minutes after its ``X-Amz-Date`` (STS ignores ``X-Amz-Expires`` for this call), on the
  wall clock, which is STS's;
- the key must be one moto issued: an assumed role's (the principal is its role) or an IAM user's;
- the principal needs an access entry (``username`` and ``kubernetesGroups``, ``{{SessionName}}`` and
  ``{{AccountID}}`` filled in) or an ``aws-auth`` mapping. Anything else is 401, as on EKS.

EKS's own authorizer runs after RBAC: the cluster creator's entry carries ``AmazonEKSClusterAdminPolicy``
(see :mod:`.eks_access`), which allows everything (:meth:`EksTokenAuthenticator.authorizes`).

Not modelled: the other access policies, ``{{EC2PrivateDNSName}}`` for node roles (simulated kubelets
hold static tokens).
"""

from __future__ import annotations

import fnmatch
import functools
import hmac
import json
import logging
import re
import threading
import time
from calendar import timegm
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import yaml
from botocore.auth import SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.loaders import create_loader
from serverless_karpenter.adapters.eks_token import CLUSTER_ID_HEADER, TOKEN_PREFIX, decode_token

from serverless_karpenter_sim import eks_access
from serverless_karpenter_sim.eks_access import IssuedKey
from serverless_karpenter_sim.kubeapi.rbac import Attributes, UserInfo

log = logging.getLogger(__name__)

TOKEN_LIFETIME_SECONDS = 15 * 60
_SIGNED_HEADERS = f"host;{CLUSTER_ID_HEADER}"
_SIGNATURES_KEPT = 256  # tokens whose signature check is remembered (a few per function and minute)


@functools.cache
def sts_hosts(region: str) -> frozenset[str]:
    """The STS hosts aws-iam-authenticator accepts for a cluster in ``region``: every regional endpoint of
    the region's partition, under that partition's DNS suffix, and the global one in ``aws`` only.

    Read from botocore's partition data (``partitions.json``, the endpoint rules' source), independently
    of how the functions build their URL."""
    for partition in create_loader().load_data("partitions")["partitions"]:
        if region in partition["regions"] or re.match(partition["regionRegex"], region):
            suffix = partition["outputs"]["dnsSuffix"]
            hosts = {f"sts.{r}.{suffix}" for r in {*partition["regions"], region}}
            if partition["id"] == "aws":
                hosts.add("sts.amazonaws.com")
            return frozenset(hosts)
    return frozenset()


def _verified_query(token: str, cluster_name: str, region: str, now: float) -> dict[str, str] | None:
    try:
        url = urlsplit(decode_token(token))
    except (ValueError, UnicodeDecodeError):
        return None
    if url.scheme != "https" or (url.hostname or "") not in sts_hosts(region):
        return None
    query = dict(parse_qsl(url.query))
    if query.get("Action") != "GetCallerIdentity" or query.get("X-Amz-SignedHeaders") != _SIGNED_HEADERS:
        return None
    try:
        signed_at = timegm(time.strptime(query["X-Amz-Date"], "%Y%m%dT%H%M%SZ"))
    except (KeyError, ValueError):
        return None
    if not 0 <= now - signed_at <= TOKEN_LIFETIME_SECONDS:
        return None
    query["_base"] = f"{url.scheme}://{url.netloc}{url.path}"
    query["_cluster"] = cluster_name
    return query


def signature_holds(query: Mapping[str, str], secret_key: str) -> bool:
    """Whether the presigned URL's SigV4 signature is the one ``secret_key`` makes for this cluster."""
    params = {k: v for k, v in query.items() if not k.startswith("_") and k != "X-Amz-Signature"}
    access_key, _, scope = query.get("X-Amz-Credential", "").partition("/")
    parts = scope.split("/")
    if len(parts) != 4 or parts[2] != "sts":
        return False
    request = AWSRequest(
        method="GET",
        url=f"{query['_base']}?{urlencode(params)}",
        headers={CLUSTER_ID_HEADER: query["_cluster"]},
    )
    request.context["timestamp"] = query["X-Amz-Date"]
    credentials = Credentials(access_key, secret_key, query.get("X-Amz-Security-Token"))
    signer = SigV4QueryAuth(credentials, "sts", parts[1], expires=int(query.get("X-Amz-Expires") or 60))
    expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    return hmac.compare_digest(expected, query.get("X-Amz-Signature", ""))


def _username_pattern(template: str) -> str:
    return template.replace("{{SessionName}}", "*").replace("{{AccountID}}", "*")


def _fill(template: str, caller: IssuedKey) -> str:
    return template.replace("{{SessionName}}", caller.session_name).replace("{{AccountID}}", caller.account)


def _aws_auth_user(aws_auth: Mapping[str, Any] | None, caller: IssuedKey) -> UserInfo | None:
    """The mapping ``aws-auth`` gives the caller (mapRoles for roles, mapUsers for users)."""
    data = (aws_auth or {}).get("data") or {}
    for key, arn_field in (("mapRoles", "rolearn"), ("mapUsers", "userarn")):
        for mapping in yaml.safe_load(data.get(key) or "[]") or []:
            if isinstance(mapping, dict) and mapping.get(arn_field) == caller.principal_arn:
                name = _fill(str(mapping.get("username") or caller.principal_arn), caller)
                return UserInfo(name, tuple(mapping.get("groups") or ()))
    return None


class EksTokenAuthenticator:
    """aws-iam-authenticator for one simulated cluster; ``aws_auth`` reads the ``aws-auth`` ConfigMap."""

    def __init__(
        self,
        cluster_name: str,
        region: str,
        aws_auth: Callable[[], Mapping[str, Any] | None],
        *,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.cluster_name = cluster_name
        self.region = region
        self._aws_auth = aws_auth
        self._wall_clock = wall_clock
        self._signatures: dict[tuple[str, str], bool] = {}  # oldest first
        self._signatures_lock = threading.Lock()

    def authenticate(self, token: str) -> UserInfo | None:
        if not token.startswith(TOKEN_PREFIX):
            return None
        query = _verified_query(token, self.cluster_name, self.region, self._wall_clock())
        if query is None:
            return None
        caller = eks_access.issued_key(query.get("X-Amz-Credential", "").split("/", 1)[0])
        if caller is None or not self._signature_holds(token, query, caller.secret_access_key):
            return None
        return self._map(caller)

    def _signature_holds(self, token: str, query: Mapping[str, str], secret_key: str) -> bool:
        """:func:`signature_holds`, remembered per token and key: a pure function of the two, and a
        function's token signs every request it makes for up to 14 minutes (SigV4 was a fifth of the
        API server's time per request at 200 nodes). Expiry and the caller's mapping are still judged
        on every request, above."""
        key = (token, secret_key)
        with self._signatures_lock:  # the server's request threads share it
            held = self._signatures.get(key)
        if held is None:
            held = signature_holds(query, secret_key)
            with self._signatures_lock:
                self._signatures[key] = held
                while len(self._signatures) > _SIGNATURES_KEPT:
                    del self._signatures[next(iter(self._signatures))]
        return held

    def authorizes(self, attributes: Attributes) -> bool:
        """EKS's own authorizer, after RBAC: a user whose access entry has the cluster admin access policy
        (the cluster's creator) may do anything."""
        from moto.eks.models import eks_backends

        for by_region in list(eks_backends.values()):
            cluster = by_region[self.region].clusters.get(self.cluster_name)
            if cluster is None:
                continue
            for principal, entry in list((vars(cluster).get("access_entries") or {}).items()):
                if fnmatch.fnmatchcase(
                    attributes.user.name, _username_pattern(entry["username"])
                ) and eks_access.has_cluster_admin_policy(cluster, principal):
                    return True
        return False

    def _cluster(self, account: str) -> Any:
        from moto.eks.models import eks_backends

        return eks_backends[account][self.region].clusters.get(self.cluster_name)

    def _map(self, caller: IssuedKey) -> UserInfo | None:
        cluster = self._cluster(caller.account)
        if cluster is None:
            return None
        mode = str(cluster.access_config["authenticationMode"])
        if mode != eks_access.CONFIG_MAP:
            entry = (vars(cluster).get("access_entries") or {}).get(caller.principal_arn)
            if entry is not None and entry["type"] == "STANDARD":
                return UserInfo(_fill(entry["username"], caller), tuple(entry["kubernetesGroups"]))
        if mode != eks_access.API:
            return _aws_auth_user(self._aws_auth(), caller)
        return None


def aws_auth_reader(store: Any) -> Callable[[], Mapping[str, Any] | None]:
    """Reads ``kube-system/aws-auth`` from a simulated API server's store (None when absent)."""
    from serverless_karpenter_sim.kubeapi.errors import ApiError
    from serverless_karpenter_sim.kubeapi.kinds import kind_of

    config_maps = kind_of("", "v1", "configmaps")

    def read() -> Mapping[str, Any] | None:
        try:
            result = store.get(config_maps, "kube-system", "aws-auth")
        except ApiError:
            return None
        obj: Mapping[str, Any] = result if isinstance(result, dict) else result.obj
        return json.loads(json.dumps(obj))

    return read

"""What a control-plane pass asks of the outside, counted (``passes.py`` and its test): DynamoDB and EC2
operations through botocore event hooks (``before-call``), the NodeClaim list reads (a Query of the NodeClaim
partition's first page), and Kubernetes requests by verb, resource and selector, by wrapping the client's
``call_api``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

from serverless_karpenter import state_schema as schema


def _kube_request(method: str, url: str) -> str:
    """``verb resource[?selector]``, as kube-apiserver's audit log would name the request."""
    parsed = urlsplit(url)
    query = parse_qs(parsed.query)
    parts = [p for p in parsed.path.split("/") if p]
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    resource = "/".join([rest[0], *rest[2:3]]) if rest else parsed.path
    if method == "GET":
        verb = "watch" if query.get("watch") else ("get" if len(rest) >= 2 else "list")
    else:
        verb = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}.get(method, method)
    if verb == "list" and query.get("continue"):
        verb = "list-page"
    selector = (query.get("fieldSelector") or query.get("labelSelector") or [""])[0]
    return f"{verb} {resource}" + (f"?{selector}" if selector and verb.startswith("list") else "")


class CallCounter:
    """Counts a pass's DynamoDB, EC2 and Kubernetes requests (see the module's docstring)."""

    def __init__(self) -> None:
        self.aws: Counter[str] = Counter()
        self.kube: Counter[str] = Counter()
        self.nodeclaim_lists = 0

    def reset(self) -> None:
        self.aws.clear()
        self.kube.clear()
        self.nodeclaim_lists = 0

    def hook_events(self, events: Any) -> None:
        """On a botocore session's or client's event system (clients copy their session's hooks)."""
        for service in ("dynamodb", "ec2"):
            events.register(f"before-call.{service}", self._aws_call, unique_id=f"passes-{service}")
        events.register(
            "before-parameter-build.dynamodb.Query", self._query_params, unique_id="passes-nodeclaims"
        )

    def hook_kube(self, api_client: Any) -> None:
        call_api: Callable[..., Any] = api_client.call_api

        def counted(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            self.kube[_kube_request(method, url)] += 1
            return call_api(method, url, *args, **kwargs)

        api_client.call_api = counted

    def _aws_call(self, model: Any, **_: Any) -> None:
        self.aws[f"{model.service_model.service_name}:{model.name}"] += 1

    def _query_params(self, params: dict[str, Any], **_: Any) -> None:
        values = params.get("ExpressionAttributeValues") or {}
        first_page = "ExclusiveStartKey" not in params and "IndexName" not in params
        if first_page and (values.get(":pk") or {}).get("S") == schema.NODECLAIM_PARTITION:
            self.nodeclaim_lists += 1

    def figures(self) -> dict[str, Any]:
        dynamodb = {k.split(":", 1)[1]: v for k, v in sorted(self.aws.items()) if k.startswith("dynamodb:")}
        ec2 = {k.split(":", 1)[1]: v for k, v in sorted(self.aws.items()) if k.startswith("ec2:")}
        return {
            "dynamodb": dynamodb,
            "dynamodb_scans": dynamodb.get("Scan", 0),
            "nodeclaim_list_reads": self.nodeclaim_lists,
            "ec2": ec2,
            "kubernetes": dict(sorted(self.kube.items())),
            "kubernetes_requests": sum(self.kube.values()),
        }

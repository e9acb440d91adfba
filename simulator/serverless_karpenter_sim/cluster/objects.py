"""Shared plumbing for the simulated cluster actors.

The actors handle Kubernetes objects as the plain JSON dicts the REST API speaks (camelCase keys), not as the
client's typed models: the typed models validate every field on the way in and out, which is slow on the
simulator's hot path and drops fields they do not know. :class:`KubeRest` still goes through the official
client's ``ApiClient`` (its configuration, auth header and HTTP pool), so the API server sees ordinary
requests.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from serverless_karpenter.clock import parse_rfc3339, to_rfc3339
from serverless_karpenter.scheduling import resources

from serverless_karpenter_sim.kubeapi.selectors import requirement_matches

Obj = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"

# The alphabet of generateName suffixes and of pod-template-hash values (no vowels, no look-alikes).
SAFE_ALPHANUMERICS = "bcdfghjklmnpqrstvwxz2456789"
_MAX_GENERATED_BASE = 58  # 63-character names minus the 5-character suffix


class KubeRest:
    """JSON in, JSON out, over the official client's transport."""

    def __init__(self, api_client: ApiClient) -> None:
        self._api = api_client
        # path -> (resourceVersion, items) of the last full LIST, as an informer's cache holds it.
        self._lists: dict[str, tuple[str, list[Obj]]] = {}

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Obj:
        headers: dict[str, str | None] = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        serialized = self._api.param_serialize(
            method=method,
            resource_path=path,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self._api.call_api(*serialized)
        data = response.read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(
                http_resp=response, body=data.decode("utf-8", "replace") if data else None, data=None
            )
        return json.loads(data) if data else {}

    def list(self, path: str, **query: str | int) -> list[Obj]:
        """The collection's items. An unfiltered LIST is kept, and read again in full only once the
        server's resourceVersion has moved: a one-item page (``limit=1``) carries it, so a step in which
        nothing was written costs a few bytes instead of every object, as an informer's cache spares a
        real controller its re-LISTs. The items are shared between steps: callers must not change them."""
        if query:
            items: list[Obj] = self.request("GET", path, query=query).get("items") or []
            return items
        cached = self._lists.get(path)
        if cached is not None:
            head = self.request("GET", path, query={"limit": 1})
            if (head.get("metadata") or {}).get("resourceVersion") == cached[0]:
                return cached[1]
        full = self.request("GET", path)
        items = full.get("items") or []
        version = (full.get("metadata") or {}).get("resourceVersion")
        if version:
            self._lists[path] = (str(version), items)
        return items

    def create(self, path: str, body: Obj) -> Obj | None:
        """The created object, or None when one of that name already exists."""
        try:
            return self.request("POST", path, body=body)
        except ApiException as err:
            if err.status == 409:
                return None
            raise

    def patch(self, path: str, body: Any, content_type: str = MERGE_PATCH) -> Obj | None:
        """The patched object, or None when it is gone."""
        try:
            return self.request("PATCH", path, body=body, content_type=content_type)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def delete(self, path: str, *, grace_period_seconds: int | None = None, uid: str | None = None) -> bool:
        """Whether the object was there to delete (a uid precondition that no longer holds counts as gone)."""
        options: Obj = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        query: dict[str, str | int] = {}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
            query["gracePeriodSeconds"] = grace_period_seconds
        if uid:
            options["preconditions"] = {"uid": uid}
        try:
            self.request("DELETE", path, query=query, body=options)
        except ApiException as err:
            if err.status in (404, 409):
                return False
            raise
        return True


# --- paths ---------------------------------------------------------------------------------------------


def pods_path(namespace: str | None = None) -> str:
    return f"/api/v1/namespaces/{namespace}/pods" if namespace else "/api/v1/pods"


def pod_path(namespace: str, name: str, subresource: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}" + (f"/{subresource}" if subresource else "")


NODES_PATH = "/api/v1/nodes"


def node_path(name: str, subresource: str = "") -> str:
    return f"{NODES_PATH}/{name}" + (f"/{subresource}" if subresource else "")


def apps_path(resource: str, namespace: str | None = None) -> str:
    return f"/apis/apps/v1/namespaces/{namespace}/{resource}" if namespace else f"/apis/apps/v1/{resource}"


def batch_path(resource: str, namespace: str | None = None) -> str:
    return f"/apis/batch/v1/namespaces/{namespace}/{resource}" if namespace else f"/apis/batch/v1/{resource}"


# --- object accessors ----------------------------------------------------------------------------------


def meta(obj: Obj) -> Obj:
    m: Obj = obj.get("metadata") or {}
    return m


def name_of(obj: Obj) -> str:
    return str(meta(obj).get("name", ""))


def namespace_of(obj: Obj) -> str:
    return str(meta(obj).get("namespace") or "default")


def uid_of(obj: Obj) -> str:
    return str(meta(obj).get("uid", ""))


def key_of(obj: Obj) -> str:
    """``namespace/name``, as kubectl and the scheduler's logs name a pod."""
    return f"{namespace_of(obj)}/{name_of(obj)}"


def labels_of(obj: Obj) -> dict[str, str]:
    labels: dict[str, str] = meta(obj).get("labels") or {}
    return labels


def is_deleting(obj: Obj) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def timestamp(obj: Obj, field: str = "creationTimestamp") -> datetime | None:
    value = meta(obj).get(field)
    return parse_rfc3339(value) if value else None


def controller_ref(obj: Obj) -> Obj | None:
    for ref in meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            owner: Obj = ref
            return owner
    return None


def owner_reference(owner: Obj, api_version: str, kind: str) -> Obj:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name_of(owner),
        "uid": uid_of(owner),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def condition(obj: Obj, kind: str) -> Obj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            found: Obj = cond
            return found
    return None


def with_condition(conditions: Iterable[Obj], new: Obj) -> list[Obj]:
    """``conditions`` with the one of ``new``'s type replaced (kept in place) or appended."""
    out: list[Obj] = []
    replaced = False
    for cond in conditions:
        if cond.get("type") == new["type"]:
            out.append(new)
            replaced = True
        else:
            out.append(cond)
    if not replaced:
        out.append(new)
    return out


def new_condition(kind: str, status: str, now: datetime, reason: str = "", message: str = "") -> Obj:
    cond: Obj = {"type": kind, "status": status, "lastTransitionTime": to_rfc3339(now)}
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def is_node_ready(node: Obj) -> bool:
    ready = condition(node, "Ready")
    return ready is not None and ready.get("status") == "True"


def pod_phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def is_terminal(pod: Obj) -> bool:
    return pod_phase(pod) in ("Succeeded", "Failed")


def is_pod_ready(pod: Obj) -> bool:
    ready = condition(pod, "Ready")
    return ready is not None and ready.get("status") == "True"


def is_pod_available(pod: Obj, min_ready_seconds: int, now: datetime) -> bool:
    """Ready for at least ``min_ready_seconds``, as the workload controllers count availability."""
    ready = condition(pod, "Ready")
    if ready is None or ready.get("status") != "True":
        return False
    if min_ready_seconds <= 0:
        return True
    since = ready.get("lastTransitionTime")
    return since is None or (now - parse_rfc3339(since)).total_seconds() >= min_ready_seconds


# --- selectors, affinity and taints --------------------------------------------------------------------


# The API's operator names as the label-selector syntax spells them (``requirement_matches``).
_SELECTOR_OPS = {
    "In": "in",
    "NotIn": "notin",
    "Exists": "exists",
    "DoesNotExist": "!",
    "Gt": "gt",
    "Lt": "lt",
}


def expression_matches(operator: str, key: str, values: list[str], labels: Mapping[str, str]) -> bool:
    """One label-selector or node-selector requirement (In, NotIn, Exists, DoesNotExist, Gt, Lt), by the
    API server's matcher; an unknown operator matches nothing."""
    op = _SELECTOR_OPS.get(operator)
    return op is not None and requirement_matches(op, key, values, labels)


def label_selector_matches(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics: a null selector matches nothing, an empty one everything."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(
        expression_matches(expr["operator"], expr["key"], list(expr.get("values") or []), labels)
        for expr in selector.get("matchExpressions") or []
    )


def node_selector_term_matches(term: Obj, node: Obj) -> bool:
    """Expressions and fields ANDed; a term with neither matches no node."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    labels = labels_of(node)
    for expr in expressions:
        if not expression_matches(expr["operator"], expr["key"], list(expr.get("values") or []), labels):
            return False
    node_fields = {"metadata.name": name_of(node)}
    for expr in fields:
        if not expression_matches(expr["operator"], expr["key"], list(expr.get("values") or []), node_fields):
            return False
    return True


def node_selector_matches(selector: Obj | None, node: Obj) -> bool:
    """A v1.NodeSelector: its terms are ORed."""
    if selector is None:
        return True
    return any(node_selector_term_matches(term, node) for term in selector.get("nodeSelectorTerms") or [])


def pod_matches_node_selector_and_affinity(pod_spec: Obj, node: Obj) -> bool:
    """nodeSelector and required node affinity, both of which must hold."""
    labels = labels_of(node)
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    node_affinity = (pod_spec.get("affinity") or {}).get("nodeAffinity") or {}
    return node_selector_matches(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"), node)


def toleration_tolerates(toleration: Obj, taint: Obj) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        # An empty key with Exists tolerates everything; validation forbids it with Equal.
        return operator == "Exists"
    if key != taint.get("key"):
        return False
    if operator == "Exists":
        return True
    return (toleration.get("value") or "") == (taint.get("value") or "")


def tolerated(tolerations: Iterable[Obj], taint: Obj) -> bool:
    return any(toleration_tolerates(t, taint) for t in tolerations)


def first_untolerated_taint(
    taints: Iterable[Obj], tolerations: list[Obj], effects: Iterable[str]
) -> Obj | None:
    wanted = set(effects)
    for taint in taints:
        if taint.get("effect") in wanted and not tolerated(tolerations, taint):
            return taint
    return None


# --- resources -----------------------------------------------------------------------------------------


def _container_requests(container: Obj) -> resources.ResourceList:
    res = container.get("resources") or {}
    # The API server defaults a missing request to the limit; honour that even if a test object skipped it.
    merged: dict[str, Any] = dict(res.get("limits") or {})
    merged.update(res.get("requests") or {})
    return resources.parse_list(merged)


def pod_requests(pod_spec: Obj) -> resources.ResourceList:
    """What a pod asks of a node: max(containers + sidecars, each init container + earlier sidecars) +
    overhead, plus one pod."""
    sidecars: resources.ResourceList = {}
    init_peak: resources.ResourceList = {}
    for container in pod_spec.get("initContainers") or []:
        requests = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            sidecars = resources.merge(sidecars, requests)
            init_peak = resources.maximum([init_peak, sidecars])
        else:
            init_peak = resources.maximum([init_peak, resources.merge(requests, sidecars)])
    main = resources.merge(sidecars, *(_container_requests(c) for c in pod_spec.get("containers") or []))
    total = resources.maximum([main, init_peak])
    total = resources.merge(total, resources.parse_list(pod_spec.get("overhead")))
    total[resources.PODS] = 1
    return total


# --- names ---------------------------------------------------------------------------------------------


def random_suffix(rng: random.Random, length: int = 5) -> str:
    return "".join(rng.choice(SAFE_ALPHANUMERICS) for _ in range(length))


def generated_name(base: str, rng: random.Random) -> str:
    """What ``generateName: base-`` gives: the base (cut to fit 63 characters) and a 5-character suffix."""
    return base[:_MAX_GENERATED_BASE] + random_suffix(rng)


def _fnv32a(data: bytes) -> int:
    value = 0x811C9DC5
    for byte in data:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def template_hash(template: Obj, collision_count: int = 0) -> str:
    """A pod-template-hash in Kubernetes' shape: FNV-32a of the template, its decimal digits mapped onto the
    safe alphabet."""
    payload = json.dumps(template, sort_keys=True, separators=(",", ":")).encode()
    if collision_count:
        payload += str(collision_count).encode()
    return "".join(SAFE_ALPHANUMERICS[ord(d) % len(SAFE_ALPHANUMERICS)] for d in str(_fnv32a(payload)))

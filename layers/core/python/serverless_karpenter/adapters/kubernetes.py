"""The Kubernetes gateway: the only place the control plane talks to the API server.

Objects cross this boundary as plain JSON dicts (``_preload_content=False``): the pure core reads the
same shapes a user writes, and we skip the client's slow model deserialisation on large lists.

Every request has a connect and a read timeout (``KUBERNETES_CONNECT_TIMEOUT_SECONDS``, default 5, and
``KUBERNETES_READ_TIMEOUT_SECONDS``, default 30, read by ``config.Settings`` and given to the gateway): a
Lambda must fail a call to a stuck API server, and retry on its next invocation, rather than hang until
Lambda kills it mid-step. A watch asks the server to
end it after ``timeoutSeconds`` and reads for that long plus the connect timeout.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pydantic_core
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from serverless_karpenter.clock import Clock, to_rfc3339

JSON = dict[str, Any]
PAGE_SIZE = 500
# Unbound pods not yet running or done: what the watcher lists and watches (bound pods never come back).
PENDING_PODS = "spec.nodeName=,status.phase=Pending"

KARPENTER_GROUP = "karpenter.sh"
KARPENTER_AWS_GROUP = "karpenter.k8s.aws"

# The environment variables Settings reads them from (config.py).
CONNECT_TIMEOUT_ENV = "KUBERNETES_CONNECT_TIMEOUT_SECONDS"
READ_TIMEOUT_ENV = "KUBERNETES_READ_TIMEOUT_SECONDS"
DEFAULT_CONNECT_TIMEOUT_SECONDS = 5.0
DEFAULT_READ_TIMEOUT_SECONDS = 30.0
# (connect, read) seconds, as the client's ``_request_timeout`` takes them.
Timeouts = tuple[float, float]
DEFAULT_TIMEOUTS: Timeouts = (DEFAULT_CONNECT_TIMEOUT_SECONDS, DEFAULT_READ_TIMEOUT_SECONDS)


class KubernetesError(Exception):
    """A failed API call. ``transient`` ones (5xx, 429, timeouts) are worth retrying later."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def transient(self) -> bool:
        return self.status is None or self.status >= 500 or self.status == 429


class WatchExpired(KubernetesError):
    """410 Gone: the resourceVersion is older than the server's watch window; list again."""

    def __init__(self, message: str) -> None:
        super().__init__(message, 410)


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED | MODIFIED | DELETED | BOOKMARK
    object: JSON

    @property
    def resource_version(self) -> str:
        return str((self.object.get("metadata") or {}).get("resourceVersion") or "")


class WatchStream:
    """One watch request's events, read one at a time as the server writes them.

    ``audit_id`` is the ``Audit-Id`` kube-apiserver puts on every response; ``lines_read`` counts the
    events read (bookmarks included), which lets the simulation's driver hand a turn exactly what the
    server has written (``PendingPodWatch.step``)."""

    def __init__(self, response: Any) -> None:
        self._response = response
        self.audit_id = str(response.headers.get("Audit-Id") or "")
        self.lines_read = 0
        self._lines = iter_resp_lines(response)

    def next(self) -> WatchEvent | None:
        """The next event; None once the server has ended the watch. An ERROR event raises (410 as
        :class:`WatchExpired`)."""
        try:
            line = next(self._lines, None)
        except Exception as error:  # the connection cut or timed out mid-stream
            raise KubernetesError(f"watch: {type(error).__name__}: {error}") from error
        if line is None:
            return None
        self.lines_read += 1
        event = json.loads(line)
        obj = event.get("object") or {}
        if event.get("type") == "ERROR":
            code = obj.get("code")
            message = f"watch: {code} {obj.get('reason')}: {obj.get('message')}"
            if code == 410:
                raise WatchExpired(message)
            raise KubernetesError(message, code if isinstance(code, int) else None)
        return WatchEvent(str(event.get("type")), obj)

    def close(self) -> None:
        """Stop reading, also from another thread blocked in :meth:`next`."""
        with contextlib.suppress(Exception):
            self._response.shutdown()  # unblocks a read in progress (urllib3 >= 2.3)
        with contextlib.suppress(Exception):
            # Closes the connection too, unless the stream's end already returned it to the pool: one
            # with the rest of a stream unread must never serve another request.
            self._response.close()


class EvictionResult:
    EVICTED = "evicted"
    BLOCKED = "blocked"  # a PDB said no (429)
    GONE = "gone"


def configuration(
    host: str, token: Callable[[], str], verify_tls: bool = True, ca_file: str | None = None
) -> k8s.Configuration:
    cfg = k8s.Configuration()
    cfg.host = host.rstrip("/")
    cfg.verify_ssl = verify_tls
    if ca_file:
        cfg.ssl_ca_cert = ca_file
    cfg.api_key_prefix["authorization"] = "Bearer"
    cfg.api_key["authorization"] = token()

    def refresh(c: k8s.Configuration) -> None:
        c.api_key["authorization"] = token()

    # The client calls this before each request, so a token near expiry is replaced in time.
    cfg.refresh_api_key_hook = refresh  # type: ignore[assignment]
    cfg.retries = False  # our callers decide what to retry; urllib3 retries would hide faults
    return cfg


def call(fn: Callable[..., Any], *args: Any, timeout: Timeouts = DEFAULT_TIMEOUTS, **kwargs: Any) -> Any:
    """One API call returning parsed JSON; failures become :class:`KubernetesError`."""
    try:
        response = fn(*args, _preload_content=False, _request_timeout=timeout, **kwargs)
    except ApiException as error:
        raise KubernetesError(f"{error.status} {error.reason}: {error.body!r:.300}", error.status) from error
    except Exception as error:  # urllib3 connection errors, timeouts
        raise KubernetesError(f"{type(error).__name__}: {error}") from error
    data = response.data
    # pydantic-core's parser (already in the layer): the same objects as json.loads, in about two thirds
    # of the time. A disruption pass at 1,000 nodes decodes some 20 MB of pods.
    return pydantic_core.from_json(data) if data else {}


class KubernetesGateway:
    def __init__(
        self,
        api_client: k8s.ApiClient,
        clock: Clock,
        component: str = "karpenter",
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
    ) -> None:
        self.api_client = api_client
        self.timeouts = timeouts
        self.core = k8s.CoreV1Api(api_client)
        self.apps = k8s.AppsV1Api(api_client)
        self.policy = k8s.PolicyV1Api(api_client)
        self.custom = k8s.CustomObjectsApi(api_client)
        self.storage = k8s.StorageV1Api(api_client)
        self._clock = clock
        self._component = component
        # Events recently published with a dedupe window: key -> when the window ends (record_event).
        self._published: dict[str, datetime] = {}

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return call(fn, *args, timeout=self.timeouts, **kwargs)

    # -- listing -------------------------------------------------------------------------------------

    def _pages(self, fn: Callable[..., Any], **kwargs: Any) -> Iterator[JSON]:
        token: str | None = None
        while True:
            page = (
                self._call(fn, limit=PAGE_SIZE, _continue=token, **kwargs)
                if token
                else self._call(fn, limit=PAGE_SIZE, **kwargs)
            )
            # The API server leaves apiVersion and kind off the items of built-in lists; the pure core
            # and Events (kubectl describe finds them by involvedObject.kind) want whole objects.
            list_kind = str(page.get("kind") or "")
            if list_kind.endswith("List"):
                for item in page.get("items") or []:
                    item.setdefault("apiVersion", page.get("apiVersion"))
                    item.setdefault("kind", list_kind[: -len("List")])
            yield page
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return

    def _paginate(self, fn: Callable[..., Any], **kwargs: Any) -> Iterator[JSON]:
        for page in self._pages(fn, **kwargs):
            yield from page.get("items") or []

    def _list_at(self, fn: Callable[..., Any], **kwargs: Any) -> tuple[list[JSON], str]:
        """Every item, and the list's resourceVersion to watch from (the first page's: the later pages
        are of its snapshot)."""
        items: list[JSON] = []
        version: str | None = None
        for page in self._pages(fn, **kwargs):
            if version is None:
                version = str((page.get("metadata") or {}).get("resourceVersion") or "")
            items.extend(page.get("items") or [])
        return items, version or ""

    def list_pods(self, field_selector: str | None = None, label_selector: str | None = None) -> list[JSON]:
        kwargs: dict[str, Any] = {}
        if field_selector:
            kwargs["field_selector"] = field_selector
        if label_selector:
            kwargs["label_selector"] = label_selector
        return list(self._paginate(self.core.list_pod_for_all_namespaces, **kwargs))

    def list_pending_pods(self) -> list[JSON]:
        # The field selector keeps the list small: bound pods never come back.
        return self.list_pods(field_selector=PENDING_PODS)

    def list_pending_pods_at(self) -> tuple[list[JSON], str]:
        """The pending pods and the resourceVersion of that list, to watch from."""
        return self._list_at(self.core.list_pod_for_all_namespaces, field_selector=PENDING_PODS)

    def watch_pending_pods(self, resource_version: str, timeout_seconds: int) -> WatchStream:
        """Watch the pending pods from ``resource_version`` (ADDED when a pod becomes pending, DELETED
        when it is bound or gone), with bookmarks; the server ends the watch after ``timeout_seconds``.
        Raises :class:`WatchExpired` when the version is too old to watch from."""
        connect, _ = self.timeouts
        try:
            response = self.core.list_pod_for_all_namespaces(
                watch=True,
                field_selector=PENDING_PODS,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_seconds,
                _preload_content=False,
                # The server sends nothing while nothing changes: read until it ends the watch, and then
                # some, but never past the caller's deadline by more than the connect timeout.
                _request_timeout=(connect, timeout_seconds + connect),
            )
        except ApiException as error:
            if error.status == 410:
                raise WatchExpired(f"410 {error.reason}: {error.body!r:.300}") from error
            raise KubernetesError(
                f"{error.status} {error.reason}: {error.body!r:.300}", error.status
            ) from error
        except Exception as error:  # urllib3 connection errors, timeouts
            raise KubernetesError(f"{type(error).__name__}: {error}") from error
        return WatchStream(response)

    def list_pods_on_node(self, node_name: str) -> list[JSON]:
        return self.list_pods(field_selector=f"spec.nodeName={node_name}")

    def list_nodes(self) -> list[JSON]:
        return list(self._paginate(self.core.list_node))

    def get_node(self, name: str) -> JSON | None:
        try:
            return self._call(self.core.read_node, name)
        except KubernetesError as error:
            if error.status == 404:
                return None
            raise

    def list_daemonsets(self) -> list[JSON]:
        return list(self._paginate(self.apps.list_daemon_set_for_all_namespaces))

    def list_pdbs(self) -> list[JSON]:
        return list(self._paginate(self.policy.list_pod_disruption_budget_for_all_namespaces))

    # Scheduling inputs (issue 3): namespace labels for pod affinity namespaceSelectors, and volume topology.
    def list_namespaces(self) -> list[JSON]:
        return list(self._paginate(self.core.list_namespace))

    def list_persistent_volume_claims(self) -> list[JSON]:
        return list(self._paginate(self.core.list_persistent_volume_claim_for_all_namespaces))

    def list_persistent_volumes(self) -> list[JSON]:
        return list(self._paginate(self.core.list_persistent_volume))

    def list_storage_classes(self) -> list[JSON]:
        return list(self._paginate(self.storage.list_storage_class))

    def list_csi_nodes(self) -> list[JSON]:
        """Each node's attachable-volume count per CSI driver (existing nodes' volume limits)."""
        return list(self._paginate(self.storage.list_csi_node))

    def _list_cluster_custom(self, group: str, version: str, plural: str) -> list[JSON]:
        return list(
            self._paginate(
                self.custom.list_cluster_custom_object, group=group, version=version, plural=plural
            )
        )

    def list_nodepools(self) -> list[JSON]:
        return self._list_cluster_custom(KARPENTER_GROUP, "v1", "nodepools")

    def patch_nodepool_status(self, nodepool: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
        """Write a NodePool's status through ``/status``, as of the resourceVersion it was read at (a merge
        patch replaces the conditions list whole, so a concurrent writer must make this fail, not be
        overwritten). False when the NodePool changed or went away meanwhile: the next pass sees it afresh."""
        meta = nodepool["metadata"]
        body = {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "status": dict(status)}
        try:
            self._call(
                self.custom.patch_cluster_custom_object_status,
                KARPENTER_GROUP,
                "v1",
                "nodepools",
                meta["name"],
                body,
            )
        except KubernetesError as error:
            if error.status in (404, 409):
                return False
            raise
        return True

    def list_ec2nodeclasses(self) -> list[JSON]:
        return self._list_cluster_custom(KARPENTER_AWS_GROUP, "v1", "ec2nodeclasses")

    def patch_ec2nodeclass_status(self, name: str, status: Mapping[str, Any]) -> JSON:
        """Merge-patch an EC2NodeClass's status through ``/status``."""
        return self._call(
            self.custom.patch_cluster_custom_object_status,
            KARPENTER_AWS_GROUP,
            "v1",
            "ec2nodeclasses",
            name,
            {"status": dict(status)},
        )

    def list_nodeoverlays(self) -> list[JSON]:
        try:
            return self._list_cluster_custom(KARPENTER_GROUP, "v1alpha1", "nodeoverlays")
        except KubernetesError as error:
            if error.status == 404:  # the CRD is optional
                return []
            raise

    # -- NodeClaims (mirrored from the DynamoDB records: lifecycle/nodeclaim_objects.py) ---------------

    def list_nodeclaims(self) -> list[JSON]:
        return self._list_cluster_custom(KARPENTER_GROUP, "v1", "nodeclaims")

    def get_nodeclaim(self, name: str) -> JSON | None:
        try:
            return self._call(
                self.custom.get_cluster_custom_object, KARPENTER_GROUP, "v1", "nodeclaims", name
            )
        except KubernetesError as error:
            if error.status == 404:
                return None
            raise

    def create_nodeclaim(self, body: JSON) -> JSON:
        """Create a NodeClaim; the API server drops ``status`` on create (the status subresource)."""
        return self._call(self.custom.create_cluster_custom_object, KARPENTER_GROUP, "v1", "nodeclaims", body)

    def patch_nodeclaim(self, name: str, patch: JSON | list[JSON]) -> JSON:
        """A merge patch (a dict) or a JSON patch (a list) of the NodeClaim's metadata."""
        kwargs = {"_content_type": "application/json-patch+json"} if isinstance(patch, list) else {}
        return self._call(
            self.custom.patch_cluster_custom_object,
            KARPENTER_GROUP,
            "v1",
            "nodeclaims",
            name,
            patch,
            **kwargs,
        )

    def patch_nodeclaim_status(self, name: str, patch: JSON) -> JSON:
        return self._call(
            self.custom.patch_cluster_custom_object_status, KARPENTER_GROUP, "v1", "nodeclaims", name, patch
        )

    def delete_nodeclaim(self, name: str) -> None:
        """Delete a NodeClaim (its finalizer holds it, with a deletionTimestamp); gone already is fine."""
        try:
            self._call(self.custom.delete_cluster_custom_object, KARPENTER_GROUP, "v1", "nodeclaims", name)
        except KubernetesError as error:
            if error.status != 404:
                raise

    # -- nodes ---------------------------------------------------------------------------------------

    def patch_node(self, name: str, patch: JSON) -> JSON:
        return self._call(self.core.patch_node, name, patch)

    def json_patch_node(self, name: str, operations: list[JSON]) -> JSON:
        return self._call(self.core.patch_node, name, operations)

    def delete_node(self, name: str) -> None:
        try:
            self._call(self.core.delete_node, name)
        except KubernetesError as error:
            if error.status != 404:
                raise

    def remove_node_finalizer(self, node: JSON, finalizer: str) -> None:
        finalizers = list(node["metadata"].get("finalizers") or [])
        if finalizer not in finalizers:
            return
        index = finalizers.index(finalizer)
        # The test on the value makes this safe against a concurrent change of the list.
        ops = [
            {"op": "test", "path": f"/metadata/finalizers/{index}", "value": finalizer},
            {"op": "remove", "path": f"/metadata/finalizers/{index}"},
        ]
        try:
            self.json_patch_node(node["metadata"]["name"], ops)
        except KubernetesError as error:
            if error.status != 404:
                raise

    # -- pods ----------------------------------------------------------------------------------------

    def evict(self, pod: Mapping[str, Any]) -> str:
        meta = pod["metadata"]
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        }
        try:
            self._call(self.core.create_namespaced_pod_eviction, meta["name"], meta["namespace"], body)
        except KubernetesError as error:
            if error.status == 429:
                return EvictionResult.BLOCKED
            if error.status == 404:
                return EvictionResult.GONE
            raise
        return EvictionResult.EVICTED

    def delete_pod(self, pod: Mapping[str, Any], grace_period_seconds: int | None = None) -> None:
        meta = pod["metadata"]
        kwargs: dict[str, Any] = {}
        if grace_period_seconds is not None:
            kwargs["grace_period_seconds"] = grace_period_seconds
        try:
            self._call(self.core.delete_namespaced_pod, meta["name"], meta["namespace"], **kwargs)
        except KubernetesError as error:
            if error.status != 404:
                raise

    # -- events --------------------------------------------------------------------------------------

    def record_event(
        self,
        obj: Mapping[str, Any],
        reason: str,
        message: str,
        event_type: str = "Normal",
        *,
        dedupe_seconds: float | None = None,
    ) -> None:
        """A core/v1 Event, as Karpenter's recorder writes them; failures are not worth failing for.

        ``dedupe_seconds``: as Karpenter's recorder (``pkg/events/recorder.go``), the same reason on the
        same object again within that window is not published at all, whatever its message: a
        disruption pass every 10 s would otherwise write (create, 409, read, patch) an Unconsolidatable
        or DisruptionBlocked Event on every node and NodeClaim each pass. The window lives with the warm
        function, as Karpenter's lives with its process.

        ``obj`` needs ``apiVersion`` and ``kind``: list items of built-in kinds come without them, and
        ``kubectl describe`` finds events by kind. Cluster-scoped objects (Node, NodePool) have their
        events in ``default`` and no namespace in the reference, as client-go's recorder does."""
        meta = obj.get("metadata", {})
        namespace = meta.get("namespace") or "default"
        at = self._clock.now()
        if dedupe_seconds is not None:
            key = f"{reason.lower()}-{obj.get('kind')}-{meta.get('uid') or meta.get('name')}"
            until = self._published.get(key)
            if until is not None and until > at:
                return
            if len(self._published) > 10_000:
                self._published = {k: t for k, t in self._published.items() if t > at}
            self._published[key] = at + timedelta(seconds=dedupe_seconds)
        now = to_rfc3339(at)
        reference = {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
        }
        # The same event on the same object again is one Event with a higher count, as client-go's
        # recorder aggregates them: a node blocked for an hour gets one DisruptionBlocked, not sixty.
        identity = "\x00".join(
            str(x)
            for x in (reference["kind"], meta.get("uid") or meta.get("name"), reason, message, event_type)
        )
        name = f"{str(meta.get('name', 'object'))[:200]}.{hashlib.sha256(identity.encode()).hexdigest()[:16]}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {k: v for k, v in reference.items() if v},
            "reason": reason,
            "message": message[:1024],
            "type": event_type,
            "source": {"component": self._component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        # An event is worth a try, never a failed reconcile.
        with contextlib.suppress(KubernetesError):
            try:
                self._call(self.core.create_namespaced_event, namespace, body)
            except KubernetesError as error:
                if error.status != 409:
                    raise
                existing = self._call(self.core.read_namespaced_event, name, namespace)
                count = int(existing.get("count") or 1) + 1
                self._call(
                    self.core.patch_namespaced_event, name, namespace, {"count": count, "lastTimestamp": now}
                )

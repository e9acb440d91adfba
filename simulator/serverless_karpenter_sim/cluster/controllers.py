"""Simulated workload controllers: Deployment, ReplicaSet, StatefulSet, Job and DaemonSet, plus the garbage
collection of objects whose controlling owner is gone.

They follow kube-controller-manager's behaviour where it matters to a node autoscaler (which pods exist, how
many, with which spec, which ones go first on scale-down) and simplify the rest: no ControllerRevisions,
no proportional scaling of rollouts in flight, no Indexed-job failure policies.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from serverless_karpenter.clock import parse_rfc3339, to_rfc3339

from serverless_karpenter_sim.cluster.informer import InformedRest
from serverless_karpenter_sim.cluster.kubelet import RUN_SECONDS_ANNOTATION
from serverless_karpenter_sim.cluster.objects import (
    NODES_PATH,
    Obj,
    apps_path,
    batch_path,
    condition,
    controller_ref,
    first_untolerated_taint,
    generated_name,
    is_deleting,
    is_node_ready,
    is_pod_available,
    is_pod_ready,
    is_terminal,
    key_of,
    labels_of,
    meta,
    name_of,
    namespace_of,
    new_condition,
    owner_reference,
    pod_matches_node_selector_and_affinity,
    pod_path,
    pod_phase,
    pods_path,
    template_hash,
    timestamp,
    uid_of,
)
from serverless_karpenter_sim.kubeapi.store import Store

POD_TEMPLATE_HASH = "pod-template-hash"
DEFAULT_REVISION_HISTORY_LIMIT = 10
DEFAULT_BACKOFF_LIMIT = 6
BURST_REPLICAS = 500  # kube-controller-manager's cap on pods created or deleted per sync
DELETION_COST_ANNOTATION = "controller.kubernetes.io/pod-deletion-cost"

# Tolerations the DaemonSet controller adds to every daemon pod.
DAEMONSET_TOLERATIONS: tuple[Obj, ...] = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)
HOST_NETWORK_TOLERATION: Obj = {
    "key": "node.kubernetes.io/network-unavailable",
    "operator": "Exists",
    "effect": "NoSchedule",
}

APPS_V1 = "apps/v1"
BATCH_V1 = "batch/v1"
_POD_OWNER_KINDS = frozenset({"ReplicaSet", "StatefulSet", "Job", "DaemonSet"})


@dataclass
class ControllersReport:
    created_pods: list[str] = field(default_factory=list)
    deleted_pods: list[str] = field(default_factory=list)
    created_replicasets: list[str] = field(default_factory=list)
    collected: list[str] = field(default_factory=list)


def _spec(obj: Obj) -> Obj:
    spec: Obj = obj.get("spec") or {}
    return spec


def _status(obj: Obj) -> Obj:
    status: Obj = obj.get("status") or {}
    return status


def _replicas(obj: Obj) -> int:
    value = _spec(obj).get("replicas")
    return 1 if value is None else int(value)


def _int_field(obj: Obj, name: str, default: int) -> int:
    value = obj.get(name)
    return default if value is None else int(value)


def _int_or_percent(value: Any, total: int, *, round_up: bool, default: str) -> int:
    value = default if value is None else value
    if isinstance(value, str) and value.endswith("%"):
        scaled = int(value[:-1]) * total
        return -(-scaled // 100) if round_up else scaled // 100
    return int(value)


def _active(pods: Iterable[Obj]) -> list[Obj]:
    return [p for p in pods if not is_terminal(p) and not is_deleting(p)]


def _ready_since(pod: Obj) -> str:
    ready = condition(pod, "Ready")
    return str((ready or {}).get("lastTransitionTime") or "")


def _deletion_order(pods: list[Obj]) -> list[Obj]:
    """Which pods a scale-down removes first, in ReplicaSet order: unscheduled, pending, not ready, cheap to
    delete, doubled up on a node, ready for less time, then newest."""
    per_node: dict[str, int] = {}
    for pod in pods:
        node = _spec(pod).get("nodeName") or ""
        if node:
            per_node[node] = per_node.get(node, 0) + 1
    phase_rank = {"Pending": 0, "Unknown": 1, "Running": 2}

    def rank(pod: Obj) -> tuple[Any, ...]:
        node = _spec(pod).get("nodeName") or ""
        try:
            cost = int((meta(pod).get("annotations") or {}).get(DELETION_COST_ANNOTATION, "0"))
        except ValueError:
            cost = 0
        created = timestamp(pod)
        return (
            1 if node else 0,
            phase_rank.get(pod_phase(pod), 3),
            1 if is_pod_ready(pod) else 0,
            cost,
            -per_node.get(node, 0),
            _reverse(_ready_since(pod)),
            -(created.timestamp() if created else 0.0),
            _reverse(name_of(pod)),
        )

    return sorted(pods, key=rank)


def _reverse(text: str) -> tuple[int, ...]:
    """A sort key that orders strings descending."""
    return (*(-ord(c) for c in text), 1)


def _changed(current: Mapping[str, Any], desired: Mapping[str, Any]) -> Obj:
    return {k: v for k, v in desired.items() if current.get(k) != v}


class WorkloadControllers:
    """Deployments, ReplicaSets, StatefulSets, Jobs and DaemonSets, reconciled once per step."""

    def __init__(
        self,
        api_client: ApiClient,
        *,
        seed: int = 0,
        job_pod_duration: float | None = None,
        store: Store | None = None,
    ) -> None:
        # Its LISTs from informers on ``store``'s change feed when given (``cluster/informer.py``).
        self._rest = InformedRest(api_client, store)
        self._rng = random.Random(seed)
        self.job_pod_duration = job_pod_duration
        # ReplicaSet uid -> (what its counts were made from, (fully labeled, ready, available)).
        self._replica_counts: dict[str, tuple[object, tuple[int, int, int]]] = {}

    # -- step --

    def step(self, now: datetime) -> ControllersReport:
        report = ControllersReport()
        deployments = self._rest.list(apps_path("deployments"))
        replicasets = self._rest.list(apps_path("replicasets"))
        statefulsets = self._rest.list(apps_path("statefulsets"))
        daemonsets = self._rest.list(apps_path("daemonsets"))
        jobs = self._rest.list(batch_path("jobs"))
        pods = self._rest.list(pods_path())
        nodes = self._rest.list(NODES_PATH) if daemonsets else []

        owners = {uid_of(o) for o in [*deployments, *replicasets, *statefulsets, *daemonsets, *jobs]}
        pods = self._collect_orphans(pods, owners, "pods", report)
        replicasets = self._collect_orphans(replicasets, owners, "replicasets", report)

        pods_by_owner: dict[str, list[Obj]] = {}
        for pod in pods:
            ref = controller_ref(pod)
            if ref is not None and ref.get("kind") in _POD_OWNER_KINDS:
                pods_by_owner.setdefault(str(ref.get("uid")), []).append(pod)
        rs_by_owner: dict[str, list[Obj]] = {}
        for rs in replicasets:
            ref = controller_ref(rs)
            if ref is not None and ref.get("kind") == "Deployment":
                rs_by_owner.setdefault(str(ref.get("uid")), []).append(rs)

        for deployment in deployments:
            if not is_deleting(deployment):
                created = self._rollout(deployment, rs_by_owner.setdefault(uid_of(deployment), []), report)
                if created is not None:
                    replicasets.append(created)
        for rs in replicasets:
            if not is_deleting(rs):
                self._sync_replicaset(rs, pods_by_owner.get(uid_of(rs), []), now, report)
        live_sets = {uid_of(rs) for rs in replicasets}
        self._replica_counts = {u: c for u, c in self._replica_counts.items() if u in live_sets}
        for deployment in deployments:
            if not is_deleting(deployment):
                self._deployment_status(deployment, rs_by_owner.get(uid_of(deployment), []))
        for sts in statefulsets:
            if not is_deleting(sts):
                self._sync_statefulset(sts, pods_by_owner.get(uid_of(sts), []), now, report)
        for job in jobs:
            if not is_deleting(job):
                self._sync_job(job, pods_by_owner.get(uid_of(job), []), now, report)
        for ds in daemonsets:
            if not is_deleting(ds):
                self._sync_daemonset(ds, pods_by_owner.get(uid_of(ds), []), nodes, now, report)
        return report

    # -- shared --

    def _collect_orphans(
        self, objects: list[Obj], owners: set[str], resource: str, report: ControllersReport
    ) -> list[Obj]:
        """The garbage collector's part: delete dependents whose controlling workload no longer exists."""
        kept = []
        for obj in objects:
            ref = controller_ref(obj)
            if (
                ref is None
                or ref.get("apiVersion") not in (APPS_V1, BATCH_V1)
                or str(ref.get("uid")) in owners
            ):
                kept.append(obj)
                continue
            if is_deleting(obj):
                continue
            if resource == "pods":
                path = pod_path(namespace_of(obj), name_of(obj))
            else:
                path = f"{apps_path(resource, namespace_of(obj))}/{name_of(obj)}"
            if self._rest.delete(path, uid=uid_of(obj) or None):
                report.collected.append(f"{resource}/{key_of(obj)}")
        return kept

    def _create_pod(self, pod: Obj, report: ControllersReport, *, generate: str | None = None) -> Obj | None:
        """Create ``pod``; with ``generate``, name it ``generate`` plus a random suffix (retrying a clash)."""
        namespace = pod["metadata"]["namespace"]
        for _ in range(3):
            if generate is not None:
                pod["metadata"]["name"] = generated_name(generate, self._rng)
            created = self._rest.create(pods_path(namespace), pod)
            if created is not None:
                report.created_pods.append(key_of(created))
                return created
            if generate is None:
                return None
        return None

    def _delete_pod(self, pod: Obj, report: ControllersReport) -> None:
        if self._rest.delete(pod_path(namespace_of(pod), name_of(pod)), uid=uid_of(pod) or None):
            report.deleted_pods.append(key_of(pod))

    @staticmethod
    def _pod_from_template(
        template: Obj,
        owner: Obj,
        owner_ref: Obj,
        *,
        labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
    ) -> Obj:
        template_meta = template.get("metadata") or {}
        metadata: Obj = {
            "namespace": namespace_of(owner),
            "labels": {**(template_meta.get("labels") or {}), **(labels or {})},
            "ownerReferences": [owner_ref],
        }
        all_annotations = {**(template_meta.get("annotations") or {}), **(annotations or {})}
        if all_annotations:
            metadata["annotations"] = all_annotations
        if template_meta.get("finalizers"):
            metadata["finalizers"] = list(template_meta["finalizers"])
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": copy.deepcopy(template.get("spec")),
        }

    def _patch_status(self, path: str, obj: Obj, desired: Obj) -> None:
        """Write only the status fields that changed, so that a quiet cluster sees no writes."""
        changes = _changed(_status(obj), desired)
        if changes:
            self._rest.patch(f"{path}/status", {"status": changes})
            obj.setdefault("status", {}).update(changes)

    # -- Deployment --

    def _rollout(self, deployment: Obj, owned: list[Obj], report: ControllersReport) -> Obj | None:
        """Create the ReplicaSet of the current template and move replicas onto it; the created RS, if any."""
        spec = _spec(deployment)
        replicas = _replicas(deployment)
        template = spec.get("template") or {}
        pod_hash = template_hash(template, int(_status(deployment).get("collisionCount") or 0))
        new_rs = next((rs for rs in owned if labels_of(rs).get(POD_TEMPLATE_HASH) == pod_hash), None)
        old = sorted(
            (rs for rs in owned if rs is not new_rs), key=lambda rs: meta(rs).get("creationTimestamp") or ""
        )
        strategy = spec.get("strategy") or {}
        recreate = strategy.get("type") == "Recreate"
        rolling = strategy.get("rollingUpdate") or {}
        max_surge = _int_or_percent(rolling.get("maxSurge"), replicas, round_up=True, default="25%")
        max_unavailable = _int_or_percent(
            rolling.get("maxUnavailable"), replicas, round_up=False, default="25%"
        )
        if max_surge == 0 and max_unavailable == 0:
            max_unavailable = 1
        old_total = sum(_replicas(rs) for rs in old)

        if recreate:
            for rs in old:
                self._scale_rs(rs, 0)
            old_pods_remain = any(int(_status(rs).get("replicas") or 0) > 0 for rs in old)
            target = 0 if old_pods_remain else replicas
        elif (new_rs is not None and _replicas(new_rs) >= replicas) or old_total == 0:
            target = replicas
        else:
            current = _replicas(new_rs) if new_rs is not None else 0
            room = replicas + max_surge - (old_total + current)
            target = current + max(0, min(room, replicas - current))

        created = None
        if new_rs is None:
            created = new_rs = self._create_replicaset(deployment, template, pod_hash, target, owned, report)
            if new_rs is None:
                return None
            owned.append(new_rs)
        else:
            self._scale_rs(new_rs, target)
        if not recreate and old:
            self._scale_down_old(old, new_rs, replicas, max_unavailable)
        self._prune_history(deployment, old)
        return created

    def _create_replicaset(
        self,
        deployment: Obj,
        template: Obj,
        pod_hash: str,
        replicas: int,
        owned: list[Obj],
        report: ControllersReport,
    ) -> Obj | None:
        rs_template = copy.deepcopy(template)
        rs_template.setdefault("metadata", {})
        rs_template["metadata"]["labels"] = {
            **(rs_template["metadata"].get("labels") or {}),
            POD_TEMPLATE_HASH: pod_hash,
        }
        selector = copy.deepcopy(_spec(deployment).get("selector") or {})
        selector["matchLabels"] = {**(selector.get("matchLabels") or {}), POD_TEMPLATE_HASH: pod_hash}
        revision = 1 + max(
            (
                int((meta(rs).get("annotations") or {}).get("deployment.kubernetes.io/revision", "0"))
                for rs in owned
            ),
            default=0,
        )
        namespace = namespace_of(deployment)
        body = {
            "apiVersion": APPS_V1,
            "kind": "ReplicaSet",
            "metadata": {
                "name": f"{name_of(deployment)}-{pod_hash}",
                "namespace": namespace,
                "labels": rs_template["metadata"]["labels"],
                "annotations": {
                    "deployment.kubernetes.io/revision": str(revision),
                    "deployment.kubernetes.io/desired-replicas": str(_replicas(deployment)),
                },
                "ownerReferences": [owner_reference(deployment, APPS_V1, "Deployment")],
            },
            "spec": {
                "replicas": replicas,
                "minReadySeconds": int(_spec(deployment).get("minReadySeconds") or 0),
                "selector": selector,
                "template": rs_template,
            },
        }
        created = self._rest.create(apps_path("replicasets", namespace), body)
        if created is None:
            # A ReplicaSet of that name exists and is not ours: count the collision and hash again next step.
            collisions = int(_status(deployment).get("collisionCount") or 0) + 1
            self._patch_status(
                f"{apps_path('deployments', namespace)}/{name_of(deployment)}",
                deployment,
                {"collisionCount": collisions},
            )
            return None
        report.created_replicasets.append(key_of(created))
        return created

    def _scale_rs(self, rs: Obj, replicas: int) -> None:
        if _replicas(rs) == replicas:
            return
        self._rest.patch(
            f"{apps_path('replicasets', namespace_of(rs))}/{name_of(rs)}", {"spec": {"replicas": replicas}}
        )
        rs.setdefault("spec", {})["replicas"] = replicas

    def _scale_down_old(self, old: list[Obj], new_rs: Obj, replicas: int, max_unavailable: int) -> None:
        """Deployment's rolling scale-down: never below ``replicas - maxUnavailable`` available pods."""
        all_rs = [*old, new_rs]
        min_available = replicas - max_unavailable
        new_unavailable = _replicas(new_rs) - int(_status(new_rs).get("availableReplicas") or 0)
        budget = sum(_replicas(rs) for rs in all_rs) - min_available - new_unavailable
        if budget <= 0:
            return
        # Unhealthy old replicas go first: removing them costs no availability.
        for rs in old:
            unhealthy = _replicas(rs) - int(_status(rs).get("availableReplicas") or 0)
            if unhealthy > 0 and budget > 0:
                cut = min(unhealthy, budget)
                self._scale_rs(rs, _replicas(rs) - cut)
                budget -= cut
        available = sum(int(_status(rs).get("availableReplicas") or 0) for rs in all_rs)
        remaining = available - min_available
        for rs in old:
            if remaining <= 0:
                break
            cut = min(_replicas(rs), remaining)
            if cut > 0:
                self._scale_rs(rs, _replicas(rs) - cut)
                remaining -= cut

    def _prune_history(self, deployment: Obj, old: list[Obj]) -> None:
        limit = _spec(deployment).get("revisionHistoryLimit")
        limit = DEFAULT_REVISION_HISTORY_LIMIT if limit is None else int(limit)
        idle = [rs for rs in old if _replicas(rs) == 0 and int(_status(rs).get("replicas") or 0) == 0]
        for rs in idle[: max(0, len(idle) - limit)]:
            self._rest.delete(
                f"{apps_path('replicasets', namespace_of(rs))}/{name_of(rs)}", uid=uid_of(rs) or None
            )

    def _deployment_status(self, deployment: Obj, owned: list[Obj]) -> None:
        replicas = _replicas(deployment)
        pod_hash = template_hash(
            _spec(deployment).get("template") or {}, int(_status(deployment).get("collisionCount") or 0)
        )
        new_rs = next((rs for rs in owned if labels_of(rs).get(POD_TEMPLATE_HASH) == pod_hash), None)
        total = sum(int(_status(rs).get("replicas") or 0) for rs in owned)
        ready = sum(int(_status(rs).get("readyReplicas") or 0) for rs in owned)
        available = sum(int(_status(rs).get("availableReplicas") or 0) for rs in owned)
        desired: Obj = {
            "observedGeneration": int(meta(deployment).get("generation") or 1),
            "replicas": total,
            "updatedReplicas": int(_status(new_rs).get("replicas") or 0) if new_rs is not None else 0,
            "readyReplicas": ready,
            "availableReplicas": available,
            "unavailableReplicas": max(0, replicas - available),
        }
        self._patch_status(
            f"{apps_path('deployments', namespace_of(deployment))}/{name_of(deployment)}", deployment, desired
        )

    # -- ReplicaSet --

    def _sync_replicaset(self, rs: Obj, pods: list[Obj], now: datetime, report: ControllersReport) -> None:
        replicas = _replicas(rs)
        active = _active(pods)
        template = _spec(rs).get("template") or {}
        diff = len(active) - replicas
        if diff < 0:
            owner_ref = owner_reference(rs, APPS_V1, "ReplicaSet")
            for _ in range(min(-diff, BURST_REPLICAS)):
                pod = self._pod_from_template(template, rs, owner_ref)
                created = self._create_pod(pod, report, generate=f"{name_of(rs)}-")
                if created is not None:
                    active.append(created)
        elif diff > 0:
            for pod in _deletion_order(active)[: min(diff, BURST_REPLICAS)]:
                self._delete_pod(pod, report)
                active.remove(pod)
        min_ready = int(_spec(rs).get("minReadySeconds") or 0)
        template_labels = (template.get("metadata") or {}).get("labels") or {}
        # The counts read every pod's labels and conditions; with no pod and no template changed since the
        # last tick (each write moves a resourceVersion) they are what they were. Not with minReadySeconds,
        # where availability moves with the clock.
        seen = (
            meta(rs).get("generation"),
            tuple(sorted(template_labels.items())),
            tuple((uid_of(p), meta(p).get("resourceVersion")) for p in active),
        )
        counted = self._replica_counts.get(uid_of(rs))
        if min_ready > 0 or counted is None or counted[0] != seen:
            counts = (
                sum(1 for p in active if all(labels_of(p).get(k) == v for k, v in template_labels.items())),
                sum(1 for p in active if is_pod_ready(p)),
                sum(1 for p in active if is_pod_available(p, min_ready, now)),
            )
            counted = (seen, counts)
            self._replica_counts[uid_of(rs)] = counted
        labeled, ready, available = counted[1]
        desired = {
            "observedGeneration": int(meta(rs).get("generation") or 1),
            "replicas": len(active),
            "fullyLabeledReplicas": labeled,
            "readyReplicas": ready,
            "availableReplicas": available,
        }
        self._patch_status(f"{apps_path('replicasets', namespace_of(rs))}/{name_of(rs)}", rs, desired)

    # -- StatefulSet --

    def _sync_statefulset(self, sts: Obj, pods: list[Obj], now: datetime, report: ControllersReport) -> None:
        spec = _spec(sts)
        replicas = _replicas(sts)
        name = name_of(sts)
        ordered = (spec.get("podManagementPolicy") or "OrderedReady") == "OrderedReady"
        by_ordinal: dict[int, Obj] = {}
        for pod in pods:
            suffix = name_of(pod).removeprefix(f"{name}-")
            if suffix.isdigit():
                by_ordinal[int(suffix)] = pod
        # A failed or finished member is replaced under the same name once its old object is gone.
        for ordinal, pod in list(by_ordinal.items()):
            if is_terminal(pod) and not is_deleting(pod):
                self._delete_pod(pod, report)
                del by_ordinal[ordinal]
        template = spec.get("template") or {}
        revision = f"{name}-{template_hash(template)}"
        owner_ref = owner_reference(sts, APPS_V1, "StatefulSet")
        blocked = False
        for ordinal in range(replicas):
            member = by_ordinal.get(ordinal)
            if member is None:
                created = self._create_member(sts, ordinal, template, revision, owner_ref, report)
                if created is not None:
                    by_ordinal[ordinal] = created
                if ordered:
                    blocked = True
                    break
            elif ordered and (is_deleting(member) or not is_pod_ready(member)):
                blocked = True
                break
        condemned = sorted((o for o in by_ordinal if o >= replicas), reverse=True)
        if condemned and not blocked:
            if ordered:
                if not any(is_deleting(by_ordinal[o]) for o in condemned):
                    self._delete_pod(by_ordinal[condemned[0]], report)
            else:
                for ordinal in condemned:
                    if not is_deleting(by_ordinal[ordinal]):
                        self._delete_pod(by_ordinal[ordinal], report)
        members = _active(p for o, p in by_ordinal.items() if o < replicas)
        min_ready = int(spec.get("minReadySeconds") or 0)
        desired = {
            "observedGeneration": int(meta(sts).get("generation") or 1),
            "replicas": len(_active(by_ordinal.values())),
            "readyReplicas": sum(1 for p in members if is_pod_ready(p)),
            "availableReplicas": sum(1 for p in members if is_pod_available(p, min_ready, now)),
            "currentReplicas": len(members),
            "updatedReplicas": len(members),
            "currentRevision": revision,
            "updateRevision": revision,
        }
        self._patch_status(f"{apps_path('statefulsets', namespace_of(sts))}/{name}", sts, desired)

    def _create_member(
        self,
        sts: Obj,
        ordinal: int,
        template: Obj,
        revision: str,
        owner_ref: Obj,
        report: ControllersReport,
    ) -> Obj | None:
        spec = _spec(sts)
        namespace = namespace_of(sts)
        pod_name = f"{name_of(sts)}-{ordinal}"
        pod = self._pod_from_template(
            template,
            sts,
            owner_ref,
            labels={
                "statefulset.kubernetes.io/pod-name": pod_name,
                "apps.kubernetes.io/pod-index": str(ordinal),
                "controller-revision-hash": revision,
            },
        )
        pod["metadata"]["name"] = pod_name
        pod["spec"]["hostname"] = pod_name
        if spec.get("serviceName"):
            pod["spec"]["subdomain"] = spec["serviceName"]
        volumes = [v for v in pod["spec"].get("volumes") or []]
        for claim_template in spec.get("volumeClaimTemplates") or []:
            claim_name = f"{name_of(claim_template)}-{pod_name}"
            claim = {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {
                    "name": claim_name,
                    "namespace": namespace,
                    "labels": {**((spec.get("selector") or {}).get("matchLabels") or {})},
                },
                "spec": copy.deepcopy(_spec(claim_template)),
            }
            try:
                self._rest.create(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims", claim)
            except ApiException as err:
                if err.status != 404:  # a server without PVCs: the pod still gets its volume entry
                    raise
            volumes = [v for v in volumes if v.get("name") != name_of(claim_template)]
            volumes.append(
                {"name": name_of(claim_template), "persistentVolumeClaim": {"claimName": claim_name}}
            )
        if volumes:
            pod["spec"]["volumes"] = volumes
        return self._create_pod(pod, report)

    # -- Job --

    def _sync_job(self, job: Obj, pods: list[Obj], now: datetime, report: ControllersReport) -> None:
        spec = _spec(job)
        path = f"{batch_path('jobs', namespace_of(job))}/{name_of(job)}"
        status = _status(job)
        finished = next(
            (
                c
                for c in status.get("conditions") or []
                if c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
            ),
            None,
        )
        if finished is not None:
            self._expire_job(job, path, now)
            return
        parallelism = _int_field(spec, "parallelism", 1)
        completions_raw = spec.get("completions")
        completions = None if completions_raw is None else int(completions_raw)
        if completions is None and spec.get("parallelism") is None:
            completions = 1
        indexed = spec.get("completionMode") == "Indexed" and completions is not None
        active = _active(pods)
        succeeded_pods = [p for p in pods if pod_phase(p) == "Succeeded"]
        failed = sum(1 for p in pods if pod_phase(p) == "Failed")
        succeeded_indexes = {_completion_index(p) for p in succeeded_pods} - {None}
        succeeded = len(succeeded_indexes) if indexed else len(succeeded_pods)
        backoff_limit = _int_field(spec, "backoffLimit", DEFAULT_BACKOFF_LIMIT)
        stamp = to_rfc3339(now)
        desired: Obj = {"startTime": status.get("startTime") or stamp}
        conditions = list(status.get("conditions") or [])

        done_reason: tuple[str, str] | None = None
        if failed > backoff_limit:
            done_reason = ("Failed", "BackoffLimitExceeded")
        elif (completions is not None and succeeded >= completions) or (
            completions is None and succeeded > 0 and not active
        ):
            done_reason = ("Complete", "")
        if done_reason is not None or spec.get("suspend"):
            for pod in active:
                self._delete_pod(pod, report)
            active = []
        else:
            if completions is None:
                want = parallelism if succeeded == 0 else 0
            else:
                want = min(parallelism, completions - succeeded)
            if len(active) < want:
                self._create_job_pods(
                    job, active, succeeded_indexes, want - len(active), completions, indexed, report
                )
            elif len(active) > want:
                for pod in _deletion_order(active)[: len(active) - want]:
                    self._delete_pod(pod, report)
                    active.remove(pod)
        if done_reason is not None:
            kind, reason = done_reason
            conditions.append(new_condition(kind, "True", now, reason))
            desired["conditions"] = conditions
            if kind == "Complete":
                desired["completionTime"] = stamp
        desired.update(
            {
                "active": len(active),
                "ready": sum(1 for p in active if is_pod_ready(p)),
                "succeeded": succeeded,
                "failed": failed,
            }
        )
        if indexed:
            desired["completedIndexes"] = _index_ranges(sorted(i for i in succeeded_indexes if i is not None))
        self._patch_status(path, job, desired)

    def _create_job_pods(
        self,
        job: Obj,
        active: list[Obj],
        succeeded_indexes: set[int | None],
        count: int,
        completions: int | None,
        indexed: bool,
        report: ControllersReport,
    ) -> None:
        template = _spec(job).get("template") or {}
        uid = uid_of(job)
        labels = {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name_of(job),
            "controller-uid": uid,
            "job-name": name_of(job),
        }
        annotations: dict[str, str] = {}
        template_annotations = (template.get("metadata") or {}).get("annotations") or {}
        if self.job_pod_duration is not None and RUN_SECONDS_ANNOTATION not in template_annotations:
            annotations[RUN_SECONDS_ANNOTATION] = f"{self.job_pod_duration:g}"
        owner_ref = owner_reference(job, BATCH_V1, "Job")
        taken = {_completion_index(p) for p in active} | succeeded_indexes
        free_indexes = [i for i in range(completions or 0) if i not in taken] if indexed else []
        for n in range(count):
            pod_labels = dict(labels)
            pod_annotations = dict(annotations)
            base = f"{name_of(job)}-"
            if indexed:
                if n >= len(free_indexes):
                    break
                index = str(free_indexes[n])
                pod_labels["batch.kubernetes.io/job-completion-index"] = index
                pod_annotations["batch.kubernetes.io/job-completion-index"] = index
                base = f"{name_of(job)}-{index}-"
            pod = self._pod_from_template(
                template, job, owner_ref, labels=pod_labels, annotations=pod_annotations
            )
            self._create_pod(pod, report, generate=base)

    def _expire_job(self, job: Obj, path: str, now: datetime) -> None:
        """The TTL-after-finished controller."""
        ttl = _spec(job).get("ttlSecondsAfterFinished")
        finished_at = _status(job).get("completionTime") or next(
            (
                c.get("lastTransitionTime")
                for c in _status(job).get("conditions") or []
                if c.get("type") == "Failed"
            ),
            None,
        )
        if ttl is None or not finished_at:
            return
        if now >= parse_rfc3339(finished_at) + timedelta(seconds=int(ttl)):
            self._rest.delete(path, uid=uid_of(job) or None)

    # -- DaemonSet --

    def _sync_daemonset(
        self, ds: Obj, pods: list[Obj], nodes: list[Obj], now: datetime, report: ControllersReport
    ) -> None:
        template = _spec(ds).get("template") or {}
        pod_spec = template.get("spec") or {}
        tolerations = list(pod_spec.get("tolerations") or [])
        for auto in (
            *DAEMONSET_TOLERATIONS,
            *((HOST_NETWORK_TOLERATION,) if pod_spec.get("hostNetwork") else ()),
        ):
            if not any(
                t.get("key") == auto["key"] and t.get("effect") == auto["effect"] for t in tolerations
            ):
                tolerations.append(dict(auto))
        generation = str(meta(ds).get("generation") or 1)
        revision = template_hash(template)
        owner_ref = owner_reference(ds, APPS_V1, "DaemonSet")
        by_node: dict[str, list[Obj]] = {}
        for pod in pods:
            if is_deleting(pod):
                continue
            if pod_phase(pod) == "Failed":
                self._delete_pod(pod, report)
                continue
            by_node.setdefault(_spec(pod).get("nodeName") or "", []).append(pod)
        desired_count = scheduled = misscheduled = ready = available = 0
        min_ready = int(_spec(ds).get("minReadySeconds") or 0)
        for node in nodes:
            if is_deleting(node):
                continue
            node_name = name_of(node)
            fits_node = pod_matches_node_selector_and_affinity(pod_spec, node)
            taints = (node.get("spec") or {}).get("taints") or []
            should_run = (
                fits_node
                and is_node_ready(node)
                and first_untolerated_taint(taints, tolerations, ("NoSchedule", "NoExecute")) is None
            )
            may_stay = fits_node and first_untolerated_taint(taints, tolerations, ("NoExecute",)) is None
            here = by_node.pop(node_name, [])
            desired_count += 1 if should_run else 0
            if here and not may_stay:
                for pod in here:
                    self._delete_pod(pod, report)
                misscheduled += 1
                continue
            if len(here) > 1:
                here.sort(key=lambda p: meta(p).get("creationTimestamp") or "")
                for pod in here[1:]:
                    self._delete_pod(pod, report)
                here = here[:1]
            if not here and should_run:
                pod = self._pod_from_template(
                    template,
                    ds,
                    owner_ref,
                    labels={"controller-revision-hash": revision, "pod-template-generation": generation},
                )
                pod["spec"]["nodeName"] = node_name
                pod["spec"]["tolerations"] = tolerations
                pod["spec"].setdefault("affinity", {})["nodeAffinity"] = {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": [node_name]}
                                ]
                            }
                        ]
                    }
                }
                created = self._create_pod(pod, report, generate=f"{name_of(ds)}-")
                here = [created] if created is not None else []
            if here:
                scheduled += 1
                if not should_run:
                    misscheduled += 1
                ready += 1 if is_pod_ready(here[0]) else 0
                available += 1 if is_pod_available(here[0], min_ready, now) else 0
        desired = {
            "observedGeneration": int(generation),
            "desiredNumberScheduled": desired_count,
            "currentNumberScheduled": scheduled,
            "updatedNumberScheduled": scheduled,
            "numberMisscheduled": misscheduled,
            "numberReady": ready,
            "numberAvailable": available,
            "numberUnavailable": max(0, desired_count - available),
        }
        self._patch_status(f"{apps_path('daemonsets', namespace_of(ds))}/{name_of(ds)}", ds, desired)


def _completion_index(pod: Obj) -> int | None:
    value = (meta(pod).get("annotations") or {}).get("batch.kubernetes.io/job-completion-index")
    return int(value) if value is not None and str(value).isdigit() else None


def _index_ranges(indexes: list[int]) -> str:
    """``1,3-5,7``: how a Job reports its completed indexes."""
    parts: list[str] = []
    start = prev = None
    for i in indexes:
        if start is None:
            start = prev = i
        elif prev is not None and i == prev + 1:
            prev = i
        else:
            parts.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = i
    if start is not None:
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(parts)

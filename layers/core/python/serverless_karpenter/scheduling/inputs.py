"""Manifests to scheduling inputs, for the offline ``plan``: workloads expanded to the pods their
controllers would create, bound pods on their nodes, RuntimeClass overhead filled in, and the pods of
nodes being deleted handed back as pending.

Pure: takes parsed YAML (dicts), reads no files and talks to no API.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from serverless_karpenter.scheduling import pods as podlib

Obj = dict[str, Any]

WORKLOAD_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "Job")
_UNSCHEDULABLE = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}


@dataclass
class ManifestSet:
    """The objects of a set of manifests, by what scheduling does with them."""

    nodepools: list[Obj] = field(default_factory=list)
    nodeclasses: list[Obj] = field(default_factory=list)
    pending: list[Obj] = field(default_factory=list)
    nodes: list[Obj] = field(default_factory=list)
    bound: list[Obj] = field(default_factory=list)
    daemonsets: list[Obj] = field(default_factory=list)
    pdbs: list[Obj] = field(default_factory=list)
    pvcs: list[Obj] = field(default_factory=list)
    pvs: list[Obj] = field(default_factory=list)
    storage_classes: list[Obj] = field(default_factory=list)
    csinodes: list[Obj] = field(default_factory=list)  # attachable-volume counts of nodes
    namespaces: list[Obj] = field(default_factory=list)
    runtime_classes: dict[str, Obj] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)  # "Kind/name" of objects plan does not use
    # Pending pods that cannot be scheduled whatever the capacity (pod key -> why).
    problems: dict[str, str] = field(default_factory=dict)


def flatten(documents: Iterable[Any]) -> list[Obj]:
    """YAML documents to objects: empty documents dropped, ``kind: List`` unpacked."""
    out: list[Obj] = []
    for doc in documents:
        if not isinstance(doc, dict):
            continue
        if doc.get("kind") == "List" or (doc.get("kind", "").endswith("List") and "items" in doc):
            out.extend(flatten(doc.get("items") or ()))
        else:
            out.append(doc)
    return out


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _namespace(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("namespace") or "default")


def template_hash(template: Mapping[str, Any]) -> str:
    """A stable stand-in for the ``pod-template-hash`` label (``matchLabelKeys`` often names it)."""
    digest = hashlib.sha256(json.dumps(template, sort_keys=True, default=str).encode()).hexdigest()
    return digest[:10]


def _pod_from_template(
    owner: Mapping[str, Any], kind: str, name: str, extra_labels: Mapping[str, str] | None = None
) -> Obj:
    template = (owner.get("spec") or {}).get("template") or {}
    meta = template.get("metadata") or {}
    labels = {**(meta.get("labels") or {}), **(extra_labels or {})}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": _namespace(owner),
            "uid": f"{_namespace(owner)}/{name}",
            "labels": labels,
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": [{"kind": kind, "name": _name(owner), "controller": True}],
        },
        "spec": copy.deepcopy(template.get("spec") or {}),
        "status": {"phase": "Pending", "conditions": [dict(_UNSCHEDULABLE)]},
    }


def expand_workload(obj: Mapping[str, Any]) -> tuple[list[Obj], list[Obj]]:
    """The pods a Deployment, ReplicaSet, StatefulSet or Job would create, and the PVCs a StatefulSet's
    ``volumeClaimTemplates`` would create."""
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    name = _name(obj)
    pods: list[Obj] = []
    claims: list[Obj] = []
    if kind in ("Deployment", "ReplicaSet"):
        replicas = int(spec.get("replicas", 1) if spec.get("replicas") is not None else 1)
        extra = (
            {"pod-template-hash": template_hash(spec.get("template") or {})} if kind == "Deployment" else {}
        )
        for index in range(replicas):
            pods.append(_pod_from_template(obj, "ReplicaSet", f"{name}-{index}", extra))
    elif kind == "StatefulSet":
        replicas = int(spec.get("replicas", 1) if spec.get("replicas") is not None else 1)
        templates = spec.get("volumeClaimTemplates") or []
        for index in range(replicas):
            pod_name = f"{name}-{index}"
            pod = _pod_from_template(
                obj, "StatefulSet", pod_name, {"statefulset.kubernetes.io/pod-name": pod_name}
            )
            volumes = pod["spec"].setdefault("volumes", [])
            for template in templates:
                claim_name = f"{_name(template)}-{pod_name}"
                volumes.append({"name": _name(template), "persistentVolumeClaim": {"claimName": claim_name}})
                claims.append(
                    {
                        "apiVersion": "v1",
                        "kind": "PersistentVolumeClaim",
                        "metadata": {"name": claim_name, "namespace": _namespace(obj)},
                        "spec": copy.deepcopy(template.get("spec") or {}),
                    }
                )
            pods.append(pod)
    elif kind == "Job":
        parallelism = int(spec.get("parallelism", 1) if spec.get("parallelism") is not None else 1)
        completions = spec.get("completions")
        count = parallelism if completions is None else min(parallelism, int(completions))
        for index in range(count):
            pods.append(_pod_from_template(obj, "Job", f"{name}-{index}"))
    return pods, claims


def apply_runtime_class(pod: Obj, runtime_classes: Mapping[str, Mapping[str, Any]]) -> str | None:
    """What the RuntimeClass admission controller does: ``spec.overhead`` from ``overhead.podFixed``,
    and the class's nodeSelector and tolerations merged in. Returns a problem, or None."""
    spec = pod.setdefault("spec", {})
    class_name = spec.get("runtimeClassName")
    if not class_name:
        return None
    runtime_class = runtime_classes.get(class_name)
    if runtime_class is None:
        return f'runtimeclass "{class_name}" not found'
    fixed = (runtime_class.get("overhead") or {}).get("podFixed")
    if fixed and not spec.get("overhead"):
        spec["overhead"] = dict(fixed)
    scheduling = runtime_class.get("scheduling") or {}
    if scheduling.get("nodeSelector"):
        spec["nodeSelector"] = {**scheduling["nodeSelector"], **(spec.get("nodeSelector") or {})}
    if scheduling.get("tolerations"):
        spec["tolerations"] = [*(spec.get("tolerations") or []), *scheduling["tolerations"]]
    return None


def _is_deleting(node: Mapping[str, Any]) -> bool:
    # Imported lazily: termination imports scheduling, not the other way round.
    from serverless_karpenter.termination.handoff import is_node_deleting

    return is_node_deleting(node)


def _reschedulable(pod: Mapping[str, Any], pdbs: Sequence[Mapping[str, Any]]) -> bool:
    # As the live provisioner: a pod a PDB keeps from being evicted stays where it is.
    from serverless_karpenter.termination.handoff import is_currently_reschedulable

    return is_currently_reschedulable(pod, pdbs, datetime.now(UTC))


def classify(objects: Iterable[Mapping[str, Any]]) -> ManifestSet:
    """Sort objects into scheduling inputs and expand workloads into pending pods."""
    out = ManifestSet()
    pods: list[Obj] = []
    template_claims: list[Obj] = []
    for raw in objects:
        obj = dict(raw)
        kind = obj.get("kind")
        if kind == "NodePool":
            out.nodepools.append(obj)
        elif kind == "EC2NodeClass":
            out.nodeclasses.append(obj)
        elif kind == "Pod":
            pods.append(copy.deepcopy(obj))
        elif kind in WORKLOAD_KINDS:
            expanded, claims = expand_workload(obj)
            pods.extend(expanded)
            template_claims.extend(claims)
        elif kind == "Node":
            out.nodes.append(obj)
        elif kind == "DaemonSet":
            out.daemonsets.append(obj)
        elif kind == "PodDisruptionBudget":
            out.pdbs.append(obj)
        elif kind == "PersistentVolumeClaim":
            out.pvcs.append(obj)
        elif kind == "PersistentVolume":
            out.pvs.append(obj)
        elif kind == "StorageClass":
            out.storage_classes.append(obj)
        elif kind == "CSINode":
            out.csinodes.append(obj)
        elif kind == "Namespace":
            out.namespaces.append(obj)
        elif kind == "RuntimeClass":
            out.runtime_classes[_name(obj)] = obj
        else:
            out.ignored.append(f"{kind}/{_name(obj)}")
    # A PVC given explicitly wins over the one a StatefulSet template would create.
    explicit = {(_namespace(c), _name(c)) for c in out.pvcs}
    out.pvcs += [c for c in template_claims if (_namespace(c), _name(c)) not in explicit]
    deleting = {_name(n) for n in out.nodes if _is_deleting(n)}
    for pod in pods:
        pod.setdefault("metadata", {}).setdefault("namespace", "default")
        if podlib.is_terminal(pod):
            continue
        node = podlib.node_name(pod)
        if node is not None and node not in deleting:
            apply_runtime_class(pod, out.runtime_classes)
            out.bound.append(pod)
            continue
        if node is not None:
            # Karpenter reschedules the pods of a node being deleted: they are pending here.
            if not _reschedulable(pod, out.pdbs):
                continue
            pod["spec"] = {k: v for k, v in pod["spec"].items() if k != "nodeName"}
        if podlib.is_daemonset_pod(pod):
            continue
        problem = apply_runtime_class(pod, out.runtime_classes)
        if problem is not None:
            out.problems[podlib.key(pod)] = problem
            continue
        out.pending.append(pod)
    return out

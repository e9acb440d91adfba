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
from typing import TYPE_CHECKING, Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.scheduling import pods as podlib

if TYPE_CHECKING:
    from serverless_karpenter.lifecycle.model import NodeClaimRecord

Obj = dict[str, Any]

WORKLOAD_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "Job")
# Plan simulates at most this many pods: a replica count near int32's limit would otherwise run for hours
# (a 20,000-pod plan took 10 s on an idle machine, 40 s on a loaded one).
MAX_PODS = 100_000
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
    nodeclaims: list[Obj] = field(default_factory=list)  # in-flight or launched capacity
    overlays: list[Obj] = field(default_factory=list)  # NodeOverlays: prices and capacity of types
    # Pending pods that cannot be scheduled whatever the capacity (pod key -> why).
    problems: dict[str, str] = field(default_factory=dict)


class NotAnObject(ValueError):
    """A document that is not a Kubernetes object (a mapping), or a List whose items are not objects."""


def is_list(doc: Mapping[str, Any]) -> bool:
    kind = doc.get("kind")
    return isinstance(kind, str) and (kind == "List" or (kind.endswith("List") and "items" in doc))


def flatten(documents: Iterable[Any]) -> list[Obj]:
    """YAML documents to objects: empty documents dropped, ``kind: List`` unpacked. Anything else that is
    not a mapping raises NotAnObject: kubectl refuses it too, and skipping it would hide a typo."""
    out: list[Obj] = []
    for index, doc in enumerate(documents):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise NotAnObject(
                f"document {index + 1}: not a Kubernetes object (a mapping with apiVersion and kind), "
                f"got {type(doc).__name__}"
            )
        if is_list(doc):
            items = doc.get("items")
            if items is not None and not isinstance(items, list):
                raise NotAnObject(f"document {index + 1}: {doc['kind']}: items: must be a list")
            out.extend(item for item in flatten(items or ()) if item is not None)
        else:
            out.append(doc)
    return out


def without_nulls(value: Any) -> Any:
    """A copy without the null fields, as the API server stores an object: ``tolerations: null`` is no
    tolerations (validation has checked that every null is somewhere a field may be left out)."""
    if isinstance(value, Mapping):
        return {key: without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [without_nulls(item) for item in value]
    return value


def pod_count(obj: Mapping[str, Any]) -> int:
    """How many pods a (validated) workload's controller would create; 1 for a Pod, 0 for anything else."""
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    if kind == "Pod":
        return 1
    if kind in ("Deployment", "ReplicaSet", "StatefulSet"):
        replicas = spec.get("replicas")
        return 1 if replicas is None else int(replicas)
    if kind == "Job":
        parallelism = spec.get("parallelism")
        count = 1 if parallelism is None else int(parallelism)
        completions = spec.get("completions")
        return count if completions is None else min(count, int(completions))
    return 0


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
    count = pod_count(obj)
    if kind in ("Deployment", "ReplicaSet"):
        extra = (
            {"pod-template-hash": template_hash(spec.get("template") or {})} if kind == "Deployment" else {}
        )
        for index in range(count):
            pods.append(_pod_from_template(obj, "ReplicaSet", f"{name}-{index}", extra))
    elif kind == "StatefulSet":
        templates = spec.get("volumeClaimTemplates") or []
        for index in range(count):
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
    """Sort objects into scheduling inputs and expand workloads into pending pods. The objects are the
    validated ones of kinds scheduling reads (see manifest_validation); any other kind is left out."""
    out = ManifestSet()
    pods: list[Obj] = []
    template_claims: list[Obj] = []
    for raw in objects:
        obj = without_nulls(raw)
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
        elif kind == "NodeClaim":
            out.nodeclaims.append(obj)
        elif kind == "NodeOverlay":
            out.overlays.append(obj)
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


def _nodeclaim_state(claim: Mapping[str, Any], registered_node: bool) -> str:
    """The record state a NodeClaim manifest stands for. A claim whose Node is among the manifests is that
    Node's (the Node is the capacity); one registered without its Node given is still capacity, as
    Karpenter's cluster state then schedules against the NodeClaim's view of it."""
    meta = claim.get("metadata") or {}
    status = claim.get("status") or {}
    if meta.get("deletionTimestamp"):
        return "Terminating"
    if registered_node:
        return "Registered"
    return "Launched" if status.get("providerID") else "Pending"


def nodeclaim_records(
    nodeclaims: Sequence[Mapping[str, Any]],
    nodes: Sequence[Mapping[str, Any]],
    daemonsets: Sequence[Mapping[str, Any]],
) -> list[NodeClaimRecord]:
    """NodeClaim manifests (validated karpenter.sh/v1) as the records the provisioner schedules against:
    like Karpenter's state node for a claim, its labels, taints and ``status.allocatable`` (empty before
    launch, so nothing fits on it yet), with the DaemonSet pods that will land on it reserved."""
    # Imported here: provisioning and lifecycle import scheduling, not the other way round.
    from serverless_karpenter.lifecycle.model import NodeClaimRecord
    from serverless_karpenter.provisioning.provisioner import daemon_overhead
    from serverless_karpenter.scheduling import resources
    from serverless_karpenter.scheduling.requirements import Requirements
    from serverless_karpenter.scheduling.taints import taints_from_dicts

    node_names = {_name(n) for n in nodes}
    provider_ids = {(n.get("spec") or {}).get("providerID") for n in nodes} - {None}
    out: list[NodeClaimRecord] = []
    for claim in nodeclaims:
        meta, spec, status = claim.get("metadata") or {}, claim.get("spec") or {}, claim.get("status") or {}
        provider_id = status.get("providerID")
        node_given = status.get("nodeName") in node_names or provider_id in provider_ids
        requirements = Requirements.from_node_selector_requirements(spec.get("requirements"))
        # Karpenter writes a claim's single-valued requirements into its labels when it creates it.
        labels = {**requirements.labels(), **(meta.get("labels") or {})}
        taints = list(spec.get("taints") or [])
        out.append(
            NodeClaimRecord(
                name=_name(claim),
                nodepool=str(labels.get(wk.NODEPOOL, "")),
                nodeclass=str((spec.get("nodeClassRef") or {}).get("name") or ""),
                state=_nodeclaim_state(claim, node_given),
                requirements=list(spec.get("requirements") or []),
                requests=resources.parse_list((spec.get("resources") or {}).get("requests")),
                daemon_overhead=daemon_overhead(daemonsets, requirements, labels, taints_from_dicts(taints)),
                capacity=resources.parse_list(status.get("capacity")),
                allocatable=resources.parse_list(status.get("allocatable")),
                labels=labels,
                taints=taints,
                # No instance_id: scheduling then holds the claim to its requirements as well as its labels,
                # which a manifest may give without the zone or instance type the launch added.
                provider_id=provider_id,
                node_name=status.get("nodeName"),
                created_at=datetime.fromtimestamp(0, UTC),
            )
        )
    return out

"""Validation of the manifests scheduling reads from files, before scheduling sees them.

Each kind is checked as the kube-apiserver (core kinds, see ``pod_validation``) or Karpenter's CRDs
(``api.manifests.parse_manifest``) would check it, for the fields scheduling reads. A broken object is a
:class:`ManifestError` naming the kind, ``namespace/name``, the field and the rule.

Pure: raises ManifestError, reads no files.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from serverless_karpenter.api.errors import FieldViolation, ManifestError, show
from serverless_karpenter.api.manifests import parse_manifest
from serverless_karpenter.scheduling.pod_validation import (
    TAINT_EFFECTS,
    TEMPLATE_KINDS,
    Checker,
    label_selector_violations,
    metadata_violations,
    pod_violations,
    pvc_spec_violations,
    toleration_violations,
    workload_violations,
)

_PERCENT = re.compile(r"^[0-9]+%$")

# The kinds scheduling reads from manifests, by apiVersion; anything else is ignored (and listed).
CORE_KINDS: dict[str, str] = {
    "Pod": "v1",
    "Node": "v1",
    "Namespace": "v1",
    "PersistentVolumeClaim": "v1",
    "PersistentVolume": "v1",
    "Deployment": "apps/v1",
    "ReplicaSet": "apps/v1",
    "StatefulSet": "apps/v1",
    "DaemonSet": "apps/v1",
    "Job": "batch/v1",
    "PodDisruptionBudget": "policy/v1",
    "StorageClass": "storage.k8s.io/v1",
    "CSINode": "storage.k8s.io/v1",
    "RuntimeClass": "node.k8s.io/v1",
}
KARPENTER_KINDS: dict[str, str] = {
    "NodePool": "karpenter.sh/v1",
    "NodeClaim": "karpenter.sh/v1",
    "NodeOverlay": "karpenter.sh/v1alpha1",
    "EC2NodeClass": "karpenter.k8s.aws/v1",
}
CLUSTER_SCOPED = frozenset(
    {"Node", "Namespace", "PersistentVolume", "StorageClass", "CSINode", "RuntimeClass", *KARPENTER_KINDS}
)


def group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def read_kind(api_version: Any, kind: Any) -> bool:
    """True when scheduling reads objects of this apiVersion and kind. A Karpenter kind in another
    version of its own group counts too: parse_manifest then says to convert it, rather than ignore it."""
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return False
    if kind in KARPENTER_KINDS:
        return group(api_version) == group(KARPENTER_KINDS[kind])
    return CORE_KINDS.get(kind) == api_version


def display_name(obj: Mapping[str, Any]) -> str | None:
    """``namespace/name`` for namespaced objects, ``name`` otherwise (None when there is none)."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    name = meta.get("name") or meta.get("generateName")
    if not isinstance(name, str) or not name:
        return None
    kind = obj.get("kind")
    if isinstance(kind, str) and kind in CLUSTER_SCOPED:
        return name
    namespace = meta.get("namespace")
    return f"{namespace if isinstance(namespace, str) and namespace else 'default'}/{name}"


def _taints(check: Checker, taints: Any, path: str) -> None:
    seen: set[tuple[Any, Any]] = set()
    for where, taint in check.objects(taints, path):
        check.qualified_name(taint.get("key"), f"{where}.key")
        check.string(taint.get("value"), f"{where}.value")
        check.enum(taint.get("effect"), f"{where}.effect", TAINT_EFFECTS, required=True)
        pair = (taint.get("key"), taint.get("effect"))
        if not all(isinstance(p, str) for p in pair):
            continue
        if pair in seen:
            check.add(where, "taints must be unique by key and effect")
        seen.add(pair)


def _node(check: Checker, obj: Mapping[str, Any]) -> None:
    spec = check.mapping(obj.get("spec"), "spec")
    if spec is not None:
        _taints(check, spec.get("taints"), "spec.taints")
        check.string(spec.get("providerID"), "spec.providerID")
        if spec.get("unschedulable") is not None and not isinstance(spec.get("unschedulable"), bool):
            check.add("spec.unschedulable", "must be true or false")
    status = check.mapping(obj.get("status"), "status")
    if status is not None:
        check.quantities(status.get("allocatable"), "status.allocatable")
        check.quantities(status.get("capacity"), "status.capacity")


def _node_selector_terms(check: Checker, terms: Any, path: str) -> None:
    for where, term in check.objects(terms, path):
        for item_path, item in check.objects(term.get("matchExpressions"), f"{where}.matchExpressions"):
            check.qualified_name(item.get("key"), f"{item_path}.key")
            check.enum(
                item.get("operator"),
                f"{item_path}.operator",
                ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"),
                required=True,
            )
            check.strings(item.get("values"), f"{item_path}.values")


def _pv(check: Checker, obj: Mapping[str, Any]) -> None:
    spec = check.mapping(obj.get("spec"), "spec", required=True)
    if spec is None:
        return
    check.string(spec.get("storageClassName"), "spec.storageClassName")
    check.quantities(spec.get("capacity"), "spec.capacity")
    affinity = check.mapping(spec.get("nodeAffinity"), "spec.nodeAffinity")
    required = check.mapping((affinity or {}).get("required"), "spec.nodeAffinity.required")
    if required is not None:
        _node_selector_terms(
            check, required.get("nodeSelectorTerms"), "spec.nodeAffinity.required.nodeSelectorTerms"
        )


def _storage_class(check: Checker, obj: Mapping[str, Any]) -> None:
    check.string(obj.get("provisioner"), "provisioner", required=True)
    check.enum(obj.get("volumeBindingMode"), "volumeBindingMode", ("Immediate", "WaitForFirstConsumer"))
    for where, term in check.objects(obj.get("allowedTopologies"), "allowedTopologies"):
        for item_path, item in check.objects(
            term.get("matchLabelExpressions"), f"{where}.matchLabelExpressions"
        ):
            check.qualified_name(item.get("key"), f"{item_path}.key")
            if not check.strings(item.get("values"), f"{item_path}.values"):
                check.add(f"{item_path}.values", "must have at least one value")


def _csinode(check: Checker, obj: Mapping[str, Any]) -> None:
    spec = check.mapping(obj.get("spec"), "spec", required=True)
    for where, driver in check.objects(
        (spec or {}).get("drivers"), "spec.drivers", required=spec is not None
    ):
        check.string(driver.get("name"), f"{where}.name", required=True)
        allocatable = check.mapping(driver.get("allocatable"), f"{where}.allocatable")
        if allocatable is not None:
            check.integer(allocatable.get("count"), f"{where}.allocatable.count", low=0)


def _runtime_class(check: Checker, obj: Mapping[str, Any]) -> None:
    check.dns_label(obj.get("handler"), "handler")
    overhead = check.mapping(obj.get("overhead"), "overhead")
    if overhead is not None:
        check.quantities(overhead.get("podFixed"), "overhead.podFixed")
    scheduling = check.mapping(obj.get("scheduling"), "scheduling")
    if scheduling is not None:
        check.labels(scheduling.get("nodeSelector"), "scheduling.nodeSelector")
        toleration_violations(check, scheduling.get("tolerations"), "scheduling.tolerations")


def _pdb(check: Checker, obj: Mapping[str, Any]) -> None:
    spec = check.mapping(obj.get("spec"), "spec")
    if spec is None:
        return
    label_selector_violations(check, spec.get("selector"), "spec.selector")
    for key in ("minAvailable", "maxUnavailable"):
        value = spec.get(key)
        if value is None:
            continue
        percent = isinstance(value, str) and _PERCENT.fullmatch(value) and int(value[:-1]) <= 100
        if not (percent or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)):
            check.add(
                f"spec.{key}",
                f"must be a non-negative integer or a percentage up to 100% (got {show(value)})",
            )
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        check.add("spec", "minAvailable and maxUnavailable cannot be both set")


def _namespace(check: Checker, obj: Mapping[str, Any]) -> None:
    meta = obj.get("metadata")
    if isinstance(meta, Mapping):
        check.dns_label(meta.get("name"), "metadata.name")


_CHECKS: dict[str, Callable[[Checker, Mapping[str, Any]], None]] = {
    "Node": _node,
    "PersistentVolume": _pv,
    "StorageClass": _storage_class,
    "CSINode": _csinode,
    "RuntimeClass": _runtime_class,
    "PodDisruptionBudget": _pdb,
    "PersistentVolumeClaim": lambda check, obj: pvc_spec_violations(check, obj.get("spec"), "spec"),
    "Namespace": _namespace,
}


def violations(obj: Mapping[str, Any]) -> list[FieldViolation]:
    """What the API server would refuse in a core object scheduling reads (an empty list: none)."""
    kind = obj.get("kind")
    if kind == "Pod":
        return pod_violations(obj)
    if kind in TEMPLATE_KINDS:
        return workload_violations(obj)
    check = Checker()
    metadata_violations(
        check, obj.get("metadata"), "metadata", namespaced=kind not in CLUSTER_SCOPED, named=True
    )
    if isinstance(kind, str) and kind in _CHECKS:
        _CHECKS[kind](check, obj)
    return check.violations


def validate(obj: Mapping[str, Any]) -> None:
    """Raise ManifestError when ``obj`` (a kind :func:`read_kind` accepts) would not be admitted."""
    kind = str(obj.get("kind"))
    if kind in KARPENTER_KINDS:
        parse_manifest(obj)
        return
    found = violations(obj)
    if found:
        raise ManifestError(kind, display_name(obj), found)

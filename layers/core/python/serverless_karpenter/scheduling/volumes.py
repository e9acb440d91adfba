"""Volume topology: where a pod's persistent volumes let it run, and volumes we cannot reason about.

As Karpenter's ``volumetopology.go``: a bound claim pins the pod to its PersistentVolume's node affinity; an
unbound one (WaitForFirstConsumer) to its StorageClass's ``allowedTopologies``. Each nodeSelectorTerm (each
allowedTopologies term) is an alternative; with several volumes, every combination of their alternatives
that is not disjoint is kept, in order, and a node takes the pod under the first one it can meet.

A pod is not provisioned for, with the reason, in the states Karpenter's ``ValidatePersistentVolumeClaims``
(after kube-scheduler's volume binding) refuses: a claim, volume or class that does not exist, a claim or
volume being deleted, a Lost claim, a claim naming a volume before the binding is complete, and an unbound
claim with no class or with an Immediate class (its volume is placed when the claim is created, not for
the pod).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from serverless_karpenter.api import labels as wk
from serverless_karpenter.scheduling.requirements import Requirement, Requirements

Obj = Mapping[str, Any]

DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
# Set by the PV controller once claim and volume are bound both ways; kube-scheduler (and Karpenter)
# takes a claim without it as not yet bound, even when it names its volume.
BIND_COMPLETED_ANNOTATION = "pv.kubernetes.io/bind-completed"
TEMPLATE_MARK = "fromEphemeralTemplate"


def _meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def _deleting(obj: Obj) -> bool:
    return bool(_meta(obj).get("deletionTimestamp"))


@dataclass
class VolumeIndex:
    """PersistentVolumeClaims by ``namespace/name``, PersistentVolumes and StorageClasses by name, and the
    attachable-volume count of each node per CSI driver (from its CSINode)."""

    claims: dict[str, Obj] = field(default_factory=dict)
    volumes: dict[str, Obj] = field(default_factory=dict)
    classes: dict[str, Obj] = field(default_factory=dict)
    default_class: str | None = None
    limits: dict[str, dict[str, int]] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        pvcs: Sequence[Obj],
        pvs: Sequence[Obj],
        storage_classes: Sequence[Obj],
        csinodes: Sequence[Obj] = (),
    ) -> VolumeIndex:
        index = cls()
        for pvc in pvcs:
            meta = _meta(pvc)
            index.claims[f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"] = pvc
        for pv in pvs:
            index.volumes[_meta(pv).get("name", "")] = pv
        defaults: list[Obj] = []
        for sc in storage_classes:
            meta = _meta(sc)
            index.classes[meta.get("name", "")] = sc
            if (meta.get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true":
                defaults.append(meta)
        if defaults:
            # Of several default classes, the API server gives a new claim the newest (ties: the first
            # name), as the DefaultStorageClass admission plugin does.
            newest = max(str(m.get("creationTimestamp") or "") for m in defaults)
            index.default_class = min(
                str(m.get("name")) for m in defaults if str(m.get("creationTimestamp") or "") == newest
            )
        for csinode in csinodes:
            counts: dict[str, int] = {}
            for driver in (csinode.get("spec") or {}).get("drivers") or ():
                count = (driver.get("allocatable") or {}).get("count")
                if count is not None and driver.get("name"):
                    counts[driver["name"]] = int(count)
            if counts:
                index.limits[_meta(csinode).get("name", "")] = counts
        return index

    def __bool__(self) -> bool:
        return bool(self.claims or self.volumes or self.classes or self.limits)

    def class_of(self, spec: Obj) -> str:
        """A claim's class: the default class when the field is unset, as admission sets it; "" when
        the claim asks for no dynamic provisioning (or there is no default)."""
        name = spec.get("storageClassName")
        if name is None:
            name = self.default_class
        return name or ""


def claim_of(pod: Obj, volume: Obj, index: VolumeIndex) -> tuple[str, Obj | None] | None:
    """A pod volume's claim (``namespace/name``, the object or None when it does not exist); None for a
    volume without a claim. A generic ephemeral volume's claim is named after the pod and the volume;
    before it exists, its template stands for it."""
    namespace = _meta(pod).get("namespace", "default")
    if "persistentVolumeClaim" in volume:
        key = f"{namespace}/{(volume['persistentVolumeClaim'] or {}).get('claimName', '')}"
        return key, index.claims.get(key)
    if "ephemeral" not in volume:
        return None
    key = f"{namespace}/{_meta(pod).get('name', '')}-{volume.get('name', '')}"
    pvc = index.claims.get(key)
    if pvc is None:
        template = ((volume["ephemeral"] or {}).get("volumeClaimTemplate") or {}).get("spec") or {}
        # Marked, for what is known of a claim the API server has not created yet.
        pvc = {"spec": {"storageClassName": index.class_of(template)}, TEMPLATE_MARK: True}
    return key, pvc


def _volume_alternatives(pv: Obj) -> list[Requirements]:
    spec = pv.get("spec") or {}
    terms = ((spec.get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms") or ()
    # A local or hostPath volume pins its node by hostname; a new node never has that name, so the term
    # is taken without it (an alternative with nothing left matches any node), as Karpenter does.
    node_local = "local" in spec or "hostPath" in spec
    out: list[Requirements] = []
    for term in terms:
        expressions = list(term.get("matchExpressions") or ())
        kept = [e for e in expressions if e.get("key") != wk.HOSTNAME] if node_local else expressions
        if kept:
            out.append(Requirements(Requirement.from_node_selector_requirement(e) for e in kept))
        elif expressions:
            out.append(Requirements())
    return out


def _class_alternatives(sc: Obj) -> list[Requirements]:
    out: list[Requirements] = []
    for term in sc.get("allowedTopologies") or ():
        expressions = term.get("matchLabelExpressions") or ()
        if expressions:
            out.append(
                Requirements(Requirement(e.get("key", ""), "In", e.get("values") or ()) for e in expressions)
            )
    return out


def _combine(alternatives: list[Requirements], volume: list[Requirements]) -> list[Requirements]:
    """Every pair of a combination so far and one of the volume's alternatives, in order; the pairs that
    cannot hold at once are dropped, unless none is left (then all are kept, and the pod fails on them)."""
    compatible = [a.merged(v) for a in alternatives for v in volume if a.intersects(v) is None]
    return compatible or [a.merged(v) for a in alternatives for v in volume]


def _bind_completed(pvc: Obj) -> bool:
    return BIND_COMPLETED_ANNOTATION in (_meta(pvc).get("annotations") or {})


def volume_requirements(pod: Obj, index: VolumeIndex) -> tuple[list[Requirements], str | None]:
    """The alternatives of node requirements a pod's volumes allow (empty when they add none), and the
    first reason the pod is not provisioned for (or None)."""
    alternatives = [Requirements()]
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        found = claim_of(pod, volume, index)
        if found is None:
            continue
        key, pvc = found
        label = f'volume "{volume.get("name")}"'
        if pvc is None:
            return [], f'{label}: persistentvolumeclaim "{key}" not found'
        if _deleting(pvc):
            return [], f'{label}: persistentvolumeclaim "{key}" is being deleted'
        if (pvc.get("status") or {}).get("phase") == "Lost":
            return [], f'{label}: persistentvolumeclaim "{key}" is Lost (its persistentvolume is gone)'
        spec = pvc.get("spec") or {}
        pv_name = spec.get("volumeName")
        if pv_name:
            pv = index.volumes.get(pv_name)
            if pv is None:
                return [], f'{label}: persistentvolume "{pv_name}" not found'
            if _deleting(pv):
                return [], f'{label}: persistentvolume "{pv_name}" is being deleted'
            if not _bind_completed(pvc):
                return [], (
                    f'{label}: persistentvolumeclaim "{key}" names persistentvolume "{pv_name}" but is not '
                    f"bound yet (no {BIND_COMPLETED_ANNOTATION} annotation)"
                )
            volume_alternatives = _volume_alternatives(pv)
        else:
            class_name = index.class_of(spec)
            if not class_name:
                return [], f'{label}: persistentvolumeclaim "{key}" is unbound and names no storageclass'
            sc = index.classes.get(class_name)
            if sc is None:
                return [], f'{label}: storageclass "{class_name}" not found'
            if not pvc.get(TEMPLATE_MARK) and _binds_immediately(sc):
                # The volume is provisioned (and placed) when the claim is created, not for the pod, so
                # no node is launched until it is bound.
                return [], (
                    f'{label}: persistentvolumeclaim "{key}" is unbound and storageclass "{class_name}" '
                    "binds Immediate; the pod waits until the volume is bound"
                )
            volume_alternatives = _class_alternatives(sc)
        if volume_alternatives:
            alternatives = _combine(alternatives, volume_alternatives)
    if len(alternatives) == 1 and not len(alternatives[0]):
        return [], None
    return alternatives, None


def _binds_immediately(sc: Obj) -> bool:
    # The API server defaults an unset volumeBindingMode to Immediate.
    return (sc.get("volumeBindingMode") or "Immediate") == "Immediate"

"""Volume topology: where a pod's persistent volumes let it run, and volumes we cannot reason about.

As Karpenter's ``volumetopology.go``: a bound claim pins the pod to its PersistentVolume's node affinity; an
unbound one (WaitForFirstConsumer) to its StorageClass's ``allowedTopologies``; an unbound claim of an
Immediate class waits for its volume, and the pod is not provisioned for. Only the first term of each is
used, as Karpenter does. A claim, volume or class that does not exist makes the pod unschedulable, with
the name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from serverless_karpenter.scheduling.requirements import Requirement, Requirements

Obj = Mapping[str, Any]


@dataclass
class VolumeIndex:
    """PersistentVolumeClaims by ``namespace/name``, PersistentVolumes and StorageClasses by name."""

    claims: dict[str, Obj] = field(default_factory=dict)
    volumes: dict[str, Obj] = field(default_factory=dict)
    classes: dict[str, Obj] = field(default_factory=dict)
    default_class: str | None = None

    @classmethod
    def build(cls, pvcs: Sequence[Obj], pvs: Sequence[Obj], storage_classes: Sequence[Obj]) -> VolumeIndex:
        index = cls()
        for pvc in pvcs:
            meta = pvc.get("metadata") or {}
            index.claims[f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"] = pvc
        for pv in pvs:
            index.volumes[(pv.get("metadata") or {}).get("name", "")] = pv
        for sc in storage_classes:
            meta = sc.get("metadata") or {}
            index.classes[meta.get("name", "")] = sc
            if (meta.get("annotations") or {}).get("storageclass.kubernetes.io/is-default-class") == "true":
                index.default_class = meta.get("name")
        return index

    def __bool__(self) -> bool:
        return bool(self.claims or self.volumes or self.classes)


def _first_term(terms: Any) -> list[Requirement]:
    if not terms:
        return []
    return [Requirement.from_node_selector_requirement(e) for e in terms[0].get("matchExpressions") or ()]


def _class_requirements(sc: Obj) -> list[Requirement]:
    topologies = sc.get("allowedTopologies") or []
    if not topologies:
        return []
    return [
        Requirement(e.get("key", ""), "In", e.get("values") or ())
        for e in topologies[0].get("matchLabelExpressions") or ()
    ]


def _binds_immediately(sc: Obj) -> bool:
    # The API server defaults an unset volumeBindingMode to Immediate.
    return (sc.get("volumeBindingMode") or "Immediate") == "Immediate"


def volume_requirements(pod: Obj, index: VolumeIndex) -> tuple[Requirements, str | None]:
    """The node requirements a pod's volumes add, and the first unsupported volume state (or None)."""
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace", "default")
    out: list[Requirement] = []
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        class_name: str | None = None
        if "persistentVolumeClaim" in volume:
            claim_name = (volume["persistentVolumeClaim"] or {}).get("claimName", "")
            pvc = index.claims.get(f"{namespace}/{claim_name}")
            if pvc is None:
                return (
                    Requirements(),
                    f'volume "{volume.get("name")}": '
                    f'persistentvolumeclaim "{namespace}/{claim_name}" not found',
                )
        elif "ephemeral" in volume:
            # A generic ephemeral volume's claim is named after the pod and volume; before it exists, its
            # template's class decides.
            claim_name = f"{meta.get('name', '')}-{volume.get('name', '')}"
            pvc = index.claims.get(f"{namespace}/{claim_name}")
            if pvc is None:
                template = ((volume["ephemeral"] or {}).get("volumeClaimTemplate") or {}).get("spec") or {}
                class_name = template.get("storageClassName") or index.default_class
                pvc = {"spec": {"storageClassName": class_name}}
        else:
            continue
        spec = pvc.get("spec") or {}
        pv_name = spec.get("volumeName")
        if pv_name:
            pv = index.volumes.get(pv_name)
            if pv is None:
                return (
                    Requirements(),
                    f'volume "{volume.get("name")}": persistentvolume "{pv_name}" not found',
                )
            affinity = ((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}
            out += _first_term(affinity.get("nodeSelectorTerms"))
            continue
        class_name = spec.get("storageClassName", index.default_class)
        if not class_name:
            continue
        sc = index.classes.get(class_name)
        if sc is None:
            return Requirements(), f'volume "{volume.get("name")}": storageclass "{class_name}" not found'
        if claim_name and f"{namespace}/{claim_name}" in index.claims and _binds_immediately(sc):
            # Karpenter's ValidatePersistentVolumeClaims: the volume is provisioned (and placed) when
            # the claim is created, not for the pod, so no node is launched until it is bound.
            return (
                Requirements(),
                f'volume "{volume.get("name")}": persistentvolumeclaim "{namespace}/{claim_name}" is '
                f'unbound and storageclass "{class_name}" binds Immediate; the pod waits until the '
                "volume is bound",
            )
        out += _class_requirements(sc)
    return Requirements(out), None

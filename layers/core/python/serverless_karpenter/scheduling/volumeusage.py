"""Attachable-volume limits of existing nodes, as Karpenter's ``VolumeUsage`` (pkg/scheduling/volumeusage.go).

A node's CSINode gives, per CSI driver, how many volumes it can attach (``spec.drivers[].allocatable.count``).
Each claim a pod mounts counts once against its driver on the node (pods sharing a claim share the
count); a pod whose claims would take a driver past its count does not go there. New nodes have no
CSINode yet, so only existing nodes are limited.

A claim's driver: its bound volume's CSI driver (an in-tree EBS volume counts as ``ebs.csi.aws.com``), or,
while unbound, its class's provisioner (in-tree provisioner names translated to their CSI drivers, as
``csi-translation-lib`` does). Claims of no driver (NFS, no class, a class or claim that is gone) are not
counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from serverless_karpenter.scheduling.volumes import VolumeIndex, claim_of

Volumes = Mapping[str, frozenset[str]]  # CSI driver -> the claims (``namespace/name``) on it

EBS_CSI_DRIVER = "ebs.csi.aws.com"
# In-tree volume plugins migrated to CSI drivers (csi-translation-lib's plugins).
IN_TREE_TO_CSI = {
    "kubernetes.io/aws-ebs": EBS_CSI_DRIVER,
    "kubernetes.io/gce-pd": "pd.csi.storage.gke.io",
    "kubernetes.io/azure-disk": "disk.csi.azure.com",
    "kubernetes.io/azure-file": "file.csi.azure.com",
    "kubernetes.io/cinder": "cinder.csi.openstack.org",
    "kubernetes.io/vsphere-volume": "csi.vsphere.vmware.com",
    "kubernetes.io/portworx-volume": "pxd.portworx.com",
}


def _driver(pvc: Mapping[str, Any], index: VolumeIndex) -> str:
    spec = pvc.get("spec") or {}
    pv_name = spec.get("volumeName")
    if pv_name:
        pv_spec = (index.volumes.get(pv_name) or {}).get("spec") or {}
        if "csi" in pv_spec:
            return str((pv_spec["csi"] or {}).get("driver") or "")
        return EBS_CSI_DRIVER if "awsElasticBlockStore" in pv_spec else ""
    sc = index.classes.get(index.class_of(spec))
    if sc is None:
        return ""
    provisioner = str(sc.get("provisioner") or "")
    return IN_TREE_TO_CSI.get(provisioner, provisioner)


def pod_volumes(pod: Mapping[str, Any], index: VolumeIndex) -> Volumes:
    """The claims a pod mounts, by the CSI driver they count against."""
    out: dict[str, set[str]] = {}
    for volume in (pod.get("spec") or {}).get("volumes") or ():
        found = claim_of(pod, volume, index)
        if found is None or found[1] is None:
            continue
        driver = _driver(found[1], index)
        if driver:
            out.setdefault(driver, set()).add(found[0])
    return {driver: frozenset(claims) for driver, claims in out.items()}


class VolumeUsage:
    """One existing node's limits and the claims its pods mount."""

    def __init__(self, limits: Mapping[str, int]) -> None:
        self.limits = dict(limits)
        self.used: dict[str, set[str]] = {}

    @classmethod
    def of_node(cls, node: str, pods: Sequence[Mapping[str, Any]], index: VolumeIndex) -> VolumeUsage | None:
        """The usage of ``node`` with ``pods`` running; None when its CSINode limits nothing."""
        limits = index.limits.get(node)
        if not limits:
            return None
        usage = cls(limits)
        for pod in pods:
            usage.add(pod_volumes(pod, index))
        return usage

    def exceeds(self, volumes: Volumes) -> str | None:
        """Why adding ``volumes`` would take a driver past its count (None when it would not)."""
        for driver, claims in volumes.items():
            limit = self.limits.get(driver)
            if limit is None:
                continue
            count = len(self.used.get(driver, set()) | claims)
            if count > limit:
                return f"would exceed the volume limit of {driver} ({count} > {limit})"
        return None

    def add(self, volumes: Volumes) -> None:
        for driver, claims in volumes.items():
            self.used.setdefault(driver, set()).update(claims)

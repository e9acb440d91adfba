"""The resources the simulated API server serves, with the per-kind facts upstream encodes in its strategies.

A :class:`Kind` says where a resource lives (group, version, scope), which subresources it has, which
field selectors it accepts, and how its registry strategy behaves on create and delete. The
``events.k8s.io/v1`` events share storage with core ``v1`` events, as upstream, through converters.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]

_STANDARD_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class FieldLabel:
    """A field selector the kind supports: the object path it reads, and its value when the path is absent."""

    path: tuple[str, ...]
    default: str = ""


def _fields(*names: str, defaults: Mapping[str, str] | None = None) -> dict[str, FieldLabel]:
    defaults = defaults or {}
    return {name: FieldLabel(tuple(name.split(".")), defaults.get(name, "")) for name in names}


_META_FIELDS = _fields("metadata.name", "metadata.namespace")


@dataclass(frozen=True)
class Kind:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    # Upstream keeps a status sent on create only for some kinds (nodes, namespaces); the others reset it,
    # and CRDs with a status subresource drop it. Pods keep theirs here so tests can seed running pods.
    keep_status_on_create: bool = False
    graceful_delete: bool = False
    # Upstream answers a delete with the object for these (ReturnDeletedObject), with a Status otherwise.
    return_deleted_object: bool = False
    custom: bool = False
    field_labels: Mapping[str, FieldLabel] = field(default_factory=lambda: dict(_META_FIELDS))
    # A kind stored in another kind's storage (events.k8s.io events live with core events).
    storage_of: str | None = None
    to_storage: Callable[[Obj], Obj] | None = None
    from_storage: Callable[[Obj], Obj] | None = None
    name_rule: str = "subdomain"  # subdomain | label | path

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource_id(self) -> str:
        """The storage identity: ``<group>/<plural>``."""
        return self.storage_of or f"{self.group}/{self.plural}"

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


# --- events.k8s.io/v1 <-> core v1 Event ------------------------------------------------------------------

_EVENTS_V1_TO_CORE = {
    "regarding": "involvedObject",
    "note": "message",
    "deprecatedSource": "source",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedCount": "count",
    "reportingController": "reportingComponent",
}
_CORE_TO_EVENTS_V1 = {core: v1 for v1, core in _EVENTS_V1_TO_CORE.items()}
_SHARED_EVENT_FIELDS = (
    "metadata",
    "eventTime",
    "series",
    "reportingInstance",
    "action",
    "reason",
    "type",
    "related",
)


def events_v1_to_core(obj: Obj) -> Obj:
    core: Obj = {"apiVersion": "v1", "kind": "Event"}
    for key, value in obj.items():
        if key in _SHARED_EVENT_FIELDS:
            core[key] = value
        elif key in _EVENTS_V1_TO_CORE:
            core[_EVENTS_V1_TO_CORE[key]] = value
    return core


def core_to_events_v1(obj: Obj) -> Obj:
    out: Obj = {"apiVersion": "events.k8s.io/v1", "kind": "Event"}
    for key, value in obj.items():
        if key in _SHARED_EVENT_FIELDS:
            out[key] = value
        elif key in _CORE_TO_EVENTS_V1:
            out[_CORE_TO_EVENTS_V1[key]] = value
    return out


# --- the table --------------------------------------------------------------------------------------------

_STATUS = frozenset({"status"})
_POD_FIELDS = {
    **_META_FIELDS,
    **_fields(
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
        defaults={"spec.hostNetwork": "false"},
    ),
}
_EVENT_FIELD_NAMES = (
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)
_EVENT_FIELDS = {**_META_FIELDS, **_fields(*_EVENT_FIELD_NAMES)}
_EVENT_FIELDS["source"] = FieldLabel(("source", "component"))
# events.k8s.io accepts its own spelling of the same selectors and reads the core storage.
_EVENTS_V1_FIELDS = {
    **_EVENT_FIELDS,
    **{
        name.replace("involvedObject.", "regarding."): label
        for name, label in _EVENT_FIELDS.items()
        if name.startswith("involvedObject.")
    },
    "reportingController": _EVENT_FIELDS["reportingComponent"],
    "deprecatedSource": _EVENT_FIELDS["source"],
}

KINDS: tuple[Kind, ...] = (
    Kind(
        "",
        "v1",
        "namespaces",
        "Namespace",
        False,
        ("ns",),
        subresources=_STATUS,
        keep_status_on_create=True,
        field_labels={**_META_FIELDS, **_fields("status.phase")},
        name_rule="label",
    ),
    Kind(
        "",
        "v1",
        "pods",
        "Pod",
        True,
        ("po",),
        ("all",),
        subresources=frozenset({"status", "binding", "eviction"}),
        keep_status_on_create=True,
        graceful_delete=True,
        return_deleted_object=True,
        field_labels=_POD_FIELDS,
    ),
    Kind(
        "",
        "v1",
        "nodes",
        "Node",
        False,
        ("no",),
        subresources=_STATUS,
        keep_status_on_create=True,
        return_deleted_object=False,
        field_labels={
            **_META_FIELDS,
            **_fields("spec.unschedulable", defaults={"spec.unschedulable": "false"}),
        },
    ),
    Kind("", "v1", "events", "Event", True, ("ev",), field_labels=_EVENT_FIELDS, name_rule="path"),
    Kind(
        "",
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        True,
        ("pvc",),
        subresources=_STATUS,
        return_deleted_object=True,
    ),
    Kind(
        "",
        "v1",
        "persistentvolumes",
        "PersistentVolume",
        False,
        ("pv",),
        subresources=_STATUS,
        return_deleted_object=True,
    ),
    Kind("", "v1", "configmaps", "ConfigMap", True, ("cm",)),
    Kind(
        "",
        "v1",
        "services",
        "Service",
        True,
        ("svc",),
        ("all",),
        subresources=_STATUS,
        return_deleted_object=True,
        name_rule="label",
    ),
    Kind(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        True,
        ("deploy",),
        ("all",),
        subresources=frozenset({"status", "scale"}),
    ),
    Kind(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        True,
        ("rs",),
        ("all",),
        subresources=frozenset({"status", "scale"}),
        field_labels={**_META_FIELDS, **_fields("status.replicas", defaults={"status.replicas": "0"})},
    ),
    Kind("apps", "v1", "daemonsets", "DaemonSet", True, ("ds",), ("all",), subresources=_STATUS),
    Kind(
        "apps",
        "v1",
        "statefulsets",
        "StatefulSet",
        True,
        ("sts",),
        ("all",),
        subresources=frozenset({"status", "scale"}),
    ),
    Kind(
        "batch",
        "v1",
        "jobs",
        "Job",
        True,
        (),
        ("all",),
        subresources=_STATUS,
        field_labels={**_META_FIELDS, **_fields("status.successful", defaults={"status.successful": "0"})},
    ),
    Kind("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ("pdb",), subresources=_STATUS),
    Kind("storage.k8s.io", "v1", "storageclasses", "StorageClass", False, ("sc",)),
    Kind("storage.k8s.io", "v1", "csinodes", "CSINode", False),
    Kind("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", False),
    Kind(
        "events.k8s.io",
        "v1",
        "events",
        "Event",
        True,
        ("ev",),
        field_labels=_EVENTS_V1_FIELDS,
        storage_of="/events",
        to_storage=events_v1_to_core,
        from_storage=core_to_events_v1,
        name_rule="path",
    ),
    Kind("coordination.k8s.io", "v1", "leases", "Lease", True),
    # RBAC policy, read by the authorizer (rbac.py) on every request; names may hold colons (system:node).
    Kind("rbac.authorization.k8s.io", "v1", "roles", "Role", True, name_rule="path"),
    Kind("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True, name_rule="path"),
    Kind("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, name_rule="path"),
    Kind(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        False,
        name_rule="path",
    ),
    Kind(
        "karpenter.sh",
        "v1",
        "nodepools",
        "NodePool",
        False,
        (),
        ("karpenter",),
        subresources=_STATUS,
        custom=True,
        name_rule="path",
    ),
    Kind(
        "karpenter.sh",
        "v1",
        "nodeclaims",
        "NodeClaim",
        False,
        (),
        ("karpenter",),
        subresources=_STATUS,
        custom=True,
        name_rule="path",
    ),
    Kind(
        "karpenter.k8s.aws",
        "v1",
        "ec2nodeclasses",
        "EC2NodeClass",
        False,
        ("ec2nc", "ec2ncs"),
        ("karpenter",),
        subresources=_STATUS,
        custom=True,
        name_rule="path",
    ),
    Kind(
        "karpenter.sh",
        "v1alpha1",
        "nodeoverlays",
        "NodeOverlay",
        False,
        ("overlays",),
        ("karpenter",),
        subresources=_STATUS,
        custom=True,
        name_rule="path",
    ),
)

_BY_PATH: dict[tuple[str, str, str], Kind] = {(k.group, k.version, k.plural): k for k in KINDS}


def lookup(group: str, version: str, plural: str) -> Kind | None:
    return _BY_PATH.get((group, version, plural))


def kind_of(group: str, version: str, plural: str) -> Kind:
    kind = _BY_PATH.get((group, version, plural))
    if kind is None:
        raise KeyError(f"no kind serves {group}/{version}/{plural}")
    return kind


def group_versions() -> dict[str, list[str]]:
    """Every API group (``""`` is core) and its served versions, in table order."""
    out: dict[str, list[str]] = {}
    for kind in KINDS:
        versions = out.setdefault(kind.group, [])
        if kind.version not in versions:
            versions.append(kind.version)
    return out


def _subresource_verbs(sub: str) -> list[str]:
    if sub in ("binding", "eviction"):
        return ["create"]
    return ["get", "patch", "update"]


def api_resource_list(group: str, version: str) -> Obj | None:
    """The discovery document for one group/version, as kubectl reads it."""
    kinds = [k for k in KINDS if k.group == group and k.version == version]
    if not kinds:
        return None
    resources: list[Obj] = []
    for k in kinds:
        entry: Obj = {
            "name": k.plural,
            "singularName": k.singular,
            "namespaced": k.namespaced,
            "kind": k.kind,
            "verbs": list(_STANDARD_VERBS),
        }
        if k.short_names:
            entry["shortNames"] = list(k.short_names)
        if k.categories:
            entry["categories"] = list(k.categories)
        resources.append(entry)
        for sub in sorted(k.subresources):
            sub_kind = {"eviction": "Eviction", "binding": "Binding", "scale": "Scale"}.get(sub, k.kind)
            sub_entry: Obj = {
                "name": f"{k.plural}/{sub}",
                "singularName": "",
                "namespaced": k.namespaced,
                "kind": sub_kind,
                "verbs": _subresource_verbs(sub),
            }
            if sub == "eviction":
                sub_entry.update(group="policy", version="v1")
            if sub == "scale":
                sub_entry.update(group="autoscaling", version="v1")
            resources.append(sub_entry)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def api_group(group: str) -> Obj | None:
    versions = group_versions().get(group)
    if not group or not versions:
        return None
    entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": group,
        "versions": entries,
        "preferredVersion": entries[0],
    }


def api_group_list() -> Obj:
    groups = [api_group(g) for g in group_versions() if g]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [g for g in groups if g]}

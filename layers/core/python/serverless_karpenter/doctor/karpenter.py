"""Doctor checks about Karpenter itself in the cluster: its CRDs, and whether its controller still runs.

- ``karpenter-crds``: which of Karpenter's CRDs are installed, and whether each serves what we read and
  write (karpenter.sh/v1 NodePools and NodeClaims, karpenter.k8s.aws/v1 EC2NodeClasses, with a ``/status``
  subresource) and stores it: a CRD stored at another version converts our writes through Karpenter's
  conversion webhook, which is gone once its controller is scaled to zero.
- ``in-cluster-karpenter``: a Karpenter controller still running next to us (its Helm chart's Deployment,
  in any namespace, or its pods). Two controllers would fight over the same nodes: each would launch for
  the same pending pods and consolidate the other's nodes.

The facts are read with discovery (served versions and subresources, readable by any authenticated
user) and, where the caller may read them, the CRD objects (the storage version).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client as k8s

from serverless_karpenter.adapters.kubernetes import KubernetesError, KubernetesGateway, call
from serverless_karpenter.doctor.checks import CheckId, CheckResult, _fail, _ok, _skip

# The Helm chart's labels on the controller's Deployment and pods, and its image repository.
KARPENTER_LABEL = ("app.kubernetes.io/name", "karpenter")
KARPENTER_IMAGE = "karpenter/controller"


@dataclass(frozen=True)
class WantedCrd:
    group: str
    plural: str
    kind: str
    version: str
    required: bool  # False: optional (NodeOverlays: without the CRD there are none)

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}"


WANTED_CRDS = (
    WantedCrd("karpenter.sh", "nodepools", "NodePool", "v1", True),
    WantedCrd("karpenter.sh", "nodeclaims", "NodeClaim", "v1", True),
    WantedCrd("karpenter.k8s.aws", "ec2nodeclasses", "EC2NodeClass", "v1", True),
    WantedCrd("karpenter.sh", "nodeoverlays", "NodeOverlay", "v1alpha1", False),
)


@dataclass
class CrdFacts:
    name: str
    served: list[str]  # versions that serve the resource
    status_versions: list[str]  # served versions with a /status subresource
    storage: str | None = None  # None: the CRD object could not be read (see storage_unknown)
    storage_unknown: str = ""


@dataclass
class ControllerFacts:
    """A Deployment that runs Karpenter's controller."""

    namespace: str
    name: str
    replicas: int  # spec.replicas
    ready: int  # status.readyReplicas


@dataclass
class KarpenterFacts:
    crds: dict[str, CrdFacts] = field(default_factory=dict)  # by CRD name; absent: not installed
    controllers: list[ControllerFacts] = field(default_factory=list)
    pods: list[str] = field(default_factory=list)  # namespace/name of running Karpenter pods
    # Why the controllers or pods could not be read ("" when they were).
    controllers_unknown: str = ""
    # Why discovery could not be read ("" when it was).
    crds_unknown: str = ""


# -- gathering -----------------------------------------------------------------------------------------


def _discovery(fn: Callable[..., Any], *args: Any) -> dict[str, Any] | None:
    """A discovery document; None when the server serves nothing there (404)."""
    try:
        out: dict[str, Any] = call(fn, *args)
    except KubernetesError as error:
        if error.status == 404:
            return None
        raise
    return out


def _pages(fn: Callable[..., Any], **kwargs: Any) -> Iterator[dict[str, Any]]:
    token: str | None = None
    while True:
        more: dict[str, Any] = {"_continue": token} if token else {}
        page = call(fn, limit=500, **more, **kwargs)
        yield from page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return


def _is_karpenter(meta: Mapping[str, Any], pod_spec: Mapping[str, Any]) -> bool:
    key, value = KARPENTER_LABEL
    if (meta.get("labels") or {}).get(key) == value:
        return True
    return any(KARPENTER_IMAGE in str(c.get("image") or "") for c in pod_spec.get("containers") or [])


def gather_crds(kube: KubernetesGateway) -> dict[str, CrdFacts]:
    listed = _discovery(k8s.ApisApi(kube.api_client).get_api_versions) or {}
    groups = {g["name"]: g for g in listed.get("groups") or []}
    out: dict[str, CrdFacts] = {}
    extensions = k8s.ApiextensionsV1Api(kube.api_client)
    for wanted in WANTED_CRDS:
        served: list[str] = []
        with_status: list[str] = []
        for version in (groups.get(wanted.group) or {}).get("versions") or []:
            document = _discovery(kube.custom.get_api_resources, wanted.group, str(version["version"])) or {}
            names = {r.get("name") for r in document.get("resources") or []}
            if wanted.plural in names:
                served.append(str(version["version"]))
                if f"{wanted.plural}/status" in names:
                    with_status.append(str(version["version"]))
        if not served:
            continue
        facts = CrdFacts(wanted.name, served, with_status)
        try:
            crd = call(extensions.read_custom_resource_definition, wanted.name)
            facts.storage = next(
                (str(v["name"]) for v in (crd.get("spec") or {}).get("versions") or [] if v.get("storage")),
                None,
            )
        except KubernetesError as error:
            facts.storage_unknown = f"the CRD object could not be read ({error.status or error})"
        out[wanted.name] = facts
    return out


def gather(kube: KubernetesGateway) -> KarpenterFacts:
    facts = KarpenterFacts()
    try:
        facts.crds = gather_crds(kube)
    except KubernetesError as error:
        facts.crds_unknown = f"API discovery could not be read ({error})"
    try:
        for deployment in _pages(kube.apps.list_deployment_for_all_namespaces):
            meta = deployment.get("metadata") or {}
            spec = deployment.get("spec") or {}
            if _is_karpenter(meta, ((spec.get("template") or {}).get("spec") or {})):
                facts.controllers.append(
                    ControllerFacts(
                        namespace=str(meta.get("namespace")),
                        name=str(meta.get("name")),
                        replicas=int(spec.get("replicas", 1) or 0),
                        ready=int((deployment.get("status") or {}).get("readyReplicas") or 0),
                    )
                )
        key, value = KARPENTER_LABEL
        for pod in _pages(kube.core.list_pod_for_all_namespaces, label_selector=f"{key}={value}"):
            meta = pod.get("metadata") or {}
            if (pod.get("status") or {}).get("phase") == "Running" and not meta.get("deletionTimestamp"):
                facts.pods.append(f"{meta.get('namespace')}/{meta.get('name')}")
    except KubernetesError as error:
        facts.controllers_unknown = f"Deployments and pods could not be listed ({error})"
    return facts


# -- checks --------------------------------------------------------------------------------------------

APPLY_CRDS = "kubectl apply --server-side -f deploy/crds/ (Karpenter's v1.14 CRDs, from this repository)"


def check_crds(facts: KarpenterFacts) -> list[CheckResult]:
    if facts.crds_unknown:
        return [_skip(CheckId.KARPENTER_CRDS, facts.crds_unknown)]
    out: list[CheckResult] = []
    for wanted in WANTED_CRDS:
        crd = facts.crds.get(wanted.name)
        what = f"{wanted.kind} CRD ({wanted.name})"
        if crd is None:
            if wanted.required:
                out.append(
                    _fail(
                        CheckId.KARPENTER_CRDS,
                        f"{what} is not installed: we read and write {wanted.kind}s",
                        APPLY_CRDS,
                    )
                )
            else:
                out.append(
                    _ok(CheckId.KARPENTER_CRDS, f"{what} is not installed (optional: no {wanted.kind}s)")
                )
            continue
        gv = f"{wanted.group}/{wanted.version}"
        if wanted.version not in crd.served:
            out.append(
                _fail(
                    CheckId.KARPENTER_CRDS,
                    f"{what} serves {', '.join(crd.served)} but not {wanted.version}: we read and write {gv}",
                    f"upgrade the CRDs to Karpenter v1's: {APPLY_CRDS}",
                )
            )
            continue
        if wanted.version not in crd.status_versions:
            out.append(
                _fail(
                    CheckId.KARPENTER_CRDS,
                    f"{what} serves {gv} without a /status subresource: the status we write would be dropped",
                    APPLY_CRDS,
                )
            )
            continue
        if crd.storage is not None and crd.storage != wanted.version:
            out.append(
                _fail(
                    CheckId.KARPENTER_CRDS,
                    f"{what} stores {crd.storage}: our {gv} writes need Karpenter's conversion webhook, "
                    "which does not run once its controller is scaled to zero",
                    f"migrate the stored objects to {wanted.version} and make it the storage version: "
                    + APPLY_CRDS,
                )
            )
            continue
        stored = (
            f"stored as {crd.storage}" if crd.storage else f"storage version unknown: {crd.storage_unknown}"
        )
        out.append(_ok(CheckId.KARPENTER_CRDS, f"{what} serves {gv} with /status ({stored})"))
    return out


def check_in_cluster_karpenter(facts: KarpenterFacts) -> list[CheckResult]:
    check = CheckId.IN_CLUSTER_KARPENTER
    if facts.controllers_unknown:
        return [_skip(check, facts.controllers_unknown)]
    running = [c for c in facts.controllers if c.replicas > 0]
    out = [
        _fail(
            check,
            f"Karpenter's controller runs in the cluster: Deployment {c.namespace}/{c.name} has {c.replicas} "
            f"replica(s), {c.ready} ready; two controllers would fight: scale it to zero",
            f"kubectl scale deployment {c.name} -n {c.namespace} --replicas=0 (see docs/migration.md)",
        )
        for c in running
    ]
    if not running and facts.pods:
        out.append(
            _fail(
                check,
                f"Karpenter pods still run ({', '.join(sorted(facts.pods))}); two controllers would fight: "
                "scale it to zero",
                "scale their Deployment to zero, or delete the pods if nothing manages them",
            )
        )
    if not out:
        scaled = ", ".join(f"{c.namespace}/{c.name}" for c in facts.controllers)
        out.append(
            _ok(
                check,
                f"Karpenter's Deployment {scaled} is scaled to zero"
                if scaled
                else "no in-cluster Karpenter runs",
            )
        )
    return out

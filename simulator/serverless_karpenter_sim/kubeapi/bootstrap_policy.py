"""The default ClusterRoles and bindings kube-apiserver creates at start-up (its ``rbac/bootstrap-roles``
hook), for the identities the simulated cluster has: any authenticated user may discover the API, the
``system:masters`` group is bound to ``cluster-admin``, the scheduler to its own roles.

Only the roles our simulated components and clients use are here, each with upstream's rules for the
resources this server serves; the rest of upstream's defaults (``admin``/``edit``/``view``, the
controllers' ``system:controller:*``) are left out.
"""

from __future__ import annotations

from typing import Any

from .rbac import AUTHENTICATED_GROUP, RBAC_GROUP, SUPERUSER_GROUP

Obj = dict[str, Any]

SCHEDULER_USER = "system:kube-scheduler"
READ = ("get", "list", "watch")
EVENT_WRITES = ("create", "patch", "update")


def _rule(groups: tuple[str, ...], resources: tuple[str, ...], verbs: tuple[str, ...], **extra: Any) -> Obj:
    return {"apiGroups": list(groups), "resources": list(resources), "verbs": list(verbs), **extra}


def _urls(urls: tuple[str, ...]) -> Obj:
    return {"nonResourceURLs": list(urls), "verbs": ["get"]}


CLUSTER_ROLES: dict[str, list[Obj]] = {
    "cluster-admin": [_rule(("*",), ("*",), ("*",)), {"nonResourceURLs": ["*"], "verbs": ["*"]}],
    "system:discovery": [
        _urls(
            (
                "/api",
                "/api/*",
                "/apis",
                "/apis/*",
                "/healthz",
                "/livez",
                "/openapi",
                "/openapi/*",
                "/readyz",
                "/version",
                "/version/",
            )
        )
    ],
    "system:public-info-viewer": [_urls(("/healthz", "/livez", "/readyz", "/version", "/version/"))],
    "system:basic-user": [
        _rule(
            ("authorization.k8s.io",), ("selfsubjectaccessreviews", "selfsubjectrulesreviews"), ("create",)
        ),
        _rule(("authentication.k8s.io",), ("selfsubjectreviews",), ("create",)),
    ],
    SCHEDULER_USER: [
        _rule(("", "events.k8s.io"), ("events",), EVENT_WRITES),
        _rule(("coordination.k8s.io",), ("leases",), ("create",)),
        _rule(("coordination.k8s.io",), ("leases",), ("get", "update"), resourceNames=["kube-scheduler"]),
        _rule(("",), ("nodes",), READ),
        _rule(("",), ("pods",), ("delete", *READ)),
        _rule(("",), ("bindings", "pods/binding"), ("create",)),
        _rule(("",), ("pods/status",), ("patch", "update")),
        _rule(("",), ("replicationcontrollers", "services"), READ),
        _rule(("apps", "extensions"), ("replicasets",), READ),
        _rule(("apps",), ("statefulsets",), READ),
        _rule(("policy",), ("poddisruptionbudgets",), READ),
        _rule(("",), ("persistentvolumeclaims", "persistentvolumes", "namespaces"), READ),
        _rule(("storage.k8s.io",), ("csinodes", "csidrivers", "csistoragecapacities"), READ),
    ],
    "system:volume-scheduler": [
        _rule(("",), ("persistentvolumes", "persistentvolumeclaims"), ("patch", "update", *READ)),
        _rule(("storage.k8s.io",), ("storageclasses",), READ),
    ],
}

# binding name -> (ClusterRole, subjects)
CLUSTER_ROLE_BINDINGS: dict[str, tuple[str, list[Obj]]] = {
    "cluster-admin": ("cluster-admin", [{"kind": "Group", "name": SUPERUSER_GROUP}]),
    "system:discovery": ("system:discovery", [{"kind": "Group", "name": AUTHENTICATED_GROUP}]),
    "system:basic-user": ("system:basic-user", [{"kind": "Group", "name": AUTHENTICATED_GROUP}]),
    "system:public-info-viewer": (
        "system:public-info-viewer",
        [{"kind": "Group", "name": AUTHENTICATED_GROUP}, {"kind": "Group", "name": "system:unauthenticated"}],
    ),
    SCHEDULER_USER: (SCHEDULER_USER, [{"kind": "User", "name": SCHEDULER_USER}]),
    "system:volume-scheduler": ("system:volume-scheduler", [{"kind": "User", "name": SCHEDULER_USER}]),
}

_BOOTSTRAP_META = {
    "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
    "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
}


def bootstrap_objects() -> list[tuple[str, Obj]]:
    """(plural, object) for every default ClusterRole, then every default ClusterRoleBinding."""
    api_version = f"{RBAC_GROUP}/v1"
    objects: list[tuple[str, Obj]] = [
        (
            "clusterroles",
            {
                "apiVersion": api_version,
                "kind": "ClusterRole",
                "metadata": {"name": name, **_BOOTSTRAP_META},
                "rules": rules,
            },
        )
        for name, rules in CLUSTER_ROLES.items()
    ]
    for name, (role, subjects) in CLUSTER_ROLE_BINDINGS.items():
        binding = {
            "apiVersion": api_version,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name, **_BOOTSTRAP_META},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": RBAC_GROUP, **s} for s in subjects],
        }
        objects.append(("clusterrolebindings", binding))
    return objects

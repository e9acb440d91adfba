"""The RBAC authorizer, as kube-apiserver's ``--authorization-mode=Node,RBAC`` decides a request.

Policy is read from the ``rbac.authorization.k8s.io/v1`` objects stored in the API server (Roles,
RoleBindings, ClusterRoles, ClusterRoleBindings), so ``kubectl apply -f deploy/rbac.yaml`` is what grants
a permission, and deleting a binding takes it away on the next request. The rules match as upstream's
``rbac/v1`` helpers do:

- a verb, an API group, a resource or a non-resource URL matches itself or ``*``;
- a subresource is its own resource, ``<resource>/<subresource>`` (``pods/eviction``,
  ``ec2nodeclasses/status``); ``*/<subresource>`` matches that subresource of every resource, and a rule on
  ``pods`` grants nothing on ``pods/eviction``;
- ``resourceNames`` restrict a rule to the named objects, so a rule with names never allows a request
  without one (``list``, ``watch``, ``create``);
- a non-resource URL rule ending in ``*`` matches by prefix (``/apis/*``);
- a ClusterRoleBinding grants its ClusterRole everywhere; a RoleBinding grants its Role, or a ClusterRole,
  in its own namespace only;
- subjects are a ``User`` by name, a ``Group`` among the user's groups, or a ``ServiceAccount`` as the
  user ``system:serviceaccount:<namespace>:<name>``.

The ``system:masters`` group is a superuser, as upstream hard-wires it ahead of RBAC. Nodes are decided
first by :mod:`.node_authorizer`.

Not modelled: ``aggregationRule`` (an aggregated ClusterRole grants only the rules written in it),
escalation prevention on writes of roles and bindings (``escalate``/``bind``), impersonation.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ApiError, qualified_resource
from .kinds import kind_of

if TYPE_CHECKING:
    from .store import Store

RBAC_GROUP = "rbac.authorization.k8s.io"
SUPERUSER_GROUP = "system:masters"
AUTHENTICATED_GROUP = "system:authenticated"

_ROLES = kind_of(RBAC_GROUP, "v1", "roles")
_ROLE_BINDINGS = kind_of(RBAC_GROUP, "v1", "rolebindings")
_CLUSTER_ROLES = kind_of(RBAC_GROUP, "v1", "clusterroles")
_CLUSTER_ROLE_BINDINGS = kind_of(RBAC_GROUP, "v1", "clusterrolebindings")

Obj = dict[str, Any]


@dataclass(frozen=True)
class UserInfo:
    """Who sent a request, as an authenticator found them."""

    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""

    @property
    def is_superuser(self) -> bool:
        return SUPERUSER_GROUP in self.groups


@dataclass(frozen=True)
class Attributes:
    """What a request asks to do (upstream's ``authorizer.Attributes``)."""

    user: UserInfo
    verb: str
    resource_request: bool
    api_group: str = ""
    resource: str = ""  # the plural, without the subresource
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""  # the URL path of a non-resource request

    @property
    def combined_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


# -- matching ---------------------------------------------------------------------------------------------


def _matches(allowed: Iterable[str], wanted: str) -> bool:
    return any(item in ("*", wanted) for item in allowed)


def _resource_matches(rule_resources: Iterable[str], attributes: Attributes) -> bool:
    combined = attributes.combined_resource
    for resource in rule_resources:
        if resource in ("*", combined):
            return True
        if attributes.subresource and resource == f"*/{attributes.subresource}":
            return True
    return False


def _url_matches(rule_urls: Iterable[str], path: str) -> bool:
    for url in rule_urls:
        if url in ("*", path):
            return True
        if url.endswith("*") and path.startswith(url[:-1]):
            return True
    return False


def rule_allows(rule: Mapping[str, Any], attributes: Attributes) -> bool:
    """Whether one PolicyRule allows the request."""
    if not _matches(rule.get("verbs") or (), attributes.verb):
        return False
    if not attributes.resource_request:
        return _url_matches(rule.get("nonResourceURLs") or (), attributes.path)
    if not _matches(rule.get("apiGroups") or (), attributes.api_group):
        return False
    if not _resource_matches(rule.get("resources") or (), attributes):
        return False
    names = rule.get("resourceNames") or ()
    return not names or attributes.name in names


def _subject_matches(subject: Mapping[str, Any], binding_namespace: str, user: UserInfo) -> bool:
    kind, name = subject.get("kind"), subject.get("name")
    if kind == "User":
        return name == user.name
    if kind == "Group":
        return name in user.groups
    if kind == "ServiceAccount":
        namespace = subject.get("namespace") or binding_namespace
        return user.name == f"system:serviceaccount:{namespace}:{name}"
    return False


def _binds(binding: Mapping[str, Any], user: UserInfo) -> bool:
    namespace = str((binding.get("metadata") or {}).get("namespace") or "")
    return any(_subject_matches(s, namespace, user) for s in binding.get("subjects") or ())


# -- policy from the store --------------------------------------------------------------------------------


def _stored(store: Store, kind: Any, namespace: str | None) -> Iterator[Obj]:
    from .store import Query

    for result in store.list_objects(Query(kind, namespace)).items:
        yield result if isinstance(result, dict) else result.obj


def _role_rules(store: Store, role_ref: Mapping[str, Any], namespace: str) -> Sequence[Mapping[str, Any]]:
    """The rules a binding's roleRef names; a missing role grants nothing (upstream logs and moves on)."""
    ref_kind, name = role_ref.get("kind"), str(role_ref.get("name") or "")
    try:
        if ref_kind == "ClusterRole":
            role = store.get(_CLUSTER_ROLES, None, name)
        elif ref_kind == "Role" and namespace:
            role = store.get(_ROLES, namespace, name)
        else:
            return ()
    except ApiError:
        return ()
    obj = role if isinstance(role, dict) else role.obj
    return list(obj.get("rules") or ())


def rbac_allows(store: Store, attributes: Attributes) -> bool:
    """Whether the stored Roles and ClusterRoles, through their bindings, allow the request."""
    user = attributes.user
    for binding in _stored(store, _CLUSTER_ROLE_BINDINGS, None):
        if _binds(binding, user) and any(
            rule_allows(r, attributes) for r in _role_rules(store, binding.get("roleRef") or {}, "")
        ):
            return True
    if not attributes.namespace:
        return False
    for binding in _stored(store, _ROLE_BINDINGS, attributes.namespace):
        if _binds(binding, user) and any(
            rule_allows(r, attributes)
            for r in _role_rules(store, binding.get("roleRef") or {}, attributes.namespace)
        ):
            return True
    return False


# -- the refusal ------------------------------------------------------------------------------------------


def forbidden(attributes: Attributes, reason: str = "") -> ApiError:
    """403 worded as kube-apiserver words it (``responsewriters.Forbidden`` and ``NewForbidden``)."""
    user = attributes.user.name
    if not attributes.resource_request:
        why = f'User "{user}" cannot {attributes.verb} path "{attributes.path}"'
        return ApiError(403, f"forbidden: {why}" + (f": {reason}" if reason else ""), reason="Forbidden")
    scope = f'in the namespace "{attributes.namespace}"' if attributes.namespace else "at the cluster scope"
    why = (
        f'User "{user}" cannot {attributes.verb} resource "{attributes.combined_resource}" '
        f'in API group "{attributes.api_group}" {scope}'
    )
    if reason:
        why += f": {reason}"
    resource = qualified_resource(attributes.resource, attributes.api_group)
    subject = f'{resource} "{attributes.name}"' if attributes.name else resource
    details: dict[str, Any] = {"kind": attributes.resource}
    if attributes.name:
        details["name"] = attributes.name
    if attributes.api_group:
        details["group"] = attributes.api_group
    return ApiError(403, f"{subject} is forbidden: {why}", reason="Forbidden", details=details)


__all__ = [
    "AUTHENTICATED_GROUP",
    "SUPERUSER_GROUP",
    "Attributes",
    "UserInfo",
    "forbidden",
    "rbac_allows",
    "rule_allows",
]

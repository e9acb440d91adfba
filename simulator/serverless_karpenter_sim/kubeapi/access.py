"""Who may do what on the simulated API server: authentication, then authorization, on every request.

A request's bearer token is authenticated (:mod:`.authn`: 401 if no authenticator knows it), then its
verb on its resource, or on its path for discovery, is authorized: ``system:masters`` always, anyone else
through the RBAC policy stored in the server (:mod:`.rbac`), seeded with upstream's defaults
(:mod:`.bootstrap_policy`). A refusal is the 403 ``Status`` kube-apiserver answers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .authn import Authenticators, StaticTokens, TokenAuthenticator
from .bootstrap_policy import bootstrap_objects
from .kinds import kind_of
from .rbac import RBAC_GROUP, Attributes, UserInfo, forbidden, rbac_allows

if TYPE_CHECKING:
    from .store import Store

# The user kubeconfig files of the simulator's operator and scenario driver name (kubeadm's admin user).
ADMIN_USER = "kubernetes-admin"
_PATH_VERBS = {
    "GET": "get",
    "HEAD": "head",
    "POST": "post",
    "PUT": "put",
    "PATCH": "patch",
    "DELETE": "delete",
}


class AccessControl:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.tokens = StaticTokens()
        self._authenticators = Authenticators(self.tokens)
        self._webhook_authorizer: Callable[[Attributes], bool] | None = None
        for plural, obj in bootstrap_objects():
            store.create(kind_of(RBAC_GROUP, "v1", plural), None, obj)

    def use_webhook(
        self, webhook: TokenAuthenticator | None, authorizer: Callable[[Attributes], bool] | None = None
    ) -> None:
        """Tokens the static ones do not cover go to ``webhook`` (EKS's aws-iam-authenticator); what RBAC
        does not allow, ``authorizer`` may (EKS's access policies)."""
        self._authenticators.webhook = webhook
        self._webhook_authorizer = authorizer

    def authenticate(self, authorization_header: str) -> UserInfo | None:
        return self._authenticators.authenticate(authorization_header)

    def authorize(self, attributes: Attributes) -> None:
        """Raise the 403 unless the request is allowed."""
        if attributes.user.is_superuser or rbac_allows(self.store, attributes):
            return
        if self._webhook_authorizer is not None and self._webhook_authorizer(attributes):
            return
        raise forbidden(attributes)

    def authorize_path(self, user: UserInfo, method: str, path: str) -> None:
        verb = _PATH_VERBS.get(method, method.lower())
        self.authorize(Attributes(user, verb, resource_request=False, path=path))

    def authorize_resource(
        self,
        user: UserInfo,
        verb: str,
        *,
        group: str,
        resource: str,
        subresource: str = "",
        namespace: str = "",
        name: str = "",
    ) -> None:
        self.authorize(
            Attributes(
                user,
                verb,
                resource_request=True,
                api_group=group,
                resource=resource,
                subresource=subresource,
                namespace=namespace,
                name=name,
            )
        )

"""Authentication of bearer tokens, as kube-apiserver chains its authenticators.

- **Static tokens** (kube-apiserver's ``--token-auth-file``) name the simulator's own components: the
  scenario driver as a ``system:masters`` admin, the scheduler as ``system:kube-scheduler``, each kubelet
  as ``system:node:<node>`` in ``system:nodes``. They are random per server, so no client can guess one.
- **Webhook tokens**: an EKS cluster hands ``k8s-aws-v1.`` tokens to aws-iam-authenticator; here, to the
  :class:`TokenAuthenticator` the server is given (see ``serverless_karpenter_sim.eks_authn``).

A token no authenticator accepts is 401 Unauthorized; an accepted one is in ``system:authenticated``.
"""

from __future__ import annotations

import secrets
import threading
from typing import Protocol

from .rbac import AUTHENTICATED_GROUP, UserInfo


class TokenAuthenticator(Protocol):
    def authenticate(self, token: str) -> UserInfo | None:
        """The user the token is, or None when it is not one this authenticator knows or accepts."""


class StaticTokens:
    """Tokens issued to named users, as lines of a ``--token-auth-file``."""

    def __init__(self) -> None:
        self._users: dict[str, UserInfo] = {}
        self._tokens: dict[UserInfo, str] = {}
        self._lock = threading.Lock()

    def issue(self, name: str, groups: tuple[str, ...] = ()) -> str:
        """The token of ``name`` in ``groups`` (the same one again for the same user)."""
        user = UserInfo(name, groups)
        with self._lock:
            token = self._tokens.get(user)
            if token is None:
                token = secrets.token_urlsafe(24)
                self._tokens[user] = token
                self._users[token] = user
            return token

    def authenticate(self, token: str) -> UserInfo | None:
        with self._lock:
            return self._users.get(token)


class Authenticators:
    """The chain: static tokens first, then the webhook, as kube-apiserver orders them."""

    def __init__(self, static: StaticTokens, webhook: TokenAuthenticator | None = None) -> None:
        self.static = static
        self.webhook = webhook

    def authenticate(self, authorization: str) -> UserInfo | None:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        token = token.strip()
        user = self.static.authenticate(token)
        if user is None and self.webhook is not None:
            user = self.webhook.authenticate(token)
        if user is None:
            return None
        groups = user.groups if AUTHENTICATED_GROUP in user.groups else (*user.groups, AUTHENTICATED_GROUP)
        return UserInfo(user.name, groups, user.uid)


__all__ = ["Authenticators", "StaticTokens", "TokenAuthenticator"]

"""A kubeconfig for kubectl against the simulated API server: its HTTPS address, its certificate authority
(so kubectl verifies the server, and sends its bearer token), and a token the server issued to the
cluster's admin (kubeadm's ``kubernetes-admin`` in ``system:masters``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from .server import KubeApiServer


def kubeconfig(server: KubeApiServer, name: str, token: str | None = None) -> dict[str, Any]:
    """The kubeconfig document for ``server`` (started), with one context named ``name``, for ``token``
    (by default one the server issues to its admin)."""
    if not server.url:
        raise RuntimeError("start the API server before writing its kubeconfig")
    if token is None:
        token = server.client_configuration().api_key["BearerToken"]
    user = f"{name}-admin"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {"server": server.url, "certificate-authority-data": server.authority.ca_data},
            }
        ],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": user, "namespace": "default"}}],
        "current-context": name,
        "preferences": {},
    }


def write_kubeconfig(path: Path, server: KubeApiServer, name: str, token: str | None = None) -> Path:
    """Write the kubeconfig to ``path``, readable by its owner only (it holds a bearer token)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        yaml.safe_dump(kubeconfig(server, name, token), handle, sort_keys=False)
    partial.replace(path)
    return path

"""A kubeconfig for kubectl against the simulated API server: its HTTPS address, its certificate authority
(so kubectl verifies the server, and sends its bearer token), and the local operator's token."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from .server import LOCAL_TOKEN, KubeApiServer


def kubeconfig(server: KubeApiServer, name: str, token: str = LOCAL_TOKEN) -> dict[str, Any]:
    """The kubeconfig document for ``server`` (started), with one context named ``name``."""
    if not server.url:
        raise RuntimeError("start the API server before writing its kubeconfig")
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


def write_kubeconfig(path: Path, server: KubeApiServer, name: str, token: str = LOCAL_TOKEN) -> Path:
    """Write the kubeconfig to ``path``, readable by its owner only (it holds a bearer token)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        yaml.safe_dump(kubeconfig(server, name, token), handle, sort_keys=False)
    partial.replace(path)
    return path

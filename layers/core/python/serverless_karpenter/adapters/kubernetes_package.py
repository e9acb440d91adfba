"""The ``kubernetes`` package without its ``__init__``'s eager imports.

``import kubernetes.client`` first runs ``kubernetes/__init__.py``, which imports every subpackage:
``config`` (kube_config, with requests-oauthlib, requests, charset-normalizer, google-auth hooks...),
``dynamic``, ``stream`` (websocket-client), ``leaderelection`` and ``informer``. We use none of them: the
gateway builds its own ``Configuration`` from the EKS endpoint, CA and token. Their import is ~0.13 s of a
handler's cold start on a full core, several times that on a Lambda's share of one.

Registering the package's module, made from its spec but not executed, lets ``kubernetes.client``,
``kubernetes.watch`` and ``kubernetes.utils`` load as usual, each on first import; a caller that needs
``kubernetes.config`` imports it by name and gets it.
"""

from __future__ import annotations

import importlib.util
import sys


def register_package_lazily() -> None:
    """Put an unexecuted ``kubernetes`` package in ``sys.modules``, unless it is already imported."""
    if "kubernetes" in sys.modules:
        return
    spec = importlib.util.find_spec("kubernetes")
    if spec is None or spec.submodule_search_locations is None:
        return  # not installed: the first real import says so
    package = importlib.util.module_from_spec(spec)
    package.__dict__.setdefault("__project__", "kubernetes")
    sys.modules["kubernetes"] = package

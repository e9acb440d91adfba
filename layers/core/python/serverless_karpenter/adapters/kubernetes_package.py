"""The ``kubernetes`` package without its ``__init__``'s eager imports.

``import kubernetes.client`` first runs ``kubernetes/__init__.py``, which imports every subpackage:
``config`` (kube_config, with requests-oauthlib, requests, charset-normalizer...), ``dynamic``, ``stream``
(websocket-client), ``leaderelection`` and ``informer``. We use none of them: the gateway builds its own
``Configuration`` from the EKS endpoint, CA and token. Their import is ~0.13 s of a handler's cold start on
a full core, several times that on a Lambda's share of one.

A finder first on ``sys.meta_path`` answers for the package alone (never its submodules): the package's
own spec, with a loader that leaves ``__init__`` unexecuted. ``kubernetes.client``, ``kubernetes.watch``
and ``kubernetes.utils`` then load as usual, each on its first import; a caller that needs
``kubernetes.config`` imports it by name and gets it. Nothing is imported until someone imports
``kubernetes``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

PACKAGE = "kubernetes"


class _PackageWithoutInit(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != PACKAGE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname)
        if spec is None or spec.submodule_search_locations is None:
            return spec  # not installed (the import fails as usual), or not a package
        spec.loader = self
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None  # the default module, with __path__ from the spec

    def exec_module(self, module: ModuleType) -> None:
        module.__dict__.setdefault("__project__", PACKAGE)


def register_package_lazily() -> None:
    """Install the finder, once; a ``kubernetes`` already imported stays as it is."""
    if any(isinstance(finder, _PackageWithoutInit) for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, _PackageWithoutInit())

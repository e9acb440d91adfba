"""The cluster actors' informers: their unfiltered LISTs kept current from the API server's change feed.

A real kubelet, scheduler or controller-manager LISTs each collection once and then WATCHes it, holding
every object in an informer's cache; it never re-reads 10,000 pods because one changed. The simulated
actors step in turns on a virtual clock, so their informers read the simulated API server's change feed
(the store's per-resource watch history, what a WATCH from the cache's resourceVersion would stream) in
this process at the start of each read: the cache then holds exactly what a fresh LIST would return, at
the cost of the objects written since the last read. A cursor older than the history's window (410 Gone,
as kube-apiserver answers a reflector) is met as a reflector meets it: by a new LIST.

Each object is decoded from the bytes the server would send for it, so the actors see what the REST API
returns, in the LIST's order (etcd key order). Writes, and filtered reads, still go over HTTP as the
actor's own user (:class:`~serverless_karpenter_sim.cluster.objects.KubeRest`).
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client import ApiClient

from serverless_karpenter_sim.cluster.objects import KubeRest, Obj
from serverless_karpenter_sim.kubeapi import kinds
from serverless_karpenter_sim.kubeapi.errors import ApiError
from serverless_karpenter_sim.kubeapi.store import Query, Result, Store, render

Key = tuple[str, str]


def kind_of_path(path: str) -> kinds.Kind | None:
    """The kind of an unnamespaced collection path (``/api/v1/pods``, ``/apis/apps/v1/deployments``)."""
    parts = path.strip("/").split("/")
    if len(parts) == 3 and parts[0] == "api":
        return kinds.lookup("", parts[1], parts[2])
    if len(parts) == 4 and parts[0] == "apis":
        return kinds.lookup(parts[1], parts[2], parts[3])
    return None


def _decoded(result: Result) -> Obj:
    decoded: Obj = json.loads(render(result))
    return decoded


def _key(obj: Obj) -> Key:
    meta: dict[str, Any] = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


class Informer:
    """One collection's cache: a LIST once, then the changes since, read on demand."""

    def __init__(self, store: Store, kind: kinds.Kind) -> None:
        self._store = store
        self._query = Query(kind, None)
        self._objects: dict[Key, Obj] = {}
        self._cursor: int | None = None
        self._items: list[Obj] | None = None  # the objects in key order, until the next change
        self.relists = 0
        self.events = 0

    def _relist(self) -> None:
        page = self._store.list_objects(self._query)
        self._objects = {}
        for result in page.items:
            obj = _decoded(result)
            self._objects[_key(obj)] = obj
        self._cursor = page.resource_version
        self._items = None
        self.relists += 1

    def items(self) -> list[Obj]:
        """Every object of the collection as a LIST now would return it. Shared between reads: callers
        must not change them."""
        if self._cursor is None:
            self._relist()
        else:
            try:
                events, cursor = self._store.watch_next(self._query, self._cursor, 0.0)
            except ApiError as err:
                if err.code != 410:
                    raise
                self._relist()
            else:
                for event_type, result in events:
                    obj = _decoded(result)
                    if event_type == "DELETED":
                        self._objects.pop(_key(obj), None)
                    else:
                        self._objects[_key(obj)] = obj
                if events:
                    self._items = None
                    self.events += len(events)
                self._cursor = cursor
        if self._items is None:
            self._items = [self._objects[k] for k in sorted(self._objects)]
        return self._items


class InformedRest(KubeRest):
    """:class:`KubeRest` whose unfiltered LISTs of built-in collections are served by informers."""

    def __init__(self, api_client: ApiClient, store: Store | None) -> None:
        super().__init__(api_client)
        self._store = store
        self._informers: dict[str, Informer] = {}

    def list(self, path: str, **query: str | int) -> list[Obj]:
        if query or self._store is None:
            return super().list(path, **query)
        informer = self._informers.get(path)
        if informer is None:
            kind = kind_of_path(path)
            if kind is None or kind.custom:
                return super().list(path)
            informer = self._informers[path] = Informer(self._store, kind)
        return informer.items()

"""The object store behind the simulated API server: etcd plus the registry strategies that matter.

One lock guards everything. Stored objects are never mutated: every write builds a new dict (sharing
unchanged subtrees), so readers may serialize an :class:`Entry` after releasing the lock, and an entry
caches its JSON.

Semantics kept from upstream (see the module docs of ``server`` for the HTTP side):
- one global resourceVersion counter; a bounded watch history per resource (kube-apiserver keeps a watch
  cache per resource), 410 Expired when a watch starts, or falls, before its resource's window;
- ``generation`` bumps when anything outside metadata/status changes (and on graceful deletion);
- a no-op update writes nothing and sends no watch event;
- finalizers hold a deleted object with ``deletionTimestamp`` until they are emptied; no new finalizer
  may be added to an object that is being deleted;
- pods delete gracefully when bound (``deletionTimestamp = now + grace``) and a later delete may only
  shorten the grace; a grace-0 delete removes them;
- ``pods/binding``, ``pods/eviction`` (with PodDisruptionBudgets), ``/status`` and ``/scale``.
"""

from __future__ import annotations

import base64
import bisect
import random
import threading
import uuid
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from serverless_karpenter.clock import Clock, parse_rfc3339, to_rfc3339

from . import admission, codec, crd_schema, patch, policy, selectors
from .audit import Audit, BudgetViolation, EvictionRecord
from .errors import (
    STALE_OBJECT,
    already_exists,
    bad_request,
    conflict,
    gone,
    invalid,
    not_found,
    unsupported_media_type,
)
from .kinds import Kind, kind_of
from .selectors import FieldSelector, LabelSelector

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)
T = TypeVar("T")

_NAMESPACES = kind_of("", "v1", "namespaces")
_PODS = kind_of("", "v1", "pods")
_PDBS = kind_of("policy", "v1", "poddisruptionbudgets")
_DEPLOYMENTS = kind_of("apps", "v1", "deployments")
# The controllers whose scale a budget reads (upstream's finders, ReplicationControllers aside).
_SCALED = {
    "ReplicaSet": kind_of("apps", "v1", "replicasets"),
    "StatefulSet": kind_of("apps", "v1", "statefulsets"),
}
_CORE_EVENTS = kind_of("", "v1", "events")

BOOTSTRAP_NAMESPACES = ("default", "kube-system", "kube-node-lease", "kube-public")
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # upstream's generateName alphabet (no vowels, no 0/1/3)
_BUILTIN_PRIORITIES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


class Entry:
    """A stored object and its lazily cached JSON."""

    __slots__ = ("_raw", "obj")

    def __init__(self, obj: Obj) -> None:
        self.obj = obj
        self._raw: bytes | None = None

    def raw(self) -> bytes:
        if self._raw is None:
            self._raw = codec.dumps(self.obj)
        return self._raw


Result = Entry | Obj  # what the server renders: a stored entry, or an object computed for this reader


def render(result: Result) -> bytes:
    return result.raw() if isinstance(result, Entry) else codec.dumps(result)


@dataclass(frozen=True)
class WatchEvent:
    rv: int
    resource_id: str
    namespace: str
    type: str  # ADDED | MODIFIED | DELETED
    entry: Entry
    previous: Entry | None


@dataclass(frozen=True)
class Page:
    items: list[Result]
    resource_version: int
    continue_token: str | None
    remaining: int | None


@dataclass(frozen=True)
class Query:
    """Who a list or watch is for: a kind, maybe a namespace, and selectors."""

    kind: Kind
    namespace: str | None
    labels: LabelSelector = selectors.EVERYTHING
    fields: FieldSelector = ()

    def admits(self, obj: Obj) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        if self.labels and not selectors.matches(self.labels, meta.get("labels")):
            return False
        return not self.fields or selectors.fields_match(self.fields, obj)


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _with_meta(obj: Obj, **changes: Any) -> Obj:
    """A copy of ``obj`` with metadata fields changed (None removes)."""
    meta = dict(_meta(obj))
    for key, value in changes.items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    return {**obj, "metadata": meta}


def _spec_part(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _micro_time(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _int_param(value: Any, what: str) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(value)
    except (TypeError, ValueError) as err:
        raise bad_request(f"invalid {what}: {value!r}") from err


class Store:
    def __init__(
        self, clock: Clock, audit: Audit, *, watch_history: int = 10_000, event_ttl_seconds: float = 3600.0
    ) -> None:
        self.clock = clock
        self.audit = audit
        # Re-entrant so that a dry run can hold the lock around a whole operation.
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self._undo: list[tuple[str, Key, Entry | None]] | None = None  # set while a dry run is in progress
        self.closed = False
        self.pokes = 0  # bumped by poke(): a waiting watch looks at the clock again
        self._rv = 0
        self._objects: dict[str, dict[Key, Entry]] = defaultdict(dict)
        self._sorted: dict[str, list[Key]] = {}
        # Per resource, as kube-apiserver's watch cache: churn of Events or Nodes does not age a pod watch.
        self._history: dict[str, list[WatchEvent]] = defaultdict(list)
        self._history_limit = max(16, watch_history)
        # Per resource, the newest resourceVersion whose event was dropped from its history.
        self._history_floor: dict[str, int] = defaultdict(int)
        self._continuations: OrderedDict[int, tuple[int, list[Entry]]] = OrderedDict()
        self._next_continuation = 0
        self._event_ttl = timedelta(seconds=event_ttl_seconds)
        self._last_event_sweep: datetime | None = None
        self._random = random.Random()
        for name in BOOTSTRAP_NAMESPACES:
            self.create(_NAMESPACES, None, {"metadata": {"name": name}})

    # --- plumbing ---------------------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        with self.lock:
            return self._rv

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.changed.notify_all()

    def poke(self) -> None:
        """Wake every waiting watch, to look at the clock (and its deadline) again."""
        with self.lock:
            self.pokes += 1
            self.changed.notify_all()

    def _now(self) -> str:
        return to_rfc3339(self.clock.now())

    def _keys(self, resource_id: str) -> list[Key]:
        keys = self._sorted.get(resource_id)
        if keys is None:
            keys = sorted(self._objects[resource_id])
            self._sorted[resource_id] = keys
        return keys

    def _entries(self, resource_id: str, namespace: str | None) -> Iterator[Entry]:
        """Entries in etcd key order, only ``namespace``'s when given."""
        objects = self._objects[resource_id]
        keys = self._keys(resource_id)
        if namespace is None:
            for key in keys:
                yield objects[key]
            return
        for i in range(bisect.bisect_left(keys, (namespace, "")), len(keys)):
            key = keys[i]
            if key[0] != namespace:
                break
            yield objects[key]

    def _lookup(self, kind: Kind, namespace: str | None, name: str) -> Entry:
        entry = self._objects[kind.resource_id].get((namespace or "", name))
        if entry is None:
            raise not_found(kind.plural, kind.group, name)
        return entry

    def _commit(self, kind: Kind, event: str, key: Key, obj: Obj | None, previous: Entry | None) -> Entry:
        """Write (or remove, for DELETED) with the next resourceVersion; ``obj`` must be a fresh dict."""
        self._rv += 1
        rv = str(self._rv)
        objects = self._objects[kind.resource_id]
        if self._undo is not None:
            self._undo.append((kind.resource_id, key, objects.get(key)))
        if event == "DELETED":
            assert previous is not None
            entry = Entry(_with_meta(previous.obj, resourceVersion=rv))
            del objects[key]
            self._sorted.pop(kind.resource_id, None)
        else:
            assert obj is not None
            obj["metadata"] = {**_meta(obj), "resourceVersion": rv}
            entry = Entry(obj)
            if key not in objects:
                self._sorted.pop(kind.resource_id, None)
            objects[key] = entry
        history = self._history[kind.resource_id]
        history.append(WatchEvent(self._rv, kind.resource_id, key[0], event, entry, previous))
        if self._undo is None and len(history) > self._history_limit + self._history_limit // 4:
            dropped = len(history) - self._history_limit
            self._history_floor[kind.resource_id] = history[dropped - 1].rv
            del history[:dropped]
        self.changed.notify_all()
        return entry

    def dry_run(self, operation: Callable[[], T]) -> T:
        """Run a write as ``dryRun=All`` does: everything but the persistence, which is rolled back."""
        with self.lock:
            if self._undo is not None:
                return operation()
            self._undo = []
            rv = self._rv
            try:
                return operation()
            finally:
                for resource_id, key, previous in reversed(self._undo):
                    if previous is None:
                        self._objects[resource_id].pop(key, None)
                    else:
                        self._objects[resource_id][key] = previous
                    self._sorted.pop(resource_id, None)
                for resource_id in {resource_id for resource_id, _, _ in self._undo}:
                    history = self._history[resource_id]
                    del history[bisect.bisect_right(history, rv, key=lambda ev: ev.rv) :]
                self._rv = rv
                self._undo = None

    def _present(self, kind: Kind, entry: Entry) -> Result:
        """What a reader of ``kind`` sees: converted (events.k8s.io) or with live status (PDBs)."""
        if kind.from_storage is not None:
            return kind.from_storage(entry.obj)
        if kind.custom:
            defaulted = crd_schema.present(kind, entry.obj)
            if defaulted is not entry.obj:
                return defaulted
        if kind is _PDBS:
            namespace = _meta(entry.obj).get("namespace") or ""
            pods = [e.obj for e in self._entries(_PODS.resource_id, namespace)]
            return {
                **entry.obj,
                "status": policy.status_object(
                    entry.obj, policy.budget_status(entry.obj, pods, self._scale_of)
                ),
            }
        return entry

    def _external(self, kind: Kind, entry: Entry) -> Obj:
        result = self._present(kind, entry)
        return result.obj if isinstance(result, Entry) else result

    def _check_namespace(self, kind: Kind, namespace: str | None) -> None:
        if not kind.namespaced:
            return
        if not namespace:
            raise bad_request("the namespace of the object must be set")
        if ("", namespace) not in self._objects[_NAMESPACES.resource_id]:
            raise not_found("namespaces", "", namespace)

    # --- validation -------------------------------------------------------------------------------------

    def _validate(self, kind: Kind, obj: Obj, old: Obj | None) -> None:
        meta = _meta(obj)
        name = str(meta.get("name") or "")
        why = _name_error(kind.name_rule, name)
        if why:
            raise invalid(kind.kind, kind.group, name, "metadata.name", f'Invalid value: "{name}": {why}')
        for field in ("labels", "annotations"):
            values = meta.get(field)
            if values is None:
                continue
            if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
                raise bad_request(f"metadata.{field} must be a map of string to string")
            for key, value in values.items():
                why = selectors.qualified_name_error(key)
                if why:
                    raise invalid(
                        kind.kind, kind.group, name, f"metadata.{field}", f'Invalid value: "{key}": {why}'
                    )
                if field == "labels":
                    why = selectors.label_value_error(value)
                    if why:
                        raise invalid(
                            kind.kind, kind.group, name, "metadata.labels", f'Invalid value: "{value}": {why}'
                        )
        finalizers = meta.get("finalizers")
        if finalizers is not None:
            if not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers):
                raise bad_request("metadata.finalizers must be a list of strings")
            for finalizer in finalizers:
                why = selectors.qualified_name_error(finalizer)
                if why:
                    raise invalid(
                        kind.kind,
                        kind.group,
                        name,
                        "metadata.finalizers",
                        f'Invalid value: "{finalizer}": {why}',
                    )
        admission.validate(kind, obj, old)
        if old is None:
            return
        old_meta = _meta(old)
        if old_meta.get("deletionTimestamp"):
            added = [f for f in finalizers or () if f not in (old_meta.get("finalizers") or ())]
            if added:
                listed = ", ".join(f'"{f}"' for f in added)
                raise invalid(
                    kind.kind,
                    kind.group,
                    name,
                    "metadata.finalizers",
                    "Forbidden: no new finalizers can be added if the object is being deleted, "
                    f"found new finalizers []string{{{listed}}}",
                )
        if kind is _PODS:
            _validate_pod_update(old, obj, name)
        elif kind.plural == "nodes" and not kind.group:
            old_id = (old.get("spec") or {}).get("providerID")
            if old_id and (obj.get("spec") or {}).get("providerID") != old_id:
                raise invalid(
                    "Node",
                    "",
                    name,
                    "spec.providerID",
                    'Forbidden: node updates may not change providerID except from "" to valid',
                )

    # --- create -----------------------------------------------------------------------------------------

    def create(self, kind: Kind, namespace: str | None, body: Any) -> Result:
        obj = self._incoming(kind, namespace, body)
        with self.lock:
            self._check_namespace(kind, namespace)
            entry = self._create_locked(kind, namespace, obj)
            return self._present(kind, entry)

    def _incoming(self, kind: Kind, namespace: str | None, body: Any, name: str | None = None) -> Obj:
        """A request body checked against the URL and converted to its storage form."""
        if not isinstance(body, dict):
            raise bad_request(f"the body of the request must be a {kind.kind} object")
        api_version, body_kind = body.get("apiVersion"), body.get("kind")
        if body_kind and body_kind != kind.kind:
            raise bad_request(
                f"the kind in the body ({body_kind}) does not match the kind of the resource ({kind.kind})"
            )
        if api_version and api_version != kind.api_version:
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({kind.api_version})"
            )
        meta = body.get("metadata")
        if meta is None:
            meta = {}
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        meta = dict(meta)
        if kind.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if name is not None and meta.get("name") and meta["name"] != name:
            raise bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
            )
        obj = {**body, "apiVersion": kind.api_version, "kind": kind.kind, "metadata": meta}
        if kind.to_storage is not None:
            obj = kind.to_storage(obj)
        return obj

    def _create_locked(self, kind: Kind, namespace: str | None, obj: Obj) -> Entry:
        meta = obj["metadata"]
        objects = self._objects[kind.resource_id]
        name = meta.get("name")
        if not name:
            prefix = meta.get("generateName")
            if not prefix:
                raise invalid(
                    kind.kind,
                    kind.group,
                    "",
                    "metadata.name",
                    "Required value: name or generateName is required",
                )
            while True:
                name = prefix + "".join(self._random.choices(_NAME_CHARS, k=5))
                if (namespace or "", name) not in objects:
                    break
            meta["name"] = name
        key = (namespace or "", str(name))
        if key in objects:
            raise already_exists(kind.plural, kind.group, str(name))
        now = self.clock.now()
        for transient in (
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "resourceVersion",
            "selfLink",
            "managedFields",
        ):
            meta.pop(transient, None)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=to_rfc3339(now), generation=1)
        if "status" in kind.subresources and not kind.keep_status_on_create:
            obj.pop("status", None)
        _apply_create_defaults(kind, obj, now)
        obj = crd_schema.admit(kind, obj, None)
        admission.admit_create(kind, obj)
        self._validate(kind, obj, None)
        entry = self._commit(kind, "ADDED", key, obj, None)
        if kind.resource_id == _CORE_EVENTS.resource_id:
            self._sweep_events(now)
        return entry

    def _sweep_events(self, now: datetime) -> None:
        """Events expire an hour after creation, as upstream's etcd lease does; checked once a minute."""
        if self._last_event_sweep and now - self._last_event_sweep < timedelta(minutes=1):
            return
        self._last_event_sweep = now
        cutoff = to_rfc3339(now - self._event_ttl)
        expired = [
            e
            for e in self._objects[_CORE_EVENTS.resource_id].values()
            if str(_meta(e.obj).get("creationTimestamp", "")) < cutoff
        ]
        for entry in expired:
            meta = _meta(entry.obj)
            self._commit(_CORE_EVENTS, "DELETED", (meta.get("namespace") or "", meta["name"]), None, entry)

    # --- read -------------------------------------------------------------------------------------------

    def get(self, kind: Kind, namespace: str | None, name: str) -> Result:
        with self.lock:
            return self._present(kind, self._lookup(kind, namespace, name))

    def list_objects(
        self, query: Query, *, limit: int | None = None, continue_token: str | None = None
    ) -> Page:
        with self.lock:
            if continue_token:
                rv, entries = self._resume(continue_token)
            else:
                rv = self._rv
                entries = [
                    e for e in self._entries(query.kind.resource_id, query.namespace) if query.admits(e.obj)
                ]
            token = remaining = None
            if limit and limit > 0 and len(entries) > limit:
                rest = entries[limit:]
                entries = entries[:limit]
                token = self._remember(rv, rest)
                remaining = len(rest)
            return Page([self._present(query.kind, e) for e in entries], rv, token, remaining)

    def _remember(self, rv: int, rest: list[Entry]) -> str:
        """Keep the rest of a paginated list so continuations see one consistent snapshot."""
        self._next_continuation += 1
        ident = self._next_continuation
        self._continuations[ident] = (rv, rest)
        while len(self._continuations) > 256:
            self._continuations.popitem(last=False)
        return base64.urlsafe_b64encode(codec.dumps({"rv": rv, "start": ident})).decode()

    def _resume(self, token: str) -> tuple[int, list[Entry]]:
        try:
            decoded = codec.loads(base64.urlsafe_b64decode(token.encode()))
            ident = int(decoded["start"])
        except (ValueError, KeyError, TypeError) as err:
            raise bad_request(f"continue key is not valid: {err}") from err
        snapshot = self._continuations.pop(ident, None)
        if snapshot is None:
            raise gone(
                "The provided continue parameter is too old to display a consistent list result. You can "
                "start a new list without the continue parameter."
            )
        return snapshot

    # --- update and patch -------------------------------------------------------------------------------

    def update(
        self, kind: Kind, namespace: str | None, name: str, body: Any, subresource: str | None = None
    ) -> Result:
        obj = self._incoming(kind, namespace, body, name)
        meta = obj["metadata"]
        with self.lock:
            entry = self._lookup(kind, namespace, name)
            old_meta = _meta(entry.obj)
            if meta.get("resourceVersion") and meta["resourceVersion"] != old_meta.get("resourceVersion"):
                raise conflict(kind.plural, kind.group, name, STALE_OBJECT)
            if meta.get("uid") and meta["uid"] != old_meta.get("uid"):
                raise conflict(
                    kind.plural,
                    kind.group,
                    name,
                    f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: "
                    f"{old_meta.get('uid')}",
                )
            return self._replace(kind, entry, obj, subresource)

    def patch(
        self,
        kind: Kind,
        namespace: str | None,
        name: str,
        content_type: str,
        raw: bytes,
        *,
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> Result:
        media = content_type.split(";", maxsplit=1)[0].strip().lower()
        body = _decode_patch(media, raw, field_manager)
        with self.lock:
            entry = self._objects[kind.resource_id].get((namespace or "", name))
            if entry is None:
                if media != APPLY_PATCH or subresource:
                    raise not_found(kind.plural, kind.group, name)
                self._check_namespace(kind, namespace)
                obj = self._incoming(kind, namespace, body, name)
                obj["metadata"].setdefault("name", name)
                return self._present(kind, self._create_locked(kind, namespace, obj))
            current = self._external(kind, entry)
            patched = _apply_patch(kind, media, current, body)
            rv = _meta(patched).get("resourceVersion")
            if rv and rv != _meta(entry.obj).get("resourceVersion"):
                raise conflict(kind.plural, kind.group, name, STALE_OBJECT)
            if not isinstance(patched.get("metadata"), dict):
                patched["metadata"] = {}
            patched = {**patched, "metadata": {**patched["metadata"], "name": name}}
            if kind.namespaced:
                patched["metadata"]["namespace"] = namespace
            if kind.to_storage is not None:
                patched = kind.to_storage(patched)
            return self._replace(kind, entry, patched, subresource)

    def _replace(self, kind: Kind, entry: Entry, obj: Obj, subresource: str | None) -> Result:
        """The shared tail of update and patch: strategy rules, validation, no-op detection, commit."""
        old = entry.obj
        old_meta = _meta(old)
        if subresource == "status":
            new = {k: v for k, v in old.items() if k != "status"}
            if obj.get("status") is not None:
                new["status"] = obj["status"]
        else:
            new = {
                **obj,
                "apiVersion": old.get("apiVersion", kind.api_version),
                "kind": old.get("kind", kind.kind),
            }
            meta = dict(_meta(obj))
            for immutable in (
                "uid",
                "creationTimestamp",
                "namespace",
                "name",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ):
                if old_meta.get(immutable) is None:
                    meta.pop(immutable, None)
                else:
                    meta[immutable] = old_meta[immutable]
            meta.pop("managedFields", None)
            meta.pop("selfLink", None)
            new["metadata"] = meta
            if "status" in kind.subresources:
                if old.get("status") is None:
                    new.pop("status", None)
                else:
                    new["status"] = old["status"]
        new["metadata"] = {**_meta(new), "resourceVersion": old_meta.get("resourceVersion")}
        new = crd_schema.admit(kind, new, old)
        self._validate(kind, new, old)
        if _spec_part(new) != _spec_part(old):
            new["metadata"]["generation"] = int(old_meta.get("generation") or 0) + 1
        if new == old:
            return self._present(kind, entry)
        meta = new["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        if (
            meta.get("deletionTimestamp")
            and not meta.get("finalizers")
            and meta.get("deletionGracePeriodSeconds") == 0
        ):
            removed = Entry(new)
            return self._present(kind, self._commit(kind, "DELETED", key, None, removed))
        return self._present(kind, self._commit(kind, "MODIFIED", key, new, entry))

    # --- delete -----------------------------------------------------------------------------------------

    def delete(
        self, kind: Kind, namespace: str | None, name: str, options: Obj | None = None
    ) -> tuple[Result, bool]:
        """Delete or mark for deletion; returns what the client sees and whether the object is gone."""
        options = options or {}
        with self.lock:
            entry = self._lookup(kind, namespace, name)
            _check_preconditions(kind, entry.obj, options)
            return self._delete_locked(kind, entry, options, "delete")

    def delete_collection(self, query: Query, options: Obj | None = None) -> list[Result]:
        options = options or {}
        with self.lock:
            targets = [
                e for e in self._entries(query.kind.resource_id, query.namespace) if query.admits(e.obj)
            ]
            return [self._delete_locked(query.kind, e, options, "deletecollection")[0] for e in targets]

    def _delete_locked(self, kind: Kind, entry: Entry, options: Obj, via: str) -> tuple[Result, bool]:
        obj = entry.obj
        budgets = self._budgets_before_losing(obj) if kind is _PODS else None
        result = self._delete_strategy(kind, entry, options)
        if budgets:
            self._record_violations(obj, budgets, via)
        return result

    def _delete_strategy(self, kind: Kind, entry: Entry, options: Obj) -> tuple[Result, bool]:
        obj = entry.obj
        meta = _meta(obj)
        key = (meta.get("namespace") or "", meta["name"])
        finalizers = meta.get("finalizers") or []
        requested = _int_param(options.get("gracePeriodSeconds"), "gracePeriodSeconds")
        now = self.clock.now()
        if kind.graceful_delete:
            if meta.get("deletionTimestamp"):
                current = meta.get("deletionGracePeriodSeconds")
                if current:  # a graceful deletion is pending; a delete may only shorten it
                    if requested is None or requested >= current:
                        return self._present(kind, entry), False
                    started = parse_rfc3339(meta["deletionTimestamp"]) - timedelta(seconds=current)
                    shortened = _with_meta(
                        obj,
                        deletionTimestamp=to_rfc3339(started + timedelta(seconds=requested)),
                        deletionGracePeriodSeconds=requested,
                    )
                    if requested > 0 or finalizers:
                        return self._present(
                            kind, self._commit(kind, "MODIFIED", key, shortened, entry)
                        ), False
                    return self._present(
                        kind, self._commit(kind, "DELETED", key, None, Entry(shortened))
                    ), True
            else:
                grace = _pod_grace(obj, requested)
                if grace > 0:
                    marked = _with_meta(
                        obj,
                        deletionTimestamp=to_rfc3339(now + timedelta(seconds=grace)),
                        deletionGracePeriodSeconds=grace,
                        generation=int(meta.get("generation") or 0) + 1,
                    )
                    return self._present(kind, self._commit(kind, "MODIFIED", key, marked, entry)), False
        if finalizers:
            if meta.get("deletionTimestamp"):
                return self._present(kind, entry), False
            marked = _with_meta(
                obj,
                deletionTimestamp=to_rfc3339(now),
                deletionGracePeriodSeconds=0,
                generation=int(meta.get("generation") or 0) + 1,
            )
            return self._present(kind, self._commit(kind, "MODIFIED", key, marked, entry)), False
        return self._present(kind, self._commit(kind, "DELETED", key, None, entry)), True

    def _budgets_before_losing(self, pod: Obj) -> list[tuple[Obj, policy.BudgetStatus]] | None:
        """Budgets a healthy pod counts toward, with their status before it goes; None if it is unhealthy."""
        if not policy.is_healthy(pod):
            return None
        namespace = _meta(pod).get("namespace") or ""
        budgets = [e.obj for e in self._entries(_PDBS.resource_id, namespace) if policy.selects(e.obj, pod)]
        if not budgets:
            return None
        pods = [e.obj for e in self._entries(_PODS.resource_id, namespace)]
        return [(pdb, policy.budget_status(pdb, pods, self._scale_of)) for pdb in budgets]

    def _scale_of(self, pod: Mapping[str, Any]) -> tuple[str, int] | None:
        """A pod's controller and its desired replicas, as the disruption controller's finders read them:
        a ReplicaSet owned by a Deployment answers with the Deployment's."""
        namespace = (pod.get("metadata") or {}).get("namespace") or ""
        ref = _controller_ref(pod)
        kind = _SCALED.get(str(ref.get("kind"))) if ref else None
        if ref is None or kind is None:
            return None
        entry = self._objects[kind.resource_id].get((namespace, str(ref.get("name"))))
        if entry is None or _meta(entry.obj).get("uid") != ref.get("uid"):
            return None
        controller = entry.obj
        owner = _controller_ref(controller)
        if kind is _SCALED["ReplicaSet"] and owner is not None and owner.get("kind") == "Deployment":
            deployment = self._objects[_DEPLOYMENTS.resource_id].get((namespace, str(owner.get("name"))))
            if deployment is not None and _meta(deployment.obj).get("uid") == owner.get("uid"):
                controller = deployment.obj
        replicas = (controller.get("spec") or {}).get("replicas")
        return str(_meta(controller).get("uid")), 1 if replicas is None else int(replicas)

    def _record_violations(self, pod: Obj, budgets: list[tuple[Obj, policy.BudgetStatus]], via: str) -> None:
        meta = _meta(pod)
        namespace = meta.get("namespace") or ""
        pods = [e.obj for e in self._entries(_PODS.resource_id, namespace)]
        for pdb, before in budgets:
            after = policy.budget_status(pdb, pods, self._scale_of)
            if (
                before.current_healthy >= before.desired_healthy
                and after.current_healthy < after.desired_healthy
            ) and self._undo is None:
                self.audit.record_violation(
                    BudgetViolation(
                        namespace=namespace,
                        budget=_meta(pdb)["name"],
                        pod=meta["name"],
                        via=via,
                        at=self.clock.now(),
                        healthy_before=before.current_healthy,
                        healthy_after=after.current_healthy,
                        desired_healthy=after.desired_healthy,
                    )
                )

    # --- pods/binding and pods/eviction -----------------------------------------------------------------

    def bind(self, namespace: str, pod_name: str | None, binding: Any) -> Obj:
        if not isinstance(binding, dict):
            raise bad_request("the body of the request must be a Binding object")
        meta = binding.get("metadata") or {}
        name = pod_name or meta.get("name")
        if not name:
            raise bad_request("the name of the pod to bind must be set")
        if pod_name and meta.get("name") and meta["name"] != pod_name:
            raise bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({pod_name})"
            )
        target = binding.get("target") or {}
        node = target.get("name")
        if not node:
            raise invalid("Binding", "", name, "target.name", "Required value")
        if target.get("kind") not in (None, "", "Node"):
            raise invalid(
                "Binding",
                "",
                name,
                "target.kind",
                f'Invalid value: "{target["kind"]}": must be empty or "Node"',
            )
        with self.lock:
            entry = self._lookup(_PODS, namespace, name)
            pod = entry.obj
            pod_meta = _meta(pod)
            if meta.get("uid") and meta["uid"] != pod_meta.get("uid"):
                raise conflict("pods", "", name, "Precondition failed: UID in precondition does not match")
            if pod_meta.get("deletionTimestamp"):
                raise conflict("pods", "", name, f"pod {name} is being deleted, cannot be assigned to a host")
            bound = (pod.get("spec") or {}).get("nodeName")
            if bound:
                raise conflict("pods", "", name, f'pod {name} is already assigned to node "{bound}"')
            status = dict(pod.get("status") or {})
            status["conditions"] = _set_condition(
                status.get("conditions"),
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": self._now(),
                },
            )
            new = {**pod, "spec": {**(pod.get("spec") or {}), "nodeName": node}, "status": status}
            if meta.get("annotations"):
                new = _with_meta(
                    new, annotations={**(pod_meta.get("annotations") or {}), **meta["annotations"]}
                )
            else:
                new = _with_meta(new)
            self._commit(_PODS, "MODIFIED", (namespace, name), new, entry)
        return {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {**meta, "name": name, "namespace": namespace},
            "target": target,
        }

    def evict(self, namespace: str, pod_name: str, eviction: Any) -> Obj:
        if not isinstance(eviction, dict):
            raise bad_request("the body of the request must be an Eviction object")
        if (eviction.get("metadata") or {}).get("name") not in (None, "", pod_name):
            raise bad_request("name in URL does not match name in Eviction object")
        options = eviction.get("deleteOptions") or {}
        with self.lock:
            entry = self._lookup(_PODS, namespace, pod_name)
            _check_preconditions(_PODS, entry.obj, options)
            budgets = [e.obj for e in self._entries(_PDBS.resource_id, namespace)]
            pods = [e.obj for e in self._entries(_PODS.resource_id, namespace)]
            verdict = policy.decide_eviction(entry.obj, budgets, pods, self._scale_of)
            if self._undo is None:
                self.audit.record_eviction(
                    EvictionRecord(
                        namespace=namespace,
                        pod=pod_name,
                        allowed=verdict.allowed,
                        code=201 if verdict.error is None else verdict.error.code,
                        at=self.clock.now(),
                        budget=verdict.budget,
                        node=(entry.obj.get("spec") or {}).get("nodeName"),
                        owner=_controller_uid(entry.obj),
                    )
                )
            if verdict.error is not None:
                raise verdict.error
            pod = entry.obj
            status = dict(pod.get("status") or {})
            status["conditions"] = _set_condition(
                status.get("conditions"),
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "EvictionByEvictionAPI",
                    "message": "Eviction API: evicting",
                    "lastTransitionTime": self._now(),
                },
            )
            budgets_before = self._budgets_before_losing(pod)
            marked = self._commit(
                _PODS, "MODIFIED", (namespace, pod_name), {**_with_meta(pod), "status": status}, entry
            )
            self._delete_strategy(_PODS, marked, options)
            if budgets_before:
                self._record_violations(pod, budgets_before, "eviction")
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    # --- /scale -----------------------------------------------------------------------------------------

    def get_scale(self, kind: Kind, namespace: str, name: str) -> Obj:
        with self.lock:
            return _scale_of(self._lookup(kind, namespace, name).obj)

    def update_scale(self, kind: Kind, namespace: str, name: str, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise bad_request("the body of the request must be a Scale object")
        with self.lock:
            entry = self._lookup(kind, namespace, name)
            return self._set_replicas(kind, entry, body)

    def patch_scale(self, kind: Kind, namespace: str, name: str, content_type: str, raw: bytes) -> Obj:
        media = content_type.split(";", maxsplit=1)[0].strip().lower()
        body = _decode_patch(media, raw, None)
        with self.lock:
            entry = self._lookup(kind, namespace, name)
            scale = _scale_of(entry.obj)
            return self._set_replicas(kind, entry, _apply_patch(kind, media, scale, body))

    def _set_replicas(self, kind: Kind, entry: Entry, scale: Obj) -> Obj:
        meta = _meta(entry.obj)
        rv = _meta(scale).get("resourceVersion")
        if rv and rv != meta.get("resourceVersion"):
            raise conflict(kind.plural, kind.group, meta["name"], STALE_OBJECT)
        replicas = (scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise invalid(
                "Scale",
                "autoscaling",
                meta["name"],
                "spec.replicas",
                f"Invalid value: {replicas!r}: must be greater than or equal to 0",
            )
        new = {**entry.obj, "spec": {**(entry.obj.get("spec") or {}), "replicas": replicas}}
        self._replace(kind, entry, new, None)
        return _scale_of(self._objects[kind.resource_id][(meta.get("namespace") or "", meta["name"])].obj)

    # --- watch ------------------------------------------------------------------------------------------

    def watch_start(self, query: Query, resource_version: str | None) -> tuple[list[tuple[str, Result]], int]:
        """The events a new watch sends first, and the cursor it continues from."""
        with self.lock:
            if resource_version in (None, "", "0"):
                initial = [
                    ("ADDED", self._present(query.kind, e))
                    for e in self._entries(query.kind.resource_id, query.namespace)
                    if query.admits(e.obj)
                ]
                return initial, self._rv
            cursor = _int_param(resource_version, "resourceVersion")
            assert cursor is not None
            self._check_window(query.kind.resource_id, cursor)
            return [], cursor

    def _check_window(self, resource_id: str, cursor: int) -> None:
        floor = self._history_floor[resource_id]
        if cursor < floor:
            # kube-apiserver's words, which clients (client-go's reflector) match to relist.
            raise gone(f"too old resource version: {cursor} ({floor + 1})")

    def watch_next(
        self, query: Query, cursor: int, wait: float, pokes: int | None = None
    ) -> tuple[list[tuple[str, Result]], int]:
        """Events after ``cursor`` that the query sees, waiting up to ``wait`` seconds for the first, or
        for a :meth:`poke` after ``pokes`` (the count the caller last looked at the clock at)."""
        with self.lock:
            if self._rv <= cursor and not self.closed and (pokes is None or pokes == self.pokes):
                self.changed.wait(wait)
            resource_id = query.kind.resource_id
            self._check_window(resource_id, cursor)
            history = self._history[resource_id]
            start = bisect.bisect_right(history, cursor, key=lambda ev: ev.rv)
            out: list[tuple[str, Result]] = []
            for event in history[start:]:
                if query.namespace is not None and event.namespace != query.namespace:
                    continue
                now_in = query.admits(event.entry.obj)
                if event.type == "MODIFIED" and event.previous is not None:
                    was_in = query.admits(event.previous.obj)
                    if now_in and not was_in:
                        out.append(("ADDED", self._present(query.kind, event.entry)))
                    elif was_in and not now_in:
                        out.append(("DELETED", self._present(query.kind, event.entry)))
                    elif now_in:
                        out.append(("MODIFIED", self._present(query.kind, event.entry)))
                elif now_in:
                    out.append((event.type, self._present(query.kind, event.entry)))
            return out, self._rv


# --- strategy helpers -------------------------------------------------------------------------------------


def _name_error(rule: str, name: str) -> str | None:
    if rule == "path":
        if name in (".", "..") or "/" in name or "%" in name:
            return "may not be '.' or '..' and may not contain '/' or '%'"
        return None if name else "name must be set"
    if rule == "label":
        if len(name) > 63 or not _is_dns_label(name):
            return (
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
                "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
                "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            )
        return None
    if len(name) > 253 or not all(_is_dns_label(part) for part in name.split(".")):
        return (
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
            "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
            "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        )
    return None


def _is_dns_label(part: str) -> bool:
    return (
        0 < len(part) <= 63
        and part[0].isalnum()
        and part[-1].isalnum()
        and all(c.islower() or c.isdigit() or c == "-" for c in part)
        and part.isascii()
    )


def _apply_create_defaults(kind: Kind, obj: Obj, now: datetime) -> None:
    meta = obj["metadata"]
    if kind is _PODS:
        spec = obj.setdefault("spec", {})
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        if "priority" not in spec:
            priority = _BUILTIN_PRIORITIES.get(spec.get("priorityClassName") or "")
            if priority is not None or not spec.get("priorityClassName"):
                spec["priority"] = priority or 0
        status = dict(obj.get("status") or {})
        status.setdefault("phase", "Pending")
        obj["status"] = status
    elif kind is _NAMESPACES:
        meta["labels"] = {**(meta.get("labels") or {}), "kubernetes.io/metadata.name": meta["name"]}
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj.setdefault("status", {"phase": "Active"})
    elif kind.group == "apps" and kind.plural in ("deployments", "replicasets", "statefulsets"):
        spec = obj.setdefault("spec", {})
        spec.setdefault("replicas", 1)
    elif kind.resource_id == _CORE_EVENTS.resource_id:
        if kind.group:  # events.k8s.io requires eventTime
            obj.setdefault("eventTime", _micro_time(now))
        elif not obj.get("eventTime") and not obj.get("firstTimestamp"):
            obj["firstTimestamp"] = to_rfc3339(now)
        if obj.get("firstTimestamp") and not obj.get("lastTimestamp"):
            obj["lastTimestamp"] = obj["firstTimestamp"]
        if not kind.group and not obj.get("series"):
            obj.setdefault("count", 1)


def _pod_grace(pod: Obj, requested: int | None) -> int:
    spec = pod.get("spec") or {}
    grace = requested if requested is not None else spec.get("terminationGracePeriodSeconds")
    grace = 30 if grace is None else int(grace)
    if not spec.get("nodeName") or policy.is_terminal(pod):
        return 0
    return 1 if grace < 0 else grace


def _check_preconditions(kind: Kind, obj: Obj, options: Obj) -> None:
    pre = options.get("preconditions") or {}
    meta = _meta(obj)
    if pre.get("uid") and pre["uid"] != meta.get("uid"):
        raise conflict(
            kind.plural,
            kind.group,
            meta["name"],
            f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {meta.get('uid')}",
        )
    if pre.get("resourceVersion") and pre["resourceVersion"] != meta.get("resourceVersion"):
        raise conflict(
            kind.plural,
            kind.group,
            meta["name"],
            f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
            f"ResourceVersion in object meta: {meta.get('resourceVersion')}",
        )


def _set_condition(conditions: Any, condition: Obj) -> list[Obj]:
    """Replace the condition of the same type (keeping its transition time when the status holds)."""
    out: list[Obj] = []
    placed = False
    for existing in conditions or ():
        if isinstance(existing, dict) and existing.get("type") == condition["type"]:
            merged = {**existing, **condition}
            if existing.get("status") == condition.get("status") and existing.get("lastTransitionTime"):
                merged["lastTransitionTime"] = existing["lastTransitionTime"]
            out.append(merged)
            placed = True
        else:
            out.append(existing)
    if not placed:
        out.append(condition)
    return out


_POD_MUTABLE_MESSAGE = (
    "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to "
    "existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
    "previously negative)"
)


def _validate_pod_update(old: Obj, new: Obj, name: str) -> None:
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    if old_spec == new_spec:
        return
    old_tolerations = old_spec.get("tolerations") or []
    new_tolerations = new_spec.get("tolerations") or []
    if any(t not in new_tolerations for t in old_tolerations):
        raise invalid(
            "Pod",
            "",
            name,
            "spec.tolerations",
            "Forbidden: existing toleration can not be modified except its tolerationSeconds",
        )
    old_gates = old_spec.get("schedulingGates") or []
    if any(g not in old_gates for g in new_spec.get("schedulingGates") or []):
        raise invalid(
            "Pod",
            "",
            name,
            "spec.schedulingGates",
            "Forbidden: only deletion is allowed, but found new scheduling gate",
        )
    if _pod_spec_fixed_part(old_spec) != _pod_spec_fixed_part(new_spec):
        raise invalid("Pod", "", name, "spec", _POD_MUTABLE_MESSAGE)


def _pod_spec_fixed_part(spec: Obj) -> Obj:
    fixed = {
        k: v for k, v in spec.items() if k not in ("activeDeadlineSeconds", "tolerations", "schedulingGates")
    }
    for field in ("containers", "initContainers"):
        if isinstance(fixed.get(field), list):
            fixed[field] = [
                {k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c
                for c in fixed[field]
            ]
    return fixed


def _decode_patch(media: str, raw: bytes, field_manager: str | None) -> Any:
    if media not in (MERGE_PATCH, JSON_PATCH, STRATEGIC_PATCH, APPLY_PATCH):
        raise unsupported_media_type(media)
    if media == APPLY_PATCH:
        if not field_manager:
            raise bad_request("PATCH, application/apply-patch+yaml requires fieldManager to be set")
        import yaml

        try:
            return yaml.safe_load(raw.decode("utf-8"))
        except yaml.YAMLError as err:
            raise bad_request(f"error decoding YAML: {err}") from err
    try:
        return codec.loads(raw)
    except ValueError as err:
        raise bad_request(f"error decoding patch: {err}") from err


def _apply_patch(kind: Kind, media: str, current: Obj, body: Any) -> Obj:
    if media == JSON_PATCH:
        return patch.json_patch(current, body)
    if not isinstance(body, dict):
        raise bad_request("the patch must be a JSON object")
    if media == MERGE_PATCH or (media == APPLY_PATCH and kind.custom):
        result = patch.merge_patch(current, body)
        return result if isinstance(result, dict) else {}
    if kind.custom:  # upstream serves no strategic merge for custom resources
        raise unsupported_media_type(media)
    return patch.strategic_merge_patch(current, body)


def _scale_of(obj: Obj) -> Obj:
    meta = _meta(obj)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {
            k: meta[k]
            for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
            if k in meta
        },
        "spec": {"replicas": spec.get("replicas", 0)},
        "status": {
            "replicas": status.get("replicas", 0),
            "selector": _selector_string(spec.get("selector") or {}),
        },
    }


def _selector_string(selector: Obj) -> str:
    terms = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or ():
        op, key, values = expr.get("operator"), expr.get("key"), ",".join(expr.get("values") or ())
        terms.append(
            {
                "In": f"{key} in ({values})",
                "NotIn": f"{key} notin ({values})",
                "Exists": f"{key}",
                "DoesNotExist": f"!{key}",
            }.get(str(op), "")
        )
    return ",".join(t for t in terms if t)


def _controller_ref(obj: Mapping[str, Any]) -> Obj | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def _controller_uid(obj: Obj) -> str | None:
    ref = _controller_ref(obj)
    return str(ref["uid"]) if ref and ref.get("uid") else None

"""Writing the NodeClaim objects that mirror the records (see ``lifecycle.nodeclaim_objects``).

One LIST a pass, then only the writes that differ: a pass over an unchanged cluster writes nothing.
Each write that the API server refuses (a 403 from a ClusterRole without the verb, a 409, a 5xx) is
logged with its status and reported in :class:`SyncResult.errors`; it never stops the pass, and the next
pass tries again. The records stay the truth: nothing here changes one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from serverless_karpenter.adapters.kubernetes import KubernetesError
from serverless_karpenter.api import labels as wk
from serverless_karpenter.clock import Clock
from serverless_karpenter.lifecycle.model import NodeClaimRecord, NodeClaimState
from serverless_karpenter.lifecycle.nodeclaim_objects import TypeLabels, merged_conditions, render
from serverless_karpenter.observability import logger

if TYPE_CHECKING:
    from serverless_karpenter.provisioning.context import KubernetesApi

JSON = dict[str, Any]
# The status fields we own; anything else in the object's status is left as it is.
_STATUS_FIELDS = ("providerID", "nodeName", "imageID", "capacity", "allocatable", "conditions")


@dataclass
class SyncResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)  # deletion requested: the record is being deleted
    released: list[str] = field(default_factory=list)  # finalizer removed: the record is Terminated
    # Deleted in the cluster (kubectl delete nodeclaim) while the record is live: the caller terminates it.
    deleted_by_user: list[str] = field(default_factory=list)
    # Objects with no record at all (Karpenter's, a user's, a leftover): adoption's to reconcile.
    without_record: list[JSON] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _deleting(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def _changed(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``desired`` that ``current`` lacks or holds otherwise (others' keys are kept)."""
    return {k: v for k, v in desired.items() if current.get(k) != v}


class NodeClaimObjects:
    def __init__(self, kube: KubernetesApi, clock: Clock) -> None:
        self.kube = kube
        self.clock = clock
        self._loaded = False  # whether this writer has listed the objects (at most once)

    def _failed(self, result: SyncResult | None, name: str, doing: str, error: KubernetesError) -> None:
        logger.warning(
            f"could not {doing} nodeclaim",
            extra={"nodeclaim": name, "status": error.status, "error": str(error)},
        )
        if result is not None:
            result.errors.append(f"{doing} nodeclaim {name}: {error}")

    def sync(
        self,
        records: Iterable[NodeClaimRecord],
        *,
        record_of: Callable[[str], NodeClaimRecord | None],
        nodepool_uids: Mapping[str, str] | None = None,
        type_labels: TypeLabels | None = None,
        drift: Mapping[str, str] | None = None,
        consolidatable_since: Mapping[str, datetime] | None = None,
        listed: list[dict[str, Any]] | None = None,
    ) -> SyncResult:
        """Converge the objects of the live ``records`` (a Pending record has none yet) and release those
        whose record is Terminated; ``record_of`` reads a record that is not live (a Terminated one).
        ``listed``: the NodeClaims, when the pass has listed them already (one LIST a pass)."""
        result = SyncResult()
        try:
            found = self.kube.list_nodeclaims() if listed is None else listed
        except KubernetesError as error:
            self._failed(result, "*", "list", error)
            return result
        objects = {o["metadata"]["name"]: o for o in found}
        _remember(objects.values(), replace=True)  # the whole set: claims gone are forgotten
        self._loaded = True
        live = {r.name: r for r in records}
        for name, record in live.items():
            if record.state == NodeClaimState.PENDING or not record.instance_id:
                continue
            desired = render(
                record,
                nodepool_uid=(nodepool_uids or {}).get(record.nodepool),
                type_labels=type_labels(record) if type_labels is not None else None,
                drift=(drift or {}).get(name),
                consolidatable_since=(consolidatable_since or {}).get(name),
                observed_at=self.clock.now(),
            )
            current = objects.get(name)
            if current is None:
                if not record.is_deleting:
                    self._create(desired, result)
                continue
            self._converge(record, current, desired, result)
        for name, current in objects.items():
            if name in live:
                continue
            closed = record_of(name)
            if closed is None:
                result.without_record.append(current)
            elif closed.state == NodeClaimState.TERMINATED and self.release(name, current, result):
                result.released.append(name)
        return result

    def create(self, record: NodeClaimRecord) -> bool:
        """Create the object of a claim just launched, so `kubectl get nodeclaims` shows it at once; the
        next lifecycle pass adds what this pass did not read (owner reference, the type's labels). An API
        failure is logged, never raised: the launch stands, and the next pass creates the object."""
        result = SyncResult()
        self._create(render(record), result)
        return bool(result.created)

    def _create(self, desired: JSON, result: SyncResult) -> None:
        name = desired["metadata"]["name"]
        body = {k: v for k, v in desired.items() if k != "status"}
        try:
            created = self.kube.create_nodeclaim(body)
        except KubernetesError as error:
            if error.status != 409:  # created meanwhile: the next pass converges it
                self._failed(result, name, "create", error)
            return
        result.created.append(name)
        self._write_status(created, desired, result)

    def _write_status(self, current: Mapping[str, Any], desired: JSON, result: SyncResult) -> bool:
        name = desired["metadata"]["name"]
        status = current.get("status") or {}
        wanted = {
            **desired["status"],
            "conditions": merged_conditions(
                status.get("conditions") or [], desired["status"]["conditions"], self.clock.now()
            ),
        }
        if all(status.get(k) == wanted.get(k) for k in _STATUS_FIELDS):
            return False
        try:
            self.kube.patch_nodeclaim_status(name, {"status": wanted})
        except KubernetesError as error:
            self._failed(result, name, "write the status of", error)
            return False
        return True

    def _converge(self, record: NodeClaimRecord, current: JSON, desired: JSON, result: SyncResult) -> None:
        name = record.name
        meta = current.get("metadata") or {}
        wanted = desired["metadata"]
        patch: JSON = {}
        labels = _changed(meta.get("labels") or {}, wanted["labels"])
        if labels:
            patch["labels"] = labels
        annotations = _changed(meta.get("annotations") or {}, wanted["annotations"])
        if annotations:
            patch["annotations"] = annotations
        finalizers = list(meta.get("finalizers") or [])
        # No finalizer may be added to an object being deleted (the API server refuses it).
        if wk.TERMINATION_FINALIZER not in finalizers and not _deleting(current):
            patch["finalizers"] = [*finalizers, wk.TERMINATION_FINALIZER]
        if not meta.get("ownerReferences") and wanted.get("ownerReferences"):
            patch["ownerReferences"] = wanted["ownerReferences"]
        changed = False
        if patch:
            try:
                # As of the version read: a concurrent writer's finalizers are never overwritten.
                self.kube.patch_nodeclaim(
                    name, {"metadata": {**patch, "resourceVersion": meta.get("resourceVersion")}}
                )
                changed = True
            except KubernetesError as error:
                if error.status != 409:
                    self._failed(result, name, "update", error)
        changed = self._write_status(current, desired, result) or changed
        if changed:
            result.updated.append(name)
        if _deleting(current) and not record.is_deleting:
            result.deleted_by_user.append(name)
        elif record.is_deleting and not _deleting(current):
            # Our flow terminates it: the object shows it (Terminating) until the instance is gone.
            try:
                self.kube.delete_nodeclaim(name)
                result.deleted.append(name)
            except KubernetesError as error:
                self._failed(result, name, "delete", error)

    def release(
        self, name: str, current: Mapping[str, Any] | None = None, result: SyncResult | None = None
    ) -> bool:
        """The claim's instance is gone: delete its object, and remove our finalizer so it goes. Whether
        the object is gone (or was); an API failure is logged and left to the next lifecycle pass."""
        try:
            obj = dict(current) if current is not None else self.kube.get_nodeclaim(name)
            if obj is None:
                return True
            if not _deleting(obj):
                self.kube.delete_nodeclaim(name)
                obj = self.kube.get_nodeclaim(name)
                if obj is None:
                    return True
            finalizers = list((obj.get("metadata") or {}).get("finalizers") or [])
            if wk.TERMINATION_FINALIZER in finalizers:
                index = finalizers.index(wk.TERMINATION_FINALIZER)
                # The test on the value keeps a concurrent change of the list from being undone.
                self.kube.patch_nodeclaim(
                    name,
                    [
                        {
                            "op": "test",
                            "path": f"/metadata/finalizers/{index}",
                            "value": wk.TERMINATION_FINALIZER,
                        },
                        {"op": "remove", "path": f"/metadata/finalizers/{index}"},
                    ],
                )
        except KubernetesError as error:
            if error.status == 404:
                return True
            self._failed(result, name, "release", error)
            return False
        logger.info("released nodeclaim", extra={"nodeclaim": name})
        return True

    def load(self) -> bool:
        """Read every object (one LIST) and remember their references; whether it could."""
        try:
            _remember(self.kube.list_nodeclaims())
        except KubernetesError as error:
            self._failed(None, "*", "list", error)
            return False
        finally:
            self._loaded = True  # once per writer: a failed read is not retried for each Event
        return True

    def event(
        self,
        name: str,
        reason: str,
        message: str,
        event_type: str = "Normal",
        *,
        dedupe_seconds: float | None = None,
    ) -> None:
        """An Event on the NodeClaim object (kubectl describe nodeclaim finds it by uid); none without the
        object. References come from what this warm Lambda has read; a claim it has not seen costs one
        LIST per writer (a pass), never a read per Event."""
        reference = _REFERENCES.get(name)
        if reference is None and not self._loaded and self.load():
            reference = _REFERENCES.get(name)
        if reference is not None:
            self.kube.record_event(reference, reason, message, event_type, dedupe_seconds=dedupe_seconds)


# The references (apiVersion, kind, name, uid) of the NodeClaims a warm Lambda has read: a claim's uid
# never changes, so a pass that records Events on claims seen before reads nothing. Bounded, as the claims
# of a cluster are.
_REFERENCES: dict[str, JSON] = {}
_MAX_REFERENCES = 20_000


def _remember(objects: Iterable[Mapping[str, Any]], *, replace: bool = False) -> None:
    fresh = {
        o["metadata"]["name"]: {
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": o["metadata"]["name"], "uid": o["metadata"].get("uid")},
        }
        for o in objects
    }
    if replace or len(_REFERENCES) + len(fresh) > _MAX_REFERENCES:
        _REFERENCES.clear()
    _REFERENCES.update(fresh)

"""The last step of a write: preconditions checked again, the object stored, watchers told.

Between ``prepare`` and ``commit`` webhooks may have run (and awaited), so the stored object is
looked up again: an unconditional write that lost a race is retried (``RetryWrite``), one with a
client precondition is a 409. A dry run stops just before the table changes. The controllers a
cluster runs after such writes (namespaces, CRDs) act here at once.
"""

from __future__ import annotations

from datetime import timedelta

from vgpu_guard.apidouble import _status as st
from vgpu_guard.apidouble._binding import binding_pod_name, bound_pod, check_bindable
from vgpu_guard.apidouble._builtin_admission import BuiltinAdmission
from vgpu_guard.apidouble._complete import Completer
from vgpu_guard.apidouble._controllers import Controllers
from vgpu_guard.apidouble._decoding import CRDS
from vgpu_guard.apidouble._pending import Pending, RetryWrite, check_delete_preconditions
from vgpu_guard.apidouble._pods import graceful_seconds
from vgpu_guard.apidouble._table import ObjectTable
from vgpu_guard.apidouble._types import TypeInfo
from vgpu_guard.apidouble._values import Obj, deep_copy, format_time, meta_of

__all__ = ["Committer"]


class Committer:
    """``commit`` of the store (see the module docstring)."""

    def __init__(
        self, table: ObjectTable, completer: Completer, admission: BuiltinAdmission, controllers: Controllers
    ):
        self._table = table
        self._completer = completer
        self._admission = admission
        self._controllers = controllers

    def commit(self, pending: Pending) -> Obj:
        """Persist (unless dry run) and emit events; returns what the client receives.

        For a bind (pods/binding or bindings) the answer is a Status Success (code 201). Raises
        ``RetryWrite`` when an unconditional write lost a race against another write since
        ``prepare``."""
        self._table.expire_events()
        self._completer.complete(pending)
        info = pending.info
        if pending.binds:
            return self._commit_bind(pending)
        storage = info.schemas.get(info.versions[0])
        if pending.object is not None and storage is not None and pending.version != info.versions[0]:
            storage.prune(pending.object)  # stored in the storage version: its schema prunes
        current = self._table.objects[info.key].get(
            (pending.namespace if info.namespaced else "", pending.name)
        )
        if pending.operation == "CREATE":
            return self._commit_create(pending, current)
        if current is None:
            raise st.not_found(info.group, info.plural, pending.name)
        assert pending.old is not None
        if current["metadata"]["resourceVersion"] != pending.old["metadata"]["resourceVersion"]:
            if pending.retryable:
                raise RetryWrite(pending.name)
            raise st.conflict(info.group, info.plural, pending.name, st.STALE)
        if pending.operation == "DELETE":
            return self._commit_delete(pending, current)
        return self._commit_update(pending, current)

    def _commit_create(self, pending: Pending, current: Obj | None) -> Obj:
        info, obj, table = pending.info, pending.object, self._table
        assert obj is not None
        if current is not None:
            raise st.already_exists(info.group, info.plural, pending.name)
        if info.namespaced:
            self._admission.namespace_lifecycle(pending.namespace, info, pending.name)
        meta = meta_of(obj)  # uid and creationTimestamp: set by complete() (_prepare_for_create)
        if info.crd_name is not None or info.key == CRDS:
            meta["generation"] = 1  # custom resources and CRDs count spec changes
        if pending.dry_run:
            meta.pop("resourceVersion", None)  # nothing was stored: no version to show
            return table.present(info, obj, pending.version)
        meta["resourceVersion"] = table.next_rv()
        table.objects[info.key][(pending.namespace if info.namespaced else "", pending.name)] = obj
        table.emit(info, "ADDED", obj, None)
        if info.key == CRDS:
            self._controllers.crd_changed(obj, pending.warnings)
        elif info.key == ("", "namespaces"):
            self._controllers.namespace_created(pending.name)
        return table.present(info, obj, pending.version)

    def _commit_update(self, pending: Pending, current: Obj) -> Obj:
        info, obj, table = pending.info, pending.object, self._table
        assert obj is not None
        meta = meta_of(obj)
        meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        if _without_rv(obj) == _without_rv(current):
            return table.present(info, current, pending.version)  # a no-op write changes nothing
        if "generation" in current["metadata"] and _spec_of(obj) != _spec_of(current):
            meta["generation"] = int(current["metadata"]["generation"]) + 1
        if meta.get("deletionTimestamp") and not meta.get("finalizers") and _deletable(info, obj):
            if pending.dry_run:
                return table.present(info, obj, pending.version)
            return self._remove(info, obj, current)
        if pending.dry_run:
            return table.present(info, obj, pending.version)
        table.put(info, "MODIFIED", obj, current)
        if info.key == CRDS:
            self._controllers.crd_changed(obj, pending.warnings)
        return table.present(info, obj, pending.version)

    def _commit_delete(self, pending: Pending, current: Obj) -> Obj:
        info, table = pending.info, self._table
        check_delete_preconditions(info, current, pending.precondition_uid, pending.precondition_rv)
        meta = current["metadata"]
        grace = graceful_seconds(current, pending.grace_period_seconds) if info.key == ("", "pods") else 0
        if grace == 0 and not meta.get("finalizers"):
            final = current
            if info.key == ("", "pods"):
                # BeforeDelete still records the (zero) grace period on the object it deletes.
                final = deep_copy(current)
                meta_of(final).setdefault("deletionTimestamp", format_time(table.clock()))
                meta_of(final)["deletionGracePeriodSeconds"] = 0
            if pending.dry_run:
                return table.present(info, final, pending.version)
            return self._remove(info, final, current)
        # The object stays, Terminating: a bound pod's grace period, or finalizers to be removed.
        old_grace = meta.get("deletionGracePeriodSeconds")
        if meta.get("deletionTimestamp") and old_grace is not None and grace >= old_grace:
            return table.present(info, current, pending.version)  # only shortening changes anything
        obj = deep_copy(current)
        meta_of(obj)["deletionTimestamp"] = format_time(table.clock() + timedelta(seconds=grace))
        meta_of(obj)["deletionGracePeriodSeconds"] = grace
        if "generation" in meta:
            meta_of(obj)["generation"] = int(meta["generation"]) + 1
        if pending.dry_run:
            return table.present(info, obj, pending.version)
        table.put(info, "MODIFIED", obj, current)
        return table.present(info, obj, pending.version)

    def _remove(self, info: TypeInfo, final: Obj, current: Obj) -> Obj:
        """Delete from the table; a namespace takes its objects with it, a CRD its type."""
        gone = self._table.remove(info, final, current)
        if info.key == ("", "namespaces"):
            self._controllers.empty_namespace(gone["metadata"]["name"])
        elif info.key == CRDS:
            self._controllers.crd_deleted(gone)
        return self._table.present(info, gone, info.versions[0])

    def _commit_bind(self, pending: Pending) -> Obj:
        """A bind through either door: the pod gets its node, the Binding's annotations and a
        PodScheduled condition; the answer is a 201 Status (``_binding``)."""
        table = self._table
        current = table.objects[("", "pods")].get((pending.namespace, binding_pod_name(pending)))
        check_bindable(pending, current)
        if pending.dry_run:
            return st.success(201)
        assert current is not None and pending.object is not None
        table.put(
            pending.info, "MODIFIED", bound_pod(current, pending.object, format_time(table.clock())), current
        )
        return st.success(201)


def _without_rv(obj: Obj) -> Obj:
    out = dict(obj)
    out["metadata"] = {
        k: v for k, v in obj["metadata"].items() if k not in ("resourceVersion", "managedFields")
    }
    return out


def _spec_of(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _deletable(info: TypeInfo, obj: Obj) -> bool:
    """A Terminating object whose last finalizer went: gone now, unless a pod still has grace."""
    if info.key != ("", "pods"):
        return True
    return not meta_of(obj).get("deletionGracePeriodSeconds")

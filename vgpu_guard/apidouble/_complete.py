"""The middle step of a write, after mutating admission: what the registry does before storing.

Mutating webhooks may have changed anything, so the object is decoded again (prune, defaults);
then rest.BeforeCreate/BeforeUpdate (name generation, uid and creationTimestamp, the status
strategies, the finalizer rule of a Terminating object) and validation, so validating webhooks
see the object as it will be stored.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from vgpu_guard.apidouble import _status as st
from vgpu_guard.apidouble._binding import check_binding
from vgpu_guard.apidouble._decoding import CRDS, redecode
from vgpu_guard.apidouble._gotext import go_string_slice
from vgpu_guard.apidouble._pending import Pending
from vgpu_guard.apidouble._pods import QuantityError, initial_status, validate_pod, validate_pod_update
from vgpu_guard.apidouble._selectors import (
    LabelSelector,
    SelectorError,
    dns1123_label_errors,
    dns1123_subdomain_errors,
)
from vgpu_guard.apidouble._status import Cause, field_error
from vgpu_guard.apidouble._table import ObjectTable
from vgpu_guard.apidouble._types import TypeInfo, crd_problems
from vgpu_guard.apidouble._values import Obj, deep_copy, format_time, meta_of
from vgpu_guard.apidouble._webhooks import default_and_validate

__all__ = ["Completer"]

_Causes = list[Cause]


class Completer:
    """``complete`` of the store: a ``Pending`` write made ready to store, or ``Invalid``."""

    def __init__(self, table: ObjectTable):
        self._table = table

    def complete(self, pending: Pending) -> None:
        """Name generation, PrepareForCreate/Update and validation (raises ``Invalid``)."""
        if pending.completed:
            return
        info, obj = pending.info, pending.object
        if pending.operation == "DELETE" or obj is None:
            pending.completed = True
            return
        if pending.binds:
            check_binding(pending)
            pending.completed = True
            return
        # Mutating webhooks may have changed anything: decode again (prune + default).
        obj = pending.object = redecode(info, pending.version, obj)
        meta = meta_of(obj)
        if pending.operation == "CREATE":
            self._prepare_for_create(pending, obj)
        else:
            assert pending.old is not None
            old_stored = self._table.stored(info, pending.namespace, pending.name)
            _prepare_for_update(pending, obj, old_stored)
        causes = self._problems(pending, obj)
        if causes:
            raise st.invalid(
                info.group, info.kind, str(meta.get("name") or meta.get("generateName") or ""), causes
            )
        pending.name = meta["name"]
        pending.completed = True

    def _problems(self, pending: Pending, obj: Obj) -> _Causes:
        """Every validation failure of ``obj``: metadata, then its kind's rules, then its schema."""
        info = pending.info
        causes = _validate_meta(info, obj)
        if info.key == ("", "pods"):
            try:
                causes += validate_pod(obj)
                if pending.operation == "UPDATE" and pending.old is not None:
                    causes += validate_pod_update(pending.old, obj)
            except QuantityError as e:
                raise st.bad_request(str(e)) from e
        if info.group == "admissionregistration.k8s.io":
            causes += default_and_validate(obj, mutating=info.plural.startswith("mutating"))
        if info.key == CRDS:
            causes += crd_problems(obj)
            spec = obj.get("spec") or {}
            group, plural = spec.get("group"), (spec.get("names") or {}).get("plural")
            existing = self._table.types.get((str(group), str(plural)))
            if existing is not None and existing.crd_name is None:
                why = f'"{group}": conflicts with a built-in resource'
                causes.append(field_error("Invalid", "spec.group", why))
        schema = info.schemas.get(pending.version)
        if schema is not None:
            causes += schema.validate(self._table.present(info, obj, pending.version))
        return causes

    def _prepare_for_create(self, pending: Pending, obj: Obj) -> None:
        info, meta = pending.info, meta_of(obj)
        if not meta.get("name"):
            prefix = meta.get("generateName")
            if not prefix:
                why = "name or generateName is required"
                raise st.invalid(info.group, info.kind, "", [field_error("Required", "metadata.name", why)])
            # names.SimpleNameGenerator: at most 58 characters of the prefix, then 5 random ones.
            meta["name"] = str(prefix)[:58] + self._table.random_name(5)
        # rest.BeforeCreate (FillObjectMetaSystemFields): validating webhooks already see these.
        meta["uid"] = str(uuid.UUID(int=self._table.random_bits(128), version=4))
        meta["creationTimestamp"] = format_time(self._table.clock())
        if info.key == ("", "pods"):
            obj["status"] = initial_status(obj)
        elif info.status_on_create == "drop":
            obj.pop("status", None)
        if info.key == ("", "namespaces"):
            obj.setdefault("spec", {})["finalizers"] = ["kubernetes"]
            obj["status"] = {"phase": "Active"}
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]


def _prepare_for_update(pending: Pending, obj: Obj, old: Obj) -> None:
    """The kind's update strategy: what the client may not change comes from ``old``."""
    info, meta = pending.info, meta_of(obj)
    if pending.subresource == "status":
        _status_strategy(info, obj, old)
        meta = meta_of(obj)
    elif info.has_status:
        if "status" in old:
            obj["status"] = deep_copy(old["status"])
        else:
            obj.pop("status", None)
    if info.key == ("", "namespaces"):
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
        obj["spec"] = deep_copy(old.get("spec") or {})
    old_fin = set(old["metadata"].get("finalizers") or [])
    new_fin = set(meta.get("finalizers") or [])
    if old["metadata"].get("deletionTimestamp") and new_fin - old_fin:
        why = "no new finalizers can be added if the object is being deleted, found new finalizers"
        cause = field_error(
            "Forbidden", "metadata.finalizers", f"{why} {go_string_slice(sorted(new_fin - old_fin))}"
        )
        # Reported twice, as the API server does: the common metadata checks of BeforeUpdate
        # and the kind's own ValidateUpdate both run ValidateObjectMetaUpdate.
        raise st.invalid(info.group, info.kind, meta["name"], [cause, cause])


def _status_strategy(info: TypeInfo, obj: Obj, old: Obj) -> None:
    """The status strategies, in place: everything but status comes from the stored object."""
    meta = meta_of(obj)
    new = deep_copy(old)
    if "status" in obj:
        new["status"] = obj["status"]
    else:
        new.pop("status", None)
    if info.key in (("", "pods"), ("", "nodes")):
        # Pod and node status strategies keep only the spec (and a pod's ownerReferences):
        # labels and annotations may change through the status subresource.
        new["metadata"] = meta
        owners = old["metadata"].get("ownerReferences")
        if info.key == ("", "pods"):
            meta.pop("ownerReferences", None)
            if owners is not None:
                meta["ownerReferences"] = owners
    obj.clear()
    obj.update(new)


def _path_segment_errors(name: str) -> list[str]:
    """path.IsValidPathSegmentName: RBAC names are path segments (ValidateRBACName)."""
    if name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in "/%" if c in name]


def _validate_meta(info: TypeInfo, obj: Obj) -> _Causes:
    """ValidateObjectMeta's name, generateName and label checks, in the kind's name rule."""
    meta = meta_of(obj)
    name = str(meta.get("name") or "")
    rule: Callable[[str], list[str]] = dns1123_subdomain_errors
    if info.key in (("", "namespaces"), ("", "serviceaccounts")):
        rule = dns1123_label_errors
    elif info.group == "rbac.authorization.k8s.io":
        rule = _path_segment_errors
    prefix = meta.get("generateName")
    causes: _Causes = []
    if isinstance(prefix, str) and prefix and info.api_key != ("", "events"):  # core/v1 Events skip it
        # The prefix first, a trailing dash masked (maskTrailingDash drops two characters for it).
        masked = prefix[:-2] + "a" if len(prefix) > 1 and prefix.endswith("-") else prefix
        causes += [field_error("Invalid", "metadata.generateName", f'"{prefix}": {e}') for e in rule(masked)]
    causes += [field_error("Invalid", "metadata.name", f'"{name}": {e}') for e in rule(name)]
    for key, value in (meta.get("labels") or {}).items():
        try:
            LabelSelector.parse(f"{key}={value}") if value else LabelSelector.parse(key)
        except SelectorError:
            why = f'"{key}={value}": not a valid label key/value'
            causes.append(field_error("Invalid", "metadata.labels", why))
    return causes

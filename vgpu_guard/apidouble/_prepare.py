"""The first step of every write to the double's store: from a request to a ``Pending`` write.

Decoding, the URL's namespace and name against the body's, the client's preconditions checked
against the stored object, and the built-in admission plugins, all before any webhook runs (the
order kube-apiserver's handlers keep). Nothing here changes the table.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from vgpu_guard.apidouble import _status as st
from vgpu_guard.apidouble._binding import decode_binding
from vgpu_guard.apidouble._builtin_admission import BuiltinAdmission
from vgpu_guard.apidouble._decoding import decode
from vgpu_guard.apidouble._gotext import parse_uint_error
from vgpu_guard.apidouble._jsonpatch import apply_json_patch
from vgpu_guard.apidouble._pending import Pending, check_delete_preconditions, uid_mismatch
from vgpu_guard.apidouble._pods import Undecodable, admit_pod_update, default_toleration_seconds
from vgpu_guard.apidouble._status import Cause
from vgpu_guard.apidouble._table import ObjectTable
from vgpu_guard.apidouble._types import TypeInfo
from vgpu_guard.apidouble._values import Obj, merge_patch, meta_of
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.resources import Resource

__all__ = ["PatchType", "Preparer"]

PatchType = Literal["merge", "json"]
SYSTEM_META = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation")


class Preparer:
    """``Store.prepare``: each verb returns the ``Pending`` write admission will see."""

    def __init__(self, table: ObjectTable, admission: BuiltinAdmission):
        self._table = table
        self._admission = admission

    def create(
        self, resource: Resource, body: Any, *, namespace: str | None = None, dry_run: bool = False
    ) -> Pending:
        info = self._table.type_of(resource)
        obj = decode(info, resource.version, body)
        meta = meta_of(obj)
        ns = ""
        if info.namespaced:
            ns = namespace or meta.get("namespace") or ""
            if not ns:
                raise st.bad_request(f"a namespace is required to create {info.plural}")
            if meta.get("namespace") not in (None, "", ns):
                raise st.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = ns
            self._admission.namespace_lifecycle(ns, info, meta.get("name") or meta.get("generateName") or "")
        else:
            meta.pop("namespace", None)
        if meta.get("resourceVersion"):
            # etcd3 store.Create returns this plain error, which the server renders as a 500.
            raise st.internal("resourceVersion should not be set on objects to be created")
        for key in SYSTEM_META:
            meta.pop(key, None)
        if info.key == ("", "pods"):  # the built-in admission plugins, in the API server's order
            self._admission.service_account(ns, obj)
            self._admission.priority(obj)
            default_toleration_seconds(obj)
        return Pending(
            operation="CREATE",
            info=info,
            version=resource.version,
            namespace=ns,
            name=str(meta.get("name") or ""),
            subresource="",
            object=obj,
            old=None,
            options={"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
            dry_run=dry_run,
            retryable=False,
        )

    def update(
        self,
        resource: Resource,
        body: Any,
        *,
        name: str | None,
        namespace: str | None,
        subresource: str,
        dry_run: bool,
    ) -> Pending:
        """PUT: ``body``'s resourceVersion, when set, is a precondition."""
        info = self._table.type_of(resource)
        check_subresource(info, subresource, "update", name or "")
        obj = decode(info, resource.version, body)
        meta = meta_of(obj)
        name = name or str(meta.get("name") or "")
        if meta.get("name") not in (None, "", name):
            raise st.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})"
            )
        if info.namespaced and meta.get("namespace") not in (None, "", namespace or ""):
            raise st.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        old = self._table.stored(info, namespace, name)
        want = meta.get("resourceVersion") or None
        _check_rv_precondition(info, name, want, old)
        if meta.get("uid") not in (None, "", old["metadata"].get("uid")):
            raise st.conflict(info.group, info.plural, name, uid_mismatch(meta["uid"], old))
        return self._pending_update(
            info, resource.version, old, obj, subresource=subresource, dry_run=dry_run, precondition=want
        )

    def _pending_update(
        self,
        info: TypeInfo,
        version: str,
        old: Obj,
        obj: Obj,
        *,
        subresource: str,
        dry_run: bool,
        precondition: str | None,
    ) -> Pending:
        """The UPDATE of ``old`` to ``obj``: identity and system fields always the stored ones."""
        meta = meta_of(obj)
        old_meta = old["metadata"]
        meta["name"] = old_meta["name"]
        if info.namespaced:
            meta["namespace"] = old_meta["namespace"]
        for key in SYSTEM_META:
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if info.key == ("", "pods") and not subresource:
            admit_pod_update(old, obj)  # built-in admission on update (Priority, DefaultTolerationSeconds)
        return Pending(
            operation="UPDATE",
            info=info,
            version=version,
            namespace=old_meta.get("namespace", ""),
            name=old_meta["name"],
            subresource=subresource,
            object=obj,
            old=self._table.present(info, old, version),
            options={"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"},
            dry_run=dry_run,
            retryable=precondition is None,
            precondition_rv=precondition,
        )

    def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None,
        patch_type: PatchType,
        subresource: str,
        dry_run: bool,
    ) -> Pending:
        """PATCH: applied to the stored object; a resourceVersion the patch sets is a precondition."""
        info = self._table.type_of(resource)
        check_subresource(info, subresource, "patch", name)
        old = self._table.stored(info, namespace, name)
        current = self._table.present(info, old, resource.version)
        patched, explicit_rv = _patched(current, old, patch, patch_type)
        want = meta_of(patched).get("resourceVersion") if explicit_rv else None
        _check_rv_precondition(info, name, want, old)
        obj = _decode_patched(info, resource.version, patched)
        pending = self._pending_update(
            info, resource.version, old, obj, subresource=subresource, dry_run=dry_run, precondition=want
        )
        pending.options = {"kind": "PatchOptions", "apiVersion": "meta.k8s.io/v1"}
        return pending

    def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None,
        grace_period_seconds: int | None,
        uid: str | None,
        resource_version: str | None,
        dry_run: bool,
    ) -> Pending:
        info = self._table.type_of(resource)
        old = self._table.stored(info, namespace, name)
        check_delete_preconditions(info, old, uid, resource_version)
        options: Obj = {"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"}
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        if uid or resource_version:
            options["preconditions"] = {
                k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v
            }
        return Pending(
            operation="DELETE",
            info=info,
            version=resource.version,
            namespace=old["metadata"].get("namespace", ""),
            name=name,
            subresource="",
            object=None,
            old=self._table.present(info, old, resource.version),
            options=options,
            dry_run=dry_run,
            retryable=not (uid or resource_version),
            precondition_rv=resource_version,
            precondition_uid=uid,
            grace_period_seconds=grace_period_seconds,
        )

    def bind(self, namespace: str, name: str | None, binding: Any, *, dry_run: bool = False) -> Pending:
        """POST pods/NAME/binding, or POST bindings when ``name`` is None (the legacy door: the
        Binding names its pod, handlers/create.go takes the name from the object). One bind
        (``_binding``); admission sees resource ``bindings`` or ``pods``/``binding``."""
        info = self._table.types[("", "pods")]
        core_kinds = {t.kind for t in self._table.types.values() if t.group == ""}
        obj = decode_binding(binding, core_kinds)
        meta = meta_of(obj)
        legacy = name is None
        if name is None:
            name = str(meta.get("name") or "")
        meta["namespace"] = namespace  # 1.20 binds in the URL's namespace whatever the body says
        self._admission.namespace_lifecycle(namespace, info, name, plural="bindings" if legacy else "")
        return Pending(
            operation="CREATE",
            info=info,
            version="v1",
            namespace=namespace,
            name=name,
            subresource="" if legacy else "binding",
            object=obj,
            old=None,
            options={"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
            dry_run=dry_run,
            retryable=False,
            precondition_uid=meta.get("uid") or None,
            legacy_binding=legacy,
        )


def check_subresource(info: TypeInfo, subresource: str, verb: str, name: str = "") -> None:
    """Only ``status`` is written through a subresource path here (binding has its own door)."""
    if subresource and subresource not in info.subresources:
        if info.crd_name is not None:  # the CRD handler: an undeclared subresource is NotFound(name)
            raise st.not_found(info.group, info.plural, name)
        raise st.not_served()
    if subresource not in ("", "status"):
        raise st.method_not_supported(info.group, f"{info.plural}/{subresource}", verb)


def _check_rv_precondition(info: TypeInfo, name: str, want: Any, old: Obj) -> None:
    """A resourceVersion the client sent must parse and be the stored one (409 otherwise)."""
    if want and parse_uint_error(str(want)) is not None:
        raise st.internal(str(parse_uint_error(str(want))))  # the etcd3 versioner's plain error
    if want is not None and want != old["metadata"]["resourceVersion"]:
        raise st.conflict(info.group, info.plural, name, st.STALE)


def _patched(current: Obj, old: Obj, patch: Any, patch_type: str) -> tuple[Obj, bool]:
    """``current`` with the patch applied, and whether the patch itself names a resourceVersion
    (then that version is a precondition, as the API server's patcher treats it)."""
    if patch_type == "merge":
        if not isinstance(patch, Mapping):
            raise st.bad_request("a merge patch must be a JSON object")
        patched = merge_patch(current, patch)
        explicit_rv = isinstance(patch.get("metadata"), Mapping) and "resourceVersion" in patch["metadata"]
    elif patch_type == "json":
        patched = apply_json_patch(current, patch)  # evanphx/json-patch's semantics and errors
        explicit_rv = meta_of(patched).get("resourceVersion") != old["metadata"]["resourceVersion"]
    else:
        raise st.unsupported_media_type(f"the patch type {patch_type!r} is not supported by the API double")
    if not isinstance(patched, dict):
        raise st.bad_request("the patched object is not a JSON object")
    return patched, explicit_rv


def _decode_patched(info: TypeInfo, version: str, patched: Obj) -> Obj:
    """Decode the patched object; one that does not decode is patch.go's 422 on the field "patch"."""
    try:
        return decode(info, version, patched)
    except KubeError as e:
        if not isinstance(e.__cause__, Undecodable):
            raise
        text = json.dumps(patched, separators=(",", ":"))
        why = f"patch: Invalid value: {json.dumps(text)}: {e.__cause__.why}"
        cause = Cause("FieldValueInvalid", "patch", why)
        raise st.invalid("", "", "", [cause]) from e

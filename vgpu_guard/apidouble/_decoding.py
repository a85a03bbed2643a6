"""What kube-apiserver's decoder does to a request body before any admission sees it.

Type check, apiVersion and kind against the URL's type (the built-in scheme's and the CRD
handler's own texts), metadata maps normalised as Go's omitempty leaves them, then the storage
shape, the version's structural schema (prune, defaults) and the built-in kinds' SetDefaults.
Mutating webhooks may change anything, so ``redecode`` runs the schema and defaults again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpu_guard.apidouble import _status as st
from vgpu_guard.apidouble._pods import Undecodable, decode_defaults
from vgpu_guard.apidouble._table import to_storage
from vgpu_guard.apidouble._types import TypeInfo, default_crd
from vgpu_guard.apidouble._values import Obj, deep_copy, meta_of

__all__ = ["CRDS", "TYPE_KEYS", "decode", "redecode"]

TYPE_KEYS = ("apiVersion", "kind")
CRDS = ("apiextensions.k8s.io", "customresourcedefinitions")


def decode(info: TypeInfo, version: str, body: Any) -> Obj:
    """The body as the server decodes it into ``info`` at ``version`` (a 400 when it cannot)."""
    if not isinstance(body, Mapping):
        raise st.bad_request(f"the body of the request must be a JSON object, not {type(body).__name__}")
    obj: Obj = deep_copy(dict(body))
    _check_type(info, version, obj)
    obj = {
        "apiVersion": info.api_version(version),
        "kind": info.kind,
        **{k: v for k, v in obj.items() if k not in TYPE_KEYS},
    }
    _normalise_meta(obj)
    if info.key == ("", "configmaps"):
        for key in ("data", "binaryData"):
            if obj.get(key) in ({}, None):
                obj.pop(key, None)
    obj = to_storage(info, obj)
    schema = info.schemas.get(version)
    if schema is not None:
        schema.prune(obj)
        schema.apply_defaults(obj)
    if info.key == CRDS:
        default_crd(obj)
    try:
        decode_defaults(info.key, obj)  # pods and nodes: canonical quantities, SetDefaults
    except Undecodable as e:
        raise st.bad_request(str(e)) from e
    return obj


def _check_type(info: TypeInfo, version: str, obj: Obj) -> None:
    """apiVersion and kind, when sent, must be the URL's: each decoder refuses in its own words."""
    want_av = info.api_version(version)
    if info.crd_name is None and (
        obj.get("apiVersion") not in (None, "", want_av) or obj.get("kind") not in (None, "", info.kind)
    ):
        # The built-in scheme's decoder (transformDecodeError): the body names a kind the
        # scheme does not have in that version.
        sent_kind = str(obj.get("kind") or info.kind)
        sent_av = str(obj.get("apiVersion") or want_av)
        raise st.bad_request(
            f'{sent_kind} in version "{sent_av.rsplit("/", 1)[-1]}" cannot be handled as a {info.kind}: '
            f'no kind "{sent_kind}" is registered for version "{sent_av}" in scheme '
            '"k8s.io/kubernetes/pkg/api/legacyscheme/scheme.go:30"'
        )
    if obj.get("apiVersion") not in (None, "", want_av):
        raise st.bad_request(
            f"the API version in the data ({obj['apiVersion']}) does not match "
            f"the expected API version ({want_av})"
        )
    if obj.get("kind") not in (None, "", info.kind):
        raise st.bad_request(
            f"the kind in the data ({obj['kind']}) does not match the expected kind ({info.kind})"
        )


def _normalise_meta(obj: Obj) -> None:
    """Labels, annotations and finalizers type-checked; empty ones dropped as omitempty does."""
    meta = meta_of(obj)
    for key in ("labels", "annotations"):
        value = meta.get(key)
        if value is None:
            meta.pop(key, None)
        elif not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise st.bad_request(f"metadata.{key} must be a map of string keys to string values")
    if meta.get("finalizers") is not None and not isinstance(meta["finalizers"], list):
        raise st.bad_request("metadata.finalizers must be a list of strings")
    # Go's omitempty: an empty map or list in these fields is not stored (nor shown).
    for key in ("labels", "annotations", "finalizers", "ownerReferences"):
        if meta.get(key) in ({}, []):
            del meta[key]


def redecode(info: TypeInfo, version: str, obj: Obj) -> Obj:
    """Decode again after mutating admission: prune, schema defaults and SetDefaults on a copy."""
    out: Obj = deep_copy(obj)
    schema = info.schemas.get(version)
    if schema is not None:
        schema.prune(out)
        schema.apply_defaults(out)
    try:
        decode_defaults(info.key, out)
    except Undecodable as e:
        raise st.bad_request(str(e)) from e
    return out

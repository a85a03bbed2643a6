"""One bind, two doors: ``POST pods/NAME/binding`` and the legacy ``POST bindings``.

kube-apiserver 1.20 (pkg/registry/core/pod/storage/storage.go) serves both with one
``BindingREST``: ``LegacyBindingREST.Create`` (registered as "bindings" in
pkg/registry/core/rest/storage_core.go) only takes the pod's name from the Binding's
metadata.name and calls ``BindingREST.Create``. What differs is in front of it: the URL carries
no name (handlers/create.go takes the object's), and admission and RBAC name resource
``bindings`` with no subresource instead of ``pods`` / ``binding``. Here is what both doors share,
in the order the server runs it:

- ``decode_binding`` (before admission): the decoder's checks of a Binding body;
- ``check_binding`` (after mutating admission, ``BindingREST.Create``): the URL's name against the
  Binding's, then ``ValidatePodBinding``;
- ``check_bindable`` and ``bound_pod`` (``assignPod`` -> ``setPodHostAndAnnotations``): the pod is
  found by the Binding's name, bound once, not while being deleted, and gets the node, the
  Binding's annotations and a PodScheduled condition.

Probed against 1.20.2 in tests/contract/test_bindings.py and test_pods.py.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from vgpu_guard.apidouble import _status as st
from vgpu_guard.apidouble._pending import Pending, uid_mismatch
from vgpu_guard.apidouble._values import Obj, deep_copy, meta_of

__all__ = ["binding_pod_name", "bound_pod", "check_bindable", "check_binding", "decode_binding"]

_SCHEME = "k8s.io/kubernetes/pkg/api/legacyscheme/scheme.go:30"


def decode_binding(body: Any, core_kinds: Collection[str]) -> Obj:
    """The Binding as the decoder hands it on (a 400 in the decoder's words when it cannot).

    ``core_kinds``: the kinds core/v1 serves; a body naming one of them cannot be converted to a
    Binding, any other kind is not registered at all (the two texts of transformDecodeError)."""
    if not isinstance(body, Mapping):
        raise st.bad_request("the body of the request must be a Binding object")
    obj: Obj = deep_copy(dict(body))
    sent_av, sent_kind = obj.get("apiVersion") or "v1", obj.get("kind") or "Binding"
    if (sent_av, sent_kind) != ("v1", "Binding"):
        why = f'no kind "{sent_kind}" is registered for version "{sent_av}" in scheme "{_SCHEME}"'
        if sent_av == "v1" and sent_kind in core_kinds:
            why = f"converting (v1.{sent_kind}) to (core.Binding): unknown conversion"
        version = str(sent_av).rsplit("/", 1)[-1]
        raise st.bad_request(f'{sent_kind} in version "{version}" cannot be handled as a Binding: {why}')
    obj["apiVersion"], obj["kind"] = "v1", "Binding"
    _check_string_maps(meta_of(obj))
    return obj


def _check_string_maps(meta: Obj) -> None:
    """Labels and annotations decode into map[string]string or not at all (a 400)."""
    for key in ("labels", "annotations"):
        value = meta.get(key)
        if value is not None and (
            not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values())
        ):
            raise st.bad_request(f"metadata.{key} must be a map of string keys to string values")


def check_binding(pending: Pending) -> None:
    """BindingREST.Create's own checks, after mutating admission: the name, then the target."""
    obj = pending.object or {}
    _check_string_maps(meta_of(obj))  # a webhook's patch is decoded into a Binding too
    name = meta_of(obj).get("name") or ""
    if not pending.legacy_binding and name != pending.name:
        # The legacy door has no name in its URL: the Binding's own is the one it binds.
        raise st.bad_request("name in URL does not match name in Binding object")
    target: Obj = obj["target"] if isinstance(obj.get("target"), dict) else {}
    texts = []
    if target.get("kind") not in (None, "", "Node"):
        texts.append(
            f'target.kind: Unsupported value: "{target.get("kind")}": supported values: "Node", "<empty>"'
        )
    if not target.get("name"):
        texts.append("target.name: Required value")
    if texts:
        # ValidatePodBinding's errs.ToAggregate() is a plain error: 500 without a reason.
        raise st.internal(texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]")


def binding_pod_name(pending: Pending) -> str:
    """The pod a Binding binds: its own name (after mutating admission, as LegacyBindingREST reads it)."""
    return str(meta_of(pending.object or {}).get("name") or "")


def check_bindable(pending: Pending, current: Obj | None) -> None:
    """setPodHostAndAnnotations' refusals, in its order; ``current`` is the stored pod or None."""
    name = binding_pod_name(pending)
    if not name:
        raise st.bad_request("Name parameter required.")  # the store's NamespaceKeyFunc
    if current is None:
        raise st.not_found("", "pods", name)
    uid = pending.precondition_uid
    if uid and uid != current["metadata"].get("uid"):
        raise st.conflict("", "pods", name, uid_mismatch(uid, current))
    if current["metadata"].get("deletionTimestamp"):
        # assignPod turns any plain error of the update into a Conflict on pods/binding.
        why = f"pod {name} is being deleted, cannot be assigned to a host"
        raise st.conflict("", "pods/binding", name, why)
    node = (current.get("spec") or {}).get("nodeName")
    if node:
        raise st.conflict("", "pods/binding", name, f'pod {name} is already assigned to node "{node}"')


def bound_pod(current: Obj, binding: Obj, now: str) -> Obj:
    """The pod after the bind: the target node, the Binding's annotations over the pod's, and
    PodScheduled True (podutil.UpdatePodCondition: an existing condition is replaced where it
    stands, keeping its lastTransitionTime only if it was True already)."""
    pod: Obj = deep_copy(current)
    pod.setdefault("spec", {})["nodeName"] = binding["target"]["name"]
    annotations = meta_of(binding).get("annotations") or {}
    if annotations:
        meta_of(pod).setdefault("annotations", {}).update(annotations)
    status = pod.setdefault("status", {})
    scheduled: Obj = {
        "type": "PodScheduled",
        "status": "True",
        "lastProbeTime": None,
        "lastTransitionTime": now,
    }
    conditions = list(status.get("conditions") or [])
    at = next((i for i, c in enumerate(conditions) if c.get("type") == "PodScheduled"), None)
    if at is None:
        conditions.append(scheduled)
    else:
        if conditions[at].get("status") == "True":
            scheduled["lastTransitionTime"] = conditions[at].get("lastTransitionTime")
        conditions[at] = scheduled
    status["conditions"] = conditions
    return pod

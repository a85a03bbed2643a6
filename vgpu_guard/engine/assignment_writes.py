"""Which writes give a pod its GPUs, and what each one gives: the arbiter's inputs, per door.

A GPU assignment reaches a pod through a write an allocation writer makes. Which write commits
it, and what the device plugin will then hand out, is this module's question; whether it fits is
engine/arbiter.py's.

- **A Binding commits.** Both doors bind a pod the same way: ``pods/binding`` (``POST
  pods/NAME/binding``, kube-scheduler's and Volcano's) and the legacy ``bindings`` resource (``POST
  namespaces/NS/bindings``; the Python client's ``create_namespaced_binding``): kube-apiserver
  copies the Binding's annotations onto the stored pod and sets its node in one update
  (pkg/registry/core/pod/storage/storage.go ``BindingREST.Create``, ``LegacyBindingREST.Create``,
  ``setPodHostAndAnnotations``). So what the pod is bound with is the stored pod's annotations
  overlaid with the Binding's: Volcano >= 1.16 carries the assignment on the Binding
  (pkg/scheduler/cache/cache.go ``DefaultBinder.Bind``), Volcano 1.10-1.15 PATCHed it onto the
  pod earlier and binds plainly (pkg/scheduler/api/devices/nvidia/vgpu/device_info.go
  ``GPUDevices.Allocate`` of those tags).
- **A PATCH of an unbound pod proposes.** Volcano 1.10-1.15 writes the assignment during a
  session whose statement may still be discarded (a gang that is not ready), and its ``Release``
  is a no-op: the annotations stay on the Pending pod and Volcano's cache counts nothing for them.
  So such a write is checked (it must fit what the ledger holds now) and reserves nothing.
- **A PATCH of a bound pod changes** what the pod will be handed: its entry is replaced, while
  the device plugin has not handed the devices out yet (``bind-phase`` is not ``success``). Once it
  has, the running containers keep what they were handed at Allocate (the kubelet does not call
  Allocate again, restarts included), so the entry *raises* to hold both, larger per device.

What the device plugin hands out is ``devices-to-allocate`` (volcano-vgpu-device-plugin
pkg/util/util.go ``GetPendingPod`` matches it, pkg/plugin/server.go consumes it container by
container), on the node named by ``vgpu-node``. Volcano writes ``vgpu-ids-new`` and
``devices-to-allocate`` with the same value and ``vgpu-node`` = the node it binds to
(device_info.go). A committed assignment whose two annotations differ, or whose ``vgpu-node`` is
not the Binding's node, would make the ledger hold one thing and the plugin hand out another (or
nothing): it is refused, naming both values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from vgpu_guard.engine.annotations import BIND_PHASE, DEVICES_TO_ALLOCATE, VGPU_IDS, VGPU_NODE
from vgpu_guard.engine.violations import Violation

__all__ = [
    "RULE",
    "Effect",
    "WrittenAssignment",
    "binding_assignment",
    "binding_needs_stored_pod",
    "binding_node",
    "is_binding",
    "update_assignment",
]

RULE = "vgpu-assignment-capacity"

# bind: a Binding (the pod is bound with it: reserved); propose: a PATCH of an unbound pod (checked,
# nothing reserved); change: a PATCH of a bound pod not handed its devices yet (its entry replaced);
# raise: a PATCH of a bound pod whose devices were handed out (its entry holds both).
Effect = Literal["bind", "propose", "change", "raise"]


@dataclass(frozen=True, slots=True)
class WrittenAssignment:
    """A GPU assignment a write gives a pod: the node, the value the plugin will read, and how."""

    node: str
    raw: str
    # The annotation it is read from (the field path of a refusal).
    key: str
    # Where the write comes from, for messages: "Binding" or "pod update".
    via: str
    effect: Effect = "bind"


def is_binding(*, operation: str, resource: str, sub_resource: str) -> bool:
    """A CREATE of a Binding through either door (``pods/binding``, or the ``bindings`` resource)."""
    if operation != "CREATE":
        return False
    return (resource == "pods" and sub_resource == "binding") or (resource == "bindings" and not sub_resource)


def _annotations(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    metadata = obj.get("metadata") if obj is not None else None
    notes = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    return notes if isinstance(notes, Mapping) else {}


def _text(notes: Mapping[str, Any], key: str) -> str | None:
    value = notes.get(key)
    return value if isinstance(value, str) and value.strip() else None


def binding_node(binding: Mapping[str, Any] | None) -> str:
    """The node a Binding binds to (``target.name``; "" when it names none)."""
    target = binding.get("target") if binding is not None else None
    name = target.get("name") if isinstance(target, Mapping) else None
    return name if isinstance(name, str) else ""


def binding_needs_stored_pod(binding: Mapping[str, Any] | None) -> bool:
    """True when what the pod is bound with depends on its stored annotations: the Binding does
    not carry the whole assignment itself (``vgpu-ids-new``, ``devices-to-allocate`` and
    ``vgpu-node``, as Volcano >= 1.16 sends them), e.g. Volcano 1.10-1.15's plain Binding or a
    writer that sends part of it, so the pod must be read as stored, not from a cache."""
    notes = _annotations(binding)
    return any(_text(notes, key) is None for key in (VGPU_IDS, DEVICES_TO_ALLOCATE, VGPU_NODE))


def _quoted(value: str) -> str:
    """An annotation value in a message: quoted, and cut at 80 characters (a forged one may be long)."""
    return repr(value[:80])


def _mismatch(key_path: str, message: str) -> list[Violation]:
    return [Violation(RULE, key_path, message)]


def _pair_violations(notes: Mapping[str, Any], *, via: str, pod: str, where: str) -> list[Violation]:
    """``vgpu-ids-new`` and ``devices-to-allocate`` must agree where both are set."""
    ids, devices = _text(notes, VGPU_IDS), _text(notes, DEVICES_TO_ALLOCATE)
    if ids is None or devices is None or ids == devices:
        return []
    return _mismatch(
        f"metadata.annotations[{DEVICES_TO_ALLOCATE}]",
        f"{_quoted(devices)} differs from {VGPU_IDS} {_quoted(ids)} {where}; the device plugin hands out "
        f"{DEVICES_TO_ALLOCATE} while Volcano counts {VGPU_IDS}, so the {via} of pod {pod} is refused; "
        f"write the same value in both",
    )


def binding_assignment(
    binding: Mapping[str, Any] | None, pod: Mapping[str, Any] | None, *, pod_key: str
) -> WrittenAssignment | list[Violation] | None:
    """What a Binding binds pod ``pod`` (as read, stored annotations included) with.

    None when neither the Binding nor the pod carries an assignment; the violations when the
    assignment would not be what the plugin hands out on the Binding's node.
    """
    carried = _annotations(binding)
    notes = {**_annotations(pod), **carried}
    devices, ids = _text(notes, DEVICES_TO_ALLOCATE), _text(notes, VGPU_IDS)
    if devices is None and ids is None:
        return None
    where = "on the Binding" if carried else "on the pod"
    wrong = _pair_violations(notes, via="Binding", pod=pod_key, where=where)
    if wrong:
        return wrong
    node = binding_node(binding)
    named = _text(notes, VGPU_NODE)
    if named is not None and named != node:
        return _mismatch(
            f"metadata.annotations[{VGPU_NODE}]",
            f"{_quoted(named)} {where} but the Binding binds pod {pod_key} to node {_quoted(node)}; the "
            f"device plugin on {_quoted(node)} hands out only assignments whose {VGPU_NODE} names it, so the "
            f"Binding is refused; set {VGPU_NODE} to the node bound to",
        )
    # The two agree where both are set (above): a refusal names vgpu-ids-new, the one Volcano's
    # users read (and its own cache counts), unless only devices-to-allocate is there.
    key = VGPU_IDS if ids is not None else DEVICES_TO_ALLOCATE
    raw = ids if ids is not None else devices
    assert raw is not None
    return WrittenAssignment(node=node, raw=raw, key=key, via="Binding", effect="bind")


def update_assignment(
    obj: Mapping[str, Any] | None, old: Mapping[str, Any] | None, *, pod_key: str
) -> WrittenAssignment | list[Violation] | None:
    """The assignment a pod UPDATE (or ``pods/status``) writes: one that adds or changes
    ``vgpu-ids-new``. The device plugin confirming ``bind-phase`` or consuming
    ``devices-to-allocate`` changes no assignment and gives None."""
    before, after = _annotations(old), _annotations(obj)
    raw = _text(after, VGPU_IDS)
    if raw is None or raw == before.get(VGPU_IDS):
        return None
    wrong = _pair_violations(after, via="pod update", pod=pod_key, where="on the pod")
    if wrong:
        return wrong
    spec = old.get("spec") if old is not None else None
    bound = spec.get("nodeName") if isinstance(spec, Mapping) else None
    if isinstance(bound, str) and bound:
        # A pod already bound is judged on its node, whatever vgpu-node the update claims.
        effect: Effect = "raise" if before.get(BIND_PHASE) == "success" else "change"
        return WrittenAssignment(node=bound, raw=raw, key=VGPU_IDS, via="pod update", effect=effect)
    node = _text(after, VGPU_NODE) or ""
    return WrittenAssignment(node=node, raw=raw, key=VGPU_IDS, via="pod update", effect="propose")

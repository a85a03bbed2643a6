"""What the controller keeps of a pod: the fields its decisions read, with replicas' equal pieces
held once.

managedFields, container statuses, images, commands, env, probes and a pod's own token volume are
most of a running pod's size and nothing the controller reads; at 100,000 pods they would be most
of its memory, and the per-pod parts (a token volume's random name) would keep replicas from
sharing anything. The projection keeps identity, labels and annotations, the spec fields some
reader takes (``_POD_SPEC``) with containers reduced to what any reader takes (requests and limits,
host ports, the name, a sidecar's restartPolicy) and volumes to those a filter judges, and the phase
(and a pending pod's conditions, which the Reporter reads). A test holds the pod's facts and vGPU
request equal before and after, for a pod shaped as the API server returns it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from vgpu_guard.engine.annotations import BIND_PHASE, DEVICES_TO_ALLOCATE, VGPU_TIME
from vgpu_guard.engine.objects import Obj
from vgpu_guard.engine.scheduling.facts import INLINE_DISKS
from vgpu_guard.engine.untrusted import as_mapping

__all__ = ["project_pod"]


_POD_META = frozenset(("name", "namespace", "uid", "resourceVersion", "labels", "annotations",
                       "deletionTimestamp", "creationTimestamp", "ownerReferences"))  # fmt: skip
_POD_STATUS = frozenset(("phase", "conditions"))
# A bound pod's conditions are read by no one (the Reporter patches PodScheduled on pending pods
# only), and their lastTransitionTime stamps make every pod's status its own: ~1 KB a pod that no
# replica could share, and a key per pod that churned the sharing table. Its phase is all we keep.
_BOUND_POD_STATUS = frozenset(("phase",))
# Annotations of a bound pod no controller path reads: kubectl's copy of the whole object as last
# applied (kilobytes on a pod created by ``kubectl apply``), and, once the device plugin has served
# the pod, its copy of the assignment and its time (the controller reads vgpu-ids-new, the ledger
# entry keeps its own time). A pending pod keeps all of its annotations (its forged ones are refused).
_UNREAD_BOUND_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)
# Until then the plugin may hand that assignment to another pod's container, which the stale-pick
# report replays (controller/stale_picks.py): kept while a device record is left and the plugin has
# not written bind-phase success or failed (it writes vgpu-time MaxUint64 with either, which is what
# the report reads for a pod without one). That is a pod between its binding and its start.
_SERVED_ANNOTATIONS = (DEVICES_TO_ALLOCATE, VGPU_TIME)
_JUDGED_VOLUMES = ("persistentVolumeClaim", "ephemeral", *INLINE_DISKS)


def _only(obj: Mapping[str, Any], keys: frozenset[str]) -> dict[str, Any]:
    """``obj`` without the keys not in ``keys``: the decoded map itself, pruned in place (it is this
    call's own, as the whole pod is), so the usual map that has no others costs no new dict."""
    if type(obj) is dict:
        for key in [k for k in obj if k not in keys]:
            del obj[key]
        return obj
    return {k: obj[k] for k in keys if k in obj}  # a mapping that is not a decoded dict: a copy


# Pieces replicas of one workload repeat (kube/sharing.py): held once for all of them, and the
# pod facts derived from them are reused (engine/scheduling/facts.py FactsMemo).
_SHARED_SPEC = frozenset(("containers", "initContainers", "tolerations", "affinity", "nodeSelector",
                          "volumes", "overhead", "topologySpreadConstraints", "resourceClaims"))  # fmt: skip
_SHARED_META = frozenset(("labels", "ownerReferences"))
# The spec fields any reader takes: where the pod runs and who places it, its priority (a vGPU
# request's), and the pieces above. The rest of what the API server defaults in (DNS and restart
# policy, service account, grace period, security context, ...) is read by no one; kept, it was a
# string of its own per pod for each field on a real cluster, ~0.5 KB a pod.
_POD_SPEC = frozenset(("nodeName", "schedulerName", "priority", *_SHARED_SPEC))
# What any reader takes from a container (requests and limits, host ports, the name in messages;
# restartPolicy marks a sidecar): image, command, env, mounts and probes are never read.
_CONTAINER_FIELDS = frozenset(("name", "resources", "ports", "restartPolicy"))


def project_pod(pod: Obj, share: Callable[[Any], Any] | None = None) -> Obj:
    """The fields the controller reads (spec, identity, phase and conditions), nothing else.

    managedFields and container statuses are most of a running pod's size; at 100,000 pods they
    would be most of the controller's memory. With ``share`` (a ``SharedParts``), the pieces
    replicas repeat are replaced by the equal piece seen first.
    """
    # Exact type tests before the general ones throughout: a start projects 100,000 pods, and
    # their maps are all plain decoded dicts.
    meta = pod.get("metadata")
    if meta.__class__ is not dict:
        meta = as_mapping(meta)
    status = pod.get("status")
    if status.__class__ is not dict:
        status = as_mapping(status)
    spec = pod.get("spec") or {}
    bound = False
    if isinstance(spec, dict):
        _project_spec(spec)
        node = spec.get("nodeName")
        if node:
            bound = True
            if node.__class__ is str:  # every pod of a node repeats it: one shared copy
                spec["nodeName"] = sys.intern(node)
    meta = _only(meta, _POD_META)
    notes = meta.get("annotations")
    if bound and notes.__class__ is dict:
        for key in _UNREAD_BOUND_ANNOTATIONS:
            notes.pop(key, None)
        if _served(notes):
            for key in _SERVED_ANNOTATIONS:
                notes.pop(key, None)
    namespace = meta.get("namespace")
    if namespace.__class__ is str:  # every pod of a namespace repeats it
        meta["namespace"] = sys.intern(namespace)
    status = _only(status, _BOUND_POD_STATUS if bound else _POD_STATUS)
    if share is not None:
        _share_in(meta, _SHARED_META, share)
        if isinstance(spec, dict):
            _share_in(spec, _SHARED_SPEC, share)
        status = share(status)
    return {"apiVersion": pod.get("apiVersion") or "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": status}  # fmt: skip


def _served(notes: Mapping[str, Any]) -> bool:
    """The device plugin is done with this bound pod's assignment (or it never had one)."""
    left = notes.get(DEVICES_TO_ALLOCATE)
    return notes.get(BIND_PHASE) in ("success", "failed") or not (isinstance(left, str) and "," in left)


def _project_spec(spec: dict[str, Any]) -> None:
    """The spec fields some reader takes; containers down to what is read; volumes down to those
    a filter judges (claims, generic ephemeral volumes, inline disks): a pod's own token and
    config volumes would otherwise make every replica's spec differ. In place: the decoded spec
    is this call's own, as the whole pod is."""
    unread = [k for k in spec if k not in _POD_SPEC]
    for key in unread:
        del spec[key]
    for key in ("containers", "initContainers"):
        containers = spec.get(key)
        if isinstance(containers, list):
            for i, c in enumerate(containers):
                if c.__class__ is dict:
                    for field in [f for f in c if f not in _CONTAINER_FIELDS]:
                        del c[field]
                elif isinstance(c, Mapping):
                    containers[i] = _only(c, _CONTAINER_FIELDS)
    volumes = spec.get("volumes")
    if isinstance(volumes, list):
        spec["volumes"] = [v for v in volumes if not _is_mapping(v) or _judged(v)]


def _is_mapping(value: object) -> bool:
    """``isinstance(value, Mapping)``, with the exact test first: the ABC check is slow, and a
    start projects 100,000 pods."""
    return value.__class__ is dict or isinstance(value, Mapping)


def _judged(volume: Mapping[str, Any]) -> bool:
    return any(kind in volume for kind in _JUDGED_VOLUMES)


def _share_in(obj: dict[str, Any], keys: frozenset[str], share: Callable[[Any], Any]) -> None:
    # Over the object's own keys (a projected spec has a few of the nine shared ones): a value
    # replaced for an existing key leaves the dict's size, and so the iteration, as it is.
    for key, value in obj.items():
        if key in keys:
            obj[key] = share(value)

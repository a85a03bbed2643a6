"""What Volcano's scheduler writes to give a vGPU task its GPUs and its node, per version.

The arbiter judges writes, not intentions, so a model of Volcano is only as good as the writes it
makes. From Volcano's source:

- **>= 1.16** (PR #5588, the fix of #5532), ``annotated-binding``: the predicates plugin's
  AllocateFunc merges the assignment into the task's pod in memory
  (pkg/scheduler/api/devices/nvidia/vgpu/device_info.go ~339-357, ``GPUDevices.Allocate``;
  plugins/predicates/predicates.go ~243-251) and nothing reaches the API server until
  ``DefaultBinder.Bind`` sends the pod's annotations on the Binding:
  ``ObjectMeta{Namespace, Name, UID: p.UID, Annotations: p.Annotations}``,
  ``Target{Kind: Node, Name: task.NodeName}`` (pkg/scheduler/cache/cache.go). A statement that
  is discarded (a gang that did not become ready) has written nothing.
- **1.10-1.15**, ``patch-then-bind``: ``GPUDevices.Allocate`` PATCHes the same annotations onto
  the pod while the session allocates (device_info.go of those tags, ``patchPodAnnotations``); a
  failed patch fails the task's allocation. The Binding follows at commit with the pod's
  annotations as the scheduler's cache holds them (the same ``DefaultBinder``). A discarded
  statement calls the DeallocateFunc, whose ``GPUDevices.Release`` does nothing from v1.10.0 to
  v1.15.0: the assignment stays on the Pending pod, which Volcano's cache does not count (it
  counts pods on a node). v1.15.1's ``Release`` patches it away again.

The annotations (device_info.go; the device plugin reads them, pkg/util/util.go): ``vgpu-node``,
``vgpu-time`` (Unix seconds), ``vgpu-ids-new``, ``devices-to-allocate`` (the same value),
``bind-phase: allocating`` and ``bind-time`` (Unix seconds).

Every call raises the API server's refusal as Volcano sees it (``KubeError``; an admission
webhook's denial included); what Volcano does next (resync, decide again next session) is the
session's business (session.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from vgpu_guard.engine.annotations import (
    BIND_PHASE,
    BIND_TIME,
    DEVICES_TO_ALLOCATE,
    VGPU_IDS,
    VGPU_NODE,
    VGPU_TIME,
)
from vgpu_guard.engine.assignment import assignment_annotations
from vgpu_guard.engine.objects import Obj
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.resources import PODS

__all__ = [
    "DEFAULT_VERSION",
    "SCHEDULER_USER",
    "Sequence",
    "VolcanoVersion",
    "allocate",
    "bind",
    "deallocate",
    "parse_version",
    "write_assignment",
]

Sequence = Literal["annotated-binding", "patch-then-bind"]

# Volcano's scheduler runs as this ServiceAccount (installer/helm/chart/volcano/templates/scheduler.yaml);
# vgpu-guard's admission.allocationWriters names it.
SCHEDULER_USER = "system:serviceaccount:volcano-system:volcano-scheduler"
DEFAULT_VERSION = "1.16"
_FIRST_PATCH_RELEASE, _FIRST_BINDING_RELEASE = 10, 16
_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?$")
_DEVICE_KEYS = (VGPU_NODE, VGPU_TIME, VGPU_IDS, DEVICES_TO_ALLOCATE, BIND_PHASE, BIND_TIME)


@dataclass(frozen=True, slots=True)
class VolcanoVersion:
    """A Volcano release: its name ("1.16", "1.15.1"), the write sequence it makes, and its minor
    and patch numbers, which the deviceshare model (deviceshare.py, device_cache.py) reads."""

    name: str
    sequence: Sequence
    minor: int = _FIRST_BINDING_RELEASE
    patch: int = 0

    def at_least(self, major: int, minor: int, patch: int = 0) -> bool:
        """This release is ``major.minor.patch`` or later (every modelled release is 1.x)."""
        return (1, self.minor, self.patch) >= (major, minor, patch)

    @property
    def release_clears(self) -> bool:
        """device_info.go ``GPUDevices.Release``: a no-op from v1.10.0 to v1.15.0 (v1.15.0 only
        subtracts in memory), so a discarded statement's PATCHed assignment stays on the pod;
        v1.15.1 removes the six annotations (``devices.RemovePodAnnotations``) unless
        ``bind-phase`` is ``success``."""
        return self.at_least(1, 15, 1)

    @property
    def describe(self) -> str:
        """One phrase for reports: which release, and what its binder writes."""
        if self.sequence == "annotated-binding":
            return f"Volcano {self.name} (>= 1.16: the assignment rides on the Binding)"
        return f"Volcano {self.name} (1.10-1.15: the assignment is PATCHed onto the pod, then the Binding)"


def parse_version(text: str) -> VolcanoVersion:
    """``1.16``, ``v1.12.2`` ...; raises ``ValueError`` naming the supported range.

    Before 1.10 Volcano's vGPU support wrote other annotations (the ``volcano.sh/devices`` era),
    which neither the device plugin nor this model reads.
    """
    found = _VERSION.match(text.strip())
    if found is None or int(found.group(1)) != 1 or int(found.group(2)) < _FIRST_PATCH_RELEASE:
        raise ValueError(
            f"Volcano version {text!r} is not modelled: give 1.10 to 1.15 (the assignment PATCHed onto "
            "the pod, then the Binding) or 1.16 and later (the assignment on the Binding)"
        )
    minor, patch = int(found.group(2)), int(found.group(3) or 0)
    sequence: Sequence = "annotated-binding" if minor >= _FIRST_BINDING_RELEASE else "patch-then-bind"
    # "1.15" is v1.15.0; a patch release is named only when given (v1.15.1's Release differs).
    name = f"1.{minor}.{patch}" if found.group(3) is not None and patch else f"1.{minor}"
    return VolcanoVersion(name=name, sequence=sequence, minor=minor, patch=patch)


def _annotations(pod: Mapping[str, Any]) -> dict[str, str]:
    meta = pod.get("metadata")
    notes = meta.get("annotations") if isinstance(meta, Mapping) else None
    return {str(k): str(v) for k, v in notes.items()} if isinstance(notes, Mapping) else {}


def _with_annotations(pod: Mapping[str, Any], notes: Mapping[str, str]) -> Obj:
    meta = dict(pod.get("metadata") or {})
    meta["annotations"] = dict(notes)
    return {**pod, "metadata": meta}


async def allocate(
    api: ClusterClient, pod: Mapping[str, Any], *, node: str, ids: str, version: VolcanoVersion, now: int
) -> Obj:
    """AllocateFunc: the task's pod as the Binding will carry it. >= 1.16 merges the assignment into
    the task's pod in memory (PR #5588), so the Binding carries it. 1.10-1.15 PATCH it onto the pod
    (a refused patch raises and nothing is allocated) and leave the task's pod as the cache holds
    it, so the Binding that follows carries no assignment (the gap #5532 reported)."""
    if version.sequence == "patch-then-bind":
        meta = pod["metadata"]
        patch = {"metadata": {"annotations": assignment_annotations(node, ids, now)}}
        await api.patch(PODS, meta["name"], patch, namespace=meta["namespace"])
        return dict(pod)
    return _with_annotations(pod, {**_annotations(pod), **assignment_annotations(node, ids, now)})


async def deallocate(api: ClusterClient, pod: Mapping[str, Any], version: VolcanoVersion) -> None:
    """DeallocateFunc of a discarded statement (predicates.go -> ``GPUDevices.Release``): v1.10.0 to
    v1.15.0 write nothing, so the PATCHed assignment stays on the Pending pod (issue 43 (a));
    v1.15.1 patches it away again; >= 1.16 wrote nothing, so there is nothing to undo."""
    if version.sequence != "patch-then-bind" or not version.release_clears:
        return
    meta = pod["metadata"]
    patch = {"metadata": {"annotations": dict.fromkeys(_DEVICE_KEYS)}}
    await api.patch(PODS, meta["name"], patch, namespace=meta["namespace"])


async def bind(api: ClusterClient, pod: Mapping[str, Any], node: str) -> None:
    """``DefaultBinder.Bind``: a Binding of ``pod`` (UID precondition) to ``node`` carrying the
    pod's annotations as the scheduler holds them."""
    meta = pod["metadata"]
    await api.bind(
        meta["namespace"], meta["name"], node=node, annotations=_annotations(pod), uid=meta.get("uid")
    )


async def write_assignment(
    api: ClusterClient, pod: Mapping[str, Any], *, node: str, ids: str, version: VolcanoVersion, now: int
) -> None:
    """Every write Volcano makes for one task that is allocated and committed: AllocateFunc, then
    the Binding. Raises the first refusal (a refused patch means no Binding is sent)."""
    task = await allocate(api, pod, node=node, ids=ids, version=version, now=now)
    await bind(api, task, node)

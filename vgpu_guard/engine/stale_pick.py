"""Which pod's assignment the device plugin hands to a container, and when that pod is the wrong one.

volcano-vgpu-device-plugin does not know which pod the kubelet is admitting. Its ``Allocate``
(pkg/plugin/server.go) takes the kubelet's one container request, counts its device IDs
(``gpuAmount := len(reqs.ContainerRequests[0].DevicesIds)``: the container's ``vgpu-number``) and
asks ``GetPendingPod(node, gpuAmount)`` (pkg/util/util.go) for the pod to serve. That function lists
**every pod of the cluster** (bound or not, any phase, any ``bind-phase``) and ``getOldestPod``
keeps those whose ``volcano.sh/vgpu-node`` is the node and whose ``volcano.sh/devices-to-allocate``
decodes to exactly ``gpuAmount`` devices (``DecodePodDevices``: every ``:``-separated record holding
a ``,``, summed over all containers still listed), then returns the one with the smallest
``volcano.sh/vgpu-time``. The container is then handed the devices of that pod's next container
(``GetNextDeviceRequest``: the first container entry with a device of type ``NVIDIA``), which are
erased from its ``devices-to-allocate`` (``EraseNextDeviceTypeFromAnnotation``); once none is left
the plugin writes ``bind-phase=success`` and ``vgpu-time=MaxUint64`` on *that* pod
(``PodAllocationTrySuccess``). "Consumed" therefore means: no device record left.

Volcano 1.10-1.15 PATCH the assignment onto the pod during the session (``GPUDevices.Allocate``,
device_info.go; ``vgpu-time`` is ``time.Now().Unix()``, seconds) and a discarded statement leaves it
on the Pending pod (``Release`` only rolls back the scheduler's cache). Such a pod is older than
any assignment made since, so when a pod bound to that node later asks for the same number of
devices, the plugin serves the discarded assignment to the bound pod's container: the GPUs and
memory limit chosen for another pod, on a card the ledger and Volcano count for nobody, while the
bound pod's own assignment stays unconsumed and is handed to the next pod in turn. Volcano >= 1.16
writes nothing until the Binding (PR #5588), so a discarded session leaves nothing behind.

``stale_picks`` replays ``getOldestPod`` for each pod the kubelet will still admit on the node and
reports the picks that land on a pod the kubelet will never admit there, exactly by the plugin's
rule:

- **the tie**: ``getOldestPod`` starts from the *last* matching pod in list order and replaces it
  only by a strictly older one, so among equal ``vgpu-time`` (common: Unix seconds) the first in
  list order wins unless the last one is among them. A list is served in storage-key order
  (``namespace/name``, from etcd and from the watch cache alike), which ``stale_picks`` sorts by.
- **bad times**: an absent ``vgpu-time``, one longer than ``PodAnnotationMaxLength`` (1 MiB), or one
  ``strconv.ParseUint(s, 10, 64)`` refuses counts as MaxUint64, the newest. A present but unreadable
  one is reported for that pod (``Malformed``), and the picks are computed with MaxUint64 for it.
- **bad records**: ``DecodeContainerDevices`` indexes fields 1-3 of every record holding a ``,``, so
  a record with fewer than four fields panics the plugin's ``Allocate`` for every pod of the node
  (the pod lists every pod whose ``vgpu-node`` names it); such a record is reported (``Malformed``)
  and still counted, as the decoder counts it before it fails.

Who asks (``Awaiting``): a pod bound to the node its ``vgpu-node`` names, still Pending, with an
unconsumed assignment and ``bind-phase`` neither ``success`` nor ``failed`` (the plugin wrote one of
those when it served it, after which the kubelet does not call again); it asks for its next
container's devices. Who can never be served on the node (``never_served``): a pod not bound there,
one that ended, or one Running (the kubelet calls Allocate before any container starts) whose
assignment is still unconsumed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vgpu_guard.engine.annotations import BIND_PHASE, DEVICES_TO_ALLOCATE, VGPU_NODE, VGPU_TIME
from vgpu_guard.engine.untrusted import as_mapping

__all__ = [
    "MAX_UINT64",
    "Malformed",
    "PickFindings",
    "PickPod",
    "StalePick",
    "consumed",
    "device_count",
    "next_request",
    "pick_pod",
    "predicate_time",
    "stale_picks",
]

MAX_UINT64 = (1 << 64) - 1
# PodAnnotationMaxLength (pkg/util/types.go): a longer vgpu-time is read as MaxUint64.
_MAX_TIME_LENGTH = 1024 * 1024
# ParseUint with base 10: ASCII digits only, no sign, no prefix, no underscores.
_DECIMAL = re.compile(r"[0-9]+", re.ASCII)
# GetNextDeviceRequest(util.NvidiaGPUDevice, ...): the device type the plugin hands out.
_NVIDIA = "NVIDIA"


@dataclass(frozen=True, slots=True)
class PickPod:
    """What ``GetPendingPod`` and the kubelet decide by, of one pod."""

    namespace: str
    name: str
    uid: str
    node: str  # spec.nodeName ("" when unbound)
    phase: str  # status.phase
    vgpu_node: str
    vgpu_time: str | None  # None when absent
    to_allocate: str  # devices-to-allocate ("" when absent)
    bind_phase: str

    @property
    def key(self) -> str:
        """``namespace/name``: how messages name it, and its place in a list (the storage key)."""
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class StalePick:
    """``bound``'s next container would be handed ``stale``'s assignment on ``node``."""

    stale: PickPod
    bound: PickPod
    node: str
    devices: int  # the kubelet's request: devices of bound's next container
    why: str  # why the kubelet never admits ``stale`` on ``node``


@dataclass(frozen=True, slots=True)
class Malformed:
    """An annotation of ``pod`` the plugin misreads; ``problem`` says how and what it does then."""

    pod: PickPod
    annotation: str
    problem: str


@dataclass(frozen=True, slots=True)
class PickFindings:
    """One node's stale picks and misread annotations, in list order of the pods they concern."""

    picks: tuple[StalePick, ...] = ()
    malformed: tuple[Malformed, ...] = ()


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def pick_pod(pod: Mapping[str, Any]) -> PickPod | None:
    """The pod as the plugin reads it, or None when no ``vgpu-node`` names a node (never picked)."""
    meta = as_mapping(pod.get("metadata"))
    notes = as_mapping(meta.get("annotations"))
    vgpu_node = _text(notes.get(VGPU_NODE))
    if not vgpu_node:
        return None
    raw_time = notes.get(VGPU_TIME)
    return PickPod(
        namespace=_text(meta.get("namespace")),
        name=_text(meta.get("name")),
        uid=_text(meta.get("uid")),
        node=_text(as_mapping(pod.get("spec")).get("nodeName")),
        phase=_text(as_mapping(pod.get("status")).get("phase")),
        vgpu_node=vgpu_node,
        vgpu_time=None if raw_time is None else str(raw_time),
        to_allocate=_text(notes.get(DEVICES_TO_ALLOCATE)),
        bind_phase=_text(notes.get(BIND_PHASE)),
    )


def predicate_time(raw: str | None) -> tuple[int, str | None]:
    """``getPredicateTimeFromPodAnnotation``: the time, and what is wrong with a present one."""
    if raw is None:
        return MAX_UINT64, None
    if len(raw) > _MAX_TIME_LENGTH:
        return MAX_UINT64, f"is longer than {_MAX_TIME_LENGTH} characters"
    if _DECIMAL.fullmatch(raw) is None or int(raw) > MAX_UINT64:
        return MAX_UINT64, f"{raw[:40]!r} is not an unsigned 64-bit decimal number"
    return int(raw), None


def _records(raw: str) -> Iterable[list[str]]:
    """The records ``DecodePodDevices`` counts, container by container: lists of their records."""
    if not raw:
        return
    for container in raw.split(";"):
        yield [record for record in container.split(":") if "," in record]


def device_count(raw: str) -> tuple[int, str | None]:
    """``DecodePodDevices``' count (every record holding a ``,``), and the first record that would
    panic its decoder (fewer than four fields)."""
    count, problem = 0, None
    for records in _records(raw):
        for record in records:
            count += 1
            if problem is None and record.count(",") < 3:
                problem = f"record {record[:60]!r} has fewer than the four fields UUID,TYPE,memory,cores"
    return count, problem


def consumed(raw: str) -> bool:
    """No record left: the plugin handed every device out (or the pod never had an assignment)."""
    return device_count(raw)[0] == 0


def next_request(raw: str) -> int:
    """The devices of the next container the kubelet admits (``GetNextDeviceRequest``): the first
    container entry holding an ``NVIDIA`` device; 0 when none is left."""
    for records in _records(raw):
        found = sum(1 for r in records if r.split(",")[1:2] == [_NVIDIA])
        if found:
            return found
    return 0


def _awaiting(pod: PickPod, node: str) -> bool:
    """The kubelet will still call Allocate for this pod on ``node``."""
    return (
        pod.node == node
        and pod.phase in ("", "Pending")
        and pod.bind_phase not in ("success", "failed")
        and next_request(pod.to_allocate) > 0
    )


def never_served(pod: PickPod, node: str) -> str | None:
    """Why the kubelet never admits ``pod`` on ``node`` (its assignment can only go to another
    pod's container), or None when it may still."""
    if not pod.node:
        return "it is not bound to any node (an assignment Volcano wrote and then discarded)"
    if pod.node != node:
        return f"it is bound to node {pod.node}"
    if pod.phase in ("Succeeded", "Failed"):
        return f"it ended ({pod.phase})"
    if pod.phase == "Running":
        return "it runs already without the plugin having consumed this assignment"
    return None


def _oldest(candidates: list[tuple[PickPod, int]]) -> PickPod:
    """``getOldestPod`` over candidates in list order: start from the last, take a strictly older."""
    oldest, oldest_time = candidates[-1]
    for pod, time in candidates:
        if oldest_time > time:
            oldest, oldest_time = pod, time
    return oldest


def stale_picks(node: str, pods: Iterable[PickPod]) -> PickFindings:
    """The picks of ``GetPendingPod`` on ``node`` that hand a pod the kubelet never admits there to a
    pod it will, and the annotations the plugin misreads (see the module docstring)."""
    listed = sorted((p for p in pods if p.vgpu_node == node), key=lambda p: p.key)
    times: dict[str, int] = {}
    counts: dict[str, int] = {}
    malformed: list[Malformed] = []
    for pod in listed:
        counts[pod.uid], bad_record = device_count(pod.to_allocate)
        if bad_record is not None:
            problem = f"{bad_record}: the plugin's decoder fails on it, for every Allocate on node {node}"
            malformed.append(Malformed(pod, DEVICES_TO_ALLOCATE, problem))
        times[pod.uid], bad_time = predicate_time(pod.vgpu_time)
        if bad_time is not None and counts[pod.uid]:
            problem = f"{bad_time}: the plugin reads it as the newest assignment of node {node}"
            malformed.append(Malformed(pod, VGPU_TIME, problem))
    picks: list[StalePick] = []
    for bound in listed:
        if not _awaiting(bound, node):
            continue
        wanted = next_request(bound.to_allocate)
        candidates = [(p, times[p.uid]) for p in listed if counts[p.uid] == wanted]
        # None matches (e.g. a pod of two 1-GPU containers does not match its own first request,
        # 2 != 1): the plugin answers "cannot get valid pod" and the kubelet retries.
        if not candidates:
            continue
        picked = _oldest(candidates)
        why = never_served(picked, node)
        if picked is not bound and why is not None:
            picks.append(StalePick(picked, bound, node, wanted, why))
    return PickFindings(tuple(picks), tuple(malformed))

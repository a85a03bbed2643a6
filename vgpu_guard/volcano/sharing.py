"""Volcano's two sharing handlers: how a card takes a pod, tentatively and for good (v1.12.0+).

pkg/scheduler/api/devices/nvidia/vgpu/sharing_factory.go names three calls, implemented per mode:

- **hami-core** (hamicore.go ``HAMICoreFactory``): ``TryAddPod`` always fits and adds the numbers
  (``UsedNum``, ``UsedMem``, ``UsedCore``) to the card it is given: the filter gives it a copy,
  the allocation the session's card. ``AddPod`` returns at once when the UID is in ``PodMap``
  (the counting rule of issue 43's (b)), else adds the numbers and the UID. ``SubPod`` fails for
  a UID not in ``PodMap``, else subtracts and deletes it.
- **mig** (mig.go ``MIGFactory``): ``TryAddPod`` looks for an instance (``findMatch``: the group in
  use, else each group in order; ``pickFromGroup``: the instances by memory, smallest first, the
  first at least as large as the request that has a free position; while a group is in use only
  the instance names already used in it are offered) and adds the instance's memory; it does not
  record the position, so two tasks of one session can be handed the same instance. ``AddPod``
  and ``SubPod`` decode ``UUID[group-position]`` and mark or clear the position
  (``addMigUsed``/``subMigUsed``). Memory is scaled by ``GPUMemoryFactor`` both ways.

v1.10/v1.11 had no handlers: the fit added the numbers itself and ``AddResource`` counted every
device (device_cache.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vgpu_guard.engine.config import MigGeometryGroup
from vgpu_guard.volcano.device_cache import Card

__all__ = ["add_pod", "sub_pod", "try_add_pod"]

_MIG_ID = re.compile(r"\[([^\]]*)\]")


@dataclass(frozen=True, slots=True)
class _Pick:
    position: int
    memory: int


def _position(group: MigGeometryGroup, count: int, used: list[int], index: int) -> int:
    """mig.go ``getPosition``: the instances before ``index``, then its first free slot."""
    position = sum(g.count for g in group.geometries[:index])
    return position + next((i for i in range(count) if i not in used), 0)


def _pick(group: MigGeometryGroup, usage: dict[str, list[int]] | None, request: int) -> _Pick | None:
    """mig.go ``pickFromGroup`` (a stable sort stands for ``sort.Slice``)."""
    ordered = sorted(enumerate(group.geometries), key=lambda pair: pair[1].memory)
    for index, inst in ordered:
        if not usage and inst.memory >= request:
            return _Pick(_position(group, inst.count, [], index), inst.memory)
        used = (usage or {}).get(inst.name)
        if used is not None and inst.count - len(used) > 0 and inst.memory >= request:
            return _Pick(_position(group, inst.count, used, index), inst.memory)
    return None


def _find_match(card: Card, request: int) -> tuple[str, int] | None:
    """mig.go ``findMatch``: ``(UUID[group-position], instance memory)`` or None."""
    if card.mig_group >= 0:
        group = card.mig_groups[card.mig_group]
        pick = _pick(group, card.mig_used, request)
        return (f"{card.uuid}[{group.group}-{pick.position}]", pick.memory) if pick else None
    for group in card.mig_groups:
        pick = _pick(group, None, request)
        if pick is not None:
            return f"{card.uuid}[{group.group}-{pick.position}]", pick.memory
    return None


def try_add_pod(card: Card, memory: int, cores: int, *, mode: str, factor: int) -> tuple[int, str] | None:
    """``TryAddPod``: the memory the card now counts for this device and the device id, or None."""
    if mode != "mig":
        card.use(1, memory, cores)
        return memory, card.uuid
    found = _find_match(card, memory * factor if factor > 1 else memory)
    if found is None:
        return None
    real = found[1] // factor if factor > 1 else found[1]
    card.use(1, real, cores)
    return real, found[0]


def _mig_slot(card: Card, device: str) -> tuple[int, str, int] | None:
    """``decodeMIGID`` + ``findPosition``: (group index, instance name, slot within the instance)."""
    found = _MIG_ID.search(device)
    parts = found.group(1).split("-") if found else []
    if len(parts) != 2 or not parts[1].isdigit():
        return None
    for group_index, group in enumerate(card.mig_groups):
        if group.group != parts[0]:
            continue
        position, start = int(parts[1]), 0
        for inst in group.geometries:
            if position < start + inst.count:
                return group_index, inst.name, position - start
            start += inst.count
        return None
    return None


def _mig_memory(card: Card, name: str) -> int:
    group = card.mig_groups[card.mig_group]
    return next(g.memory for g in group.geometries if g.name == name)


def add_pod(
    card: Card,
    memory: int,
    cores: int,
    *,
    uid: str,
    group: str,
    device: str,
    mode: str,
    factor: int,
    every_call: bool = False,
) -> None:
    """``AddPod``: count the pod on the card unless its UID is already there; ``group`` is the pod's
    PodGroup key, which device_info.go ``addResource`` records beside it. ``every_call``: hami-core's
    ``AddPod`` of v1.13.x and v1.14.x (hamicore.go) only creates the ``PodMap`` entry when missing and
    counts every call, so a pod's second container on the card is counted there; v1.12.x and
    v1.15.0+ return early, as MIG's does in every release."""
    if uid in card.pods and every_call and mode != "mig":
        mem, used_cores, _ = card.pods[uid]
        card.pods[uid] = (mem + memory, used_cores + cores, group)
        card.use(1, memory, cores)
        return
    if uid in card.pods:
        return
    if mode == "mig":
        slot = _mig_slot(card, device)
        if slot is None:  # decodeMIGID's error: nothing is added
            return
        card.mig_group = slot[0]
        used = card.mig_used.setdefault(slot[1], [])
        if slot[2] not in used:
            used.append(slot[2])
            used.sort()
        memory = _mig_memory(card, slot[1])
        memory = memory // factor if factor > 1 else memory
    card.pods[uid] = (memory, cores, group)
    card.use(1, memory, cores)


def sub_pod(card: Card, memory: int, cores: int, *, uid: str, device: str, mode: str, factor: int) -> None:
    """``SubPod``: take the pod off the card; a UID the card does not hold is an error (no change)."""
    if uid not in card.pods:
        return
    if mode == "mig":
        slot = _mig_slot(card, device)
        if slot is None:
            return
        card.mig_group = slot[0]
        used = card.mig_used.get(slot[1])
        memory = _mig_memory(card, slot[1]) if used is not None else 0  # subMigUsed returns 0
        memory = memory // factor if factor > 1 else memory
        if used is not None and slot[2] in used:
            used.remove(slot[2])
        if used is not None and not used:
            del card.mig_used[slot[1]]
    del card.pods[uid]
    card.use(-1, -memory, -cores)

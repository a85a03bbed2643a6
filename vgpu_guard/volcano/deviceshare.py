"""Volcano's vGPU fit, device choice and score for one pod on one node (deviceshare's predicate).

Carried from pkg/scheduler/api/devices/nvidia/vgpu/utils.go ``checkNodeGPUSharingPredicateAndScore``
and devices/util.go ``ExtractResourceRequest``, at the tags named ("1.15+" is v1.15.0 to master):

- **Requests**: one per container whose limits name ``vgpu-number`` or ``vgpu-memory``; ``Nums``
  from ``vgpu-number`` (1 when only memory is named), memory and cores from limits, else requests
  (``AsInt64``; a value that is not a whole number counts 0); the memory percentage is 101 ("not
  given"), or 100 when no memory is given either.
- **Mode**: a pod's ``volcano.sh/vgpu-mode`` must equal the node's mode.
- **Card order**, for each container: v1.10-v1.14 from the highest position down; 1.15+
  ``sortedDeviceIndicesByPolicy``: binpack the most used memory first, spread the fewest pods first,
  ties by position (no policy: the highest position first).
- **Card checks**, in order: a free share (``Number > UsedNum``); 1.15+ a pod annotated
  ``volcano.sh/vgpu-podgroup-policy: spread`` skips a card holding one of its PodGroup;
  memory: v1.10-v1.13 a percentage request becomes ``Memory * (pct / 100)`` in integer division on
  the first card looked at and stays so, 1.14+ ``Memory * pct / 100`` per card; free memory;
  ``UsedCore + cores <= 100``; **exclusive cores** (issue 43's (d)): 100 cores only on a card no pod
  uses (``UsedNum == 0``), 0 cores never on a card at 100 %; the type (``NVIDIA`` in it, and the
  ``nvidia.com/use-gputype``/``nouse-gputype`` annotations); then the sharing handler's
  ``TryAddPod`` (sharing.py), which adds the numbers to the card at once, so a later container of
  the same pod sees them and may take the same card (issue 43's (b)). Health is never looked at.
- **Score** (``GPUScore``, per device taken, after it is added): binpack ``100 * UsedMem / Memory``;
  spread 100 for a card with ``UsedNum == 1`` (v1.10-v1.14) or ``== 0`` (1.15+, never true once
  ``TryAddPod`` has counted the pod). Exact fractions here; Volcano's ``float64`` rounds.
- A container that gets too few cards fails the node: "not enough gpu fitted on this node"; 1.15+
  roll the tentative numbers back (``rollbackTentative``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from vgpu_guard.engine.config import NvidiaConfig
from vgpu_guard.engine.quantity import QuantityError, parse_quantity
from vgpu_guard.engine.untrusted import as_list, as_mapping
from vgpu_guard.volcano.binder import VolcanoVersion
from vgpu_guard.volcano.device_cache import Card, ContainerDevice, NodeDevices
from vgpu_guard.volcano.device_usage import group_key
from vgpu_guard.volcano.sharing import try_add_pod

__all__ = ["DeviceRequest", "Fit", "container_requests", "fit", "has_device_request"]

MODE_ANNOTATION = "volcano.sh/vgpu-mode"
GROUP_POLICY = "volcano.sh/vgpu-podgroup-policy"
USE_TYPE, NO_USE_TYPE = "nvidia.com/use-gputype", "nvidia.com/nouse-gputype"
_NOT_GIVEN = 101


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """devices.go ``ContainerDeviceRequest``: cards, memory (plugin units), memory %, cores %."""

    nums: int
    memory: int
    percentage: int
    cores: int


@dataclass(frozen=True, slots=True)
class Fit:
    """The devices each vGPU container gets on the node, and deviceshare's score for them."""

    containers: tuple[tuple[ContainerDevice, ...], ...]
    score: Fraction


def _as_int64(resources: Mapping[str, Any], name: str) -> int | None:
    if name not in resources:
        return None
    try:
        parsed = parse_quantity(resources[name])
    except QuantityError:
        return 0
    return int(parsed.value) if parsed.is_integer else 0


def _limit_or_request(container: Mapping[str, Any], name: str) -> int | None:
    resources = as_mapping(container.get("resources"))
    found = _as_int64(as_mapping(resources.get("limits")), name)
    return found if found is not None else _as_int64(as_mapping(resources.get("requests")), name)


def container_requests(pod: Mapping[str, Any], nvidia: NvidiaConfig) -> list[DeviceRequest]:
    """``ExtractResourceRequest`` (see the module docstring)."""
    out = []
    for container in as_list(as_mapping(pod.get("spec")).get("containers")):
        limits = as_mapping(as_mapping(as_mapping(container).get("resources")).get("limits"))
        if nvidia.resource_count_name in limits:
            nums = _as_int64(limits, nvidia.resource_count_name) or 0
        elif nvidia.resource_memory_name in limits:
            nums = 1
        else:
            continue
        memory = _limit_or_request(as_mapping(container), nvidia.resource_memory_name) or 0
        given = _limit_or_request(as_mapping(container), nvidia.resource_memory_percentage_name)
        percentage = given if given is not None else _NOT_GIVEN
        if percentage == _NOT_GIVEN and memory == 0:
            percentage = 100
        cores = _limit_or_request(as_mapping(container), nvidia.resource_core_name) or 0
        out.append(DeviceRequest(nums, memory, percentage, cores))
    return out


def has_device_request(pod: Mapping[str, Any], nvidia: NvidiaConfig) -> bool:
    """utils.go ``checkVGPUResourcesInPod``: a container's limits name vgpu-memory or vgpu-number."""
    names = (nvidia.resource_memory_name, nvidia.resource_count_name)
    return any(
        name in as_mapping(as_mapping(as_mapping(c).get("resources")).get("limits"))
        for c in as_list(as_mapping(pod.get("spec")).get("containers"))
        for name in names
    )


def _order(node: NodeDevices, policy: str, version: VolcanoVersion) -> list[int]:
    """The positions in the order the cards are tried (``sortedDeviceIndicesByPolicy``)."""
    positions = sorted(node.cards)
    if not version.at_least(1, 15) or policy not in ("binpack", "spread"):
        return positions[::-1]
    if policy == "binpack":
        return sorted(positions, key=lambda i: (-node.cards[i].used_mem, i))
    return sorted(positions, key=lambda i: (node.cards[i].used_num, i))


def _type_ok(annotations: Mapping[str, Any], card_type: str) -> bool:
    """utils.go ``checkType`` + ``checkGPUtype`` (v1.12.0+ wording of the nouse branch)."""
    if "NVIDIA" not in card_type:
        return False
    upper = card_type.upper()
    if USE_TYPE in annotations:
        return any(v.upper() in upper for v in str(annotations[USE_TYPE]).split(","))
    if NO_USE_TYPE in annotations:
        return not any(v.upper() in upper for v in str(annotations[NO_USE_TYPE]).split(","))
    return True


def _card_refuses(card: Card, memory: int, cores: int, group: str) -> bool:
    """The checks before the type and ``TryAddPod``, with the memory this card is asked for."""
    if card.number <= card.used_num:
        return True
    if group and any(g == group and (m > 0 or c > 0) for m, c, g in card.pods.values()):
        return True  # deviceHasPodFromSameGroup
    if card.memory - card.used_mem < memory or card.used_core + cores > 100:
        return True
    return (cores == 100 and card.used_num > 0) or (card.used_core == 100 and cores == 0)


def _score(policy: str, card: Card, version: VolcanoVersion) -> Fraction:
    """``GPUScore`` for one device just added to ``card``."""
    if policy == "binpack":
        return Fraction(100 * card.used_mem, card.memory) if card.memory else Fraction(0)
    if policy == "spread":
        return Fraction(100) if card.used_num == (0 if version.at_least(1, 15) else 1) else Fraction(0)
    return Fraction(0)


def fit(
    pod: Mapping[str, Any],
    node: NodeDevices,
    *,
    nvidia: NvidiaConfig,
    version: VolcanoVersion,
    policy: str,
) -> Fit | str:
    """The pod's devices on ``node`` (whose cards it adds them to: pass a copy to only look), or
    the error Volcano returns. The caller keeps or drops the changed cards."""
    annotations = as_mapping(as_mapping(pod.get("metadata")).get("annotations"))
    wanted = annotations.get(MODE_ANNOTATION)
    if wanted is not None and wanted != node.mode:
        return f"pod required sharing mode {wanted} is not the same as the node mode {node.mode}"
    group = group_key(pod) if version.at_least(1, 15) and annotations.get(GROUP_POLICY) == "spread" else ""
    containers: list[tuple[ContainerDevice, ...]] = []
    score = Fraction(0)
    for request in container_requests(pod, nvidia):
        if request.nums > len(node.cards):
            return f"no enough gpu cards on node {node.name}"
        devices: list[ContainerDevice] = []
        memory = request.memory
        for index in _order(node, policy, version):
            card = node.cards[index]
            if request.percentage != _NOT_GIVEN and version.at_least(1, 14):
                memory = card.memory * request.percentage // 100
            elif request.percentage != _NOT_GIVEN and memory == 0:
                memory = card.memory * (request.percentage // 100)
            if _card_refuses(card, memory, request.cores, group) or not _type_ok(annotations, card.type):
                continue
            added = try_add_pod(card, memory, request.cores, mode=node.mode, factor=nvidia.gpu_memory_factor)
            if added is None:
                continue
            devices.append(ContainerDevice(added[1], "NVIDIA", memory, request.cores))
            score += _score(policy, card, version)
            if len(devices) == request.nums:
                break
        if len(devices) < request.nums:
            return "not enough gpu fitted on this node"
        containers.append(tuple(devices))
    return Fit(tuple(containers), score)

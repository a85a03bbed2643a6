"""Volcano's view of a node's GPUs: its ``GPUDevices``, read from the registration and counted from
the bound pods' own assignments, per Volcano release. Not vgpu-guard's ledger: Volcano never reads it.

Everything here is carried from Volcano's source (pkg/scheduler/api/devices/nvidia/vgpu/), at the
tag named; "1.12+" means every tag from v1.12.0 to master (ed72c7c) agrees:

- **Registration** (utils.go ``decodeNodeDevices``): the ``volcano.sh/node-vgpu-register`` value
  split on ``:``; a card's ``ID`` is its position in that split; parts without ``,`` are skipped.
  ``count`` and ``devmem`` through ``strconv.Atoi`` (garbage is 0), health through
  ``strconv.ParseBool`` (``True``, ``TRUE``, ``t``, ``1`` are healthy; anything unreadable is
  unhealthy) and then never consulted by the fit. A UUID registered twice is two cards (the map is
  keyed by position). v1.12.0+ ignore the whole node when a record has fewer than six fields
  ("wrong Node GPU info"); the last record's mode is the node's (``getSharingMode``: ``mig``, else
  hami-core), and a ``mig`` node whose type matches no known geometry is served as hami-core
  (``extractGeometryFromType``). v1.10/v1.11 had no mode field: every node is hami-core.
  v1.15.1+ (device_info.go ``NewGPUDevices``) ignore a node whose allocatable lacks, or has 0 of,
  ``vgpu-number``, ``vgpu-cores`` or ``vgpu-memory``. (v1.10-v1.15.0 also wanted the
  ``node-vgpu-handshake`` annotation the device plugin keeps; simulate's nodes do not carry it
  and the model does not ask for it.)
- **Counting** (device_info.go ``AddResource``; ``Sharing.AddPod`` in hamicore.go and mig.go):
  only pods on a node (``spec.nodeName``), not Succeeded/Failed (cache/event_handlers.go
  ``addTask``), are counted, from their ``vgpu-ids-new``. v1.10/v1.11 add every device of every
  container to the card whose UUID equals it, so a pod with two containers on one card counts
  twice. v1.12.0+ find the card whose UUID the device's contains (``strings.Contains``, first
  match: Go iterates the map in random order, the model takes the lowest position) and
  ``AddPod`` returns at once when the pod's UID is already in the card's ``PodMap``: the second
  container on the same card is not counted at all.
- **Release** (``SubResource`` -> ``SubPod``): v1.12.0+ subtract the device's own numbers and
  delete the UID from ``PodMap``; a UID not in it is an error (nothing is subtracted).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from vgpu_guard.engine.config import MigGeometryGroup, MigModelGeometries
from vgpu_guard.engine.quantity import QuantityError, parse_quantity
from vgpu_guard.volcano.binder import VolcanoVersion

__all__ = [
    "Card",
    "ContainerDevice",
    "NodeDevices",
    "decode_pod_devices",
    "go_atoi",
    "go_parse_bool",
    "node_devices",
]

REGISTER = "volcano.sh/node-vgpu-register"
_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_ALLOCATABLE = ("volcano.sh/vgpu-number", "volcano.sh/vgpu-cores", "volcano.sh/vgpu-memory")


def go_parse_bool(text: str) -> bool:
    """``strconv.ParseBool`` with its error taken as false, as ``decodeNodeDevices`` does."""
    return text in _TRUE


def go_atoi(text: str) -> int:
    """``strconv.Atoi`` with its error taken as 0 (``count, _ := strconv.Atoi(...)``)."""
    body = text[1:] if text[:1] in "+-" else text
    if not body.isascii() or not body.isdigit():
        return 0
    return int(text)


@dataclass(frozen=True, slots=True)
class ContainerDevice:
    """One device of an assignment (types.go ``ContainerDevice``): the UUID as written (a MIG
    instance is ``UUID[group-position]``), memory in plugin units, cores in percent."""

    uuid: str
    type: str
    memory: int
    cores: int


def decode_pod_devices(raw: str) -> list[list[ContainerDevice]]:
    """utils.go ``DecodePodDevices``: containers split on ``;``, devices on ``:``; a part without a
    ``,`` is skipped and unreadable numbers are 0 (``ParseInt`` errors ignored)."""
    if not raw:
        return []
    out: list[list[ContainerDevice]] = []
    for entry in raw.split(";"):
        devices = []
        for part in entry.split(":"):
            if "," not in part:
                continue
            items = [*part.split(","), "", "", ""]
            devices.append(ContainerDevice(items[0], items[1], go_atoi(items[2]), go_atoi(items[3])))
        out.append(devices)
    return out


@dataclass(slots=True)
class Card:
    """device_info.go ``GPUDevice``: a registered card and what Volcano counts on it.

    ``pods`` is ``PodMap`` (UID -> memory, cores, PodGroup key); ``mig_groups`` the geometry
    groups of a MIG card, ``mig_group`` the group in use (``MigUsage.Index``, -1 for none) and
    ``mig_used`` the used positions of each instance name in it (``MigUsage.UsageList``)."""

    index: int
    uuid: str
    number: int
    memory: int
    type: str
    healthy: bool
    used_num: int = 0
    used_mem: int = 0
    used_core: int = 0
    pods: dict[str, tuple[int, int, str]] = field(default_factory=dict)
    mig_groups: tuple[MigGeometryGroup, ...] = ()
    mig_group: int = -1
    mig_used: dict[str, list[int]] = field(default_factory=dict)

    def use(self, num: int, memory: int, cores: int) -> None:
        """Add (or, negative, take away) pods, memory and cores to what the card counts."""
        self.used_num, self.used_mem, self.used_core = (
            self.used_num + num,
            self.used_mem + memory,
            self.used_core + cores,
        )

    def copy(self) -> Card:
        """``getGPUDeviceSnapShot``'s copy: the filter works on one, the allocation on the original."""
        return replace(
            self, pods=dict(self.pods), mig_used={name: list(used) for name, used in self.mig_used.items()}
        )


@dataclass(slots=True)
class NodeDevices:
    """device_info.go ``GPUDevices``: one node's cards by position, and its sharing mode."""

    name: str
    mode: str
    cards: dict[int, Card]

    def copy(self) -> NodeDevices:
        return NodeDevices(self.name, self.mode, {i: c.copy() for i, c in self.cards.items()})

    def card_for(self, uuid: str, version: VolcanoVersion) -> list[Card]:
        """The cards an assignment's device is counted on (see the module docstring)."""
        if version.minor < 12:
            return [c for c in self.cards.values() if c.uuid == uuid]
        return next(([c] for c in self.cards.values() if c.uuid in uuid), [])


def _geometries(card_type: str, known: Sequence[MigModelGeometries]) -> tuple[MigGeometryGroup, ...]:
    """utils.go ``extractGeometryFromType``: the first entry one of whose models the type contains."""
    for entry in known:
        if any(model in card_type for model in entry.models):
            return entry.allowed_geometries
    return ()


def _allocatable_ok(allocatable: Mapping[str, Any]) -> bool:
    """v1.15.1+ ``NewGPUDevices``: the three vGPU resources present and not 0."""
    for name in _ALLOCATABLE:
        try:
            if name not in allocatable or parse_quantity(allocatable[name]).value == 0:
                return False
        except QuantityError:
            return False
    return True


def node_devices(
    name: str,
    annotations: Mapping[str, str],
    allocatable: Mapping[str, Any],
    *,
    version: VolcanoVersion,
    known_mig: Sequence[MigModelGeometries],
) -> NodeDevices | None:
    """``NewGPUDevices`` + ``decodeNodeDevices``: the node's cards, or None when Volcano sees none."""
    raw = annotations.get(REGISTER)
    if raw is None or ":" not in raw:
        return None
    if version.at_least(1, 15, 1) and not _allocatable_ok(allocatable):
        return None
    cards: dict[int, Card] = {}
    mode = "hami-core"
    for index, record in enumerate(raw.split(":")):
        if "," not in record:
            continue
        items = record.split(",")
        if len(items) < (6 if version.minor >= 12 else 5):  # 1.10/1.11 would index past the end
            return None
        card = Card(index, items[0], go_atoi(items[1]), go_atoi(items[2]), items[3], go_parse_bool(items[4]))
        mode = "mig" if version.minor >= 12 and items[5] == "mig" else "hami-core"
        if mode == "mig":
            card.mig_groups = _geometries(card.type, known_mig)
            mode = "mig" if card.mig_groups else "hami-core"
        cards[index] = card
    return NodeDevices(name, mode, cards) if cards else None

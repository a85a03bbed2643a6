"""GPU registrations written by volcano-vgpu-device-plugin on each node.

Annotation ``volcano.sh/node-vgpu-register``: records joined by ``:`` (trailing ``:``), each
``UUID,count,devmemMiB,type,health,mode``. Plugin v1.9.x wrote five fields (no mode), which means
hami-core. Volcano 1.12+ ignores a whole node when any record is short; we parse the legacy form.
A mode other than ``mig`` is hami-core and fields after the sixth are ignored, as Volcano reads
them. A record with an empty UUID, or whose count or memory is not an integer in range, makes us
skip that node *with a reported reason* instead of guessing (or crashing): Volcano reads such a
number as 0. docs/volcano-differences.md lists each rule beside Volcano's.

Faults that cost one card, not the node, because Volcano keeps scheduling the node's other cards
(pkg/scheduler/api/devices/nvidia/vgpu/utils.go ``decodeNodeDevices``, v1.10.0 to master):

- **health** is read as ``strconv.ParseBool`` reads it (``1 t T TRUE true True`` / ``0 f F FALSE
  false False``); Volcano drops the parse error, so anything else is unhealthy. Volcano's fit never
  consults health; our own placement (routing mode) avoids an unhealthy card, the arbiter does not.
- **a UUID registered twice**: Volcano keeps both records as two cards (its device map is keyed by
  position). v1.10-v1.12 count a bound pod on every copy (device_info.go ``AddResource`` /
  ``addResource``, no ``break``); v1.13.0 to master on whichever copy the map walk meets first
  (``for index, gsdevice := range gs.Device`` ... ``break``; Go's map order is random), so the
  other copy looks free and the card's capacity can be fitted twice. The ledger holds use by UUID,
  one physical card, and cannot know which record tells its capacity: the card keeps what it
  holds (releases work) and takes no new assignment (``GpuDevice.unusable``). The first record
  stands for it, the later ones are dropped (the node counts one card fewer than Volcano).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from vgpu_guard.engine.untrusted import MAX_GPU_MEMORY_MIB, MAX_SPLIT_COUNT, plain_int

__all__ = [
    "REGISTER_ANNOTATION",
    "GpuDevice",
    "Mode",
    "Registration",
    "go_parse_bool",
    "parse_registration",
]

REGISTER_ANNOTATION = "volcano.sh/node-vgpu-register"
Mode = Literal["hami-core", "mig"]
MODES: tuple[Mode, ...] = ("hami-core", "mig")
# strconv.ParseBool's accepted spellings (Go's strconv/atob.go); everything else is an error.
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


@dataclass(slots=True, unsafe_hash=True)
class GpuDevice:
    """One physical card as the plugin registered it; memory is in plugin units (gpuMemoryFactor MiB).

    ``unusable``: why the card takes no new assignment although it is registered, worded to follow
    "GPU <uuid>" (its UUID is registered twice), or None. Never changed after it is parsed, but not
    ``frozen``: a start parses one per card (40,000 at 5,000 nodes), and a frozen init costs
    several times a plain one (engine/ledger.py)."""

    uuid: str
    index: int
    split_count: int
    memory: int
    type: str
    healthy: bool
    mode: Mode
    unusable: str | None = None


@dataclass(frozen=True, slots=True)
class Registration:
    """A node's parsed registration: its cards and mode, or why it was skipped.

    ``mode`` is the last record's (Volcano's ``decodeNodeDevices`` takes the node's mode from it).
    ``notes`` are the per-card faults that cost a card, not the node, for the operator."""

    devices: tuple[GpuDevice, ...] = ()
    error: str | None = None
    mode: Mode | None = None
    notes: tuple[str, ...] = ()


def go_parse_bool(text: str) -> bool | None:
    """``strconv.ParseBool``: the value, or None where Go returns an error."""
    if text in _GO_TRUE:
        return True
    return False if text in _GO_FALSE else None


def _is_known_mig_type(card_type: str, mig_models: Sequence[str]) -> bool:
    return any(model in card_type for model in mig_models)


def _device(fields: list[str], position: int, mig_models: Sequence[str]) -> GpuDevice | str:
    """One record's card, or what is wrong with its fields in words for the operator."""
    if len(fields) < 5:
        return f"has {len(fields)} fields, expected UUID,count,devmem,type,health[,mode]"
    uuid, count, memory, card_type, health = fields[:5]
    if not uuid:
        return "has an empty UUID"
    split_count, memory_mib = plain_int(count), plain_int(memory)
    if split_count is None or not 1 <= split_count <= MAX_SPLIT_COUNT:
        return f"has split count {count!r}, expected an integer from 1 to {MAX_SPLIT_COUNT}"
    if memory_mib is None or memory_mib > MAX_GPU_MEMORY_MIB:
        return f"has device memory {memory!r}, expected an integer (MiB) of at most {MAX_GPU_MEMORY_MIB}"
    # Volcano's getSharingMode: "mig" is MIG, anything else hami-core (v1.10/v1.11 read no mode).
    mig = len(fields) > 5 and fields[5] == "mig" and _is_known_mig_type(card_type, mig_models)
    checked_mode: Mode = "mig" if mig else "hami-core"
    # uuid, index, split_count, memory, type, healthy, mode (positional: half the cost to pass)
    return GpuDevice(uuid, position, split_count, memory_mib, card_type, health in _GO_TRUE, checked_mode)


def _notes(fields: list[str], record: int, uuid: str) -> list[str]:
    """What Volcano reads in a way the plugin never writes, read as Volcano does and told."""
    out = []
    if go_parse_bool(fields[4]) is None:
        out.append(
            f"record {record}: GPU {uuid} has health {fields[4]!r}, which strconv.ParseBool does not read, "
            "so it is unhealthy (Volcano reads it so too)"
        )
    if len(fields) > 5 and fields[5] not in MODES:
        out.append(
            f"record {record}: GPU {uuid} has mode {fields[5]!r}, which Volcano reads as hami-core, as we do"
        )
    if len(fields) > 6:
        out.append(
            f"record {record}: GPU {uuid} has {len(fields)} fields; the ones after the sixth are ignored"
        )
    return out


def _twice(device: GpuDevice, again: int) -> str:
    """Why a UUID registered again takes no new assignment (see the module doc)."""
    return (
        f"is registered twice in {REGISTER_ANNOTATION} (records {device.index + 1} and "
        f"{again + 1}): Volcano 1.13+ counts a pod on one copy only, so it takes no new assignment "
        "until the device plugin registers it once"
    )


def parse_registration(raw: object, *, mig_models: Sequence[str] = ()) -> Registration:
    """Parse the register annotation; never raises.

    ``mig_models`` are the ``knownMigGeometries`` model names: a ``mig`` record whose type matches
    none of them is served by Volcano as hami-core, and so do we.
    """
    if not isinstance(raw, str) or not raw.strip():
        return Registration(error=f"annotation {REGISTER_ANNOTATION} is missing or empty")
    devices: dict[str, GpuDevice] = {}
    notes: list[str] = []
    mode: Mode | None = None
    for position, record in enumerate(part for part in raw.strip().split(":") if part.strip()):
        fields = [f.strip() for f in record.split(",")]
        device = _device(fields, position, mig_models)
        if isinstance(device, str):
            # The record is named only on an error: a start parses 5,000 nodes of 8 records each.
            return Registration(error=f"record {position + 1} ({record[:60]!r}) {device}")
        mode = device.mode
        notes.extend(_notes(fields, position + 1, device.uuid))
        first = devices.get(device.uuid)
        if first is None:
            devices[device.uuid] = device
        elif first.unusable is None:
            # Set while parsing, before anyone hashes or shares the card.
            first.unusable = _twice(first, position)
            notes.append(f"GPU {device.uuid} {first.unusable}")
    if not devices:
        return Registration(error=f"annotation {REGISTER_ANNOTATION} holds no records")
    return Registration(devices=tuple(devices.values()), mode=mode, notes=tuple(notes))

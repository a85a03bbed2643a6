"""GPU registrations written by volcano-vgpu-device-plugin on each node.

Annotation ``volcano.sh/node-vgpu-register``: records joined by ``:`` (trailing ``:``), each
``UUID,count,devmemMiB,type,health,mode``. Plugin v1.9.x wrote five fields (no mode), which means
hami-core. Volcano ignores a whole node when any record is short; we parse the legacy form, and a
record that is malformed otherwise makes us skip that node *with a reported reason* instead of
guessing (or crashing).
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
    "parse_registration",
]

REGISTER_ANNOTATION = "volcano.sh/node-vgpu-register"
Mode = Literal["hami-core", "mig"]
MODES: tuple[Mode, ...] = ("hami-core", "mig")


@dataclass(slots=True, unsafe_hash=True)
class GpuDevice:
    """One physical card as the plugin registered it; memory is in plugin units (gpuMemoryFactor MiB).

    Never changed after it is parsed, but not ``frozen``: a start parses one per card (40,000 at
    5,000 nodes), and a frozen init costs several times a plain one (engine/ledger.py)."""

    uuid: str
    index: int
    split_count: int
    memory: int
    type: str
    healthy: bool
    mode: Mode


@dataclass(frozen=True, slots=True)
class Registration:
    """A node's parsed registration: its cards and mode, or why it was skipped."""

    devices: tuple[GpuDevice, ...] = ()
    error: str | None = None

    @property
    def mode(self) -> Mode | None:
        # Volcano takes the node's mode from its last record.
        return self.devices[-1].mode if self.devices else None


def _is_known_mig_type(card_type: str, mig_models: Sequence[str]) -> bool:
    return any(model in card_type for model in mig_models)


def _device(fields: list[str], position: int, seen: set[str], mig_models: Sequence[str]) -> GpuDevice | str:
    """One record's card, or what is wrong with its fields in words for the operator."""
    if len(fields) not in (5, 6):
        return f"has {len(fields)} fields, expected UUID,count,devmem,type,health[,mode]"
    uuid, count, memory, card_type, health = fields[:5]
    mode = fields[5] if len(fields) == 6 else "hami-core"
    if not uuid:
        return "has an empty UUID"
    if uuid in seen:
        return f"repeats UUID {uuid}"
    split_count, memory_mib = plain_int(count), plain_int(memory)
    if split_count is None or not 1 <= split_count <= MAX_SPLIT_COUNT:
        return f"has split count {count!r}, expected an integer from 1 to {MAX_SPLIT_COUNT}"
    if memory_mib is None or memory_mib > MAX_GPU_MEMORY_MIB:
        return f"has device memory {memory!r}, expected an integer (MiB) of at most {MAX_GPU_MEMORY_MIB}"
    if health not in ("true", "false"):
        return f"has health {health!r}, expected true or false"
    if mode not in MODES:
        return f"has mode {mode!r}, expected hami-core or mig"
    checked_mode: Mode = "mig" if mode == "mig" and _is_known_mig_type(card_type, mig_models) else "hami-core"
    # uuid, index, split_count, memory, type, healthy, mode (positional: half the cost to pass)
    return GpuDevice(uuid, position, split_count, memory_mib, card_type, health == "true", checked_mode)


def parse_registration(raw: object, *, mig_models: Sequence[str] = ()) -> Registration:
    """Parse the register annotation; never raises.

    ``mig_models`` are the ``knownMigGeometries`` model names: a ``mig`` record whose type matches
    none of them is served by Volcano as hami-core, and so do we.
    """
    if not isinstance(raw, str) or not raw.strip():
        return Registration(error=f"annotation {REGISTER_ANNOTATION} is missing or empty")
    devices: list[GpuDevice] = []
    seen: set[str] = set()
    for position, record in enumerate(part for part in raw.strip().split(":") if part.strip()):
        fields = [f.strip() for f in record.split(",")]
        device = _device(fields, position, seen, mig_models)
        if isinstance(device, str):
            # The record is named only on an error: a start parses 5,000 nodes of 8 records each.
            return Registration(error=f"record {position + 1} ({record[:60]!r}) {device}")
        seen.add(device.uuid)
        devices.append(device)
    if not devices:
        return Registration(error=f"annotation {REGISTER_ANNOTATION} holds no records")
    return Registration(devices=tuple(devices))

"""MIG geometry matching, as Volcano and the plugin place MIG requests, plus the real slice sizes.

Volcano's rule (deviceshare, knownMigGeometries): a card's model matches the first entry whose
model name is a substring of the card type; on a card with no geometry in use, groups are tried in
config order and the FIRST group with any instance >= the request wins, taking its smallest such
instance. The webhook rounds requests with the same rule so what the pod asks for is what it gets.

Configured template memory can exceed what the driver really exposes (1g.5gb is 5120 in the
plugin's defaults but 4864 MiB on an A100-40GB); ``usable_mib`` knows the real numbers so we can
warn (../docs/mig.md and NVIDIA's MIG user guide).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from vgpu_guard.engine.config import MigGeometry, MigGeometryGroup, MigModelGeometries

__all__ = ["MigChoice", "card_family", "geometries_for", "round_to_profile", "usable_mib"]


@dataclass(frozen=True, slots=True)
class MigChoice:
    """The instance a request lands on for one card type."""

    card_type: str
    group: str
    profile: str
    memory: int


def geometries_for(card_type: str, known: Iterable[MigModelGeometries]) -> MigModelGeometries | None:
    """The geometry entry Volcano uses for a card type (substring match, first entry wins)."""
    for entry in known:
        if any(model in card_type for model in entry.models):
            return entry
    return None


def _smallest_fitting(group: MigGeometryGroup, request: int) -> MigGeometry | None:
    fitting = [g for g in group.geometries if g.memory >= request]
    return min(fitting, key=lambda g: (g.memory, g.name)) if fitting else None


def round_to_profile(card_type: str, request: int, known: Iterable[MigModelGeometries]) -> MigChoice | None:
    """Where ``request`` (plugin memory units) lands on an empty card of ``card_type``; None if nowhere."""
    entry = geometries_for(card_type, known)
    if entry is None:
        return None
    for group in entry.allowed_geometries:
        geometry = _smallest_fitting(group, request)
        if geometry is not None:
            return MigChoice(
                card_type=card_type, group=group.group, profile=geometry.name, memory=geometry.memory
            )
    return None


# Usable MiB per (family, profile) from nvidia-smi -lgip outputs (see docs/mig.md for sources).
_USABLE: dict[str, dict[str, int]] = {
    "A30": {"1g.6gb": 5952, "2g.12gb": 11968, "4g.24gb": 24000},
    "A100-40GB": {
        "1g.5gb": 4864,
        "1g.10gb": 9856,
        "2g.10gb": 9856,
        "3g.20gb": 19968,
        "4g.20gb": 19968,
        "7g.40gb": 40192,
    },
    "A100-80GB": {"1g.10gb": 9728, "2g.20gb": 19968, "3g.40gb": 40192, "4g.40gb": 40192, "7g.80gb": 80896},
    "H100-80GB": {
        "1g.10gb": 9984,
        "1g.20gb": 20096,
        "2g.20gb": 20096,
        "3g.40gb": 40448,
        "4g.40gb": 40448,
        "7g.80gb": 81152,
    },
    "H200": {"1g.18gb": 16384, "1g.35gb": 33024, "2g.35gb": 33024, "3g.71gb": 71168, "4g.71gb": 71168},
    "H20": {
        "1g.12gb": 11264,
        "1g.24gb": 23552,
        "2g.24gb": 23552,
        "3g.48gb": 47616,
        "4g.48gb": 47616,
        "7g.96gb": 95232,
    },
}
_SLICES = re.compile(r"^(\d+)g\.")


def card_family(card_type: str) -> str | None:
    """The MIG-capable GPU family of a card type (A30, A100-40GB, ..., H20), None when unknown."""
    upper = card_type.upper()
    if "A30" in upper:
        return "A30"
    if "A100" in upper:
        return "A100-80GB" if "80G" in upper else "A100-40GB"
    if "H100" in upper:
        return "H100-80GB"
    if "H200" in upper:
        return "H200"
    if "H20" in upper:
        return "H20"
    return None


def usable_mib(card_type: str, profile: str) -> int | None:
    """What the driver really exposes for a profile on a card type, when we know it.

    Names differ across drivers (3g.39gb vs 3g.40gb, 7g.79gb vs 7g.80gb), so an unknown name
    falls back to the one known profile with the same compute-slice count, if it is unique.
    """
    family = card_family(card_type)
    if family is None:
        return None
    table = _USABLE[family]
    if profile in table:
        return table[profile]
    match = _SLICES.match(profile)
    if match is None:
        return None
    same_slices = {mib for name, mib in table.items() if name.startswith(f"{match[1]}g.")}
    return same_slices.pop() if len(same_slices) == 1 else None

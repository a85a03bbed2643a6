"""Physical MIG placements: where each instance of a geometry group sits on the card's memory slices.

Why: Volcano and the plugin name a MIG instance by ``<group>-<position>`` (position = instances of
the earlier geometries in the group + index within its own geometry) and track only counts. Two
instances can still collide on the card if a group lists more than the hardware can carve (e.g.
eight 1g.5gb on an A100-40GB, or 2g + 3g + 3g). We lay every group out on NVIDIA's legal
placements (mig-profiles.md: start index set and slice count per profile) once, and the ledger
records each granted position's ``[start, start + size)`` so overlap is checkable and impossible.

A position that cannot be laid out is unusable (never granted). Card types whose placements we do
not know fall back to counts and memory only (``start``/``size`` None), which is what Volcano does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from vgpu_guard.engine.config import MigGeometryGroup
from vgpu_guard.engine.mig import card_family

__all__ = ["SlotLayout", "group_layout", "profile_slices", "total_slices"]

# (starts, size) per profile name, per card family (NVIDIA MIG user guide, `nvidia-smi mig -lgipp`).
_GH100_LIKE = {"1g": ((0, 1, 2, 3, 4, 5, 6), 1), "1g2": ((0, 2, 4, 6), 2), "2g": ((0, 2, 4), 2)}
_GH100_LIKE |= {"3g": ((0, 4), 4), "4g": ((0,), 4), "7g": ((0,), 8)}
_A30 = {"1g": ((0, 1, 2, 3), 1), "2g": ((0, 2), 2), "4g": ((0,), 4)}
# GB in the name of the "double memory" 1g instance (2/8 memory, 1/7 compute) per family.
_DOUBLE_1G_GB = {"A100-40GB": 10, "A100-80GB": 20, "H100-80GB": 20, "H200": 35, "H20": 24}
_SLICES = re.compile(r"^(\d+)g\.(\d+)gb")


@dataclass(frozen=True, slots=True)
class SlotLayout:
    """Where one position of a group sits: profile, template MiB, slices (None when unknown)."""

    position: int
    profile: str
    memory: int
    start: int | None
    size: int | None


def total_slices(card_type: str) -> int | None:
    """Memory slices of a card (8, or 4 on an A30), None when the family is unknown."""
    family = card_family(card_type)
    if family is None:
        return None
    return 4 if family == "A30" else 8


def profile_slices(card_type: str, profile: str) -> tuple[tuple[int, ...], int] | None:
    """Legal start indices and slice count of a profile on a card type, when known.

    Names drift across drivers (3g.39gb vs 3g.40gb), so we match on the ``<n>g`` prefix; among
    1g profiles the family's double-memory one (e.g. 1g.10gb on A100-40GB) takes two slices.
    """
    family = card_family(card_type)
    match = _SLICES.match(profile)
    if family is None or match is None:
        return None
    compute = f"{match[1]}g"
    if family == "A30":
        return _A30.get(compute)
    if compute == "1g" and int(match[2]) >= _DOUBLE_1G_GB[family]:
        return _GH100_LIKE["1g2"]
    return _GH100_LIKE.get(compute)


def _fit(
    order: list[int],
    options: list[tuple[tuple[int, ...], int] | None],
    total: int,
) -> dict[int, int] | None:
    """Backtracking: a start per position (in ``order``) with no two ranges overlapping."""
    chosen: dict[int, int] = {}
    used = [False] * total

    def place(i: int) -> bool:
        if i == len(order):
            return True
        position = order[i]
        option = options[position]
        assert option is not None
        starts, size = option
        for start in starts:
            if start + size <= total and not any(used[start : start + size]):
                for s in range(start, start + size):
                    used[s] = True
                chosen[position] = start
                if place(i + 1):
                    return True
                for s in range(start, start + size):
                    used[s] = False
                del chosen[position]
        return False

    return chosen if place(0) else None


@lru_cache(maxsize=256)
def group_layout(card_type: str, group: MigGeometryGroup) -> tuple[SlotLayout | None, ...]:
    """Every position of ``group`` on ``card_type``: its slot, or None if the hardware cannot hold it.

    Positions are laid out together (a card is partitioned into one group at a time). When the
    whole group does not fit, the longest prefix of positions that does is kept: the plugin carves
    instances in position order, so later positions are the ones that would fail.
    """
    names: list[tuple[str, int]] = [(g.name, g.memory) for g in group.geometries for _ in range(g.count)]
    total = total_slices(card_type)
    options = [profile_slices(card_type, name) for name, _ in names]
    if total is None or any(o is None for o in options):
        return tuple(
            SlotLayout(position=p, profile=name, memory=mem, start=None, size=None)
            for p, (name, mem) in enumerate(names)
        )
    for keep in range(len(names), 0, -1):
        # Larger instances first: they have the fewest legal starts.
        order = sorted(range(keep), key=lambda p: (-(options[p] or ((), 0))[1], p))
        starts = _fit(order, options, total)
        if starts is not None:
            return tuple(
                SlotLayout(
                    position=p,
                    profile=name,
                    memory=mem,
                    start=starts[p],
                    size=(options[p] or ((), 0))[1],
                )
                if p < keep
                else None
                for p, (name, mem) in enumerate(names)
            )
    return tuple(None for _ in names)

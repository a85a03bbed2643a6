"""Why a pod the arbiter keeps refusing is refused: what holds its GPUs, and whether Volcano sees it.

The arbiter refuses an assignment whose GPU the ledger holds full; Volcano then decides again next
session. When its choice stays the same, either Volcano's cache is catching up (a pod it counts
was bound a moment ago: the refusals end by themselves) or the GPU is held by something Volcano
does not count, and only the holder going frees it. A user must be able to tell the two apart, so
a pod refused ``STUCK_REFUSALS`` times within ``STUCK_WINDOW_SECONDS`` gets one notice
(webhook/stuck_refusals.py) naming each holder and what Volcano knows of it:

- **a Binding that has not landed** (``admitted``, pod still unbound): reserved by the arbiter, refused
  after admission by another webhook or the API server; Volcano counts nothing for an unbound pod.
  It goes when its hold ends (``reservedAt + arbiter.unboundReleaseSeconds``).
- **vgpu-guard's controller** (``committed``, not ``admitted``, pod unbound): routing on, the
  controller reserved before its Binding; Volcano sees the pod once bound.
- **a pod with two containers on the card**: Volcano 1.12.x and >= 1.15.0 count a pod's use of one
  card once (``GPUDevices.addResource`` -> ``Sharing.AddPod`` returns early for a pod already in the
  card's ``PodMap``, pkg/scheduler/api/devices/nvidia/vgpu/{device_info,hamicore}.go; 1.13-1.14's
  hami-core counts each), the ledger counts both containers (what the device plugin hands out):
  Volcano thinks the rest free.
- anything else is a bound pod Volcano counts from its annotation: Volcano is catching up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from vgpu_guard.engine.ledger import Allocation, NodeLedger
from vgpu_guard.engine.timestamps import rfc3339

__all__ = ["STUCK_REFUSALS", "STUCK_WINDOW_SECONDS", "Holder", "holders_of", "stuck_message"]

# Volcano decides every session (1 s by default, schedulePeriod): 5 refusals within 2 minutes is a
# choice repeated, not a cache a moment behind.
STUCK_REFUSALS = 5
STUCK_WINDOW_SECONDS = 120


@dataclass(frozen=True, slots=True)
class Holder:
    """One ledger entry holding a refused GPU, and whether Volcano's cache counts it."""

    pod: str
    gpu: str
    memory: int
    why: str
    volcano_sees: bool


def _why(entry: Allocation, gpu: str, *, unbound: bool, hold_seconds: int) -> tuple[str, bool]:
    if entry.admitted and unbound:
        return f"a Binding that has not landed, held until {rfc3339(entry.reserved_at + hold_seconds)}", False
    if entry.committed and not entry.admitted and unbound:
        return "vgpu-guard's controller is binding it (routing on)", False
    on_card = sum(1 for c in entry.containers if any(d.uuid == gpu for d in c.devices))
    if on_card > 1:
        return f"{on_card} of its containers share the card; Volcano counts the pod's use once", False
    return "bound; Volcano counts it", True


def holders_of(
    ledger: NodeLedger,
    gpus: Iterable[str],
    *,
    unbound: Callable[[Allocation], bool],
    hold_seconds: int,
    exclude_uid: str = "",
) -> list[Holder]:
    """The entries holding any of ``gpus`` (the refused pod's own excluded), by pod name."""
    wanted = set(gpus)
    out: list[Holder] = []
    for uid, entry in ledger.allocations.items():
        if uid == exclude_uid:
            continue
        for gpu in sorted({g.uuid for g in entry.grants()} & wanted):
            memory = sum(g.memory for g in entry.grants() if g.uuid == gpu)
            why, sees = _why(entry, gpu, unbound=unbound(entry), hold_seconds=hold_seconds)
            out.append(Holder(entry.key, gpu, memory, why, sees))
    return sorted(out, key=lambda h: (h.gpu, h.pod))


def stuck_message(pod: str, node: str, refusals: int, holders: list[Holder], *, window: int) -> str:
    """The notice on the pod: what holds its GPUs, and whether waiting will do."""
    shown = "; ".join(f"{h.gpu}: {h.pod} {h.memory} MiB ({h.why})" for h in holders[:6])
    more = f"; and {len(holders) - 6} more" if len(holders) > 6 else ""
    lead = (
        f"vgpu-guard refused the GPU assignment of pod {pod} on node {node} {refusals} times within "
        f"{window} s; held by {shown or 'nothing now (freed since the last refusal)'}{more}"
    )
    if any(not h.volcano_sees for h in holders):
        return (
            f"{lead}. Volcano does not count the holders marked so and keeps choosing these GPUs: the pod "
            "binds once they go (a Binding's hold ends by itself; shared cards when their pod ends), or "
            "on another GPU"
        )
    return f"{lead}. Volcano counts every holder: its cache is catching up and the next sessions choose again"

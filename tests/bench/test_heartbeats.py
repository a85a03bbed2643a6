"""The throughput benchmark's fleet heartbeats and its tail diagnostic (bench/scheduler_throughput_bench.py)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import scheduler_throughput_bench as bench  # bench/ is a folder of scripts, not a package


class RecordingAdmin:
    """Records when each node's status PATCH was sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, str]] = []

    async def patch(self, resource: Any, name: str, body: Any, **_: Any) -> dict[str, Any]:
        self.sent.append((time.monotonic(), name))
        return {}


async def _beats(monkeypatch: pytest.MonkeyPatch, *, spread: bool) -> list[tuple[float, str]]:
    """The PATCHes of 4 nodes over 0.5 s at a 0.2 s period, times from the heartbeat's start."""
    monkeypatch.setattr(bench, "HEARTBEAT_SECONDS", 0.2)
    admin = RecordingAdmin()
    start = time.monotonic()
    fleet = bench.Fleet(admin, 4)  # type: ignore[arg-type]  # only patch is called
    task = asyncio.ensure_future(fleet.heartbeat(spread=spread))
    await asyncio.sleep(0.5)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert fleet.requests == len(admin.sent)
    return [(t - start, name) for t, name in admin.sent]


async def test_a_burst_sends_every_node_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    sent = await _beats(monkeypatch, spread=False)
    first = [t for t, _ in sent[:4]]
    assert sorted(n for _, n in sent[:4]) == [f"node-{i:04d}" for i in range(4)]
    assert min(first) >= 0.2  # after a whole period
    assert max(first) - min(first) < 0.1  # together (a margin for a busy machine)


async def test_spread_sends_each_node_at_its_own_moment(monkeypatch: pytest.MonkeyPatch) -> None:
    sent = await _beats(monkeypatch, spread=True)
    # 4 nodes over a 0.2 s period: one every 0.05 s, in turn, each node once per period.
    assert [n for _, n in sent[:4]] == [f"node-{i:04d}" for i in range(4)]
    assert [t >= 0.05 * (i + 1) for i, (t, _) in enumerate(sent[:4])] == [True] * 4  # never early
    assert sent[0][0] < 0.15  # the first node goes before the period ends (a burst would wait it)
    assert len(sent) >= 8  # still every node every period


def test_the_tail_diagnostic_counts_waits_that_overlap_a_burst() -> None:
    side = bench.Side(namespace="x")
    for i in range(100):  # one pod a second, 10 ms waits, but pod-99 waited 2 s
        side.created[f"pod-{i}"] = float(i)
        side.bound[f"pod-{i}"] = i + (2.0 if i == 99 else 0.01)
    bursts = [(100.5, 100.6), (50.02, 50.03)]  # only pod-99's wait overlaps one
    share = bench.during_bursts(side, bursts)
    assert share == {"all": 0.01, "slowest_1pct": 1.0, "slowest_created_s": [99.0]}
    assert bench.during_bursts(side, []) is None

"""Every benchmark runs in ``--smoke`` mode (tiny sizes), so the scripts cannot rot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize(
    ("script", "expect"),
    [
        ("allocator_bench.py", "idx/scan"),
        ("ledger_rebuild_bench.py", "steady: decode ledgers"),
        ("webhook_bench.py", "mutate at half of its peak load (open loop): p99 added"),
        ("hostile_load_bench.py", "hostile-load normal-review p99"),
        ("controller_scale_bench.py", "restart to first bind"),
        ("controller_scale_bench.py --api-shaped", "pods as kube-apiserver returns them"),
    ],
)
def test_smoke(script: str, expect: str) -> None:
    name, *flags = script.split()
    done = subprocess.run(
        [sys.executable, str(BENCH / name), "--smoke", *flags],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert expect in done.stdout
    assert "skipped" not in done.stdout and "failed" not in done.stdout, done.stdout


@pytest.mark.parametrize(
    ("script", "expect"),
    [
        # kube-scheduler, the protocol floor and our controller side by side (smoke sizes), and the
        # floor's and our latency rows: every side bound its pods.
        (
            "scheduler_throughput_bench.py",
            [
                "| 500/1000 | kube-scheduler |",
                "| 500/1000 | protocol floor (",
                "| 500/1000 | protocol floor + a CAS ledger write per pod |",
                "| 500/1000 | vgpu-guard |",
                "| 500/1000 | protocol floor at 20.0 pods/s for 2 s |",
                "| 500/1000 | protocol floor + a CAS ledger write per pod at 20.0 pods/s for 2 s |",
                "| 500/1000 | vgpu-guard at 20.0 pods/s for 2 s |",
            ],
        ),
        # Two controller replicas on one Lease: the table names a leader and a standby.
        ("standby_bench.py", ["| standby |", "| leader (baseline) |"]),
    ],
)
def test_smoke_on_the_real_control_plane(script: str, expect: list[str]) -> None:
    from tests.real_cluster import unavailable

    why = unavailable()
    if why:
        pytest.skip(why)
    done = subprocess.run(
        [sys.executable, str(BENCH / script), "--smoke"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for line in expect:
        assert line in done.stdout, done.stdout
    for row in done.stdout.splitlines():
        if " pods/s for " in row:  # a fixed-rate row: every pod of the stream was bound
            assert row.endswith("| unbound at end: 0 |"), row

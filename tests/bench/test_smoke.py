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
    ],
)
def test_smoke(script: str, expect: str) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH / script), "--smoke"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert expect in done.stdout
    assert "skipped" not in done.stdout and "failed" not in done.stdout, done.stdout


def test_smoke_of_the_throughput_bench_on_the_real_control_plane() -> None:
    """kube-scheduler and our controller side by side on a real control plane (smoke sizes)."""
    from tests.real_cluster import unavailable

    why = unavailable()
    if why:
        pytest.skip(why)
    done = subprocess.run(
        [sys.executable, str(BENCH / "scheduler_throughput_bench.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 500/1000 |")]
    assert [r.split("|")[2].strip() for r in rows][:2] == ["kube-scheduler", "vgpu-guard"], done.stdout


def test_smoke_of_the_standby_bench_on_the_real_control_plane() -> None:
    """Two controller replicas on one Lease: the table names a leader and a standby."""
    from tests.real_cluster import unavailable

    why = unavailable()
    if why:
        pytest.skip(why)
    done = subprocess.run(
        [sys.executable, str(BENCH / "standby_bench.py"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| standby |" in done.stdout and "| leader (baseline) |" in done.stdout, done.stdout

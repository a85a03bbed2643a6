"""Every benchmark runs in ``--smoke`` mode (tiny sizes), so the scripts cannot rot."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
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
        ("ghost_entries_bench.py", "| 200 |"),
        ("webhook_fleet_bench.py", "node churn (N/10 status/s)"),
        ("controller_scale_bench.py --arbiter-rate 20", "whole-fleet rebuilds"),
        ("simulate_scale_bench.py", "| 30 / 90 |"),
    ],
)
def test_smoke(script: str, expect: str) -> None:
    name, *flags = script.split()
    done = subprocess.run(
        [sys.executable, str(BENCH / name), "--smoke", *flags],
        capture_output=True,
        text=True,
        timeout=60,
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
        # Ghost ledger entries on one node, a canary on another, the controller as a process.
        ("ghost_entries_bench.py --real", ["real control plane (kube-apiserver 1.20.2)", "| 200 |"]),
        # Volcano's annotated Bindings with the arbiter's webhook installed and without it: both
        # cases measured on both sides, every binding of the arbiter's side held in a ledger.
        (
            "arbiter_bench.py",
            [
                "| 20 binds/s over 10 nodes (1 x 1 s a side) | without the arbiter (baseline) |",
                "| 20 binds/s over 10 nodes (1 x 1 s a side) | with the arbiter |",
                "| 16-pod gang on 2 nodes (1 gang a side) | without the arbiter (baseline) |",
                "| 16-pod gang on 2 nodes (1 gang a side) | with the arbiter |",
                "| 20 binds/s over 10 nodes (1 x 1 s a side) | one GPULedger PUT, same pace (",
                "target rate: added p50 <= 1.3 x one GPULedger PUT's p50 (issue 44):",
                "check rate: every binding of the arbiter's side reserved, none of the baseline's: yes",
                "check gang: every binding of the arbiter's side reserved, none of the baseline's: yes",
            ],
        ),
        # What one GPULedger PUT costs beside a ConfigMap of the same bytes, as shipped and as the
        # typed encoding before issue 44, with and without managed fields.
        (
            "arbiter_bench.py --ledger-puts 4 --put-sizes 1,3 --put-encodings product,typed "
            "--put-managed-fields both",
            ["| 3 | product | tracked |", "| 3 | typed | none |"],
        ),
    ],
)
def test_smoke_on_the_real_control_plane(script: str, expect: list[str]) -> None:
    from tests.real_cluster import unavailable

    why = unavailable()
    if why:
        pytest.skip(why)
    name, *flags = script.split()
    done = subprocess.run(
        [sys.executable, str(BENCH / name), "--smoke", *flags],
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


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone while we looked
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_terminated_benchmark_stops_its_control_plane() -> None:
    """SIGTERM (``timeout``, a CI runner) stops the control plane it started: its processes run in
    sessions of their own, so a benchmark that died without leaving its context managers orphaned
    etcd and kube-apiserver, which then skewed every later run on the machine."""
    from tests.real_cluster import unavailable

    why = unavailable()
    if why:
        pytest.skip(why)
    bench = subprocess.Popen(
        [sys.executable, str(BENCH / "standby_bench.py"), "--smoke"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 180  # the components start one after the other, each once
        started: list[int] = []  # the one before answers: slow on a loaded CI machine
        while len(started) < 4 and time.monotonic() < deadline:  # etcd and the three components
            time.sleep(0.2)
            started = _children(bench.pid)
        assert len(started) >= 4, f"the control plane did not start: children {started}"
        bench.send_signal(signal.SIGTERM)
        assert bench.wait(timeout=60) == 128 + signal.SIGTERM
    finally:
        if bench.poll() is None:
            bench.kill()
    deadline = time.monotonic() + 20
    while any(_alive(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [p for p in started if _alive(p)] == []

"""A standby controller replica is quiet: its CPU over 60 s on the real control plane, beside the leader's.

    .venv/bin/python bench/standby_bench.py [--nodes 20] [--seconds 60] [--sync-seconds 5] [--smoke]

Two ``vgpu-guard serve controller`` processes share one Lease on a real control plane
(kube-apiserver 1.20.2 from ``scripts/control-plane build``) with N heartbeated GPU nodes; the
first to hold the Lease leads. Over ``--seconds`` the CPU time (utime + stime from /proc) of each
process is read, as a share of one core. The target (issue 19): the standby under 1 %. The
baseline in the same run is the leader, which holds the same caches and renews the same Lease.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scheduler_throughput_bench import (
    Fleet,
    background,
    controller_process,
    install_crds,
    machine,
    namespace_ready,
)

from vgpu_guard.controlplane.build import cached_binaries, ensure_built
from vgpu_guard.controlplane.launch import ControlPlane
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.errors import NotFound
from vgpu_guard.kube.resources import LEASES

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


async def holder(admin: AioClusterClient) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(NotFound):
            lease = await admin.get(LEASES, "vgpu-guard-controller", namespace="vgpu-guard")
            who = (lease.get("spec") or {}).get("holderIdentity")
            if who:
                return str(who)
        await asyncio.sleep(0.2)
    raise RuntimeError("no replica took the Lease within 60 s")


async def run(args: argparse.Namespace) -> int:
    binaries = cached_binaries() or ensure_built(lambda line: print(line, file=sys.stderr))
    with (
        tempfile.TemporaryDirectory(prefix="vgpu-standby-") as tmp,
        ControlPlane(binaries, Path(tmp) / "plane") as plane,
    ):
        admin = await AioClusterClient.from_kubeconfig(str(plane.kubeconfig))
        try:
            await install_crds(admin)
            fleet = Fleet(admin, args.nodes)
            await fleet.create()
            await namespace_ready(admin, "vgpu-guard")
            async with background(fleet.heartbeat()):
                common = {
                    "qps": 50,
                    "burst": 100,
                    "namespace": "vgpu-guard",
                    "workdir": Path(tmp),
                    "policy": "binpack",
                }
                with controller_process(plane, identity="replica-a", **common) as a:  # type: ignore[arg-type]
                    await holder(admin)
                    with controller_process(plane, identity="replica-b", **common) as b:  # type: ignore[arg-type]
                        await asyncio.sleep(args.sync_seconds)  # both synced
                        leader = await holder(admin)
                        procs = {"replica-a": a, "replica-b": b}
                        before = {who: cpu_seconds(p.pid) for who, p in procs.items()}
                        await asyncio.sleep(args.seconds)
                        used = {who: cpu_seconds(p.pid) - before[who] for who, p in procs.items()}
        finally:
            await admin.close()
    standby = next(w for w in used if w != leader)
    print(f"machine: {machine()}")
    print(f"{args.nodes} heartbeated nodes, {args.seconds:.0f} s, Lease retry period 2 s")
    print("| replica | role | CPU over the window | share of one core |")
    print("|---|---|---|---|")
    for who, role in ((leader, "leader (baseline)"), (standby, "standby")):
        print(f"| {who} | {role} | {used[who]:.2f} s | {100 * used[who] / args.seconds:.2f} % |")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument(
        "--sync-seconds", type=float, default=5.0, help="the second replica's start before the window"
    )
    parser.add_argument(
        "--smoke", action="store_true", help="3 nodes, a 1 s window 1 s after the start: it runs and reports"
    )
    args = parser.parse_args()
    if args.smoke:
        args.nodes, args.seconds, args.sync_seconds = 3, 1.0, 1.0
    # `timeout` and CI runners stop a run with SIGTERM: leave through the context managers, so the
    # control plane (its processes each in a session of their own) is stopped, not orphaned.
    signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())

"""Ghost ledger entries and a placement elsewhere: how long a canary on another node waits (issue 36).

    .venv/bin/python bench/ghost_entries_bench.py [--ghosts 3000] [--repeat 3] [--smoke]

A namespace deleted while the controller was down leaves ledger entries whose pods are gone. The
controller confirms such entries against the API server before releasing them, and its pass
decides nothing until then. One node's ledger holds ``--ghosts`` such entries; a canary pod asks
for a GPU on another node. Measured: the controller's start (informers synced) to the canary bound,
with the ghosts and, as the baseline in the same run, without them; ``added`` is the difference.
In-process on the API double (cached inputs, as the running controller reads), so it measures the
controller's own work and its round trips to the double, not a network.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prometheus_client import CollectorRegistry

from tests.controller.allocation_testkit import Cluster, gpu_node, running, vgpu_pod
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.controller.allocation import AllocationController
from vgpu_guard.controller.inputs import CachedInputs
from vgpu_guard.engine.ledger import Allocation, ContainerGrant, DeviceGrant, NodeLedger, encode_ledger
from vgpu_guard.kube.resources import LEDGERS


def ghosts(count: int) -> dict[str, Allocation]:
    grant = ContainerGrant(0, "cuda", (DeviceGrant("GPU-gpu-b-0", 1, 0),))
    return {
        f"ghost-{i}": Allocation(f"ghost-{i}", "gone", f"p{i}", "", (grant,), committed=True)
        for i in range(count)
    }


async def canary_seconds(count: int) -> float:
    """Controller start to the canary on gpu-a bound, with ``count`` ghosts on gpu-b."""
    cluster = Cluster([gpu_node("gpu-a", 1), gpu_node("gpu-b", 1)])
    if count:
        cluster.store.create(LEDGERS, encode_ledger(NodeLedger("gpu-b", ghosts(count))))
    canary = vgpu_pod("canary", memory=1024)
    canary["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "gpu-a"}
    cluster.create_pod(canary)
    client = MemoryClusterClient(cluster.store)
    inputs = CachedInputs(client)
    controller = AllocationController(
        client,
        cluster.config,
        identity="bench",
        clock=cluster.clock,
        inputs=inputs,
        registry=CollectorRegistry(),
    )
    async with running(inputs):
        started = time.perf_counter()
        while "canary" not in cluster.bound():
            await controller.run_once()
        return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ghosts", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, so the script cannot rot")
    args = parser.parse_args()
    count, repeat = (200, 1) if args.smoke else (args.ghosts, args.repeat)
    base = [asyncio.run(canary_seconds(0)) for _ in range(repeat)]
    with_ghosts = [asyncio.run(canary_seconds(count)) for _ in range(repeat)]
    b, g = statistics.median(base), statistics.median(with_ghosts)
    print(f"machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    print("| ghost entries on another node | canary bound after (median) | added |")
    print("|---:|---:|---:|")
    print(f"| 0 (baseline) | {b * 1000:.0f} ms | |")
    print(f"| {count} | {g * 1000:.0f} ms | {(g - b) * 1000:+.0f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

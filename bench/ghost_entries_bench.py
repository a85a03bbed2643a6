"""Ghost ledger entries and a placement elsewhere: how long a canary on another node waits (issue 36).

    .venv/bin/python bench/ghost_entries_bench.py [--ghosts 3000] [--repeat 3] [--smoke]
    .venv/bin/python bench/ghost_entries_bench.py --real [--ghosts 3000] [--repeat 3] [--smoke]

A namespace deleted while the controller was down leaves ledger entries whose pods are gone. The
controller confirms such entries against the API server before releasing them, and its pass
decides nothing until then. One node's ledger holds ``--ghosts`` such entries; a canary pod asks
for a GPU on another node. Measured: the controller's start (informers synced) to the canary bound,
with the ghosts and, as the baseline in the same run, without them; ``added`` is the difference.
In-process on the API double (cached inputs, as the running controller reads), so it measures the
controller's own work and its round trips to the double, not a network.

``--real``: the issue's setting. A real control plane (kube-apiserver 1.20.2 from ``scripts/control-plane
build``), two heartbeated GPU nodes, the ghosts in node-0001's GPULedger (namespace ``gone``, which
does not exist: deleted with its pods), the canary pinned to node-0000 before the controller starts;
then ``vgpu-guard serve controller`` is started as a process and the time from its start to the
canary bound (nodeName set, seen by a watch) is measured. The baseline is the same without the
ghosts, alternating with it, so both include the process's start and its informers' first LIST.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import platform
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # scheduler_throughput_bench, for --real

from prometheus_client import CollectorRegistry

from tests.controller.allocation_testkit import Cluster, gpu_node, running, vgpu_pod
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.controller.allocation import AllocationController
from vgpu_guard.controller.inputs import CachedInputs
from vgpu_guard.engine.ledger import Allocation, ContainerGrant, DeviceGrant, NodeLedger, encode_ledger
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.errors import NotFound
from vgpu_guard.kube.resources import LEDGERS, PODS


def ghosts(count: int, node: str = "gpu-b") -> dict[str, Allocation]:
    grant = ContainerGrant(0, "cuda", (DeviceGrant(f"GPU-{node}-0", 1, 0),))
    return {
        f"ghost-{i}": Allocation(f"ghost-{i}", "gone", f"p{i}", "default", (grant,), committed=True)
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


# -- the real control plane -------------------------------------------------------------------------

CANARY_NODE, GHOST_NODE = "node-0000", "node-0001"
REAL_DEADLINE_SECONDS = 120.0


async def real_canary_seconds(plane: Any, admin: AioClusterClient, workdir: Path, count: int) -> float:
    """Controller process start to the canary on node-0000 bound, with ``count`` ghosts on node-0001."""
    from scheduler_throughput_bench import controller_process

    for name in (CANARY_NODE, GHOST_NODE):
        with contextlib.suppress(NotFound):
            await admin.delete(LEDGERS, name)
    with contextlib.suppress(NotFound):
        await admin.delete(PODS, "canary", namespace="bench", grace_period_seconds=0)
    while True:  # the previous canary gone before the next is created
        try:
            await admin.get(PODS, "canary", namespace="bench")
        except NotFound:
            break
        await asyncio.sleep(0.05)
    if count:
        await admin.create(LEDGERS, encode_ledger(NodeLedger(GHOST_NODE, ghosts(count, GHOST_NODE))))
    canary = vgpu_pod("canary", memory=1024, namespace="bench")
    canary["spec"]["nodeSelector"] = {"kubernetes.io/hostname": CANARY_NODE}
    canary["metadata"].pop("uid", None)
    canary["metadata"].pop("creationTimestamp", None)
    created = await admin.create(PODS, canary, namespace="bench")
    watch = admin.watch(
        PODS,
        namespace="bench",
        resource_version=created["metadata"]["resourceVersion"],
        field_selector="metadata.name=canary",
        timeout_seconds=int(REAL_DEADLINE_SECONDS),
    )
    common = {"qps": 50, "burst": 100, "namespace": "vgpu-guard", "workdir": workdir, "policy": "binpack"}
    with controller_process(plane, identity=f"ghosts-{count}", **common):  # type: ignore[arg-type]
        started = time.perf_counter()
        async for event in watch:
            if (event.object.get("spec") or {}).get("nodeName"):
                return time.perf_counter() - started
    raise RuntimeError(f"the canary was not bound within {REAL_DEADLINE_SECONDS:.0f} s ({count} ghosts)")


async def real(count: int, repeat: int) -> tuple[list[float], list[float], str]:
    from scheduler_throughput_bench import Fleet, background, install_crds, machine, namespace_ready

    from vgpu_guard.controlplane.build import cached_binaries, ensure_built
    from vgpu_guard.controlplane.launch import ControlPlane

    binaries = cached_binaries() or ensure_built(lambda line: print(line, file=sys.stderr))
    base: list[float] = []
    with_ghosts: list[float] = []
    with (
        tempfile.TemporaryDirectory(prefix="vgpu-ghosts-") as tmp,
        ControlPlane(binaries, Path(tmp) / "plane") as plane,
    ):
        admin = await AioClusterClient.from_kubeconfig(str(plane.kubeconfig))
        try:
            await install_crds(admin)
            fleet = Fleet(admin, 2)
            await fleet.create()
            for namespace in ("vgpu-guard", "bench"):
                await namespace_ready(admin, namespace)
            async with background(fleet.heartbeat()):
                for _ in range(repeat):  # alternating, so a slow spell of the machine hits both
                    base.append(await real_canary_seconds(plane, admin, Path(tmp), 0))
                    with_ghosts.append(await real_canary_seconds(plane, admin, Path(tmp), count))
        finally:
            await admin.close()
    return base, with_ghosts, machine()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ghosts", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--real", action="store_true", help="on the real control plane (kube-apiserver 1.20.2)"
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, so the script cannot rot")
    args = parser.parse_args()
    count, repeat = (200, 1) if args.smoke else (args.ghosts, args.repeat)
    if args.real:
        # `timeout` and CI stop a run with SIGTERM: leave through the context managers, so the
        # control plane and the controller process are stopped, not orphaned.
        signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
        base, with_ghosts, where = asyncio.run(real(count, repeat))
        setting = "real control plane (kube-apiserver 1.20.2), controller process start to canary bound"
    else:
        base = [asyncio.run(canary_seconds(0)) for _ in range(repeat)]
        with_ghosts = [asyncio.run(canary_seconds(count)) for _ in range(repeat)]
        where = f"{platform.processor() or platform.machine()}, Python {platform.python_version()}"
        setting = "in-process on the API double, controller start to canary bound"
    b, g = statistics.median(base), statistics.median(with_ghosts)
    print(f"machine: {where}")
    runs = f"baseline {[round(x, 3) for x in base]}, ghosts {[round(x, 3) for x in with_ghosts]}"
    print(f"{setting}; runs: {runs}")
    print("| ghost entries on another node | canary bound after (median) | added |")
    print("|---:|---:|---:|")
    print(f"| 0 (baseline) | {b * 1000:.0f} ms | |")
    print(f"| {count} | {g * 1000:.0f} ms | {(g - b) * 1000:+.0f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

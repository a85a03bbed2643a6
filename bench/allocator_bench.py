"""Allocator throughput at issue 9's scale, and how it grows: 500 -> 5,000 -> 20,000 nodes x 8 GPUs.

    .venv/bin/python bench/allocator_bench.py [--smoke] [--sizes 500,5000,20000] [--live-per-node 20]
                                              [--pods 2000] [--scan-pods 30]

At every size the cluster holds ``live-per-node`` live allocations per node (100,000 at 5,000
nodes, as issue 9 asks). For the indexed search (the product's) and the reference per-node /
per-device scan (``search="scan"``, the baseline measured in the same run), it prints the
allocator build time and single-pod placements/s, each placement decided AND committed (index
updated) as the controller does it; and the time of one 64-pod gang decision (indexed). The scan
is timed on a sample of ``scan-pods`` placements (fewer at 20,000 nodes: it is linear in the
cluster), so its placements/s is a rate over that sample. Each size runs in its own subprocess
(bounded: a size that takes longer than 300 s is skipped and reported).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from typing import Any, cast

TIMEOUT_S = 300


def node(name: str, gpus: int) -> dict[str, object]:
    records = "".join(
        f"GPU-{name}-{i},10,81920,NVIDIA-NVIDIA H100 80GB HBM3,true,hami-core:" for i in range(gpus)
    )
    return {
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"zone": f"z{int(name[1:]) % 4}"},
            "annotations": {"volcano.sh/node-vgpu-register": records},
        },
        "status": {
            "allocatable": {
                "pods": "110",
                "volcano.sh/vgpu-number": "80",
                "volcano.sh/vgpu-memory": str(81920 * gpus),
                "volcano.sh/vgpu-cores": "800",
            },
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def measure(nodes: int, gpus: int, live: int, pods: int, scan_pods: int) -> dict[str, Any]:
    """One size: build the snapshot, then time both searches; returns the numbers."""
    from vgpu_guard.configfile import load_config
    from vgpu_guard.engine.allocator import Allocator, Placement
    from vgpu_guard.engine.cluster import ClusterView
    from vgpu_guard.engine.ledger import Allocation, ContainerGrant, DeviceGrant, NodeLedger
    from vgpu_guard.engine.pod_request import ContainerRequest, PodRequest

    def pod(i: int, memory: int, group: str = "") -> PodRequest:
        return PodRequest(
            uid=f"new-{i}",
            namespace="bench",
            name=f"p{i}",
            containers=(
                ContainerRequest(index=0, name="c", count=1, memory=memory, percentage=None, cores=10),
            ),
            group=group,
        )

    rng = random.Random(7)
    config = load_config(env={})
    t0 = time.perf_counter()
    view = ClusterView.from_objects([node(f"n{i:05d}", gpus) for i in range(nodes)], config)
    allocations: dict[str, dict[str, Allocation]] = {}
    for j in range(live):
        n = f"n{rng.randrange(nodes):05d}"
        g = rng.randrange(gpus)
        a = Allocation(
            f"live-{j}",
            "bench",
            f"l{j}",
            "default",
            (ContainerGrant(0, "c", (DeviceGrant(f"GPU-{n}-{g}", 2048 * rng.randint(1, 3), 5),)),),
        )
        allocations.setdefault(n, {})[a.pod_uid] = a
    ledgers = {n: NodeLedger(n, allocs, "1") for n, allocs in allocations.items()}
    out: dict[str, Any] = {"nodes": nodes, "live": live, "snapshot_s": time.perf_counter() - t0}
    for search, count in (("indexed", pods), ("scan", scan_pods)):
        t = time.perf_counter()
        allocator = Allocator(view, ledgers, config=config, search=search)  # type: ignore[arg-type]
        build = time.perf_counter() - t
        t = time.perf_counter()
        placed = 0
        for i in range(count):
            result = allocator.place(pod(i, rng.choice([1024, 4096, 8192, 16384])))
            if isinstance(result, Placement):
                allocator.commit(result)
                placed += 1
        elapsed = time.perf_counter() - t
        out[search] = {
            "build_s": build,
            "count": count,
            "placed": placed,
            "seconds": elapsed,
            "rate": count / elapsed,
        }
        if search == "indexed":
            members = [pod(100_000 + i, 16384, group="gang") for i in range(64)]
            t = time.perf_counter()
            outcome = allocator.place_gang(members, min_member=64)
            out["gang_ms"] = (time.perf_counter() - t) * 1000
            out["gang_ok"] = bool(outcome.ok)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds)")
    parser.add_argument("--sizes", default=None, help="node counts, comma-separated")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--live-per-node", type=int, default=20)
    parser.add_argument("--pods", type=int, default=None, help="indexed placements per size")
    parser.add_argument("--scan-pods", type=int, default=None, help="scan sample at 5,000 nodes")
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--child-scan", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    pods = args.pods or (50 if args.smoke else 2000)
    if args.child:
        live = args.child * args.live_per_node
        print(json.dumps(measure(args.child, args.gpus, live, pods, args.child_scan)))
        return 0

    sizes = [int(s) for s in (args.sizes or ("50,200" if args.smoke else "500,5000,20000")).split(",")]
    scan_at_5000 = args.scan_pods or (5 if args.smoke else 30)
    print(
        f"allocator: {args.gpus} GPUs/node, {args.live_per_node} live allocations/node, "
        f"Python {sys.version.split()[0]}, {os.cpu_count()} cores; each size in its own subprocess"
    )
    print(
        f"{'nodes':>6s} {'live':>8s} {'snap s':>7s} {'idx build s':>11s} {'idx pl/s':>9s} {'gang ms':>8s} "
        f"{'scan build s':>12s} {'scan pl/s':>9s} {'(sample)':>8s} {'idx/scan':>8s}"
    )
    rows: dict[int, dict[str, Any]] = {}
    for nodes in sizes:
        # The scan is linear in the cluster: keep its sample's time about constant across sizes.
        scan = max(3, min(200, scan_at_5000 * 5000 // nodes)) if not args.smoke else scan_at_5000
        cmd = [sys.executable, os.path.abspath(__file__), "--child", str(nodes), "--child-scan", str(scan)]
        cmd += ["--gpus", str(args.gpus), "--live-per-node", str(args.live_per_node), "--pods", str(pods)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            print(f"{nodes:6d} skipped: longer than {TIMEOUT_S} s")
            continue
        if done.returncode != 0:
            print(f"{nodes:6d} failed (exit {done.returncode}): {done.stderr.strip()[-1500:]}")
            continue
        r = cast(dict[str, Any], json.loads(done.stdout.strip().splitlines()[-1]))
        rows[nodes] = r
        idx, sc = r["indexed"], r["scan"]
        print(
            f"{nodes:6d} {r['live']:8,d} {r['snapshot_s']:7.1f} {idx['build_s']:11.2f} {idx['rate']:9,.0f} "
            f"{r['gang_ms']:8.1f} {sc['build_s']:12.2f} {sc['rate']:9,.1f} {sc['count']:8d} "
            f"{idx['rate'] / sc['rate']:7.0f}x"
        )
    base = rows.get(sizes[0])
    if base and len(rows) > 1:
        print(f"growth relative to {sizes[0]:,} nodes (time per placement, gang time, build time):")
        for nodes, r in rows.items():
            print(
                f"  {nodes:6d} nodes ({nodes / sizes[0]:4.0f}x): indexed placement "
                f"{base['indexed']['rate'] / r['indexed']['rate']:5.1f}x, gang "
                f"{r['gang_ms'] / base['gang_ms']:5.1f}x, indexed build "
                f"{r['indexed']['build_s'] / base['indexed']['build_s']:5.1f}x, scan placement "
                f"{base['scan']['rate'] / r['scan']['rate']:5.1f}x"
            )
    at = rows.get(5000)
    if at:
        idx = at["indexed"]
        print(
            f"targets at 5,000 nodes: {idx['rate']:,.0f} placements/s (>= 2,000: "
            f"{'met' if idx['rate'] >= 2000 else 'MISSED'}); gang {at['gang_ms']:.1f} ms ok={at['gang_ok']} "
            f"(< 20 ms: {'met' if at['gang_ms'] < 20 else 'MISSED'}); "
            f"{idx['rate'] / at['scan']['rate']:.0f}x the scan (>= 10x: "
            f"{'met' if idx['rate'] / at['scan']['rate'] >= 10 else 'MISSED'})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Allocator throughput at issue 9's scale: 5,000 nodes x 8 GPUs, 100,000 live allocations.

    .venv/bin/python bench/allocator_bench.py [--nodes 5000] [--pods 2000] [--scan-pods 50]

Prints placements/s for the indexed search and the reference scan (the baseline), and the time of
one 64-pod gang decision. Each placement is decided and committed (index updated), as the
controller does it.
"""

from __future__ import annotations

import argparse
import random
import time

from vgpu_guard.configfile import load_config
from vgpu_guard.engine.allocator import Allocator, Placement
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.ledger import Allocation, ContainerGrant, DeviceGrant, NodeLedger
from vgpu_guard.engine.pod_request import ContainerRequest, PodRequest


def node(name: str, gpus: int) -> dict[str, object]:
    records = "".join(
        f"GPU-{name}-{i},10,81920,NVIDIA-NVIDIA H100 80GB HBM3,true,hami-core:" for i in range(gpus)
    )
    return {
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"zone": f"z{hash(name) % 4}"},
            "annotations": {"volcano.sh/node-vgpu-register": records},
        },
        "status": {
            "allocatable": {
                "volcano.sh/vgpu-number": "80",
                "volcano.sh/vgpu-memory": str(81920 * gpus),
                "volcano.sh/vgpu-cores": "800",
            },
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(i: int, memory: int, group: str = "") -> PodRequest:
    return PodRequest(
        uid=f"new-{i}",
        namespace="bench",
        name=f"p{i}",
        containers=(ContainerRequest(index=0, name="c", count=1, memory=memory, percentage=None, cores=10),),
        group=group,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--live", type=int, default=100_000)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--scan-pods", type=int, default=30)
    args = parser.parse_args()
    rng = random.Random(7)
    config = load_config(env={})
    t0 = time.perf_counter()
    view = ClusterView.from_objects([node(f"n{i:05d}", args.gpus) for i in range(args.nodes)], config)
    allocations: dict[str, dict[str, Allocation]] = {}
    for j in range(args.live):
        n = f"n{rng.randrange(args.nodes):05d}"
        g = rng.randrange(args.gpus)
        a = Allocation(
            f"live-{j}",
            "bench",
            f"l{j}",
            "default",
            (ContainerGrant(0, "c", (DeviceGrant(f"GPU-{n}-{g}", 2048 * rng.randint(1, 3), 5),)),),
        )
        allocations.setdefault(n, {})[a.pod_uid] = a
    ledgers = {n: NodeLedger(n, allocs, "1") for n, allocs in allocations.items()}
    t1 = time.perf_counter()
    print(
        f"snapshot: {args.nodes} nodes x {args.gpus} GPUs, {args.live} allocations built in {t1 - t0:.1f} s"
    )
    for search, count in (("indexed", args.pods), ("scan", args.scan_pods)):
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
        print(
            f"{search:8s}: allocator built in {build:.2f} s; {count} placements ({placed} placed) "
            f"in {elapsed:.3f} s = {count / elapsed:,.0f} placements/s"
        )
        if search == "indexed":
            members = [pod(100_000 + i, 16384, group="gang") for i in range(64)]
            t = time.perf_counter()
            outcome = allocator.place_gang(members, min_member=64)
            print(
                f"gang    : 64 members, ok={outcome.ok}, decided in {(time.perf_counter() - t) * 1000:.1f} ms"
            )


if __name__ == "__main__":
    main()

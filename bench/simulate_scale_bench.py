"""What ``vgpu-guard simulate`` costs as the fleet grows: 100, 300 and 1,000 nodes (issue 45 item 4).

    .venv/bin/python bench/simulate_scale_bench.py [--smoke] [--sizes 100,300,1000] [--keep DIR]

Each size is one scenario file: N Nodes of 8 x NVIDIA A10 24 GiB (registered through
``volcano.sh/node-vgpu-register`` as the device plugin writes it) and 3N single-vGPU pods of
8 GiB for Volcano (``schedulerName: volcano``), which all fit. ``vgpu-guard simulate -f FILE
-o json`` runs it in Volcano mode (the default) as a user would, in its own process, so each size's
peak RSS is its own (``wait4``). Reported per size: wall time, peak RSS, pods bound, ledger
entries, and the time against the first size's scaled by the pods (linear growth is 1.0).

``--keep DIR`` writes each size's scenario and JSON output there, to compare two builds' results:
the scenarios are deterministic, and so is simulate's output.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]
CARDS = 8
CARD_MIB = 24576
POD_MIB = 8192
PODS_PER_NODE = 3
# A size that takes longer is skipped and said so (the whole run stays bounded).
TIMEOUT_SECONDS = 1800


def node(i: int) -> Obj:
    """One GPU node as a kubelet and the device plugin report it: 8 A10 cards, Ready."""
    name = f"gpu-{i:04d}"
    cards = "".join(f"GPU-{name}-{c},10,{CARD_MIB},NVIDIA-NVIDIA A10,true,hami-core:" for c in range(CARDS))
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name},
            "annotations": {"volcano.sh/node-vgpu-register": cards},
        },
        "status": {
            "allocatable": {
                "cpu": "64",
                "memory": "256Gi",
                "pods": "110",
                "volcano.sh/vgpu-number": str(CARDS * 10),
                "volcano.sh/vgpu-memory": str(CARDS * CARD_MIB),
                "volcano.sh/vgpu-cores": str(CARDS * 100),
            },
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(i: int) -> Obj:
    """One 8 GiB single-vGPU pod for Volcano."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"job-{i:05d}", "namespace": "default"},
        "spec": {
            "schedulerName": "volcano",
            "containers": [
                {
                    "name": "train",
                    "image": "pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime",
                    "resources": {"limits": {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": POD_MIB}},
                }
            ],
        },
    }


def scenario(nodes: int) -> str:
    """The scenario of ``nodes`` nodes and 3 pods a node, as one multi-document YAML."""
    objects = [node(i) for i in range(nodes)] + [pod(i) for i in range(nodes * PODS_PER_NODE)]
    return yaml.safe_dump_all(objects, sort_keys=False)


def run_size(nodes: int, workdir: Path) -> Obj:
    """``vgpu-guard simulate -f`` on the scenario of ``nodes``, in its own process."""
    path = workdir / f"scenario-{nodes}.yaml"
    path.write_text(scenario(nodes), encoding="utf-8")
    out = workdir / f"simulate-{nodes}.json"
    # From the scenario's folder, so the output names it the same way whatever the folder is.
    command = [sys.executable, "-m", "vgpu_guard.cli.main", "simulate", "-f", path.name, "-o", "json"]
    started = time.perf_counter()
    with out.open("wb") as sink:
        child = subprocess.Popen(command, stdout=sink, stderr=subprocess.PIPE, cwd=workdir)
        _, status, usage = os.wait4(child.pid, 0)
    elapsed = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        error = child.stderr.read().decode() if child.stderr else ""
        return {"nodes": nodes, "failed": f"exit {child.returncode}: {error[-500:]}"}
    result = json.loads(out.read_text(encoding="utf-8"))
    return {
        "nodes": nodes,
        "pods": nodes * PODS_PER_NODE,
        "seconds": elapsed,
        "rss_mb": usage.ru_maxrss / 1024,
        "bound": sum(1 for p in result["pods"] if p["phase"] == "Bound"),
        "entries": sum(len(g["pods"]) for g in result["gpus"]),
        "sessions": len(result["volcano"]["sessions"]),
    }


def report(rows: list[Obj]) -> None:
    print("| nodes / pods | wall time | peak RSS | bound | ledger entries | sessions | per pod vs first |")
    print("|---|---|---|---|---|---|---|")
    first = next((r for r in rows if "failed" not in r), None)
    for row in rows:
        if "failed" in row:
            print(f"| {row['nodes']} | failed: {row['failed']} |")
            continue
        assert first is not None
        ratio = row["seconds"] / (first["seconds"] * row["pods"] / first["pods"])
        print(
            f"| {row['nodes']:,} / {row['pods']:,} | {row['seconds']:.1f} s | {row['rss_mb']:.0f} MB "
            f"| {row['bound']:,} | {row['entries']:,} | {row['sessions']} | {ratio:.2f} |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (10, 30)")
    parser.add_argument("--sizes", help="comma-separated node counts (default 100,300,1000)")
    parser.add_argument("--keep", metavar="DIR", help="keep each size's scenario and JSON output in DIR")
    args = parser.parse_args()
    sizes = [int(s) for s in (args.sizes or ("10,30" if args.smoke else "100,300,1000")).split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(args.keep or scratch).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        rows = []
        for nodes in sizes:
            rows.append(run_size(nodes, workdir))
            print(f"# {nodes} nodes done: {rows[-1]}", file=sys.stderr, flush=True)
        report(rows)
    return 0 if all("failed" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Ledger rebuild from bound pods at issue 9's scale: 100,000 pods on 5,000 nodes x 8 GPUs.

    .venv/bin/python bench/ledger_rebuild_bench.py [--smoke] [--nodes 5000] [--pods 100000]

What is timed is the controller's own code path, ``AllocationController.run_once`` (see
vgpu_guard/controller/allocation.py), against an in-process client that hands out prepared LIST
answers in one page and keeps what is written (no HTTP, no API double):

* ``adopt``: no GPULedger exists; every pod is bound (``spec.nodeName``) and carries the plugin's
  assignment annotation, so the pass decodes every pod's request and assignment, adopts it, and
  encodes and writes one ledger per node (what happens on the first start of the controller on a
  cluster already running GPU pods);
* ``steady``: the ledgers written by ``adopt`` exist; the pass decodes them, checks every entry
  against its pod (release/hold), reports invariants and builds the allocator (what every pass
  after a restart does).

Baseline, in the same run: ``json.loads`` of the same pods and nodes as the API server sends
them, i.e. the floor any rebuild pays before it looks at a single annotation.

Every case runs in a fresh subprocess, so its peak RSS (``VmHWM``) is its own; the
inputs are built in that subprocess before timing starts, and both the peak of the process and
the growth over the inputs are reported. The subprocess is set up as ``vgpu-guard serve
controller`` sets up its process: JSON logging at info with the audit trail (to /dev/null, so
its cost is counted) and the controller's GC settings (controller/gc_tuning.py).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from typing import Any, cast

Obj = dict[str, Any]
GPUS = 8
TIMEOUT_S = 300  # one case may not take longer than this (the spec's bound)


def node_obj(name: str) -> Obj:
    records = "".join(
        f"GPU-{name}-{i},10,81920,NVIDIA-NVIDIA H100 80GB HBM3,true,hami-core:" for i in range(GPUS)
    )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "labels": {"kubernetes.io/hostname": name, "zone": f"z{int(name[1:]) % 4}"},
            "annotations": {"volcano.sh/node-vgpu-register": records},
        },
        "spec": {},
        "status": {
            "allocatable": {
                "cpu": "192",
                "memory": "2Ti",
                "pods": "110",
                "volcano.sh/vgpu-number": str(10 * GPUS),
                "volcano.sh/vgpu-memory": str(81920 * GPUS),
                "volcano.sh/vgpu-cores": str(100 * GPUS),
            },
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod_obj(i: int, nodes: int) -> Obj:
    """Pod ``i``: one container, one vGPU; pods go round-robin over nodes, then GPUs (2-3 per GPU)."""
    node = f"n{i % nodes:05d}"
    gpu = (i // nodes) % GPUS
    memory = (4096, 8192, 12288, 16384)[i % 4]
    ids = f"GPU-{node}-{gpu},NVIDIA,{memory},10:"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"train-{i}",
            "namespace": f"team-{i % 20}",
            "uid": f"00000000-0000-0000-0000-{i:012d}",
            "resourceVersion": str(1000 + i),
            "labels": {"app": f"train-{i % 50}"},
            "annotations": {
                "volcano.sh/vgpu-node": node,
                "volcano.sh/vgpu-time": "1700000000",
                "volcano.sh/vgpu-ids-new": ids,
                "volcano.sh/devices-to-allocate": ids,
                "volcano.sh/bind-phase": "success",
                "volcano.sh/bind-time": "1700000000",
            },
        },
        "spec": {
            "schedulerName": "vgpu-guard",
            "nodeName": node,
            "containers": [
                {
                    "name": "cuda",
                    "image": "nvidia/cuda:12.4.0-base-ubuntu22.04",
                    "resources": {
                        "limits": {
                            "volcano.sh/vgpu-number": "1",
                            "volcano.sh/vgpu-memory": str(memory),
                            "volcano.sh/vgpu-cores": "10",
                        }
                    },
                }
            ],
        },
        "status": {"phase": "Running"},
    }


def api_shaped(pod: Obj, i: int) -> Obj:
    """``pod`` as kube-apiserver 1.20 returns a running Deployment replica: managed fields, owner,
    the defaulted spec (DNS and restart policy, service account, the two not-ready/unreachable
    tolerations, the token volume and its mount), container details, and the kubelet's status with
    per-pod condition times, IPs and container status. ``pod_obj`` alone is what the controller
    keeps of such a pod; this is what it is handed (and must project) on a real cluster."""
    meta, spec = pod["metadata"], pod["spec"]
    stamp = f"2026-11-27T10:{i // 3600 % 60:02d}:{i % 60:02d}Z"
    token = f"kube-api-access-{i % 16**5:05x}"  # five characters, as the API server names it
    meta.update(
        generateName=f"train-{i % 50}-7d9f8c6b5-",
        creationTimestamp=stamp,
        ownerReferences=[
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": f"train-{i % 50}-7d9f8c6b5",
                "uid": f"rs-{i % 50:08d}",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        managedFields=[
            {
                "manager": "kube-controller-manager",
                "operation": "Update",
                "apiVersion": "v1",
                "time": stamp,
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:generateName": {}, "f:labels": {".": {}}},
                    "f:spec": {"f:containers": {}, "f:dnsPolicy": {}},
                },
            },
            {
                "manager": "kubelet",
                "operation": "Update",
                "apiVersion": "v1",
                "time": stamp,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": {"f:conditions": {}, "f:podIP": {}}},
            },
        ],
    )
    meta["labels"]["pod-template-hash"] = "7d9f8c6b5"
    container = spec["containers"][0]
    container.update(
        imagePullPolicy="IfNotPresent",
        terminationMessagePath="/dev/termination-log",
        terminationMessagePolicy="File",
        volumeMounts=[
            {"name": token, "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
        ],
    )
    spec.update(
        dnsPolicy="ClusterFirst",
        enableServiceLinks=True,
        preemptionPolicy="PreemptLowerPriority",
        priority=0,
        restartPolicy="Always",
        securityContext={},
        serviceAccount="default",
        serviceAccountName="default",
        terminationGracePeriodSeconds=30,
        tolerations=[
            {
                "key": f"node.kubernetes.io/{t}",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
            for t in ("not-ready", "unreachable")
        ],
        volumes=[
            {
                "name": token,
                "projected": {
                    "defaultMode": 420,
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {
                            "configMap": {
                                "name": "kube-root-ca.crt",
                                "items": [{"key": "ca.crt", "path": "ca.crt"}],
                            }
                        },
                    ],
                },
            }
        ],
    )
    ip = f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"
    pod["status"] = {
        "phase": "Running",
        "conditions": [
            {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": stamp}
            for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
        ],
        "hostIP": f"192.168.{i % 5000 >> 8}.{i % 256}",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": stamp,
        "qosClass": "BestEffort",
        "containerStatuses": [
            {
                "name": "cuda",
                "state": {"running": {"startedAt": stamp}},
                "lastState": {},
                "ready": True,
                "restartCount": 0,
                "image": container["image"],
                "imageID": "docker-pullable://nvidia/cuda@sha256:" + "0" * 64,
                "containerID": f"containerd://{i:064x}",
                "started": True,
            }
        ],
    }
    return pod


class PreparedClient:
    """The slice of ``ClusterClient`` one allocation pass uses: LISTs in one page, writes kept."""

    def __init__(self, objects: dict[str, list[Obj]]) -> None:
        self.objects = objects
        self.written: list[Obj] = []

    async def list(self, resource: Any, **_: Any) -> Any:
        """The prepared items, handed over: like a decoded LIST response, only the caller holds them."""
        from vgpu_guard.kube.client import ObjectList

        return ObjectList(items=self.objects.pop(resource.plural, []), resource_version="1")

    async def create(self, resource: Any, obj: Mapping[str, Any], **_: Any) -> Obj:
        body = dict(obj)
        body["metadata"] = {**obj["metadata"], "resourceVersion": "1"}
        if resource.plural != "events":
            self.written.append(body)
        return body

    async def replace(self, resource: Any, obj: Mapping[str, Any]) -> Obj:
        return await self.create(resource, obj)

    async def close(self) -> None:
        return None


def rss_now_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mb() -> float:
    """This process's peak resident set in MiB: ``VmHWM``, the high-water mark of its own memory
    (``ru_maxrss`` survives exec, so a subprocess would report a larger parent's size)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def child(case: str, nodes: int, pods: int, ledgers_path: str) -> dict[str, Any]:
    """Build the inputs, then time one case; returns what the parent prints."""
    from vgpu_guard.controller.gc_tuning import tune_gc
    from vgpu_guard.logs import setup_logging

    # As `vgpu-guard serve controller` runs (every case, the baseline too): JSON logging with the
    # audit trail on (to /dev/null, so its cost is counted) and the controller's GC settings.
    stderr, sys.stderr = sys.stderr, open(os.devnull, "w")  # noqa: SIM115 - lives with the process
    setup_logging("info")
    sys.stderr = stderr
    tune_gc()
    node_objs = [node_obj(f"n{i:05d}") for i in range(nodes)]
    pod_objs = [pod_obj(i, nodes) for i in range(pods)]
    if case == "baseline":
        pods_raw, nodes_raw = json.dumps({"items": pod_objs}), json.dumps({"items": node_objs})
        del pod_objs, node_objs
        gc.collect()
        before = rss_now_mb()
        t = time.perf_counter()
        decoded = len(json.loads(pods_raw)["items"]) + len(json.loads(nodes_raw)["items"])
        elapsed = time.perf_counter() - t
        return {"seconds": elapsed, "rss_before": before, "peak": peak_rss_mb(), "objects": decoded}

    from prometheus_client import CollectorRegistry

    from vgpu_guard.configfile import load_config
    from vgpu_guard.controller.allocation import AllocationController
    from vgpu_guard.kube.client import ClusterClient

    # One pass over everything listed: the test suite's listed source (the product reads informers).
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tests.controller.listed_inputs import ListedInputs

    objects: dict[str, list[Obj]] = {"pods": pod_objs, "nodes": node_objs}
    if case == "steady":
        with open(ledgers_path) as f:
            objects["gpuledgers"] = json.load(f)
    ledger_count = len(objects.get("gpuledgers", []))
    client = PreparedClient(objects)
    controller = AllocationController(
        cast(ClusterClient, client),
        load_config(env={}),
        identity="bench",
        clock=lambda: 1_700_000_100,
        registry=CollectorRegistry(),
        inputs=ListedInputs(cast(ClusterClient, client)),
    )
    gc.collect()
    before = rss_now_mb()
    t = time.perf_counter()
    result = asyncio.run(controller.run_once())
    elapsed = time.perf_counter() - t
    peak = peak_rss_mb()
    if result.errors or result.conflicts:
        raise SystemExit(f"{case}: the pass failed: {result.errors[:3]} conflicts={result.conflicts}")
    if case == "adopt":
        if len(result.adopted) != pods:
            raise SystemExit(f"adopt: {len(result.adopted)} of {pods} pods adopted")
        with open(ledgers_path, "w") as f:
            json.dump(client.written, f)
    elif result.changed:
        raise SystemExit(f"steady: the pass changed something: {result}")
    entries = sum(len(o.get("spec", {}).get("allocations", []) or []) for o in client.written)
    return {
        "seconds": elapsed,
        "rss_before": before,
        "peak": peak,
        "objects": len(result.adopted) if case == "adopt" else ledger_count,
        "ledgers_written": len(client.written),
        "entries": entries,
    }


def run_case(case: str, nodes: int, pods: int, ledgers_path: str) -> dict[str, Any] | None:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", case, "--nodes", str(nodes)]
    cmd += ["--pods", str(pods), "--ledgers", ledgers_path]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        print(f"{case}: skipped, longer than {TIMEOUT_S} s")
        return None
    if done.returncode != 0:
        print(f"{case}: failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
        return None
    return cast(dict[str, Any], json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (seconds)")
    parser.add_argument("--nodes", type=int, default=None)
    parser.add_argument("--pods", type=int, default=None)
    parser.add_argument("--child", choices=("baseline", "adopt", "steady"), help=argparse.SUPPRESS)
    parser.add_argument("--ledgers", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    nodes = args.nodes or (50 if args.smoke else 5000)
    pods = args.pods or (1000 if args.smoke else 100_000)
    if args.child:
        print(json.dumps(child(args.child, nodes, pods, args.ledgers)))
        return 0

    print(
        f"ledger rebuild: {pods:,} bound pods on {nodes:,} nodes x {GPUS} GPUs, "
        f"Python {sys.version.split()[0]}"
    )
    print("each case in a fresh subprocess; RSS in MB; 'inputs' = RSS with the objects built, before timing")
    results: dict[str, dict[str, Any] | None] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ledgers.json")
        for case in ("baseline", "adopt", "steady"):
            if case == "steady" and not results.get("adopt"):
                results[case] = None
                print("steady: skipped, needs the ledgers written by adopt")
                continue
            results[case] = run_case(case, nodes, pods, path)
    base = results["baseline"]
    print(f"{'case':34s} {'time s':>8s} {'x base':>7s} {'inputs':>7s} {'peak':>7s} {'growth':>7s}")
    labels = {
        "baseline": "baseline: json.loads pods+nodes",
        "adopt": "adopt: no ledgers -> 1 per node",
        "steady": "steady: decode ledgers + allocator",
    }
    for case, label in labels.items():
        r = results[case]
        if r is None:
            print(f"{label:34s} {'skipped':>8s}")
            continue
        ratio = f"{r['seconds'] / base['seconds']:.1f}" if base else "-"
        print(
            f"{label:34s} {r['seconds']:8.2f} {ratio:>7s} {r['rss_before']:7.0f} {r['peak']:7.0f} "
            f"{r['peak'] - r['rss_before']:7.0f}"
        )
    adopt = results["adopt"]
    if adopt:
        print(
            f"adopt wrote {adopt['ledgers_written']:,} ledgers with {adopt['entries']:,} entries; "
            f"targets: < 5 s -> {'met' if adopt['seconds'] < 5 else 'MISSED'}, "
            f"peak RSS < 500 MB -> {'met' if adopt['peak'] < 500 else 'MISSED'}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

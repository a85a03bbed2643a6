"""Webhook throughput and latency over TLS against a bare aiohttp TLS server (the floor).

    .venv/bin/python bench/webhook_bench.py [--smoke] [--peak 16] [--duration 8]

Servers, in this process on loopback, one TLS certificate from a throwaway CA (trustme):
* floor: a bare aiohttp app that reads the body and answers one constant AdmissionReview;
* ours: ``running_webhook`` (the product's server) with a static view of 100 H100 nodes,
  ``/mutate/pods`` and ``/validate/pods`` with a realistic vGPU pod (1 vGPU, memory and cores),
  logging as in production (JSON, one audit line per review, to /dev/null).

Load: a closed-loop aiohttp client (keep-alive, ``limit`` = concurrency, one TLS handshake per
connection) in a SEPARATE PROCESS (multiprocessing, spawn): on a 2-core machine client and server
then get one core each instead of sharing the server's event loop. Every run is bounded by time
and by a request count; a short warm-up is not recorded. Runs are interleaved (floor, mutate,
validate at each concurrency) so drift hits all three alike.

Reported: requests/s, p50 and p99 latency per run; throughput as a ratio to the floor at peak
concurrency (target >= 0.8) and p99 added over the floor at half of peak concurrency
(target < 2 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import multiprocessing
import os
import platform
import ssl
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

Obj = dict[str, Any]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


# --- load generator (runs in the child process) -------------------------------------------------


@dataclass(frozen=True)
class LoadSpec:
    """One load run, as handed to the load-generator process (picklable).

    ``rate`` None: closed loop, ``concurrency`` workers POST ``body`` until ``duration`` or
    ``max_requests``. With ``rate``: open loop instead, one request every ``1/rate`` s on up to
    ``concurrency`` connections, each latency counted from the moment the request was DUE (so a
    stalled server cannot hide its queue: no coordinated omission).
    """

    url: str
    body: bytes
    ca_pem: str
    concurrency: int
    duration: float
    max_requests: int
    warmup: float
    rate: float | None = None


def load(spec: LoadSpec) -> Obj:
    """Run one ``LoadSpec`` in this (child) process."""
    return asyncio.run(_load(spec))


async def _load(spec: LoadSpec) -> Obj:
    url, body, concurrency, duration = spec.url, spec.body, spec.concurrency, spec.duration
    max_requests, warmup, rate = spec.max_requests, spec.warmup, spec.rate
    context = ssl.create_default_context(cadata=spec.ca_pem)
    headers = {"Content-Type": "application/json"}
    latencies: list[float] = []
    errors = 0
    first: list[bytes] = []
    connector = aiohttp.TCPConnector(ssl=context, limit=concurrency, force_close=False)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> bool:
            async with session.post(url, data=body, headers=headers) as response:
                data = await response.read()
                if not first:
                    first.append(data)
                return response.status == 200

        # Warm-up: open the connections (TLS handshakes) and warm the server's caches.
        warm_until = time.perf_counter() + warmup

        async def warm() -> None:
            while time.perf_counter() < warm_until:
                await one()

        await asyncio.gather(*(warm() for _ in range(concurrency)))
        start = time.perf_counter()
        deadline = start + duration
        sent = 0

        async def worker() -> None:
            nonlocal sent, errors
            while sent < max_requests and time.perf_counter() < deadline:
                sent += 1
                t = time.perf_counter()
                ok = await one()
                latencies.append(time.perf_counter() - t)
                if not ok:
                    errors += 1

        async def scheduled(due: float, slots: asyncio.Semaphore) -> None:
            nonlocal errors
            async with slots:
                ok = await one()
            latencies.append(time.perf_counter() - due)
            if not ok:
                errors += 1

        if rate is None:
            await asyncio.gather(*(worker() for _ in range(concurrency)))
        else:
            slots, tasks = asyncio.Semaphore(concurrency), []
            for i in range(min(max_requests, int(duration * rate))):
                due = start + i / rate
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                tasks.append(asyncio.create_task(scheduled(due, slots)))
            await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
    latencies.sort()
    n = len(latencies)
    return {
        "requests": n,
        "errors": errors,
        "seconds": elapsed,
        "rps": n / elapsed if elapsed else 0.0,
        "p50_ms": latencies[n // 2] * 1000 if n else 0.0,
        "p99_ms": latencies[min(n - 1, int(n * 0.99))] * 1000 if n else 0.0,
        "first": first[0].decode() if first else "",
    }


# --- objects ----------------------------------------------------------------------------------------


def h100_node(name: str) -> Obj:
    records = "".join(
        f"GPU-{name}-{i},10,81920,NVIDIA-NVIDIA H100 80GB HBM3,true,hami-core:" for i in range(8)
    )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {}, "annotations": {"volcano.sh/node-vgpu-register": records}},
        "spec": {},
        "status": {
            "allocatable": {
                "cpu": "192",
                "memory": "2Ti",
                "volcano.sh/vgpu-number": "80",
                "volcano.sh/vgpu-memory": str(8 * 81920),
                "vgpu-cores": "800",
                "volcano.sh/vgpu-cores": "800",
            },
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def vgpu_pod() -> Obj:
    """A pod as a training job controller would create it: one vGPU container plus a sidecar."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train-7f9c-worker-0",
            "namespace": "ml-team",
            "labels": {"app": "train", "job-name": "train-7f9c", "volcano.sh/job-name": "train-7f9c"},
            "annotations": {"scheduling.k8s.io/group-name": "train-7f9c"},
        },
        "spec": {
            "schedulerName": "volcano",
            "restartPolicy": "Never",
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "trainer",
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "command": ["python", "train.py", "--epochs", "10"],
                    "env": [
                        {"name": "NCCL_DEBUG", "value": "WARN"},
                        {"name": "OMP_NUM_THREADS", "value": "8"},
                    ],
                    "resources": {
                        "limits": {
                            "cpu": "8",
                            "memory": "64Gi",
                            "volcano.sh/vgpu-number": "1",
                            "volcano.sh/vgpu-memory": "20480",
                            "volcano.sh/vgpu-cores": "30",
                        },
                        "requests": {"cpu": "8", "memory": "64Gi"},
                    },
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                },
                {
                    "name": "log-shipper",
                    "image": "fluent/fluent-bit:3.0",
                    "resources": {"limits": {"cpu": "200m", "memory": "128Mi"}},
                },
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}],
        },
    }


def review(obj: Obj) -> Obj:
    gvk = {"group": "", "version": "v1", "kind": "Pod"}
    gvr = {"group": "", "version": "v1", "resource": "pods"}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "name": obj["metadata"]["name"],
            "namespace": obj["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:volcano:vc-controller",
                "groups": ["system:authenticated"],
            },
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


# --- servers --------------------------------------------------------------------------------------------


@asynccontextmanager
async def floor_server(context: ssl.SSLContext) -> AsyncIterator[int]:
    answer = json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": "00000000-0000-0000-0000-000000000000", "allowed": True},
        }
    ).encode()

    async def handle(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=answer, content_type="application/json")

    app = web.Application()
    app.router.add_post("/mutate/pods", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


def percentile_row(name: str, conc: int, r: Obj | None, floor: Obj | None) -> str:
    if r is None:
        return f"{name:16s} {conc:5d} {'skipped':>9s}"
    ratio = f"{r['rps'] / floor['rps']:.2f}" if floor and floor["rps"] else "-"
    added = f"{r['p99_ms'] - floor['p99_ms']:+.2f}" if floor and name != "floor" else "-"
    return (
        f"{name:16s} {conc:5d} {r['rps']:9,.0f} {ratio:>7s} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {added:>9s}"
        f" {r['requests']:9,d} {r['errors']:6d}"
    )


async def run(args: argparse.Namespace) -> int:
    import trustme
    from prometheus_client import CollectorRegistry

    from vgpu_guard.configfile import load_config
    from vgpu_guard.engine.cluster import ClusterView
    from vgpu_guard.webhook.server import running_webhook
    from vgpu_guard.webhook.views import StaticViewSource

    config = load_config(env={})
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    ca_pem = ca.cert_pem.bytes().decode()
    views = StaticViewSource(ClusterView.from_objects([h100_node(f"h{i:03d}") for i in range(100)], config))

    def server_context() -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(context)
        return context

    pod_body = json.dumps(review(vgpu_pod())).encode()
    half = max(1, args.peak // 2)
    levels = sorted({1, half, args.peak})
    spawn = multiprocessing.get_context("spawn")
    loop = asyncio.get_running_loop()
    results: dict[tuple[str, int], Obj | None] = {}
    open_loop: dict[str, Obj | None] = {}
    with tempfile.TemporaryDirectory():
        async with (
            floor_server(server_context()) as floor_port,
            running_webhook(
                config=config,
                views=views,
                ssl_context=server_context(),
                registry=CollectorRegistry(),
                host="127.0.0.1",
                port=0,
                ops_port=0,
            ) as ours,
        ):
            targets = {
                "floor": f"https://127.0.0.1:{floor_port}/mutate/pods",
                "mutate (ours)": f"https://127.0.0.1:{ours.port}/mutate/pods",
                "validate (ours)": f"https://127.0.0.1:{ours.port}/validate/pods",
            }
            with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:

                async def measure(url: str, concurrency: int, rate: float | None = None) -> Obj | None:
                    spec = LoadSpec(
                        url,
                        pod_body,
                        ca_pem,
                        concurrency,
                        args.duration,
                        args.max_requests,
                        args.warmup,
                        rate,
                    )
                    try:
                        return await asyncio.wait_for(
                            loop.run_in_executor(pool, load, spec), args.duration + 60
                        )
                    except TimeoutError:
                        return None

                for conc in levels:
                    for name, url in targets.items():
                        results[name, conc] = await measure(url, conc)
                # Open loop at half of OUR peak throughput: the same offered load for every target,
                # below saturation, so the p99 difference is the added service time, not a queue.
                peak_ours = results.get(("mutate (ours)", args.peak))
                if peak_ours:
                    for name, url in targets.items():
                        open_loop[name] = await measure(url, 64, rate=peak_ours["rps"] / 2)
    # Print.
    print(
        f"webhook over TLS on loopback; Python {sys.version.split()[0]}; "
        f"{os.cpu_count()} cores, {cpu_model()}"
    )
    print(
        "load generator: aiohttp client in a separate process (multiprocessing spawn), closed loop, "
        "keep-alive; "
        f"{args.duration:g} s per run (max {args.max_requests:,} requests) after {args.warmup:g} s warm-up"
    )
    print("server: our webhook and the floor in this process (one event loop, one core each run)")
    print(
        f"{'target':16s} {'conc':>5s} {'req/s':>9s} {'x floor':>7s} {'p50 ms':>8s} {'p99 ms':>8s} "
        f"{'p99 +ms':>9s} {'requests':>9s} {'errors':>6s}"
    )
    for conc in levels:
        for name in targets:
            print(percentile_row(name, conc, results[name, conc], results["floor", conc]))
    if open_loop:
        rate = (results.get(("mutate (ours)", args.peak)) or {}).get("rps", 0) / 2
        print(f"open loop at {rate:,.0f} req/s (half of mutate's peak), latency from the due time:")
        for name in targets:
            print(percentile_row(name, 0, open_loop.get(name), open_loop.get("floor")))
    for name in ("mutate (ours)", "validate (ours)"):
        first = results.get((name, levels[0]))
        if first:
            response = json.loads(first["first"])["response"]
            print(f"{name}: allowed={response.get('allowed')} patch={'patch' in response}")
    peak_floor, peak_ours = results["floor", args.peak], results["mutate (ours)", args.peak]
    half_floor, half_ours = results["floor", half], results["mutate (ours)", half]
    if peak_floor and peak_ours and half_floor and half_ours:
        ratio = peak_ours["rps"] / peak_floor["rps"]
        added = half_ours["p99_ms"] - half_floor["p99_ms"]
        print(
            f"mutate at peak concurrency {args.peak}: {ratio:.2f}x the floor's throughput (target >= 0.8: "
            f"{'met' if ratio >= 0.8 else 'MISSED'}); p99 added at concurrency {half}: {added:+.2f} ms "
            f"(target < 2 ms: {'met' if added < 2 else 'MISSED'})"
        )
    open_floor, open_ours = open_loop.get("floor"), open_loop.get("mutate (ours)")
    if open_floor and open_ours:
        added = open_ours["p99_ms"] - open_floor["p99_ms"]
        print(
            f"mutate at half of its peak load (open loop): p99 added {added:+.2f} ms "
            f"(target < 2 ms: {'met' if added < 2 else 'MISSED'})"
        )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny run (seconds)")
    parser.add_argument("--peak", type=int, default=None, help="peak concurrency (default 16)")
    parser.add_argument("--duration", type=float, default=None, help="seconds per run (default 8)")
    parser.add_argument("--max-requests", type=int, default=None, help="request cap per run")
    args = parser.parse_args()
    args.peak = args.peak or (2 if args.smoke else 16)
    args.duration = args.duration or (0.3 if args.smoke else 8.0)
    args.max_requests = args.max_requests or (200 if args.smoke else 500_000)
    args.warmup = 0.1 if args.smoke else 0.5
    from vgpu_guard.logs import setup_logging

    # As `vgpu-guard serve webhook` runs: JSON logging at info with one audit line per review,
    # written to /dev/null so its cost counts (40-65 us of every request on this CPU).
    stderr, sys.stderr = sys.stderr, open(os.devnull, "w")  # noqa: SIM115 - lives with the process
    setup_logging("info")
    sys.stderr = stderr
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())

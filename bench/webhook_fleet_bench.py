"""What one review costs as the fleet grows: the webhook at 100, 1,000 and 5,000 GPU nodes (issue 44).

    .venv/bin/python bench/webhook_fleet_bench.py [--smoke] [--sizes 100,1000,5000] [--seconds 15]

Three processes per fleet size, on loopback:
* the cluster: the API double served over HTTPS (``serve_double``), our CRDs and Volcano's, N Nodes
  shaped as kubelets report them (8 H100 registered through ``volcano.sh/node-vgpu-register``,
  conditions, addresses, images) and N GPULedgers of 4 entries each; it also makes the churn;
* the webhook: ``serve webhook``'s parts as its ``_main`` wires them (``AioClusterClient`` from a
  kubeconfig, ``ClusterCache`` fed by list+watch, ``running_webhook`` on the cache, JSON logging
  at info to /dev/null), with a ``gc.callbacks`` recorder of every collection's pause;
* the load: an open loop of 40 reviews/s (``/mutate/pods`` and ``/validate/pods`` in turn, the
  realistic 1-vGPU training pod of webhook_bench.py), latency counted from the due time.

Cases, each first measured with the churn alone (the webhook's CPU per second without reviews),
then with the churn and the reviews:
* quiet: nothing changes;
* node churn: N/10 Node status updates a second (a heartbeat condition, as kubelets at 10 s),
  spread evenly;
* ledger churn: 20 GPULedger writes a second (an entry added or removed on a random node), what
  the webhook's caches see of Volcano's Bindings reserved by the arbiter (any replica's);
* arbiter: no churn, and instead of pod reviews Volcano's Bindings at ``--bind-rate`` (20/s) sent
  to the arbiter's route (``/validate/pod-allocations``; a Binding as Volcano >= 1.16 sends it, for
  an unbound pod of the cluster, one vGPU on card k % 8 of node k % N): each is reserved with a
  compare-and-swap write of that node's GPULedger into the API double, as in production.

Reported per size and case: p50, p99, the webhook's CPU per review (its process CPU during the
reviews minus the churn's own CPU rate over the same time, per review) and the process's CPU per
review without that subtraction, the churn's CPU per second, full (generation 2) collections and
their longest pause; ratios against 100 nodes in the same run; the webhook's peak RSS. In the
arbiter case a "review" is a Binding, and every one must be allowed (errors counts the rest).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import json
import multiprocessing
import os
import random
import ssl
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The API double served over HTTPS is the tests' (tests/apidouble_support/http/).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from webhook_bench import cpu_model, review, vgpu_pod

Obj = dict[str, Any]
TICK = 0.01  # the churn's clock: updates due in each 10 ms are made together
CLK = os.sysconf("SC_CLK_TCK")
ROOT = Path(__file__).resolve().parents[1]


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of a process (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


# --- the cluster -------------------------------------------------------------------------------


def fleet_node(i: int, beat: int = 0) -> Obj:
    name = f"gpu-{i:05d}"
    records = "".join(
        f"GPU-{name}-{g},10,81920,NVIDIA-NVIDIA H100 80GB HBM3,true,hami-core:" for g in range(8)
    )
    stamp = f"2026-11-28T10:{(beat // 60) % 60:02d}:{beat % 60:02d}Z"
    conditions = [
        {
            "type": t,
            "status": s,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": "2026-11-01T00:00:00Z",
            "reason": r,
            "message": m,
        }
        for t, s, r, m in (
            ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        )
    ]
    resources_ = {
        "cpu": "192",
        "memory": "2Ti",
        "pods": "110",
        "ephemeral-storage": "3Ti",
        "volcano.sh/vgpu-number": "80",
        "volcano.sh/vgpu-memory": str(8 * 81920),
        "volcano.sh/vgpu-cores": "800",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "p5.48xlarge",
                "topology.kubernetes.io/zone": f"zone-{i % 3}",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "volcano.sh/vgpu": "enabled",
            },
            "annotations": {
                "volcano.sh/node-vgpu-register": records,
                "volcano.sh/node-vgpu-handshake": stamp,
            },
        },
        "spec": {"podCIDR": f"10.{i // 250}.{i % 250}.0/24"},
        "status": {
            "capacity": resources_,
            "allocatable": resources_,
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": f"10.200.{i // 250}.{i % 250}"},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "kubeletVersion": "v1.20.2",
                "containerRuntimeVersion": "containerd://1.7.2",
                "osImage": "Ubuntu 22.04.4 LTS",
                "kernelVersion": "5.15.0",
                "architecture": "amd64",
                "operatingSystem": "linux",
                "machineID": f"{i:032x}",
                "systemUUID": f"{i:032x}",
                "bootID": f"{i:032x}",
                "kubeProxyVersion": "v1.20.2",
            },
            "images": [
                {
                    "names": [
                        f"registry.example/team/image-{k}@sha256:{k:064x}",
                        f"registry.example/team/image-{k}:v{k}",
                    ],
                    "sizeBytes": 1_000_000 * k,
                }
                for k in range(12)
            ],
        },
    }


def ledger(i: int, entries: int) -> Obj:
    from vgpu_guard.engine.ledger import Allocation, ContainerGrant, DeviceGrant, NodeLedger, encode_ledger

    name = f"gpu-{i:05d}"
    allocations = {}
    for e in range(entries):
        uid = f"{i:05d}-{e:04d}-{random.getrandbits(32):08x}"
        grant = DeviceGrant(uuid=f"GPU-{name}-{e % 8}", memory=10240, cores=10)
        a = Allocation(
            pod_uid=uid,
            namespace="ml-team",
            name=f"p-{uid}",
            queue="default",
            containers=(ContainerGrant(index=0, name="trainer", devices=(grant,)),),
            reserved_at=1_790_000_000,
            committed=True,
        )
        allocations[a.pod_uid] = a
    return encode_ledger(NodeLedger(node=name, allocations=allocations))


def install_crds(store: Any) -> None:
    import yaml

    from vgpu_guard.kube.resources import CRDS

    for path in sorted((ROOT / "manifests" / "crds").glob("*.yaml")):
        store.create(CRDS, yaml.safe_load(path.read_text()))
    volcano = resources.files("vgpu_guard").joinpath("data/crds/volcano")
    for name in (
        "scheduling.volcano.sh_queues",
        "scheduling.volcano.sh_podgroups",
        "topology.volcano.sh_hypernodes",
    ):
        store.create(CRDS, yaml.safe_load(volcano.joinpath(f"{name}.yaml").read_text()))


def cluster_main(conn: Any, nodes: int, directory: str, binds: int) -> None:
    # The API server runs on other machines in a cluster; here it shares 2 cores with the webhook,
    # so it gets only the CPU the webhook leaves (the webhook's latency is then its own).
    os.nice(19)
    asyncio.run(_cluster(conn, nodes, directory, binds))


def bind_pod(k: int) -> Obj:
    """An unbound pod of one vGPU that Volcano will bind (the arbiter case's k-th Binding)."""
    pod = copy.deepcopy(vgpu_pod())
    pod["metadata"] = {"name": f"bind-{k:05d}", "namespace": "ml-team"}
    return pod


async def _cluster(conn: Any, n: int, directory: str, binds: int) -> None:
    from tests.apidouble_support.http.server import serve_double
    from vgpu_guard.kube.resources import LEDGERS, NAMESPACES, NODES, PODS

    async with serve_double(Path(directory)) as api:
        store = api.store
        install_crds(store)
        for i in range(n):
            store.create(NODES, fleet_node(i))
            store.create(LEDGERS, ledger(i, 4))
        store.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml-team"}})
        pods = [store.create(PODS, bind_pod(k), namespace="ml-team") for k in range(binds)]
        conn.send(str(api.kubeconfig))
        conn.send([p["metadata"]["uid"] for p in pods])
        state: dict[str, Any] = {"mode": "quiet", "stop": False, "made": 0}
        loop = asyncio.get_running_loop()

        def commands() -> None:
            while True:
                command = conn.recv()
                if command.get("made"):
                    conn.send(state["made"])
                    continue
                loop.call_soon_threadsafe(state.update, command)
                if command.get("stop"):
                    return

        threading.Thread(target=commands, daemon=True).start()
        beat, debt, next_node = 0, 0.0, 0
        while not state["stop"]:
            await asyncio.sleep(TICK)
            mode = state["mode"]
            rate = n / 10 if mode == "nodes" else 20.0 if mode == "ledgers" else 0.0
            debt += rate * TICK
            while debt >= 1:
                debt -= 1
                state["made"] += 1
                if mode == "nodes":
                    beat += 1
                    status = fleet_node(next_node, beat)["status"]
                    store.patch(
                        NODES,
                        f"gpu-{next_node:05d}",
                        {"status": {"conditions": status["conditions"]}},
                        subresource="status",
                    )
                    next_node = (next_node + 1) % n
                else:
                    i = random.randrange(n)
                    current = store.get(LEDGERS, f"gpu-{i:05d}")
                    updated = copy.deepcopy(current)
                    allocations = updated["spec"]["allocations"]
                    if len(allocations) > 4:
                        allocations.pop()
                    else:
                        allocations.append(ledger(i, 1)["spec"]["allocations"][0])
                    store.replace(LEDGERS, updated)


# --- the webhook -------------------------------------------------------------------------------


def webhook_main(conn: Any, kubeconfig: str, cert_pem: bytes, key_pem: bytes, freeze: bool) -> None:
    from vgpu_guard.logs import setup_logging
    from vgpu_guard.webhook import server

    if not freeze:  # as if done already: the collector left as CPython sets it
        server._frozen = True

    stderr, sys.stderr = sys.stderr, open(os.devnull, "w")  # noqa: SIM115 - lives with the process
    setup_logging("info")
    sys.stderr = stderr
    asyncio.run(_webhook(conn, kubeconfig, cert_pem, key_pem))


class GcPauses:
    """Every collection's generation and pause, from ``gc.callbacks``."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.pauses.append((info["generation"], time.perf_counter() - self._started))


async def _webhook(conn: Any, kubeconfig: str, cert_pem: bytes, key_pem: bytes) -> None:
    from prometheus_client import CollectorRegistry

    from vgpu_guard.configfile import load_config
    from vgpu_guard.kube.aio import AioClusterClient
    from vgpu_guard.kube.view_cache import ClusterCache
    from vgpu_guard.webhook.server import running_webhook

    config = load_config(env={})
    client = await AioClusterClient.from_kubeconfig(kubeconfig)
    cache = ClusterCache(client)
    caching = asyncio.create_task(cache.run())
    started = time.perf_counter()
    await cache.wait_synced()
    synced = time.perf_counter() - started
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.NamedTemporaryFile("wb", suffix=".pem") as pem:
        pem.write(cert_pem + key_pem)
        pem.flush()
        context.load_cert_chain(pem.name)
    pauses = GcPauses()
    gc.callbacks.append(pauses)
    loop = asyncio.get_running_loop()
    async with running_webhook(
        config=config,
        views=cache,
        ssl_context=context,
        registry=CollectorRegistry(),
        client=client,  # as `serve webhook` runs it: the arbiter and its cache of unbound pods
        host="127.0.0.1",
        port=0,
        ops_port=0,
    ) as served:
        cache.snapshot(config)  # the first view, as the first review would build it
        conn.send({"port": served.port, "synced_s": synced})
        while True:
            command = await loop.run_in_executor(None, conn.recv)
            if command == "stop":
                break
            if command == "gc":
                got, pauses.pauses = pauses.pauses, []
                conn.send(got)
    caching.cancel()
    await asyncio.gather(caching, return_exceptions=True)
    await client.close()


# --- the load ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class FleetLoad:
    """An open loop of ``rate`` reviews/s for ``seconds``; the webhook's CPU read around it."""

    urls: tuple[str, ...]
    bodies: tuple[bytes, ...]  # request i sends bodies[i % len(bodies)] to urls[i % len(urls)]
    ca_pem: str
    rate: float
    seconds: float
    warmup: float
    pid: int


def load(spec: FleetLoad) -> Obj:
    return asyncio.run(_load(spec))


async def _load(spec: FleetLoad) -> Obj:
    context = ssl.create_default_context(cadata=spec.ca_pem)
    headers = {"Content-Type": "application/json"}
    latencies: list[float] = []
    errors = 0
    connector = aiohttp.TCPConnector(ssl=context, limit=32)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(url: str, body: bytes) -> bool:
            async with session.post(url, data=body, headers=headers) as response:
                answer = await response.read()
                return response.status == 200 and json.loads(answer)["response"]["allowed"] is True

        async def at(due: float, i: int, record: bool) -> None:
            nonlocal errors
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            ok = await one(spec.urls[i % len(spec.urls)], spec.bodies[i % len(spec.bodies)])
            if record:
                latencies.append(time.perf_counter() - due)
                errors += 0 if ok else 1

        # Warm-up: four connections (TLS handshakes) and the server's first view, not recorded.
        await asyncio.gather(*(one(spec.urls[0], spec.bodies[k]) for k in range(4)))
        start = time.perf_counter() + spec.warmup
        cpu0: list[float] = []

        async def read_cpu_at_start() -> None:
            await asyncio.sleep(max(0.0, start - time.perf_counter()))
            cpu0.append(process_cpu(spec.pid))

        total = int(spec.seconds * spec.rate)
        warm = int(spec.warmup * spec.rate)
        tasks = [asyncio.create_task(read_cpu_at_start())]
        for i in range(-warm, total):
            due = start + i / spec.rate
            tasks.append(asyncio.create_task(at(due, i + warm + 4, i >= 0)))
        await asyncio.gather(*tasks)
        cpu = process_cpu(spec.pid) - cpu0[0]
        elapsed = time.perf_counter() - start
    latencies.sort()
    n = len(latencies)
    return {
        "requests": n,
        "errors": errors,
        "seconds": elapsed,
        "cpu": cpu,
        "p50_ms": latencies[n // 2] * 1000 if n else 0.0,
        "p99_ms": latencies[min(n - 1, int(n * 0.99))] * 1000 if n else 0.0,
        "max_ms": latencies[-1] * 1000 if n else 0.0,
    }


# --- the run -----------------------------------------------------------------------------------

CASES = ("quiet", "nodes", "ledgers", "arbiter")
CASE_NAMES = {
    "quiet": "no changes",
    "nodes": "node churn (N/10 status/s)",
    "ledgers": "ledger churn (20 writes/s)",
    "arbiter": "arbiter (Bindings, no churn)",
}
VOLCANO = "system:serviceaccount:volcano-system:volcano-scheduler"


def binding_review(uid: str, k: int, nodes: int) -> Obj:
    """The AdmissionReview of the k-th Binding as Volcano >= 1.16 sends it (device_info.go,
    DefaultBinder.Bind): the assignment on the Binding, one 20 GiB vGPU with 30 % of the cores (what
    the pod asks) on card k % 8 of node k % N."""
    # Node k % N and card k % 8: a (node, card) pair meets Binding k again only after lcm(N, 8),
    # so no card is asked for more than it has and every Binding must be allowed.
    node = f"gpu-{k % nodes:05d}"
    raw = f"GPU-{node}-{k % 8},NVIDIA,20480,30:;"
    notes = {
        "volcano.sh/vgpu-ids-new": raw,
        "volcano.sh/devices-to-allocate": raw,
        "volcano.sh/vgpu-node": node,
    }
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": f"bind-{k:05d}", "namespace": "ml-team", "uid": uid, "annotations": notes},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    body = review(binding)
    request = body["request"]
    request["kind"] = request["requestKind"] = {"group": "", "version": "v1", "kind": "Binding"}
    request["resource"] = request["requestResource"] = {"group": "", "version": "v1", "resource": "pods"}
    request["subResource"] = request["requestSubResource"] = "binding"
    request["userInfo"] = {"username": VOLCANO, "groups": ["system:serviceaccounts", "system:authenticated"]}
    return body


def full_pauses(pauses: list[tuple[int, float]]) -> tuple[int, float, float]:
    full = [p for g, p in pauses if g == 2]
    young = [p for g, p in pauses if g < 2]
    return len(full), max(full, default=0.0) * 1000, max(young, default=0.0) * 1000


def run_size(n: int, args: argparse.Namespace, spawn: Any, ca: Any, cert: Any) -> Obj:
    out: Obj = {"cases": {}}
    with tempfile.TemporaryDirectory(prefix="fleet-bench-") as directory:
        cluster_conn, child = spawn.Pipe()
        binds = bind_count(args)
        cluster = spawn.Process(target=cluster_main, args=(child, n, directory, binds), daemon=True)
        cluster.start()
        t0 = time.perf_counter()
        kubeconfig = cluster_conn.recv()
        uids = cluster_conn.recv()
        out["created_s"] = time.perf_counter() - t0
        hook_conn, child = spawn.Pipe()
        hook = spawn.Process(
            target=webhook_main,
            args=(
                child,
                kubeconfig,
                cert.cert_chain_pems[0].bytes(),
                cert.private_key_pem.bytes(),
                args.gc_freeze,
            ),
            daemon=True,
        )
        hook.start()
        try:
            started = hook_conn.recv()
            out["synced_s"] = started["synced_s"]
            port = started["port"]
            urls = (f"https://127.0.0.1:{port}/mutate/pods", f"https://127.0.0.1:{port}/validate/pods")
            bodies = (json.dumps(review(vgpu_pod())).encode(),) * 4
            arbiter = (f"https://127.0.0.1:{port}/validate/pod-allocations",)
            bindings = tuple(json.dumps(binding_review(uid, k, n)).encode() for k, uid in enumerate(uids))
            ca_pem = ca.cert_pem.bytes().decode()
            with spawn.Pool(1) as pool:
                for case in CASES:
                    cluster_conn.send({"mode": case})
                    time.sleep(args.settle)
                    c0, t = process_cpu(hook.pid), time.perf_counter()
                    time.sleep(args.alone)
                    churn_rate = (process_cpu(hook.pid) - c0) / (time.perf_counter() - t)
                    hook_conn.send("gc")
                    hook_conn.recv()
                    if case == "arbiter":
                        spec = FleetLoad(
                            arbiter, bindings, ca_pem, args.bind_rate, args.seconds, args.warmup, hook.pid
                        )
                    else:
                        spec = FleetLoad(urls, bodies, ca_pem, args.rate, args.seconds, args.warmup, hook.pid)
                    cluster_conn.send({"made": True})
                    made = cluster_conn.recv()
                    r = pool.apply(load, (spec,))
                    cluster_conn.send({"made": True})
                    r["made_s"] = (cluster_conn.recv() - made) / r["seconds"]
                    hook_conn.send("gc")
                    r["gc"] = full_pauses(hook_conn.recv())
                    r["churn_cpu_s"] = churn_rate
                    r["cpu_per_review_ms"] = (
                        max(0.0, r["cpu"] - churn_rate * r["seconds"]) / max(1, r["requests"]) * 1000
                    )
                    r["process_cpu_per_review_ms"] = r["cpu"] / max(1, r["requests"]) * 1000
                    out["cases"][case] = r
                    cluster_conn.send({"mode": "quiet"})
            out["peak_rss_mb"] = peak_rss_mb(hook.pid)
        finally:
            hook_conn.send("stop")
            hook.join(20)
            cluster_conn.send({"stop": True})
            cluster.join(20)
            for p in (hook, cluster):
                if p.is_alive():
                    p.kill()
    return out


def bind_count(args: argparse.Namespace) -> int:
    """Bindings the arbiter case sends: its warm-up connections, warm-up and measured window."""
    return 4 + int(args.bind_rate * (args.warmup + args.seconds)) + 1


def report(results: dict[int, Obj], args: argparse.Namespace) -> None:
    print(f"webhook fleet benchmark; Python {sys.version.split()[0]}; {os.cpu_count()} cores, {cpu_model()}")
    freeze = "on" if args.gc_freeze else "off (--no-gc-freeze)"
    print(f"gc.freeze after sync: {freeze}; load average at the end {os.getloadavg()}")
    print(
        f"open loop {args.rate:g} reviews/s (mutate and validate in turn) for {args.seconds:g} s per case; "
        f"churn alone {args.alone:g} s first; arbiter case {args.bind_rate:g} Bindings/s"
    )
    base = results[min(results)]
    for n, r in results.items():
        print(
            f"{n} nodes: created in {r['created_s']:.1f} s, webhook synced in {r['synced_s']:.1f} s, "
            f"peak RSS {r['peak_rss_mb']:.0f} MB"
        )
    head = (
        f"{'nodes':>6s} {'case':28s} {'p50 ms':>7s} {'p99 ms':>7s} {'max ms':>7s} {'cpu/rev':>8s} "
        f"{'proc/rev':>8s} {'churn cpu':>9s} {'writes/s':>8s} {'full gc':>7s} {'max full':>8s} "
        f"{'x p50':>6s} {'x p99':>6s} {'x cpu':>6s} {'errors':>6s}"
    )
    print(head)
    for n, r in results.items():
        for case in CASES:
            c, b = r["cases"][case], base["cases"][case]
            full, full_max, _ = c["gc"]
            latency = f"{c['p50_ms']:7.2f} {c['p99_ms']:7.2f} {c['max_ms']:7.1f}"
            cpu = (
                f"{c['cpu_per_review_ms']:8.2f} {c['process_cpu_per_review_ms']:8.2f} {c['churn_cpu_s']:9.3f}"
            )
            x_p50, x_p99 = c["p50_ms"] / b["p50_ms"], c["p99_ms"] / b["p99_ms"]
            x_cpu = c["cpu_per_review_ms"] / max(b["cpu_per_review_ms"], 1e-9)
            print(
                f"{n:6d} {CASE_NAMES[case]:28s} {latency} {cpu} {c['made_s']:8.0f} {full:7d} {full_max:8.1f} "
                f"{x_p50:6.2f} {x_p99:6.2f} {x_cpu:6.2f} {c['errors']:6d}"
            )
    print("cpu/rev: the webhook's CPU per review beyond the churn's own (ms); proc/rev: its whole CPU")
    print("per review; churn cpu: the webhook's CPU seconds per second with the churn alone; writes/s:")
    print("the churn's writes made a second during the reviews; full gc: generation-2 collections")
    print("during the reviews, max full: the longest (ms); x: ratio against the smallest size in this run")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes and windows")
    parser.add_argument("--sizes", default=None, help="fleet sizes, comma-separated (default 100,1000,5000)")
    parser.add_argument("--seconds", type=float, default=None, help="reviews per case, seconds (default 15)")
    parser.add_argument("--rate", type=float, default=40.0, help="reviews per second (default 40)")
    parser.add_argument("--bind-rate", type=float, default=20.0, help="arbiter case: Bindings/s (default 20)")
    parser.add_argument(
        "--no-gc-freeze", dest="gc_freeze", action="store_false", help="the webhook without its gc.freeze"
    )
    args = parser.parse_args()
    sizes = [int(s) for s in (args.sizes or ("20,40" if args.smoke else "100,1000,5000")).split(",")]
    args.seconds = args.seconds or (0.5 if args.smoke else 15.0)
    args.alone = 0.25 if args.smoke else 5.0
    args.settle = 0.2 if args.smoke else 2.0
    args.warmup = 0.2 if args.smoke else 1.0
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    spawn = multiprocessing.get_context("spawn")
    results = {n: run_size(n, args, spawn, ca, cert) for n in sizes}
    report(results, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())

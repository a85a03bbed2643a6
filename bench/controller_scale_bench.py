"""The running controller at 5,000 nodes x 8 GPUs and 100,000 live allocations: decision latency,
restart to first bind, peak RSS.

    .venv/bin/python bench/controller_scale_bench.py [--nodes 5000] [--pods 100000]
        [--rates 50,200] [--seconds 20] [--smoke] [--api-shaped] [--arbiter-rate 20]

``run_controller`` itself (informers, World, allocator, Binder, Lease) runs against ``FeedClient``,
an in-process stand-in for the API server with no HTTP and no store of its own, as
bench/ledger_rebuild_bench.py's client: LISTs hand over prepared objects, WATCHes are fed by the
bench, writes come back as watch events (a ledger write with a new resourceVersion, a binding as
the pod bound), and the device plugin's confirmation is fed at once. So what is timed is the
controller's own work on its path, not a server's.

* restart to first bind: the process starts with 100,000 bound pods and their ledgers (the steady
  state after adoption) and one pending pod; time until that pod's Binding is sent;
* then new pods at each rate for ``--seconds``: pod ADDED event fed -> its Binding sent (the
  decision and the ledger write before it included), p50/p99, and whether a backlog remained;
* with ``--api-shaped``, the feed's bound pods are what kube-apiserver returns for running replicas
  (managed fields, conditions, container statuses, the defaulted spec) instead of the lean pods
  that hold only what the controller keeps, served as pages of compressed JSON that a LIST decodes
  as a client does: the restart then includes decoding and projecting them, and the peak RSS
  shows what the projection keeps of real pods;
* peak RSS of the process (``VmHWM``: the high-water mark of its own memory; ``ru_maxrss`` is not
  reset by exec, so a subprocess started from this benchmark's 650 MB parent reported the parent's
  size), with the prepared objects it was handed.

With ``--arbiter-rate R`` (issue 44) the rate rows run twice in one run: as above, then with the
webhook's arbiter writing R Volcano Bindings a second into the same ledgers (a bound pod fed and
its entry added to its node's GPULedger with a new resourceVersion, nodes in turn), so the
controller's writes meet real 409s. Reported: the ratio of the p99 with and without those writes,
the controller's ledger conflicts, and how often it rebuilt its whole picture of the fleet
(``vgpu_guard_allocator_rebuilds_total``: 0 is the goal, a race costs one node).

Baseline in the same run: the naive full pass (``AllocationController.run_once`` with fresh LISTs,
what every new pod waited for before this controller was incremental) over the same cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import gc
import json
import statistics
import sys
import time
import zlib
from collections.abc import AsyncIterator, Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The listed source of one naive pass (tests/controller/listed_inputs.py; the product reads informers).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ledger_rebuild_bench import GPUS, api_shaped, node_obj, peak_rss_mb, pod_obj

from tests.controller.listed_inputs import ListedInputs
from vgpu_guard.engine.ledger import Allocation, ContainerGrant, DeviceGrant, encode_entry
from vgpu_guard.kube.client import ObjectList, WatchEvent
from vgpu_guard.kube.errors import AlreadyExists, Conflict, NotFound

Obj = dict[str, Any]


def _inflate(stored: bytes) -> Obj:
    """A ledger as the server hands it over, from its compressed JSON (the feed keeps 5,000
    ledgers in ~3 MB instead of ~38 MB of text, so the peak RSS is the controller's)."""
    out: Obj = json.loads(zlib.decompress(stored))
    return out


def _gone() -> Obj:
    raise RuntimeError("listed twice")


ABSENT = {"queues", "podgroups", "hypernodes", "gangplacements"}


class FeedClient:
    """LIST from prepared objects, WATCH from queues the bench feeds, writes echoed as events."""

    def __init__(
        self, objects: dict[str, list[Callable[[], Obj]]], *, pages: dict[str, list[bytes]] | None = None
    ) -> None:
        self.objects = objects
        # Plurals served from prepared pages of compressed JSON (``json_pages``), decoded when
        # listed as a client decodes a LIST response.
        self.pages = pages or {}
        self.queues: dict[str, asyncio.Queue[WatchEvent]] = {}
        self.rv = 10_000_000
        self.leases: dict[str, Obj] = {}
        self.bound_at: dict[str, float] = {}
        self.first_bind = asyncio.Event()
        # Pods a rate row still waits for; the event is set when the last of them is bound.
        self.awaited: set[str] = set()
        self.all_awaited = asyncio.Event()
        self.pods_by_name: dict[tuple[str, str], Obj] = {}
        # Each ledger's resourceVersion, and its stored JSON (compressed) as last written: writes
        # are compare-and-swap on it, as the API server's are, so the arbiter's writes make the
        # controller's stale ones fail with 409.
        self.ledger_rv: dict[str, str] = {}
        self.ledger_stored: dict[str, bytes] = {}
        self.conflicts_answered = 0

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def feed(self, plural: str, kind: str, obj: Obj) -> None:
        self.queues.setdefault(plural, asyncio.Queue()).put_nowait(WatchEvent(kind, obj))  # type: ignore[arg-type]

    async def list(
        self, resource: Any, *, limit: int | None = None, continue_token: str | None = None, **_: Any
    ) -> ObjectList:
        """Pages of ``limit`` objects, each built when asked for and then handed over (not kept),
        as a server's paged LIST: the process holds what the controller keeps, no more."""
        if resource.plural in ABSENT:
            raise NotFound(f"{resource.plural} not served")
        if resource.plural in self.pages:
            pages, n = self.pages[resource.plural], int(continue_token or 0)
            items, pages[n] = _decode_page(pages[n]), b""  # handed over: not kept
            more = str(n + 1) if n + 1 < len(pages) else ""
            return ObjectList(items=items, resource_version=str(self.rv), continue_token=more)
        source = self.objects.get(resource.plural, [])
        start = int(continue_token or 0)
        end = len(source) if not limit else min(len(source), start + limit)
        items = [make() for make in source[start:end]]
        for i in range(start, end):
            source[i] = _gone  # handed over: this client keeps nothing of it
        more = str(end) if end < len(source) else ""
        return ObjectList(items=items, resource_version=str(self.rv), continue_token=more)

    async def watch(self, resource: Any, **_: Any) -> AsyncIterator[WatchEvent]:
        if resource.plural in ABSENT:
            raise NotFound(f"{resource.plural} not served")
        queue = self.queues.setdefault(resource.plural, asyncio.Queue())
        while True:
            yield await queue.get()

    async def get(self, resource: Any, name: str, *, namespace: str | None = None) -> Obj:
        if resource.plural == "leases" and name in self.leases:
            return copy.deepcopy(self.leases[name])
        if resource.plural == "pods" and (namespace or "", name) in self.pods_by_name:
            return self.pods_by_name[(namespace or "", name)]
        raise NotFound(f"{resource.plural} {name} not found")

    async def create(self, resource: Any, obj: Mapping[str, Any], **_: Any) -> Obj:
        body = copy.deepcopy(dict(obj))
        body.setdefault("metadata", {})["resourceVersion"] = self._next_rv()
        if resource.plural == "leases":
            if body["metadata"]["name"] in self.leases:
                raise AlreadyExists("lease exists")
            self.leases[body["metadata"]["name"]] = body
        elif resource.plural == "gpuledgers":
            name = body["metadata"]["name"]
            if name in self.ledger_rv:
                raise AlreadyExists(f"gpuledgers {name} exists")
            self._stored(body)
            self.feed("gpuledgers", "ADDED", body)
        elif resource.plural == "pods":
            self.pods_by_name[(body["metadata"]["namespace"], body["metadata"]["name"])] = body
            self.feed("pods", "ADDED", body)
        return body

    async def replace(self, resource: Any, obj: Mapping[str, Any]) -> Obj:
        body = copy.deepcopy(dict(obj))
        if resource.plural == "gpuledgers":
            name = body["metadata"]["name"]
            if body["metadata"].get("resourceVersion") != self.ledger_rv.get(name):
                self.conflicts_answered += 1
                raise Conflict(f"gpuledgers {name}: the object has been modified", code=409)
        body["metadata"]["resourceVersion"] = self._next_rv()
        if resource.plural == "leases":
            self.leases[body["metadata"]["name"]] = body
        elif resource.plural == "gpuledgers":
            self._stored(body)
            self.feed("gpuledgers", "MODIFIED", body)
        return body

    def _stored(self, ledger: Obj) -> None:
        name = ledger["metadata"]["name"]
        self.ledger_rv[name] = ledger["metadata"]["resourceVersion"]
        self.ledger_stored[name] = zlib.compress(json.dumps(ledger).encode())

    def stored_ledger(self, name: str) -> Obj:
        return _inflate(self.ledger_stored[name])

    async def patch(self, resource: Any, name: str, patch: Any, **kwargs: Any) -> Obj:
        return {"metadata": {"name": name}}  # PodScheduled reports: no pod is left pending here

    async def bind(
        self, namespace: str, name: str, *, node: str, annotations: Mapping[str, str], **_: Any
    ) -> None:
        self.bound_at[name] = time.perf_counter()
        self.first_bind.set()
        if name in self.awaited:
            self.awaited.discard(name)
            if not self.awaited:
                self.all_awaited.set()
        pod = self.pods_by_name[(namespace, name)]
        bound = {
            **pod,
            "metadata": {**pod["metadata"], "annotations": {**annotations}},
            "spec": {**pod["spec"], "nodeName": node},
        }
        bound["metadata"]["resourceVersion"] = self._next_rv()
        self.pods_by_name[(namespace, name)] = bound
        self.feed("pods", "MODIFIED", bound)
        # The device plugin confirms at once.
        confirmed = {
            **bound,
            "metadata": {
                **bound["metadata"],
                "annotations": {**annotations, "volcano.sh/bind-phase": "success"},
            },
        }
        confirmed["metadata"]["resourceVersion"] = self._next_rv()
        self.pods_by_name[(namespace, name)] = confirmed
        self.feed("pods", "MODIFIED", confirmed)

    async def delete(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def close(self) -> None:
        return None


PAGE = 500  # the informer's page size


def json_pages(args: argparse.Namespace, last: Obj) -> list[bytes]:
    """The bound pods as kube-apiserver returns them (``--api-shaped``), then ``last``, in pages of
    ``PAGE`` as compressed JSON: built before the clock starts, so what a start pays is what a
    client pays for a LIST (decoding it: every value its own string, keys shared within a page),
    not the server's encoding; compressed, the feed holds ~30 MB instead of ~360 MB of text."""
    pages = []
    for at in range(0, args.pods, PAGE):
        page = [api_shaped(pod_obj(i, args.nodes), i) for i in range(at, min(args.pods, at + PAGE))]
        pages.append(zlib.compress(json.dumps(page).encode()))
    pages.append(zlib.compress(json.dumps([last]).encode()))
    return pages


def _decode_page(stored: bytes) -> list[Obj]:
    out: list[Obj] = json.loads(zlib.decompress(stored))
    return out


def pending_pod(i: int) -> Obj:
    pod = pod_obj(i, 1)
    meta = pod["metadata"]
    meta["name"], meta["namespace"], meta["uid"] = f"new-{i}", "default", f"new-{i:012d}"
    meta["annotations"] = {}
    del pod["spec"]["nodeName"]
    pod["status"] = {"phase": "Pending"}
    return pod


def steady_ledgers(nodes: int, pods: int) -> list[Obj]:
    """The ledgers adoption writes for ``pod_obj``'s pods (one entry per pod, as the controller does)."""
    from ledger_rebuild_bench import PreparedClient
    from prometheus_client import CollectorRegistry

    from vgpu_guard.configfile import load_config
    from vgpu_guard.controller.allocation import AllocationController
    from vgpu_guard.kube.client import ClusterClient

    client = PreparedClient(
        {
            "pods": [pod_obj(i, nodes) for i in range(pods)],
            "nodes": [node_obj(f"n{i:05d}") for i in range(nodes)],
        }
    )
    controller = AllocationController(cast(ClusterClient, client), load_config(env={}), identity="seed",
                                      clock=lambda: 1_700_000_100, registry=CollectorRegistry(),
                                      inputs=ListedInputs(cast(ClusterClient, client)))  # fmt: skip
    asyncio.run(controller.run_once())
    return client.written


async def arbiter_writes(client: FeedClient, rate: float, nodes: int, stop: asyncio.Event) -> int:
    """The webhook's arbiter as Volcano binds: ``rate`` Bindings a second, nodes in turn, each a
    bound pod (its annotations as Volcano >= 1.16 sends them) and its entry written into the node's
    ledger with a new resourceVersion, as kube-apiserver stores the arbiter's CAS write. Returns
    how many were written."""
    written, t0 = 0, time.perf_counter()
    while not stop.is_set():
        await asyncio.sleep(max(0.0, t0 + written / rate - time.perf_counter()))
        node = f"n{written % nodes:05d}"
        name, uid = f"volcano-{written}", f"volcano-{written:012d}"
        ids = f"GPU-{node}-{written % GPUS},NVIDIA,1,0:"
        annotations = {"volcano.sh/vgpu-node": node, "volcano.sh/vgpu-ids-new": ids,
                       "volcano.sh/devices-to-allocate": ids, "volcano.sh/bind-phase": "success"}  # fmt: skip
        pod = pending_pod(0)
        pod["metadata"].update(name=name, uid=uid, annotations=annotations, resourceVersion=client._next_rv())
        pod["spec"].update(nodeName=node, schedulerName="volcano")
        client.pods_by_name[("default", name)] = pod
        client.feed("pods", "ADDED", pod)
        ledger = client.stored_ledger(node)
        grant = DeviceGrant(f"GPU-{node}-{written % GPUS}", 1, 0)
        entry = Allocation(uid, "default", name, "default", (ContainerGrant(0, "main", (grant,)),),
                           1_700_000_000, committed=True, admitted=True)  # fmt: skip
        ledger["spec"]["allocations"] = [*(ledger["spec"].get("allocations") or []), encode_entry(entry)]
        ledger["metadata"]["resourceVersion"] = client._next_rv()
        client._stored(ledger)
        client.feed("gpuledgers", "MODIFIED", ledger)
        written += 1
    return written


async def scenario(args: argparse.Namespace, ledgers: list[str]) -> dict[str, Any]:
    """``ledgers``: each ledger's JSON, as the server stores it (the process holds only that text:
    parsed, 100,000 entries would be ~230 MB of the bench's own in the peak RSS it reports)."""
    from prometheus_client import CollectorRegistry

    from vgpu_guard.configfile import load_config
    from vgpu_guard.controller.gc_tuning import tune_gc
    from vgpu_guard.controller.run import run_controller
    from vgpu_guard.kube.client import ClusterClient

    tune_gc()  # as `vgpu-guard serve controller` runs
    first = pending_pod(0)
    pods: list[Callable[[], Obj]] = []
    if not args.api_shaped:
        pods = [partial(pod_obj, i, args.nodes) for i in range(args.pods)]
        pods.append(partial(copy.deepcopy, first))
    nodes: list[Callable[[], Obj]] = [partial(node_obj, f"n{i:05d}") for i in range(args.nodes)]
    client = FeedClient(
        {
            "pods": pods,
            "nodes": nodes,
            "gpuledgers": [partial(_inflate, zlib.compress(t.encode())) for t in ledgers],
        },
        pages={"pods": json_pages(args, first)} if args.api_shaped else None,
    )
    client.pods_by_name[("default", "new-0")] = first
    for text in ledgers:
        meta = json.loads(text)["metadata"]
        client.ledger_rv[meta["name"]] = meta["resourceVersion"]
        client.ledger_stored[meta["name"]] = zlib.compress(text.encode())
    del pods
    ledgers.clear()  # handed over: the FeedClient holds the only reference to each text
    registry = CollectorRegistry()
    # Whole-fleet rebuilds, counted at World.resync(None) itself so that a build without
    # vgpu_guard_allocator_rebuilds_total (before issue 44) is measured the same way.
    from vgpu_guard.controller.world import World

    rebuilds, resync = [0], World.resync

    def counted(self: World, nodes: set[str] | None = None) -> None:
        rebuilds[0] += nodes is None
        resync(self, nodes)

    World.resync = counted  # type: ignore[method-assign]
    start = time.perf_counter()
    task = asyncio.ensure_future(
        run_controller(cast(ClusterClient, client), load_config(env={}), identity="bench",
                       registry=registry, lease_namespace="default", resync_seconds=3600)
    )  # fmt: skip
    try:
        await asyncio.wait_for(client.first_bind.wait(), 300)
        restart = client.bound_at["new-0"] - start
        rows = []
        counter = 1
        stop = asyncio.Event()
        arbiter = (
            asyncio.ensure_future(arbiter_writes(client, args.arbiter_rate, args.nodes, stop))
            if args.arbiter_rate
            else None
        )
        for rate in args.rates:
            fed: dict[str, float] = {}
            count = int(rate * args.seconds)
            t0 = time.perf_counter()
            for _ in range(count):
                due = t0 + len(fed) / rate
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                pod = pending_pod(counter)
                counter += 1
                fed[pod["metadata"]["name"]] = time.perf_counter()
                await client.create(type("R", (), {"plural": "pods"})(), pod)
            # Up to 2 s for the last ones (what "unbound 2 s later" counts); no longer once all are.
            client.awaited = {n for n in fed if n not in client.bound_at}
            if client.awaited:
                client.all_awaited.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(client.all_awaited.wait(), 2.0)
            lat = sorted((client.bound_at[n] - t) * 1000 for n, t in fed.items() if n in client.bound_at)
            rows.append({
                "rate": rate, "pods": count, "bound": len(lat),
                "p50_ms": round(statistics.median(lat), 1) if lat else None,
                "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))], 1) if lat else None,
                "unbound_after_2s": count - len(lat),
            })  # fmt: skip
        stop.set()
        arbiter_written = await arbiter if arbiter is not None else 0
    finally:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
    peak = peak_rss_mb()
    return {
        "restart_to_first_bind_s": round(restart, 2),
        "rates": rows,
        "peak_rss_mb": round(peak),
        "arbiter_writes": arbiter_written,
        "conflicts": client.conflicts_answered,
        "allocator_rebuilds": rebuilds[0],
    }


def naive_pass(args: argparse.Namespace, ledgers: list[Obj]) -> float:
    """The baseline: one full pass with fresh LISTs over the same cluster plus one new pod."""
    from ledger_rebuild_bench import PreparedClient
    from prometheus_client import CollectorRegistry

    from vgpu_guard.configfile import load_config
    from vgpu_guard.controller.allocation import AllocationController
    from vgpu_guard.kube.client import ClusterClient

    if args.api_shaped:
        pods = [pod for page in json_pages(args, pending_pod(0)) for pod in _decode_page(page)]
    else:
        pods = [pod_obj(i, args.nodes) for i in range(args.pods)] + [pending_pod(0)]
    client = PreparedClient(
        {"pods": pods, "nodes": [node_obj(f"n{i:05d}") for i in range(args.nodes)], "gpuledgers": ledgers}
    )
    controller = AllocationController(cast(ClusterClient, client), load_config(env={}), identity="naive",
                                      clock=lambda: 1_700_000_100, registry=CollectorRegistry(),
                                      inputs=ListedInputs(cast(ClusterClient, client)))  # fmt: skip
    t = time.perf_counter()
    asyncio.run(controller.run_once())
    return time.perf_counter() - t


def receive_floor(args: argparse.Namespace, ledgers: list[str]) -> float:
    """Seconds to have the objects a restart must read before its first bind, and nothing else:
    the feed's pods, nodes and ledgers, the ledgers (and API-shaped pods) decoded from their JSON
    as a client does, with the collector paused as during the controller's start. No controller
    can bind sooner in this process; the restart row is compared with it."""
    pages = json_pages(args, pending_pod(0)) if args.api_shaped else []
    gc.disable()  # as the controller's start runs (controller/gc_tuning.py StartPause)
    try:
        t = time.perf_counter()
        if args.api_shaped:
            pods = [pod for page in pages for pod in _decode_page(page)]
        else:
            pods = [pod_obj(i, args.nodes) for i in range(args.pods)]
        nodes = [node_obj(f"n{i:05d}") for i in range(args.nodes)]
        parsed = [json.loads(text) for text in ledgers]
        seconds = time.perf_counter() - t
    finally:
        gc.enable()
    del pods, nodes, parsed
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--rates", type=lambda s: [float(x) for x in s.split(",")], default=[50.0, 200.0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument(
        "--api-shaped",
        action="store_true",
        help="feed pods as kube-apiserver returns them (managed fields, statuses, defaults)",
    )
    parser.add_argument(
        "--arbiter-rate",
        type=float,
        default=0.0,
        help="also run the rates with the arbiter writing this many Bindings/s into the same ledgers",
    )
    parser.add_argument("--baseline", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ledgers", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.smoke:
        args.nodes, args.pods, args.seconds = 50, 1000, 2.0
    ledgers_file = Path(args.ledgers) if args.ledgers else None
    if ledgers_file is None:
        import subprocess
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "ledgers.jsonl"
            written = steady_ledgers(args.nodes, args.pods)
            for i, ledger in enumerate(written):
                ledger["metadata"]["resourceVersion"] = str(1000 + i)
            path.write_text("".join(json.dumps(ledger) + "\n" for ledger in written))
            del written
            base = [sys.executable, __file__, "--nodes", str(args.nodes), "--pods", str(args.pods),
                    "--seconds", str(args.seconds), "--rates", ",".join(str(r) for r in args.rates),
                    "--ledgers", str(path), *(["--api-shaped"] if args.api_shaped else [])]  # fmt: skip
            ours = json.loads(
                subprocess.run(base, capture_output=True, text=True, check=True).stdout.splitlines()[-1]
            )
            raced = (
                json.loads(
                    subprocess.run(
                        [*base, "--arbiter-rate", str(args.arbiter_rate)],
                        capture_output=True,
                        text=True,
                        check=True,
                    ).stdout.splitlines()[-1]
                )
                if args.arbiter_rate
                else None
            )
            naive = json.loads(
                subprocess.run(
                    [*base, "--baseline"], capture_output=True, text=True, check=True
                ).stdout.splitlines()[-1]
            )
        shape = (
            "as kube-apiserver returns them" if args.api_shaped else "lean: only what the controller keeps"
        )
        print(f"{args.nodes:,} nodes x {GPUS} GPUs, {args.pods:,} live allocations; pods {shape}")
        print(
            f"restart to first bind: {ours['restart_to_first_bind_s']} s; peak RSS {ours['peak_rss_mb']} MB"
        )
        print(f"baseline, receiving the objects alone (pods, nodes, ledgers decoded; no processing): "
              f"{naive['receive']:.2f} s")  # fmt: skip
        for row in ours["rates"]:
            print(f"new pods at {row['rate']:g}/s: decided and bound (sent) p50 {row['p50_ms']} ms, "
                  f"p99 {row['p99_ms']} ms, {row['unbound_after_2s']} unbound 2 s later")  # fmt: skip
        if raced is not None:
            print(f"with the arbiter writing {args.arbiter_rate:g} Bindings/s into the same ledgers "
                  f"({raced['arbiter_writes']} written): {raced['conflicts']} ledger conflicts met by the "
                  f"controller, {raced['allocator_rebuilds']:g} whole-fleet rebuilds")  # fmt: skip
            for quiet, row in zip(ours["rates"], raced["rates"], strict=True):
                ratio = (row["p99_ms"] or 0) / max(quiet["p99_ms"] or 0.001, 0.001)
                print(f"  new pods at {row['rate']:g}/s: p50 {row['p50_ms']} ms, "
                      f"p99 {row['p99_ms']} ms ({ratio:.2f}x the p99 without), "
                      f"{row['unbound_after_2s']} unbound 2 s later")  # fmt: skip
        print(f"baseline, one naive full pass for one new pod: {naive['seconds']:.2f} s "
              f"(ratio to our p50 at {ours['rates'][0]['rate']:g}/s: "
              f"{naive['seconds'] * 1000 / max(ours['rates'][0]['p50_ms'] or 1, 0.001):.0f}x)")  # fmt: skip
        return 0
    ledgers = ledgers_file.read_text().splitlines()
    if args.baseline:
        floor = receive_floor(args, ledgers)
        naive = naive_pass(args, [json.loads(text) for text in ledgers])
        print(json.dumps({"seconds": naive, "receive": floor}))
    else:
        print(json.dumps(asyncio.run(scenario(args, ledgers))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Normal-review latency while callers attack the webhook (issue 22), beside the quiet latency.

    .venv/bin/python bench/hostile_load_bench.py [--smoke] [--idle 1000] [--rss-idle 2000] [--duration 10]

Server: the product's ``running_webhook`` with the default config (limits as the chart ships
them) in its OWN PROCESS (``--serve``), TLS from a throwaway CA (trustme), a static view of 25
GPU nodes, on 127.0.0.1 only. Its RSS is read from /proc.

Load (this process, one event loop):
* quiet: one closed-loop client posts a realistic vGPU pod to /validate/pods for ``--duration`` s;
* hostile, all at once for ``--duration`` s: ``--idle`` TLS connections opened and left idle, a
  /metrics scrape loop, 8 loops posting a 2.4 MB pod with 20,000 containers (the oversized review
  of issue 22), and the same closed-loop normal client, whose latency is the result;
* RSS: ``--rss-idle`` idle TLS connections attempted, server RSS read while they are held.

A normal review counts as a timeout past 5 s (the chart's webhook timeoutSeconds). Bounded: every
phase has a time limit and every loop a request cap; every connection is closed at the end and
the server process is terminated.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import ssl
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, cast

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 5.0
CAP = 200_000  # requests per loop, whatever the duration


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def _pod(containers: int) -> dict[str, Any]:
    gpu = {"volcano.sh/vgpu-number": 1, "volcano.sh/vgpu-memory": 4096}
    items = [
        {
            "name": f"c{i}",
            "image": "nvidia/cuda:12.4.0-base-ubuntu22.04",
            "resources": {"limits": gpu if i == 0 else {}},
        }
        for i in range(containers)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"containers": items},
    }


def _review(obj: dict[str, Any]) -> bytes:
    gvk = {"group": "", "version": "v1", "kind": "Pod"}
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": gvk,
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "ml",
                "operation": "CREATE",
                "userInfo": {"username": "alice"},
                "object": obj,
            },
        }
    ).encode()


# --- server process -------------------------------------------------------------------------------


async def serve(directory: Path) -> None:
    sys.path.insert(0, str(REPO))
    from prometheus_client import CollectorRegistry

    from tests.builders import A100_40, default_config, gpu_node, view_of
    from vgpu_guard.webhook.server import running_webhook
    from vgpu_guard.webhook.views import StaticViewSource

    nodes = [gpu_node(f"a30-{i}") for i in range(20)] + [
        gpu_node(f"a100-{i}", count=8, memory=40960, card_type=A100_40, mode="mig", split=7) for i in range(5)
    ]
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(directory / "tls.crt", directory / "tls.key")
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with running_webhook(
        config=default_config(),
        views=StaticViewSource(view_of(nodes)),
        ssl_context=context,
        registry=CollectorRegistry(),
        host="127.0.0.1",
        port=0,
        ops_port=0,
    ) as webhook:
        (directory / "ports.tmp").write_text(f"{webhook.port} {webhook.ops_port}")
        (directory / "ports.tmp").rename(directory / "ports")
        await stop.wait()


# --- load -----------------------------------------------------------------------------------------


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _metric(text: str, name: str) -> str:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return str(int(float(line.split()[1])))
    return "?"


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def normal_client(session: Any, url: str, until: float) -> tuple[list[float], int]:
    latencies: list[float] = []
    timeouts = 0
    for _ in range(CAP):
        if time.monotonic() >= until:
            break
        body = _review(_pod(1))
        started = time.perf_counter()
        try:
            async with session.post(
                url + "/validate/pods", data=body, headers={"Content-Type": "application/json"}
            ) as r:
                await r.read()
                ok = r.status == 200
        except Exception:
            ok = False
        elapsed = time.perf_counter() - started
        if not ok or elapsed > TIMEOUT:
            timeouts += 1
        latencies.append(elapsed)
    return latencies, timeouts


async def oversized_loop(session: Any, url: str, body: bytes, until: float, statuses: dict[str, int]) -> None:
    for _ in range(CAP):
        if time.monotonic() >= until:
            break
        try:
            async with session.post(
                url + "/validate/pods", data=body, headers={"Content-Type": "application/json"}
            ) as r:
                answer = await r.json()
                key = f"{r.status} {answer.get('response', {}).get('status', {}).get('code', '')}".strip()
        except Exception as e:
            key = type(e).__name__
        statuses[key] = statuses.get(key, 0) + 1


async def scrape_loop(session: Any, url: str, until: float) -> tuple[int, int]:
    count = size = 0
    for _ in range(CAP):
        if time.monotonic() >= until:
            break
        async with session.get(url + "/metrics") as r:
            size = len(await r.read())
        count += 1
    return count, size


async def open_idle(port: int, context: ssl.SSLContext, n: int) -> list[asyncio.StreamWriter]:
    writers: list[asyncio.StreamWriter] = []

    async def one() -> None:
        try:
            async with asyncio.timeout(20):
                _, writer = await asyncio.open_connection(
                    "127.0.0.1", port, ssl=context, server_hostname="127.0.0.1"
                )
            writers.append(writer)
        except (OSError, TimeoutError, ssl.SSLError):
            pass

    for start in range(0, n, 100):  # 100 handshakes at a time
        await asyncio.gather(*(one() for _ in range(min(100, n - start))))
    return writers


def _close(writers: list[asyncio.StreamWriter]) -> None:
    for writer in writers:
        writer.transport.abort()


async def run(args: argparse.Namespace) -> None:
    import aiohttp
    import trustme

    ca = trustme.CA()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        cert = ca.issue_cert("127.0.0.1")
        cert.private_key_pem.write_to_path(str(directory / "tls.key"))
        cert.cert_chain_pems[0].write_to_path(str(directory / "tls.crt"))
        server = await asyncio.create_subprocess_exec(sys.executable, __file__, "--serve", tmp, cwd=REPO)
        try:
            deadline = time.monotonic() + 60
            while not (directory / "ports").exists():
                if time.monotonic() > deadline or server.returncode is not None:
                    raise SystemExit("the webhook process did not start")
                await asyncio.sleep(0.05)
            port, ops_port = map(int, (directory / "ports").read_text().split())
            url, ops = f"https://127.0.0.1:{port}", f"http://127.0.0.1:{ops_port}"
            context = ssl.create_default_context()
            ca.configure_trust(context)
            timeout = aiohttp.ClientTimeout(total=30)
            async with (
                aiohttp.ClientSession(
                    connector=aiohttp.TCPConnector(ssl=context, limit=16), timeout=timeout
                ) as s,
                aiohttp.ClientSession(timeout=timeout) as plain,
            ):
                # Warm-up, not recorded.
                await normal_client(s, url, time.monotonic() + min(1.0, args.duration / 4))
                quiet, quiet_timeouts = await normal_client(s, url, time.monotonic() + args.duration)
                rss_quiet = _rss_kib(server.pid)

                idle = await open_idle(port, context, args.idle)
                await asyncio.sleep(0.5)
                rss_idle = _rss_kib(server.pid)
                async with plain.get(ops + "/metrics") as r:
                    open_at_start = _metric(await r.text(), "vgpu_guard_admission_connections_open")
                oversized = _review(_pod(args.containers))
                statuses: dict[str, int] = {}
                until = time.monotonic() + args.duration
                results = await asyncio.gather(
                    normal_client(s, url, until),
                    scrape_loop(plain, ops, until),
                    *(oversized_loop(s, url, oversized, until, statuses) for _ in range(8)),
                )
                # gather keeps its arguments' order (mypy joins the three result types into one).
                hostile, hostile_timeouts = cast(tuple[list[float], int], results[0])
                scrapes, metrics_size = cast(tuple[int, int], results[1])
                rss_hostile = _rss_kib(server.pid)
                async with plain.get(ops + "/metrics") as r:
                    metrics = await r.text()
                _close(idle)

                held = await open_idle(port, context, args.rss_idle)
                await asyncio.sleep(0.5)
                rss_many = _rss_kib(server.pid)
                _close(held)
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(30):
                    await server.wait()
            except TimeoutError:
                server.kill()
                await server.wait()

    print(f"machine: {cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"oversized review: {args.containers} containers, {len(oversized):,} bytes; answers {statuses}")
    print("| phase | normal reviews | p50 ms | p99 ms | max ms | timeouts (> 5 s or not 200) | server RSS |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, values, timeouts, rss in (
        ("quiet", quiet, quiet_timeouts, rss_quiet),
        (
            f"hostile: {args.idle} idle TLS connections opened ({open_at_start} open on the server), "
            f"{scrapes} scrapes ({metrics_size:,} B), 8 oversized loops",
            hostile,
            hostile_timeouts,
            rss_hostile,
        ),
    ):
        print(
            f"| {name} | {len(values):,} | {_pct(values, 0.5) * 1000:.1f} | {_pct(values, 0.99) * 1000:.1f} "
            f"| {max(values) * 1000:.1f} | {timeouts} | {rss // 1024} MiB |"
        )
    print(f"RSS: quiet {rss_quiet // 1024} MiB, with {len(idle)} idle {rss_idle // 1024} MiB; ", end="")
    print(
        f"{args.rss_idle} idle attempted, {len(held)} handshakes done: {rss_many // 1024} MiB (limit 512 MiB)"
    )
    print(
        "connections refused by the cap during the run: "
        f"{_metric(metrics, 'vgpu_guard_admission_connections_refused_total')}"
    )
    p99 = _pct(hostile, 0.99) * 1000
    print(f"hostile-load normal-review p99: {p99:.1f} ms (target < 500 ms, 0 timeouts)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--rss-idle", type=int, default=2000)
    parser.add_argument("--containers", type=int, default=20_000)
    parser.add_argument("--duration", type=float, default=10.0)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(Path(args.serve)))
        return 0
    if args.smoke:
        args.idle, args.rss_idle, args.containers, args.duration = 20, 20, 600, 1.0
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())

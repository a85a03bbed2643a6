"""``vgpu-guard sandbox``: the API double on its own, like a cluster, for any Kubernetes client.

It serves the double (``vgpu_guard.apidouble``) over loopback HTTPS with our CRDs and Volcano's
installed and writes a kubeconfig, so ``kubectl``, the official client or our own processes can
talk to it. With ``--with-guard`` it also runs our webhook and controller as child processes
(``vgpu-guard serve webhook`` / ``serve controller``, TLS from a CA generated here) and registers
them by creating the chart's webhook configurations, rendered with ``webhooks.urlOverride``
(``vgpu_guard/data/sandbox/webhook-configurations.yaml``), pointed at the local webhook with that
CA as caBundle. A stand-in for the device plugin confirms each binding
(``volcano.sh/bind-phase=success``), as ``simulate`` does.

Everything lives in memory: Ctrl-C (or SIGTERM) stops the children and the server and the state
is gone. RBAC is off (every token may do everything); there are no nodes until you create them.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import importlib.util
import os
import signal
import socket
import sys
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from vgpu_guard.apidouble.server import RunningDouble, serve_double, write_kubeconfig
from vgpu_guard.apidouble.store import Store
from vgpu_guard.certs import ServingSpec, generate_ca, issue_serving_certificate
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.resources import CRDS, MUTATING_WEBHOOKS, NAMESPACES, VALIDATING_WEBHOOKS

__all__ = ["add_parser", "run"]

NAMESPACE = "vgpu-guard"
# The URL base the packaged webhook configurations were rendered with (tests/manifests/chart.py).
RENDERED_URL = "https://127.0.0.1:9443"
_HOST = "127.0.0.1"
_READY_SECONDS = 60.0
_STOP_SECONDS = 15.0
_CONFIRM_INTERVAL = 0.2


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "sandbox",
        help="serve an in-memory API server (the API double) with our CRDs, optionally with the guard",
        description="Serve the API double on 127.0.0.1 over HTTPS with the vgpu-guard and Volcano CRDs "
        "installed and write a kubeconfig for it; with --with-guard also run `vgpu-guard serve webhook` "
        "and `serve controller` against it and register the webhook. State is in memory only: Ctrl-C "
        "stops everything and the state is lost. RBAC is off; create Nodes (with the "
        "volcano.sh/node-vgpu-register annotation) yourself, e.g. from examples/simulate/.",
    )
    parser.add_argument("--kubeconfig", required=True, metavar="FILE", help="where to write the kubeconfig")
    parser.add_argument("--port", type=int, default=0, help="API server port (default: any free port)")
    parser.add_argument(
        "--with-guard",
        action="store_true",
        help="also run the webhook and the controller (routing on: vGPU pods are placed by our "
        "controller) and register the webhook configurations",
    )
    parser.set_defaults(func=run)


def _crd_files() -> Iterator[Any]:
    root = resources.files("vgpu_guard") / "data" / "crds"
    for sub in (root, root / "volcano"):
        for entry in sorted(sub.iterdir(), key=lambda e: e.name):
            if entry.name.endswith(".yaml"):
                yield yaml.safe_load(entry.read_text("utf-8"))


def webhook_configurations(base_url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """The chart's webhook configurations pointed at ``base_url`` and trusting ``ca_pem``."""
    text = (resources.files("vgpu_guard") / "data" / "sandbox" / "webhook-configurations.yaml").read_text(
        "utf-8"
    )
    bundle = base64.b64encode(ca_pem).decode("ascii")
    out = []
    for doc in yaml.safe_load_all(text):
        if not doc:
            continue
        for hook in doc.get("webhooks") or []:
            client = hook["clientConfig"]
            url = str(client["url"])
            if not url.startswith(RENDERED_URL):
                raise ValueError(
                    f"webhook {hook['name']}: unexpected URL {url} in the packaged configuration"
                )
            client["url"] = base_url.rstrip("/") + url[len(RENDERED_URL) :]
            client["caBundle"] = bundle
        out.append(doc)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((_HOST, 0))
        port: int = s.getsockname()[1]
        return port


def _install(store: Store) -> None:
    store.create(
        NAMESPACES,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
    )
    for crd in _crd_files():
        store.create(CRDS, crd)


class _Child:
    """One ``vgpu-guard serve`` child process, its log file and its operations port."""

    def __init__(self, component: str, log: Path, ops_port: int) -> None:
        self.component = component
        self.log = log
        self.ops_port = ops_port
        self.process: asyncio.subprocess.Process | None = None

    async def start(self, argv: list[str], env: dict[str, str]) -> None:
        with self.log.open("wb") as sink:  # a file, not a pipe: nobody reads a pipe, it would block
            self.process = await asyncio.create_subprocess_exec(
                *argv, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=sink, stderr=sink
            )

    async def wait_ready(self) -> None:
        import aiohttp

        deadline = asyncio.get_running_loop().time() + _READY_SECONDS
        url = f"http://{_HOST}:{self.ops_port}/readyz"
        async with aiohttp.ClientSession() as session:
            while asyncio.get_running_loop().time() < deadline:
                if self.process is None or self.process.returncode is not None:
                    raise RuntimeError(f"{self.component} exited early; its log: {self.log}")
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(url) as response:
                        if response.status == 200:
                            return
                await asyncio.sleep(0.1)
        raise RuntimeError(
            f"{self.component} was not ready within {_READY_SECONDS:.0f}s; its log: {self.log}"
        )

    async def stop(self) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), timeout=_STOP_SECONDS)
        except TimeoutError:
            process.kill()
            await process.wait()


async def _confirm_allocations(store: Store) -> None:
    """The device plugin's stand-in (see ``simulation.confirm_allocations``), every 200 ms."""
    from vgpu_guard.cli.simulation import confirm_allocations

    while True:
        with contextlib.suppress(KubeError):  # a pod deleted meanwhile: the next round sees it
            confirm_allocations(store)
        await asyncio.sleep(_CONFIRM_INTERVAL)


async def _start_guard(api: RunningDouble, workdir: Path) -> list[_Child]:
    now = datetime.now(UTC)
    ca = generate_ca(now=now, validity=timedelta(days=30))
    spec = ServingSpec(service="vgpu-guard-webhook", namespace=NAMESPACE, ip_addresses=(_HOST,))
    serving = issue_serving_certificate(ca, spec, now=now, validity=timedelta(days=30))
    (workdir / "tls.crt").write_bytes(serving.cert_pem)
    (workdir / "tls.key").write_bytes(serving.key_pem)
    (workdir / "tls.key").chmod(0o600)
    port = _free_port()
    config = {
        "scheduling": {"routing": True},
        "webhook": {
            "host": _HOST,
            "port": port,
            "tlsCertFile": str(workdir / "tls.crt"),
            "tlsKeyFile": str(workdir / "tls.key"),
        },
    }
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    children = []
    for component in ("webhook", "controller"):
        child = _Child(component, workdir / f"{component}.log", _free_port())
        argv = [
            sys.executable,
            "-m",
            "vgpu_guard.cli.main",
            "serve",
            component,
            "--config",
            str(workdir / "config.yaml"),
            "--kubeconfig",
            str(api.kubeconfig),
            "--cert-mode",
            "files",
            "--namespace",
            NAMESPACE,
            "--identity",
            f"sandbox-{component}",
            "--metrics-port",
            str(child.ops_port),
        ]
        children.append(child)
        await child.start(argv, dict(os.environ))
    for child in children:
        await child.wait_ready()
    for config_obj in webhook_configurations(f"https://{_HOST}:{port}", ca.cert_pem):
        resource = (
            MUTATING_WEBHOOKS if config_obj["kind"] == "MutatingWebhookConfiguration" else VALIDATING_WEBHOOKS
        )
        api.store.create(resource, config_obj)
    print(f"webhook:    https://{_HOST}:{port} (log {children[0].log})")
    print(f"controller: leader-elected, Lease {NAMESPACE}/vgpu-guard-controller (log {children[1].log})")
    return children


async def _main(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    target = Path(args.kubeconfig)
    with tempfile.TemporaryDirectory(prefix="vgpu-guard-sandbox-") as tmp:
        workdir = Path(tmp)
        async with serve_double(workdir, host=_HOST, port=args.port) as api:
            _install(api.store)
            target.parent.mkdir(parents=True, exist_ok=True)
            write_kubeconfig(target, url=api.url, ca_pem=api.tls.ca_pem, users={"admin": api.admin_token})
            print(f"API server: {api.url} (in memory: everything is lost when it stops)")
            print(f"kubeconfig: {target}")
            children: list[_Child] = []
            helpers: list[asyncio.Task[None]] = []
            code = 0
            try:
                if args.with_guard:
                    children = await _start_guard(api, workdir)
                    helpers.append(asyncio.create_task(_confirm_allocations(api.store)))
                print("ready; Ctrl-C stops everything", flush=True)
                code = await _serve_until_stopped(stop, children)
            except RuntimeError as e:
                print(f"error: {e}", file=sys.stderr)
                for child in children:
                    if child.log.exists():
                        sys.stderr.write(child.log.read_text("utf-8", errors="replace")[-4000:])
                code = 1
            finally:
                for task in helpers:
                    task.cancel()
                await asyncio.gather(*helpers, return_exceptions=True)
                for child in children:
                    await child.stop()
    print("stopped", flush=True)
    return code


async def _serve_until_stopped(stop: asyncio.Event, children: list[_Child]) -> int:
    """Wait for Ctrl-C; a child that exits on its own stops the sandbox (exit code 1)."""
    while not stop.is_set():
        for child in children:
            if child.process is not None and child.process.returncode is not None:
                print(
                    f"error: {child.component} exited with {child.process.returncode}; its log: {child.log}",
                    file=sys.stderr,
                )
                return 1
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.5):
                await stop.wait()
    return 0


def run(args: argparse.Namespace) -> int:
    if args.with_guard and importlib.util.find_spec("celpy") is None:
        print(
            "error: --with-guard registers the chart's webhook configurations, whose matchConditions "
            "(CEL) the sandbox evaluates with cel-python: pip install cel-python",
            file=sys.stderr,
        )
        return 2
    return asyncio.run(_main(args))

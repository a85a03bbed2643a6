"""``vgpu-guard sandbox``: a real cluster on this machine for any Kubernetes client.

The project's control plane (``vgpu_guard.controlplane``: kube-apiserver, kube-controller-manager
and kube-scheduler 1.20.2 with etcd), built once and cached (``--build`` builds it, about 5
minutes, root on Debian). Our CRDs and Volcano's are installed; nodes have no kubelet, so the
sandbox keeps every Node's Ready condition fresh (the node lifecycle controller would otherwise
mark them NotReady after 40 s and taint them). Without a build it says why and stops: there is no
in-memory fallback, because a user trying vgpu-guard with kubectl or Helm should meet a real API
server's answers, never a partial imitation's (``simulate`` is the run without a cluster).

The first line printed names the control plane; the next ones what runs and what does not, and
the mode (cli/sandbox_settings.py). With ``--with-guard`` the sandbox also runs our
webhook and controller as child processes (``vgpu-guard serve webhook`` / ``serve controller``, on
``--config FILE`` when given, TLS from a CA generated here) and registers them by creating, through
the API as a user would, what the chart registers on that server: its webhook configurations
rendered with ``webhooks.urlOverride`` (``vgpu_guard/data/sandbox/``), pointed at the local webhook
with that CA as caBundle. The chart's ``webhooks.scope: auto`` picks matchConditions from
Kubernetes 1.28 and the allNamespaces scope before (1.20 drops matchConditions silently, so every
pod of every namespace but the excluded ones is sent to us, and the pod webhooks fail open), so the
sandbox reads the server's ``/version`` and says which. Below 1.21 it also does what the chart's
pre-install hook does: the namespaces the selectors exclude get the ``kubernetes.io/metadata.name``
label that 1.21+ sets itself. A stand-in for the
device plugin confirms each binding (``volcano.sh/bind-phase=success``). Ctrl-C (or SIGTERM) stops
the children and the server, and the state is gone (etcd lives in a temporary
directory); the processes' logs are kept (``--logs DIR``, else a new directory in the system's
temporary directory), and the sandbox names that directory when it starts and when it stops.
There are no nodes until you create them (e.g. from ``examples/simulate/``).
``--volcano-model`` runs Volcano's model (vgpu_guard/volcano/) as a task against the API server,
once the webhook is registered: Volcano Jobs get their PodGroup and pods, vGPU pods with
``schedulerName: volcano`` get Volcano's binds, which the arbiter reserves or refuses.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import os
import re
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from vgpu_guard.certs import ServingSpec, generate_ca, issue_serving_certificate
from vgpu_guard.cli.packaged_crds import packaged_crds
from vgpu_guard.cli.sandbox_settings import SandboxSettings, SettingsError, settings_from
from vgpu_guard.controlplane.launch import free_port
from vgpu_guard.engine.objects import Obj
from vgpu_guard.kube.errors import KubeError, NotFound
from vgpu_guard.kube.resources import MUTATING_WEBHOOKS, NAMESPACES, VALIDATING_WEBHOOKS
from vgpu_guard.volcano.binder import DEFAULT_VERSION

if TYPE_CHECKING:
    from vgpu_guard.controlplane import Binaries, ControlPlane
    from vgpu_guard.kube.aio import AioClusterClient

__all__ = ["add_parser", "run"]

Helper = Callable[[], Coroutine[Any, Any, None]]

NAMESPACE = "vgpu-guard"
# The URL base the packaged webhook configurations were rendered with (tests/manifests/chart.py).
RENDERED_URL = "https://127.0.0.1:9443"
_HOST = "127.0.0.1"
_READY_SECONDS = 60.0
_STOP_SECONDS = 15.0
_HEARTBEAT_SECONDS = 5.0
MATCH_CONDITIONS = "matchConditions"
ALL_NAMESPACES = "allNamespaces"
OPT_IN = "namespaceOptIn"
# The chart's podScope: matchConditions are on by default (beta) from this release.
MATCH_CONDITIONS_SINCE = (1, 28)
# From this release the API server sets kubernetes.io/metadata.name on every namespace.
NAME_LABEL_SINCE = (1, 21)
NAME_LABEL = "kubernetes.io/metadata.name"
SCOPE_FILES = {
    MATCH_CONDITIONS: "webhook-configurations.yaml",
    ALL_NAMESPACES: "webhook-configurations-all-namespaces.yaml",
    OPT_IN: "webhook-configurations-opt-in.yaml",
}
# Where the README's "try it" commands create their objects (no namespace in examples/).
OPTED_IN_NAMESPACES = ("default",)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "sandbox",
        help="a local cluster for kubectl: the real control plane, Kubernetes 1.20.2",
        description="Start a cluster on 127.0.0.1 with the vgpu-guard and Volcano CRDs installed and "
        "write a kubeconfig for it: the real control plane (kube-apiserver, kube-controller-manager, "
        "kube-scheduler 1.20.2) from its cached build (--build builds it when none is cached). "
        "With --with-guard also run `vgpu-guard serve webhook` and "
        "`serve controller` against it and register the webhook. Ctrl-C stops everything and the state "
        "is lost. Create Nodes (with the volcano.sh/node-vgpu-register annotation) yourself, e.g. from "
        "examples/simulate/; the sandbox keeps them Ready.",
    )
    parser.add_argument("--kubeconfig", required=True, metavar="FILE", help="where to write the kubeconfig")
    parser.add_argument(
        "--build",
        action="store_true",
        help="build the real control plane first when it is not cached (root on Debian, ~5 minutes)",
    )
    _add_guard_options(parser)
    _add_volcano_options(parser)
    parser.add_argument(
        "--logs",
        metavar="DIR",
        help="where the webhook's, the controller's and the real control plane's logs go, kept when "
        "the sandbox stops (default: a new vgpu-guard-sandbox-logs-* directory in the temporary directory)",
    )
    parser.set_defaults(func=run)


def _add_guard_options(parser: argparse.ArgumentParser) -> None:
    """``--with-guard`` and its ``--config``: what runs vgpu-guard against the sandbox."""
    parser.add_argument(
        "--with-guard",
        action="store_true",
        help="also run the webhook and the controller and register the webhook configurations "
        "(routing mode unless --volcano-model runs or --config sets scheduling.routing)",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="with --with-guard: the vgpu-guard config file, as `vgpu-guard serve` reads it (the sandbox "
        "sets only where the webhook listens and its TLS files)",
    )


def _add_volcano_options(parser: argparse.ArgumentParser) -> None:
    """The Volcano model's options: on, which release's writes, and its stale-cache bug."""
    parser.add_argument(
        "--volcano-model",
        action="store_true",
        help="run a model of Volcano against the sandbox: Volcano Jobs get their PodGroup and pods, "
        "vGPU pods with schedulerName volcano get Volcano's binds (volcano mode unless --config says)",
    )
    parser.add_argument(
        "--volcano-version",
        metavar="X.Y",
        default=DEFAULT_VERSION,
        help="the Volcano release whose writes the model makes (default: %(default)s)",
    )
    parser.add_argument(
        "--volcano-stale-cache",
        action="store_true",
        help="the model's sessions ignore their own placements (Volcano #3616)",
    )


def pod_scope(version: Obj) -> tuple[str, str]:
    """The scope the chart's ``webhooks.scope: auto`` renders for a server's ``/version``, and the
    release ("1.20") it read; a version it cannot read gets the opt-in scope, which never sends a
    pod of an unlabelled namespace to us (the safe side when matchConditions may be dropped)."""
    found = re.match(r"v?(\d+)\.(\d+)", str(version.get("gitVersion") or ""))
    if found is None:
        return OPT_IN, "unknown"
    release = (int(found.group(1)), int(found.group(2)))
    scope = MATCH_CONDITIONS if release >= MATCH_CONDITIONS_SINCE else ALL_NAMESPACES
    return scope, f"{release[0]}.{release[1]}"


def excluded_namespaces(configs: list[Obj]) -> tuple[str, ...]:
    """The namespaces the configurations' selectors keep out by ``kubernetes.io/metadata.name``."""
    out: dict[str, None] = {}
    for config in configs:
        for hook in config.get("webhooks") or []:
            for expr in (hook.get("namespaceSelector") or {}).get("matchExpressions") or []:
                if expr.get("key") == NAME_LABEL and expr.get("operator") == "NotIn":
                    out.update(dict.fromkeys(str(v) for v in expr.get("values") or []))
    return tuple(out)


def webhook_configurations(base_url: str, ca_pem: bytes, scope: str = MATCH_CONDITIONS) -> list[Obj]:
    """The chart's webhook configurations for ``scope`` pointed at ``base_url``, trusting ``ca_pem``."""
    text = (resources.files("vgpu_guard") / "data" / "sandbox" / SCOPE_FILES[scope]).read_text("utf-8")
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


def opt_in_label(configs: list[Obj]) -> tuple[str, str]:
    """The label (key, value) the opt-in scope's namespaceSelectors require, read from the
    configurations themselves so it follows the chart's ``webhooks.optInLabel``."""
    for config in configs:
        for hook in config.get("webhooks") or []:
            for expr in (hook.get("namespaceSelector") or {}).get("matchExpressions") or []:
                if expr.get("operator") == "In" and len(expr.get("values") or []) == 1:
                    return str(expr["key"]), str(expr["values"][0])
    raise ValueError("the packaged opt-in webhook configurations require no namespace label")


def scope_lines(scope: str, release: str, label: str, namespaces: tuple[str, ...]) -> list[str]:
    """What the sandbox prints about which pods reach the webhook (``namespaces``: those it
    labelled, with ``label``)."""
    if scope == MATCH_CONDITIONS:
        return [f"scope:      matchConditions (Kubernetes {release}): only vGPU pods reach the pod webhooks"]
    if scope == ALL_NAMESPACES:
        lines = [
            f"scope:      all namespaces (Kubernetes {release} has no matchConditions): every pod of every "
            "namespace but the excluded ones reaches the pod webhooks, which fail open"
        ]
        if namespaces:
            shown = ", ".join(namespaces)
            lines.append(f"labelled:   {shown} with {label}=<name> (1.21+ sets it), which keeps them out")
        return lines
    return [
        f"scope:      namespace opt-in (Kubernetes {release} has no matchConditions): only pods in "
        f"namespaces labelled {label} reach the pod webhooks",
        f"labelled:   {', '.join(namespaces)} (`kubectl label namespace NAME {label}` opts in another)",
    ]


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


def _serving_files(workdir: Path) -> bytes:
    """A CA and a serving certificate for 127.0.0.1 written to ``workdir``; returns the CA PEM."""
    now = datetime.now(UTC)
    ca = generate_ca(now=now, validity=timedelta(days=30))
    spec = ServingSpec(service="vgpu-guard-webhook", namespace=NAMESPACE, ip_addresses=(_HOST,))
    serving = issue_serving_certificate(ca, spec, now=now, validity=timedelta(days=30))
    (workdir / "tls.crt").write_bytes(serving.cert_pem)
    (workdir / "tls.key").write_bytes(serving.key_pem)
    (workdir / "tls.key").chmod(0o600)
    return ca.cert_pem


async def _start_guard(
    kubeconfig: Path, workdir: Path, logs: Path, settings: SandboxSettings
) -> list[_Child]:
    """Run ``serve webhook`` and ``serve controller`` on ``kubeconfig``; register the webhook."""
    ca_pem = _serving_files(workdir)
    port = free_port()
    env = {
        **os.environ,
        **settings.child_env(host=_HOST, port=port, cert=workdir / "tls.crt", key=workdir / "tls.key"),
    }
    children = []
    for component in ("webhook", "controller"):
        child = _Child(component, logs / f"{component}.log", free_port())
        argv = [sys.executable, "-m", "vgpu_guard.cli.main", "serve", component]
        if settings.config_file is not None:
            argv += ["--config", str(settings.config_file)]
        argv += ["--kubeconfig", str(kubeconfig)]
        argv += ["--cert-mode", "files", "--namespace", NAMESPACE, "--identity", f"sandbox-{component}"]
        argv += ["--metrics-port", str(child.ops_port)]
        children.append(child)
        await child.start(argv, env)
    for child in children:
        await child.wait_ready()
    scope_text = await _register(kubeconfig, f"https://{_HOST}:{port}", ca_pem)
    webhook, controller = children
    metrics = f"http://{_HOST}:{webhook.ops_port}/metrics"
    print(f"webhook:    https://{_HOST}:{port}, metrics {metrics} (log {webhook.log})")
    print(
        f"controller: leader-elected, Lease {NAMESPACE}/vgpu-guard-controller, "
        f"metrics http://{_HOST}:{controller.ops_port}/metrics (log {controller.log})"
    )
    print("\n".join(scope_text))
    return children


async def _register(kubeconfig: Path, base_url: str, ca_pem: bytes) -> list[str]:
    """Create what the chart registers on this server, through its API; returns the scope lines.

    In the opt-in scope the README's namespace is labelled before the configurations exist, so
    the first ``kubectl apply`` there already reaches the webhook; below 1.21 the namespaces the
    selectors exclude get their name label first, as the chart's pre-install hook does."""
    from vgpu_guard.kube.aio import AioClusterClient

    admin = await AioClusterClient.from_kubeconfig(str(kubeconfig))
    try:
        scope, release = pod_scope(await admin.server_version())
        configs = webhook_configurations(base_url, ca_pem, scope)
        label = ""
        labelled: tuple[str, ...] = OPTED_IN_NAMESPACES
        if scope == OPT_IN:
            key, value = opt_in_label(configs)
            label = f"{key}={value}"
            for name in OPTED_IN_NAMESPACES:
                await admin.patch(NAMESPACES, name, {"metadata": {"labels": {key: value}}})
        elif scope == ALL_NAMESPACES:
            label, labelled = NAME_LABEL, ()
            if tuple(map(int, release.split("."))) < NAME_LABEL_SINCE:
                labelled = await _label_excluded(admin, excluded_namespaces(configs))
        for config_obj in configs:
            mutating = config_obj["kind"] == "MutatingWebhookConfiguration"
            await admin.create(MUTATING_WEBHOOKS if mutating else VALIDATING_WEBHOOKS, config_obj)
    except KubeError as e:
        raise RuntimeError(f"registering the webhook configurations failed: {e}") from None
    finally:
        await admin.close()
    return scope_lines(scope, release, label, labelled)


async def _label_excluded(admin: AioClusterClient, namespaces: tuple[str, ...]) -> tuple[str, ...]:
    """``vgpu-guard label-ns`` as the chart's hook runs it: the name label on each namespace that
    exists (the release namespace may not, in the sandbox); returns those labelled."""
    done = []
    for name in namespaces:
        try:
            await admin.patch(NAMESPACES, name, {"metadata": {"labels": {NAME_LABEL: name}}})
        except NotFound:
            continue
        done.append(name)
    return tuple(done)


@dataclass
class _Cluster:
    """What the running control plane hands the shared part: the kubeconfig, what runs beside."""

    kubeconfig: Path
    background: list[Helper]  # for as long as the sandbox runs
    with_guard: list[Helper]  # beside our processes (device plugin stand-in)


# -- the real control plane -----------------------------------------------------------------------
@contextlib.asynccontextmanager
async def _real(workdir: Path, binaries: Binaries, logs: Path) -> AsyncIterator[tuple[_Cluster, str]]:
    from vgpu_guard.controlplane import ControlPlane

    plane = ControlPlane(binaries, workdir / "control-plane")
    try:
        async with _running(plane) as running:
            yield running
    finally:  # the plane's directory (credentials, state) goes with workdir; its logs are kept
        if plane.logs.is_dir():
            shutil.copytree(plane.logs, logs / "control-plane", dirs_exist_ok=True)


@contextlib.asynccontextmanager
async def _running(plane: ControlPlane) -> AsyncIterator[tuple[_Cluster, str]]:
    from vgpu_guard.cli.sandbox_cluster import confirm_bindings, install, keep_nodes_ready
    from vgpu_guard.controlplane import StartError
    from vgpu_guard.kube.aio import AioClusterClient

    try:
        await asyncio.to_thread(plane.start)
    except StartError as e:
        raise RuntimeError(f"the real control plane did not start: {e}") from None
    try:
        admin = await AioClusterClient.from_kubeconfig(str(plane.kubeconfig))
        try:
            await install(admin, NAMESPACE, list(packaged_crds()))
            cluster = _Cluster(
                plane.kubeconfig,
                [lambda: keep_nodes_ready(admin, _HEARTBEAT_SECONDS)],
                [lambda: confirm_bindings(admin)],
            )
            yield cluster, plane.server
        finally:
            await admin.close()
    finally:
        await asyncio.to_thread(plane.stop)


_NO_CLUSTER = "`vgpu-guard simulate` runs vgpu-guard without one"


def _binaries(args: argparse.Namespace) -> Binaries:
    """The cached control plane (built first with ``--build``); a RuntimeError saying why not."""
    from vgpu_guard.controlplane import BuildError, Unavailable, cached_binaries, ensure_built
    from vgpu_guard.controlplane.build import unavailable_reason

    binaries = cached_binaries()
    if binaries is None and args.build:
        try:
            binaries = ensure_built(lambda line: print(f"control-plane: {line}", file=sys.stderr, flush=True))
        except (BuildError, Unavailable) as e:
            # One line: a failed step's message goes on with its log's tail, and its first line
            # names the log file.
            first = (str(e).splitlines() or [type(e).__name__])[0].rstrip(":")
            raise RuntimeError(f"--build failed: {first}; {_NO_CLUSTER}") from None
    if binaries is None:
        why = unavailable_reason() or "no cached build; `vgpu-guard sandbox --build` builds it (~5 minutes)"
        raise RuntimeError(f"no control plane to run: {why}; {_NO_CLUSTER}")
    return binaries


async def _main(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    target = Path(args.kubeconfig)
    try:
        settings = settings_from(
            args.config,
            volcano_model=args.volcano_model,
            volcano_version=args.volcano_version,
            stale_cache=args.volcano_stale_cache,
        )
    except SettingsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    binaries = _binaries(args)
    print(
        f"cluster:    real control plane, Kubernetes {binaries.version} "
        "(kube-apiserver, kube-controller-manager, kube-scheduler, etcd)",
        flush=True,
    )
    print("\n".join(settings.banner(with_guard=args.with_guard)), flush=True)
    logs = _logs_directory(args.logs)
    print(f"logs:       {logs} (kept when the sandbox stops)", flush=True)
    try:
        with tempfile.TemporaryDirectory(prefix="vgpu-guard-sandbox-") as tmp:
            workdir = Path(tmp)
            async with _real(workdir, binaries, logs) as (cluster, url):
                _publish(cluster.kubeconfig, target)
                print(f"API server: {url} (etcd in a temporary directory: everything is lost when it stops)")
                print(f"kubeconfig: {target}")
                code = await _run_cluster(args, settings, cluster, workdir, stop, logs=logs)
    finally:
        print(_kept(logs), flush=True)
    print("stopped", flush=True)
    return code


def _logs_directory(given: str | None) -> Path:
    """``--logs`` (made when missing), else a new directory in the system's temporary directory."""
    if given is None:
        return Path(tempfile.mkdtemp(prefix="vgpu-guard-sandbox-logs-"))
    path = Path(given).absolute()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RuntimeError(f"--logs {given}: {e.strerror or e}") from None
    return path


def _kept(logs: Path) -> str:
    """The exit line: where the logs are, and which there are."""
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in logs.iterdir()) if logs.is_dir() else []
    return f"logs kept:  {logs}: {', '.join(names) or 'none written'}"


def _publish(kubeconfig: Path, target: Path) -> None:
    """The admin kubeconfig where the user asked for it (self-contained: the CA is inline)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(kubeconfig, target)
    target.chmod(0o600)


async def _run_cluster(
    args: argparse.Namespace,
    settings: SandboxSettings,
    cluster: _Cluster,
    workdir: Path,
    stop: asyncio.Event,
    *,
    logs: Path,
) -> int:
    children: list[_Child] = []
    helpers = cluster.background + (cluster.with_guard if args.with_guard else [])
    tasks = [asyncio.create_task(helper()) for helper in helpers]
    try:
        if args.with_guard:
            children = await _start_guard(cluster.kubeconfig, workdir, logs, settings)
        if settings.volcano is not None:  # after the webhook is registered: no assignment unarbitrated
            tasks.append(asyncio.create_task(_volcano(cluster.kubeconfig, settings)))
        print("ready; Ctrl-C stops everything", flush=True)
        return await _serve_until_stopped(stop, children)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        for child in children:
            if child.log.exists():
                sys.stderr.write(child.log.read_text("utf-8", errors="replace")[-4000:])
        return 1
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for child in children:
            await child.stop()


async def _volcano(kubeconfig: Path, settings: SandboxSettings) -> None:
    """Volcano's model against the sandbox (vgpu_guard/volcano/service.py), until cancelled."""
    from vgpu_guard.kube.aio import AioClusterClient
    from vgpu_guard.volcano.jobs import JobController
    from vgpu_guard.volcano.service import run_volcano, session_lines
    from vgpu_guard.volcano.session import SessionRecord, VolcanoScheduler

    def report(record: SessionRecord) -> None:  # what Volcano wrote, and what was refused and why
        for line in session_lines(record):
            print(f"volcano:    {line}", flush=True)

    assert settings.volcano is not None
    api = await AioClusterClient.from_kubeconfig(str(kubeconfig))
    try:
        scheduler = VolcanoScheduler(
            api, settings.config, version=settings.volcano, stale_cache=settings.stale_cache
        )
        await run_volcano(JobController(api), scheduler, report=report)
    finally:
        await api.close()


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
    try:
        return asyncio.run(_main(args))
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

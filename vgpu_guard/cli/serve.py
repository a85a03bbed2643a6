"""``vgpu-guard serve webhook|controller|all``: the production processes.

Each process is a set of long-running loops on one event loop (watch caches, certificate loops,
the admission server, the allocation controller, the queue audit) plus the plain-HTTP operations
endpoint (/metrics, /healthz, /readyz). A loop that crashes is logged and restarted with backoff;
SIGTERM/SIGINT start a bounded graceful shutdown (in-flight admission requests get
``webhook.shutdownTimeoutSeconds``, then the loops are cancelled and the Lease released).

Who we are in the cluster (namespace, Secret, Service, Lease, webhook configuration names) comes
from the chart's ``VGPU_GUARD_*`` environment (``process_settings``); policy comes from the config.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from aiohttp import web
from prometheus_client import REGISTRY

from vgpu_guard.certs import (
    CertificateFiles,
    CertificateManagerConfig,
    ReloadableSSLContext,
    RenewalPolicy,
    ServingSpec,
    run_certificate_manager,
    run_file_reloader,
)
from vgpu_guard.cli.process_settings import ProcessSettings, SettingsError
from vgpu_guard.configfile import ConfigError, load_config
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.informer import Informer
from vgpu_guard.kube.ratelimit import RateLimitedClient, bucket
from vgpu_guard.kube.view_cache import ClusterCache
from vgpu_guard.logs import setup_logging
from vgpu_guard.ops_http import create_ops_app

if TYPE_CHECKING:  # the webhook's modules load only when a webhook is served
    from vgpu_guard.webhook.server import RunningWebhook

__all__ = ["add_parser", "kubeconfig_problem", "run"]

log = logging.getLogger("vgpu_guard.serve")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the webhook and/or the controller against a cluster",
        description="Run vgpu-guard against a cluster; stops gracefully on SIGTERM/SIGINT. Deployment "
        "names (Secret, Service, Lease, webhook configurations) come from VGPU_GUARD_* variables.",
    )
    parser.add_argument("component", choices=("webhook", "controller", "all"))
    parser.add_argument("--config", metavar="FILE", help="vgpu-guard config file")
    parser.add_argument(
        "--device-config", metavar="FILE", help="the plugin's device-config.yaml (or its ConfigMap)"
    )
    parser.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig (default: the pod's service account in a cluster, else $KUBECONFIG)",
    )
    parser.add_argument("--namespace", help="our namespace (default: $POD_NAMESPACE, else vgpu-guard)")
    parser.add_argument(
        "--identity", help="leader-election identity (default: $POD_NAME, else the host name)"
    )
    parser.add_argument(
        "--cert-mode",
        choices=("builtin", "files"),
        help="builtin: CA and certificate in the shared Secret; files: follow webhook.tlsCertFile/"
        "tlsKeyFile, e.g. written by cert-manager (default: $VGPU_GUARD_CERT_MODE, else files)",
    )
    parser.add_argument("--port", type=int, help="admission HTTPS port (default: webhook.port)")
    parser.add_argument(
        "--metrics-port", type=int, help="operations HTTP port (default: webhook.metricsPort)"
    )
    parser.add_argument(
        "--log-level",
        default="info",
        choices=("debug", "info", "warning", "error"),
        help="the least severe JSON log line written to stderr (default: info; audit lines always are)",
    )
    parser.set_defaults(func=run)


def _utcnow() -> datetime:
    return datetime.now(UTC)


def kubeconfig_problem(kubeconfig: str | None, environ: Mapping[str, str]) -> str | None:
    """Why the kubeconfig ``serve`` would load cannot work, in one line (None: try it).

    Checked before the client library sees it: the library logs "Config not found" and then fails
    on a missing ``current-context`` of the empty config it made up, two messages that contradict.
    """
    if not kubeconfig and environ.get("KUBERNETES_SERVICE_HOST"):
        return None  # in a pod: the service account
    listed = [p for p in (environ.get("KUBECONFIG") or "").split(os.pathsep) if p]
    if not kubeconfig and len(listed) > 1:
        return None  # several files are merged; the library reports on those
    path = kubeconfig or (listed[0] if listed else str(Path.home() / ".kube" / "config"))
    origin = "--kubeconfig" if kubeconfig else ("$KUBECONFIG" if listed else "the default path")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return (
            f"no kubeconfig: {path} ({origin}) does not exist and this is not a pod in a cluster "
            "(no KUBERNETES_SERVICE_HOST); pass --kubeconfig FILE or set KUBECONFIG"
        )
    except (OSError, UnicodeDecodeError) as e:
        return f"kubeconfig {path} ({origin}): cannot read: {getattr(e, 'strerror', None) or e}"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        return (
            f"kubeconfig {path} ({origin}): not valid YAML{where}; fix it or pass another --kubeconfig FILE"
        )
    if not isinstance(data, dict):
        return f"kubeconfig {path} ({origin}): not a kubeconfig (a mapping with current-context, contexts)"
    current = data.get("current-context")
    if not current:
        return (
            f"kubeconfig {path} ({origin}): key current-context is missing or empty; "
            f"run `kubectl config use-context NAME --kubeconfig {path}`"
        )
    contexts = data.get("contexts")
    if not isinstance(contexts, list):
        contexts = []
    if not any(isinstance(c, dict) and c.get("name") == current for c in contexts):
        return (
            f"kubeconfig {path} ({origin}): current-context {current!r} names no entry of contexts; "
            f"run `kubectl config get-contexts --kubeconfig {path}` and use-context one of them"
        )
    return None


async def cluster_client(kubeconfig: str | None) -> AioClusterClient:
    """The API client of a process: the kubeconfig given, else in-cluster, else ~/.kube/config."""
    if kubeconfig:
        return await AioClusterClient.from_kubeconfig(kubeconfig)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return AioClusterClient.in_cluster()
    return await AioClusterClient.from_kubeconfig(None)


async def _supervise(name: str, factory: Callable[[], Awaitable[None]]) -> None:
    """Keep a loop alive: a crash is logged with its traceback and the loop restarted with backoff."""
    delay = 1.0
    while True:
        try:
            await factory()
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("loop crashed; restarting", extra={"fields": {"loop": name, "in_seconds": delay}})
            await asyncio.sleep(delay)
            delay = min(delay * 2, 60.0)


@dataclass
class _Process:
    """What one ``serve`` process runs; readiness checks are collected from its components."""

    args: argparse.Namespace
    config: GuardConfig
    settings: ProcessSettings
    client: AioClusterClient
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    checks: list[Callable[[], tuple[bool, str]]] = field(default_factory=list)

    def spawn(self, name: str, factory: Callable[[], Awaitable[None]]) -> None:
        self.tasks.append(asyncio.create_task(_supervise(name, factory), name=name))

    def ready(self) -> tuple[bool, str]:
        for check in self.checks:
            ok, reason = check()
            if not ok:
                return False, reason
        return True, "ready"

    def certificate_config(self, *, injecting: bool) -> CertificateManagerConfig:
        s = self.settings
        return CertificateManagerConfig(
            secret_namespace=s.namespace,
            secret_name=s.tls_secret,
            spec=ServingSpec(
                service=s.webhook_service,
                namespace=s.namespace,
                cluster_domain=s.cluster_domain,
                extra_dns=s.cert_extra_dns,
            ),
            mutating_webhooks=s.mutating_webhook_configurations if injecting else (),
            validating_webhooks=s.validating_webhook_configurations if injecting else (),
            policy=RenewalPolicy(
                ca_validity=s.ca_validity,
                serving_validity=s.serving_validity,
                serving_renew_before=s.serving_renew_before,
                ca_renew_before=s.ca_renew_before,
                check_interval=s.cert_check_interval,
            ),
        )


def _webhook(
    process: _Process, cache: ClusterCache, pods: Informer | None
) -> contextlib.AbstractAsyncContextManager[RunningWebhook]:
    """The admission server; ``pods``: the controller's pod informer, when it runs in this process,
    is where the arbiter reads unbound pods (else the webhook watches them itself)."""
    from vgpu_guard.webhook.pending_pods import PendingPods
    from vgpu_guard.webhook.server import running_webhook

    settings, config = process.settings, process.config
    context = ReloadableSSLContext(source=settings.tls_secret if settings.cert_mode == "builtin" else "files")
    if settings.cert_mode == "builtin":
        # Every replica keeps the shared Secret valid; only the controller's leader injects caBundles.
        certs = process.certificate_config(injecting=False)
        process.spawn(
            "certificates",
            lambda: run_certificate_manager(
                process.client, config=certs, context=context, is_leader=lambda: False, clock=_utcnow
            ),
        )
    else:
        files = CertificateFiles(
            cert_file=Path(config.webhook.tls_cert_file), key_file=Path(config.webhook.tls_key_file)
        )
        process.spawn("certificate-files", lambda: run_file_reloader(context, files))
    process.checks.append(lambda: (context.loaded, "not ready: no serving certificate loaded yet"))
    # The admission path's API calls (a gang's placement, a missing PodGroup, the stored Queues for
    # a Queue write): a short timeout, well inside the webhook's timeoutSeconds, on the same
    # connection pool as the caches.
    recorder = AioClusterClient(process.client.api, request_timeout=2.0)
    return running_webhook(
        config=config,
        views=cache,
        ssl_context=context.ssl_context,
        registry=REGISTRY,
        client=recorder,
        ready=process.ready,
        port=process.args.port,
        ops_port=process.args.metrics_port,
        pods=PendingPods(pods) if pods is not None else None,
        ledgers=cache.ledgers,
    )


def _controller(process: _Process, cache: ClusterCache, *, share_pods: bool) -> Informer | None:
    """The controller's loops; with ``share_pods`` (``serve all``) its pod informer is the process's,
    returned for the webhook to read: one watch of pods, not one per component."""
    from vgpu_guard.controller.inputs import pod_informer
    from vgpu_guard.controller.leader import LeaderElector
    from vgpu_guard.controller.queue_audit import run_queue_audit
    from vgpu_guard.controller.run import run_controller

    settings, config, client = process.settings, process.config, process.client
    # Paced like kube-scheduler's clients; the Lease keeps the unthrottled client, so a busy bucket
    # can never cost the leadership (kube-scheduler's leader election has its own client too).
    limited = RateLimitedClient(
        client,
        bucket(settings.kube_api_qps, settings.kube_api_burst),
        events=bucket(settings.events_qps, settings.events_burst),
    )
    elector = LeaderElector(
        client,
        name=settings.lease_name,
        namespace=settings.namespace,
        identity=settings.pod_name,
        clock=time.time,
        lease_duration=settings.lease_duration_seconds,
    )
    pods = pod_informer(limited) if share_pods else None
    if pods is not None:
        process.spawn("informer-pods", pods.run)
    process.spawn(
        "allocation",
        lambda: run_controller(
            limited,
            config,
            identity=settings.pod_name,
            elector=elector,
            retry_seconds=float(settings.lease_retry_period_seconds),
            cluster=cache,
            pods=pods,
            write_concurrency=settings.write_concurrency,
        ),
    )
    process.spawn(
        "queue-audit", lambda: run_queue_audit(client, config, cache=cache, is_leader=lambda: elector.leading)
    )
    if settings.cert_mode == "builtin" and (
        settings.mutating_webhook_configurations or settings.validating_webhook_configurations
    ):
        certs = process.certificate_config(injecting=True)
        process.spawn(
            "ca-bundle",
            lambda: run_certificate_manager(
                client, config=certs, context=None, is_leader=lambda: elector.leading, clock=_utcnow
            ),
        )
    process.checks.append(lambda: (elector.attempted, "not ready: no leader-election round completed yet"))
    return pods


async def _main(args: argparse.Namespace, config: GuardConfig, settings: ProcessSettings) -> int:
    try:
        client = await cluster_client(args.kubeconfig)
    except KubeError as e:
        print(f"error: {e}; pass --kubeconfig FILE or set KUBECONFIG", file=sys.stderr)
        return 2
    process = _Process(args=args, config=config, settings=settings, client=client)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, process.stop.set)
    cache = ClusterCache(client)
    process.spawn("cluster-cache", cache.run)
    try:
        pods = None
        if args.component in ("controller", "all"):
            pods = _controller(process, cache, share_pods=args.component == "all")
        if args.component in ("webhook", "all"):
            async with _webhook(process, cache, pods) as served:
                fields = {"component": args.component, "port": served.port, "ops_port": served.ops_port}
                log.info("serving", extra={"fields": fields})
                await process.stop.wait()
        else:
            process.checks.append(lambda: (cache.synced, "not ready: cluster caches not synced yet"))
            runner = web.AppRunner(create_ops_app(registry=REGISTRY, ready=process.ready), access_log=None)
            await runner.setup()
            port = args.metrics_port if args.metrics_port is not None else config.webhook.metrics_port
            await web.TCPSite(runner, config.webhook.host, port).start()
            log.info("serving", extra={"fields": {"component": args.component, "ops_port": port}})
            try:
                await process.stop.wait()
            finally:
                await runner.cleanup()
    finally:
        for task in process.tasks:
            task.cancel()
        await asyncio.gather(*process.tasks, return_exceptions=True)
        await client.close()
    log.info("stopped")
    return 0


def run(args: argparse.Namespace) -> int:
    setup_logging(args.log_level)
    try:
        config = load_config(args.config, device_config=args.device_config)
        settings = ProcessSettings.from_environment(
            os.environ, namespace=args.namespace, pod_name=args.identity, cert_mode=args.cert_mode
        )
    except (ConfigError, SettingsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    problem = kubeconfig_problem(args.kubeconfig, os.environ)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    if args.component in ("controller", "all"):
        from vgpu_guard.controller.gc_tuning import tune_gc

        tune_gc()
    return asyncio.run(_main(args, config, settings))

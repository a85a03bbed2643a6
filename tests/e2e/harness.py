"""Bring-up and tear-down of the end-to-end suite: one installation, two backends.

What differs between the backends is only where the API server comes from and how a
ServiceAccount gets a kubeconfig:

- ``double``: the API double served over loopback HTTPS with RBAC switched on and Volcano's CRDs
  installed (the part of "a cluster with Volcano" the suite needs); ServiceAccount identities are
  bearer tokens the double maps to ``system:serviceaccount:NS:NAME``.
- ``cluster``: ``E2E_KUBECONFIG`` (kind, k3s, any conformant cluster with Volcano's CRDs);
  ServiceAccount tokens come from the TokenRequest API.

Everything else is the same code for both, and it installs the way users do: render the Helm
chart (``webhook.enabled=false``, ``controller.enabled=false``, ``webhooks.urlOverride`` +
``caBundle`` pointing at local processes), apply what it renders through the API, start
``vgpu-guard serve webhook`` / ``serve controller`` as local processes with the arguments and
``VGPU_GUARD_*`` environment of the chart's Deployments, under the chart's ServiceAccounts, with
``--cert-mode files`` and a CA + serving certificate generated here. Nodes have no kubelet: the
suite writes their status through the status subresource and keeps their Ready heartbeat fresh,
and stands in for the device plugin by confirming bindings (``volcano.sh/bind-phase=success``).
"""

from __future__ import annotations

import abc
import asyncio
import base64
import contextlib
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from tests.apidouble_support.rbac import RBACAuthorizer
from tests.apidouble_support.tokens import kubeconfig_for
from tests.manifests.chart import render_objects
from vgpu_guard.certs import ServingSpec, generate_ca, issue_serving_certificate
from vgpu_guard.cli.sandbox_cluster import for_1_20  # the sandbox installs Volcano's CRDs alike
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.errors import AlreadyExists, Expired, KubeError, NotFound
from vgpu_guard.kube.resources import (
    CRDS,
    LEDGERS,
    MUTATING_WEBHOOKS,
    NAMESPACES,
    NODES,
    PODS,
    QUEUES,
    SECRETS,
    VALIDATING_WEBHOOKS,
    Resource,
)

Obj = dict[str, Any]
BIN = Path(sys.executable).with_name("vgpu-guard")
REPO = Path(__file__).resolve().parents[2]
VOLCANO_CRDS = REPO / "vgpu_guard" / "data" / "crds" / "volcano"
RELEASE = NAMESPACE = "vgpu-guard"
WEBHOOK_SA = f"{RELEASE}-webhook"
CONTROLLER_SA = f"{RELEASE}-controller"
LEASE = f"{RELEASE}-controller"

# Labels of everything the suite creates, so tear-down finds it on a shared cluster.
SUITE_LABEL = "e2e.vgpu-guard.io/suite"
POOL_LABEL = "e2e.vgpu-guard.io/pool"
CAPACITY_LABEL = "e2e.vgpu-guard.io/capacity"
IB_LABEL = "e2e.vgpu-guard.io/ib-cluster"
OPT_IN_LABEL = "vgpu-guard.io/admission"  # the chart's webhooks.optInLabel

SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", namespaced=True)
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)
EVENTS_V1 = Resource("", "v1", "events", "Event", namespaced=True)
_RBAC = "rbac.authorization.k8s.io"
CLUSTER_ROLES = Resource(_RBAC, "v1", "clusterroles", "ClusterRole", namespaced=False)
CLUSTER_ROLE_BINDINGS = Resource(_RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", namespaced=False)
ROLES = Resource(_RBAC, "v1", "roles", "Role", namespaced=True)
ROLE_BINDINGS = Resource(_RBAC, "v1", "rolebindings", "RoleBinding", namespaced=True)
BY_KIND: dict[str, Resource] = {
    r.kind: r
    for r in (
        NAMESPACES, CRDS, SERVICE_ACCOUNTS, SECRETS, CONFIGMAPS, CLUSTER_ROLES, CLUSTER_ROLE_BINDINGS,
        ROLES, ROLE_BINDINGS, MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS,
    )
}  # fmt: skip
# Helm's install order (pkg/release/util/kind_sorter.go) for the kinds the chart renders here.
INSTALL_ORDER = [
    "CustomResourceDefinition",
    "ServiceAccount",
    "Secret",
    "ConfigMap",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
]

READY_SECONDS = 45.0
STOP_SECONDS = 20.0


class HarnessError(AssertionError):
    """Raised when the environment cannot be brought up (the message says what is missing)."""


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


async def until(what: str, check: Callable[[], Awaitable[Any]], *, within: float = 20.0) -> Any:
    """Poll ``check`` every 100 ms until it returns something truthy; fail naming ``what``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    last: Any = None
    while True:
        last = await check()
        if last:
            return last
        if loop.time() >= deadline:
            raise AssertionError(f"timed out after {within:.0f}s waiting for {what}; last seen: {last!r}")
        await asyncio.sleep(0.1)


# -- backends -----------------------------------------------------------------------------------
class Backend(abc.ABC):
    """Where the API server comes from; everything else is shared."""

    name: str
    admin_kubeconfig: Path
    admin_user: str  # the username webhooks see for the admin kubeconfig
    webhook_host: str  # where the local webhook listens and the API server reaches it
    kube_version: str  # the server's gitVersion, what Helm's .Capabilities.KubeVersion would be

    @abc.abstractmethod
    async def kubeconfig_for(self, namespace: str, service_account: str) -> Path:
        """A kubeconfig that authenticates as the ServiceAccount (RBAC is enforced on both backends)."""

    async def close(self) -> None:
        return None


class DoubleBackend(Backend):
    """The API double with RBAC on; Volcano's CRDs installed as a cluster with Volcano has them."""

    name = "double"

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.webhook_host = "127.0.0.1"
        self._stack = contextlib.AsyncExitStack()

    async def start(self) -> None:
        from tests.apidouble_support.http.server import serve_double
        from vgpu_guard.apidouble import ADMIN

        self.api = await self._stack.enter_async_context(
            serve_double(self.workdir, authorizer=RBACAuthorizer)
        )
        self.admin_kubeconfig = self.api.kubeconfig
        self.admin_user = ADMIN.username
        admin = await AioClusterClient.from_kubeconfig(str(self.admin_kubeconfig))
        try:
            self.kube_version = str((await admin.server_version())["gitVersion"])
            for path in sorted(VOLCANO_CRDS.glob("*.yaml")):
                await admin.create(CRDS, yaml.safe_load(path.read_text()))
        finally:
            await admin.close()

    async def kubeconfig_for(self, namespace: str, service_account: str) -> Path:
        from vgpu_guard.apidouble import service_account as sa

        return kubeconfig_for(self.api, sa(namespace, service_account))

    async def close(self) -> None:
        await self._stack.aclose()


class ClusterBackend(Backend):
    """A real cluster from ``E2E_KUBECONFIG``; ``E2E_WEBHOOK_HOST`` is the address of this machine
    that the API server can reach (127.0.0.1 only works when the API server runs here)."""

    name = "cluster"

    def __init__(self, workdir: Path, kubeconfig: str) -> None:
        self.workdir = workdir
        self.admin_kubeconfig = Path(kubeconfig)
        self.webhook_host = os.environ.get("E2E_WEBHOOK_HOST", "127.0.0.1")

    async def start(self) -> None:
        admin = await AioClusterClient.from_kubeconfig(str(self.admin_kubeconfig))
        try:
            self.admin_user = os.environ.get("E2E_ADMIN_USER") or await whoami(admin)
            self.kube_version = str((await admin.server_version())["gitVersion"])
            await ensure_volcano_crds(admin)
        finally:
            await admin.close()

    async def kubeconfig_for(self, namespace: str, service_account: str) -> Path:
        """A kubeconfig with a bound token of the ServiceAccount (TokenRequest, 1 h)."""
        from kubernetes import client, config

        def request() -> tuple[str, Obj]:
            api = config.new_client_from_config(str(self.admin_kubeconfig))  # type: ignore[no-untyped-call]  # unannotated in kubernetes
            try:
                token = client.CoreV1Api(api).create_namespaced_service_account_token(
                    service_account,
                    namespace,
                    {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",  # type: ignore[arg-type]  # a dict body is taken as the model (validate_call); the annotation names the model only
                     "spec": {"expirationSeconds": 3600}},
                )  # fmt: skip
                assert token.status is not None
                return str(token.status.token), _current_cluster(self.admin_kubeconfig)
            finally:
                api.close()

        token, cluster = await asyncio.to_thread(request)
        path = self.workdir / f"kubeconfig-{namespace}-{service_account}"
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "e2e", "cluster": cluster}],
            "users": [{"name": service_account, "user": {"token": token}}],
            "contexts": [{"name": service_account, "context": {"cluster": "e2e", "user": service_account}}],
            "current-context": service_account,
        }
        path.write_text(yaml.safe_dump(kubeconfig))
        path.chmod(0o600)
        return path


def _current_cluster(kubeconfig: Path) -> Obj:
    """The cluster entry of the current context, with a relative CA file made absolute."""
    data = yaml.safe_load(kubeconfig.read_text())
    context = next(c["context"] for c in data["contexts"] if c["name"] == data["current-context"])
    cluster: Obj = dict(next(c["cluster"] for c in data["clusters"] if c["name"] == context["cluster"]))
    ca = cluster.get("certificate-authority")
    if ca and not Path(ca).is_absolute():
        cluster["certificate-authority"] = str((kubeconfig.parent / ca).resolve())
    return cluster


# -- what a real cluster needs before the suite ----------------------------------------------------
SELF_SUBJECT_REVIEW_VERSIONS = ("v1", "v1beta1", "v1alpha1")
CSRS = Resource("certificates.k8s.io", "v1", "certificatesigningrequests", "CertificateSigningRequest", False)


async def whoami(admin: AioClusterClient) -> str:
    """The username the API server (and so our webhook) sees for ``admin``.

    SelfSubjectReview answers that from 1.26 (alpha) on; older servers have no such API, but a
    dry-run CertificateSigningRequest comes back with ``spec.username`` filled in by the server
    from the requester's identity, and creates nothing.
    """
    for version in SELF_SUBJECT_REVIEW_VERSIONS:
        resource = Resource(
            "authentication.k8s.io", version, "selfsubjectreviews", "SelfSubjectReview", False
        )
        review = {"apiVersion": resource.api_version, "kind": "SelfSubjectReview"}
        try:
            out = await admin.create(resource, review)
        except NotFound:
            continue
        return str(out["status"]["userInfo"]["username"])
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "vgpu-guard-e2e-whoami")])
    request = x509.CertificateSigningRequestBuilder().subject_name(name).sign(key, hashes.SHA256())
    pem = request.public_bytes(serialization.Encoding.PEM)
    csr = {
        "apiVersion": CSRS.api_version,
        "kind": CSRS.kind,
        "metadata": {"generateName": "vgpu-guard-e2e-whoami-"},
        "spec": {
            "request": base64.b64encode(pem).decode(),
            "signerName": "kubernetes.io/kube-apiserver-client",
            "usages": ["client auth"],
        },
    }
    out = await admin.create(CSRS, csr, dry_run=True)
    return str(out["spec"]["username"])


async def ensure_volcano_crds(admin: AioClusterClient) -> None:
    """Install Volcano's CRDs the cluster lacks, as "a cluster with Volcano" has them.

    1.20 rejects Volcano's jobs CRD: its ``default: ""`` on string fields reaches validation as
    null (``default: Invalid value: "null": in body must be of type string``). Only when the server
    says so is the copy installed here stripped of empty defaults (and of the list-map markers whose
    keys 1.20 then wants defaulted); what users install is unchanged.
    """
    for path in sorted(VOLCANO_CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        try:
            await admin.get(CRDS, crd["metadata"]["name"])
            continue
        except NotFound:
            pass
        try:
            await admin.create(CRDS, crd)
        except KubeError as e:
            if e.code != 422 or ".default: Invalid value" not in str(e):
                raise
            await admin.create(CRDS, for_1_20(crd))
        await established(admin, crd["metadata"]["name"])


async def established(admin: AioClusterClient, name: str) -> None:
    async def check() -> bool:
        crd = await admin.get(CRDS, name)
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    await until(f"CRD {name} Established", check)


async def server_minor(admin: AioClusterClient) -> int:
    version = await admin.server_version()
    return int("".join(ch for ch in str(version.get("minor", "0")) if ch.isdigit()) or 0)


async def service_account_ready(admin: AioClusterClient, namespace: str, name: str = "default") -> None:
    """Wait until pods using ``name`` can be created in ``namespace``.

    Before 1.24 the ServiceAccount admission plugin refuses a pod until the token controller has
    put a token Secret on the account (``No API token found for service account "default"``);
    users' tooling retries, the suite waits for the account (and, there, its token).
    """
    needs_token = await server_minor(admin) < 24

    async def check() -> bool:
        try:
            account = await admin.get(SERVICE_ACCOUNTS, name, namespace=namespace)
        except NotFound:
            return False
        return bool(account.get("secrets")) or not needs_token

    await until(f"ServiceAccount {namespace}/{name} with its token", check, within=60.0)


# -- processes ----------------------------------------------------------------------------------
@dataclass
class ServeProcess:
    """One local ``vgpu-guard serve`` process, started as the chart's Deployment would run it."""

    component: str
    identity: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    ops_url: str
    process: asyncio.subprocess.Process | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def start(self) -> None:
        # The log goes to a file: a pipe nobody reads fills up and blocks the process.
        with self.log.open("ab") as sink:
            self.process = await asyncio.create_subprocess_exec(
                *self.argv, env=self.env, stdin=asyncio.subprocess.DEVNULL, stdout=sink, stderr=sink
            )

    async def wait_ready(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READY_SECONDS
        async with aiohttp.ClientSession() as session:
            while loop.time() < deadline:
                if not self.running:
                    raise HarnessError(f"{self.identity} exited early:\n{self.tail()}")
                with contextlib.suppress(aiohttp.ClientError):
                    async with session.get(f"{self.ops_url}/readyz") as response:
                        if response.status == 200:
                            return
                await asyncio.sleep(0.1)
        raise HarnessError(f"{self.identity} not ready within {READY_SECONDS:.0f}s:\n{self.tail()}")

    async def metrics(self) -> str:
        async with aiohttp.ClientSession() as session, session.get(f"{self.ops_url}/metrics") as response:
            return await response.text()

    async def stop(self) -> int | None:
        """SIGTERM and wait (a graceful stop: in-flight requests finish, the Lease is released)."""
        if self.process is None:
            return None
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), timeout=STOP_SECONDS)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        return self.process.returncode

    async def kill(self) -> None:
        """SIGKILL: no shutdown code runs, as when a node dies or the OOM killer strikes."""
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await self.process.wait()

    def tail(self, chars: int = 6000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else "(no log)"


# -- the installation ---------------------------------------------------------------------------
def _env_of(deployment: Obj, *, identity: str) -> dict[str, str]:
    """The container environment of a rendered Deployment, downward API resolved for a local run."""
    out: dict[str, str] = {}
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    for item in container.get("env") or []:
        if "value" in item:
            out[item["name"]] = str(item["value"])
            continue
        path = item["valueFrom"]["fieldRef"]["fieldPath"]
        out[item["name"]] = {"metadata.name": identity, "metadata.namespace": NAMESPACE}[path]
    return out


@dataclass
class Guard:
    """The chart installed through the API, and the local processes it points at."""

    backend: Backend
    workdir: Path
    admin: AioClusterClient
    port: int = 0
    ca_pem: bytes = b""
    objects: list[Obj] = field(default_factory=list)
    deployments: dict[str, Obj] = field(default_factory=dict)
    processes: dict[str, ServeProcess] = field(default_factory=dict)
    hook_output: dict[str, str] = field(default_factory=dict)  # pre-install hook Job -> its output

    @property
    def host(self) -> str:
        return self.backend.webhook_host

    @property
    def match_conditions(self) -> bool:
        """True when the chart rendered matchConditions (the server has them, 1.28+): only GPU pods
        reach the pod webhooks. Without them (the allNamespaces scope) every pod of every namespace
        but the excluded ones does, and the pod webhooks fail open."""
        mutating = next(o for o in self.objects if o["kind"] == "MutatingWebhookConfiguration")
        return any(w.get("matchConditions") for w in mutating["webhooks"])

    @property
    def opt_in(self) -> bool:
        """True when the chart runs in the namespaceOptIn scope (``webhooks.scope`` set so): only
        namespaces labelled ``OPT_IN_LABEL=enabled`` reach the pod webhooks, every pod there."""
        mutating = next(o for o in self.objects if o["kind"] == "MutatingWebhookConfiguration")
        return any(
            e["key"] == OPT_IN_LABEL
            for w in mutating["webhooks"]
            for e in w["namespaceSelector"]["matchExpressions"]
        )

    def values(self, *, in_cluster: bool = False) -> Obj:
        """The chart values of the suite (``in_cluster`` only to read the Deployments' process spec)."""
        return {
            "webhook": {"enabled": in_cluster},
            "controller": {"enabled": in_cluster},
            "webhooks": {
                "urlOverride": f"https://{self.host}:{self.port}",
                "caBundle": base64.b64encode(self.ca_pem).decode(),
            },
            "config": {
                # No Volcano scheduler places pods here: vGPU pods are routed to our controller.
                "scheduling": {"routing": True},
                # Queue capacity counts only the suite's CPU workers, whatever else the cluster has.
                "queues": {"nodeSelector": {CAPACITY_LABEL: "true"}},
                # Gangs are pinned to one InfiniBand cluster named by this node label (seed 004).
                "topology": {"ibClusterLabel": IB_LABEL},
            },
        }

    def certificates(self) -> tuple[Path, Path]:
        now = datetime.now(UTC)
        ca = generate_ca(now=now, validity=timedelta(days=1))
        spec = ServingSpec(service=WEBHOOK_SA, namespace=NAMESPACE, ip_addresses=(self.host,))
        serving = issue_serving_certificate(ca, spec, now=now, validity=timedelta(days=1))
        self.ca_pem = ca.cert_pem
        cert, key = self.workdir / "tls.crt", self.workdir / "tls.key"
        cert.write_bytes(serving.cert_pem)
        key.write_bytes(serving.key_pem)
        key.chmod(0o600)
        return cert, key

    async def apply(self, obj: Obj) -> Obj:
        """Create, or replace what exists (``kubectl apply`` without the merge)."""
        resource = BY_KIND[obj["kind"]]
        meta = obj["metadata"]
        try:
            return await self.admin.create(resource, obj, namespace=meta.get("namespace"))
        except AlreadyExists:
            current = await self.admin.get(resource, meta["name"], namespace=meta.get("namespace"))
            obj = {**obj, "metadata": {**meta, "resourceVersion": current["metadata"]["resourceVersion"]}}
            return await self.admin.replace(resource, obj)

    def rendered(self, kind: str, name: str) -> Obj:
        """A fresh copy of one object as the chart rendered it."""
        return next(
            yaml.safe_load(yaml.safe_dump(o))
            for o in self.objects
            if o["kind"] == kind and o["metadata"]["name"] == name
        )

    async def install(self) -> None:
        self.port = free_port(self.host)
        cert, key = self.certificates()
        version = self.backend.kube_version
        everything = render_objects(self.values(), kube_version=version)
        rendered = [r for r in everything if not r.is_hook]
        self.objects = [r.obj for r in rendered]
        self.deployments = {
            r.name: r.obj
            for r in render_objects(self.values(in_cluster=True), kube_version=version)
            if r.kind == "Deployment"
        }
        # helm install --create-namespace
        await self.apply(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": NAMESPACE, "labels": {SUITE_LABEL: "e2e"}},
            }
        )
        await self.pre_install([r.obj for r in everything if r.is_hook and "pre-install" in r.hook_phases])
        for kind in INSTALL_ORDER:
            for obj in (o for o in self.objects if o["kind"] == kind):
                await self.apply(obj)
                if kind == "CustomResourceDefinition":
                    await established(self.admin, obj["metadata"]["name"])
        unknown = {o["kind"] for o in self.objects} - set(INSTALL_ORDER)
        if unknown:
            raise HarnessError(f"the chart renders kinds the suite does not install: {sorted(unknown)}")
        config = next(o for o in self.objects if o["kind"] == "ConfigMap")["data"]["config.yaml"]
        (self.workdir / "config.yaml").write_text(config)
        self._cert_files = (cert, key)

    async def pre_install(self, hook: list[Obj]) -> None:
        """The chart's pre-install hooks as Helm runs them: their objects created (weights order
        them as INSTALL_ORDER does), each Job's container run here under its ServiceAccount, and the
        objects deleted once it succeeded (hook-delete-policy hook-succeeded). Below 1.21 that is
        the name-label hook (``vgpu-guard label-ns``), which keeps the excluded namespaces out."""
        for kind in INSTALL_ORDER:
            for obj in (o for o in hook if o["kind"] == kind):
                await self.apply(obj)
        for job in (o for o in hook if o["kind"] == "Job"):
            spec = job["spec"]["template"]["spec"]
            kubeconfig = await self.backend.kubeconfig_for(NAMESPACE, spec["serviceAccountName"])
            argv = [str(BIN), *spec["containers"][0]["args"], "--kubeconfig", str(kubeconfig)]
            run = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            out, _ = await run.communicate()
            self.hook_output[job["metadata"]["name"]] = out.decode()
            if run.returncode != 0:
                raise HarnessError(
                    f"hook Job {job['metadata']['name']} exited {run.returncode}:\n{out.decode()}"
                )
        for obj in reversed([o for o in hook if o["kind"] != "Job"]):
            meta = obj["metadata"]
            with contextlib.suppress(NotFound):
                await self.admin.delete(BY_KIND[obj["kind"]], meta["name"], namespace=meta.get("namespace"))

    async def process(
        self, component: str, identity: str, overrides: Mapping[str, str] | None = None
    ) -> ServeProcess:
        """A ``serve`` process as the chart's Deployment runs it, plus local overrides; ``overrides``:
        more ``VGPU_GUARD__SECTION__FIELD`` settings for a story's own process."""
        if identity in self.processes:
            return self.processes[identity]
        deployment = self.deployments[f"{RELEASE}-{component}"]
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        args = list(container["args"])
        args[args.index("--config") + 1] = str(self.workdir / "config.yaml")
        kubeconfig = await self.backend.kubeconfig_for(
            NAMESPACE, deployment["spec"]["template"]["spec"]["serviceAccountName"]
        )
        ops_port = free_port("127.0.0.1")
        argv = [str(BIN), *args, "--kubeconfig", str(kubeconfig), "--cert-mode", "files"]
        argv += ["--metrics-port", str(ops_port)]
        cert, key = self._cert_files
        env = {
            **os.environ,
            **_env_of(deployment, identity=identity),
            # The config's webhook block is the in-cluster one (0.0.0.0, /etc/vgpu-guard/tls):
            # the documented VGPU_GUARD__SECTION__FIELD overrides point it at this machine.
            "VGPU_GUARD__WEBHOOK__HOST": self.host if component == "webhook" else "127.0.0.1",
            "VGPU_GUARD__WEBHOOK__TLS_CERT_FILE": str(cert),
            "VGPU_GUARD__WEBHOOK__TLS_KEY_FILE": str(key),
            **(overrides or {}),
        }
        if component == "webhook":
            argv += ["--port", str(self.port)]
        proc = ServeProcess(
            component=component,
            identity=identity,
            argv=argv,
            env=env,
            log=self.workdir / f"{identity}.log",
            ops_url=f"http://127.0.0.1:{ops_port}",
        )
        self.processes[identity] = proc
        return proc

    async def ensure(
        self, component: str, identity: str, overrides: Mapping[str, str] | None = None
    ) -> ServeProcess:
        proc = await self.process(component, identity, overrides)
        if not proc.running:
            await proc.start()
        await proc.wait_ready()
        return proc

    async def uninstall(self) -> None:
        """Webhook configurations first (the chart's pre-delete hook), then processes, then the rest."""
        errors: list[str] = []

        async def attempt(coro: Awaitable[Any]) -> None:
            try:
                await coro
            except NotFound:
                pass
            except KubeError as e:
                errors.append(str(e))

        for resource in (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS):
            await attempt(self.admin.delete(resource, RELEASE))
        for proc in self.processes.values():
            await proc.stop()
        for obj in reversed(self.objects):
            if obj["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
                continue
            meta = obj["metadata"]
            await attempt(
                self.admin.delete(BY_KIND[obj["kind"]], meta["name"], namespace=meta.get("namespace"))
            )
        await attempt(self.admin.delete(NAMESPACES, NAMESPACE))
        # As `kubectl delete namespace` waits: the next install (a worker coming back to the e2e
        # package) must not find the namespace still terminating ("unable to create new content").
        try:
            await until(f"namespace {NAMESPACE} deleted", self._namespace_gone, within=120.0)
        except (AssertionError, KubeError) as e:
            errors.append(str(e))
        if errors:
            raise HarnessError("tear-down could not delete everything: " + "; ".join(errors))

    async def _namespace_gone(self) -> bool:
        try:
            await self.admin.get(NAMESPACES, NAMESPACE)
        except NotFound:
            return True
        return False


# -- nodes without kubelets ---------------------------------------------------------------------
@dataclass(frozen=True)
class GpuNode:
    """A node of the suite: its GPUs ("uuid,split,memory,type,health,mode" as the plugin registers)."""

    name: str
    pool: str
    gpus: tuple[tuple[str, int, str, str], ...] = ()  # (uuid, memory MiB, card type, mode)
    cpu: str = "16"
    ib_cluster: str = ""
    capacity: bool = False
    # The registration as written, when a story needs one the plugin would not write ("True"
    # health, a UUID twice); else it is derived from ``gpus``.
    registration: str = ""

    def register(self) -> str:
        if self.registration:
            return self.registration
        return "".join(f"{u},10,{m},{t},true,{mode}:" for u, m, t, mode in self.gpus)

    def node(self) -> Obj:
        labels = {"kubernetes.io/hostname": self.name, SUITE_LABEL: "e2e", POOL_LABEL: self.pool}
        if self.capacity:
            labels[CAPACITY_LABEL] = "true"
        if self.ib_cluster:
            labels[IB_LABEL] = self.ib_cluster
        annotations = {"volcano.sh/node-vgpu-register": self.register()} if self.gpus else {}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels, "annotations": annotations},
        }

    def status(self, now: datetime) -> Obj:
        resources = {"cpu": self.cpu, "memory": "64Gi", "pods": "110"}
        if self.gpus:
            resources |= {
                "volcano.sh/vgpu-number": str(10 * len(self.gpus)),
                "volcano.sh/vgpu-memory": str(sum(m for _, m, _, _ in self.gpus)),
                "volcano.sh/vgpu-cores": str(100 * len(self.gpus)),
            }
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "e2e: no kubelet, the suite keeps this condition fresh",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }
        return {"status": {"capacity": resources, "allocatable": resources, "conditions": [ready]}}


A10 = "NVIDIA-NVIDIA A10"
A100 = "NVIDIA-NVIDIA A100-SXM4-40GB"
NODE_SET = (
    GpuNode("e2e-a10-0", "seed-000", (("GPU-e2e-a10-0-0", 24576, A10, "hami-core"),)),
    GpuNode("e2e-mig-0", "mig", (("GPU-e2e-mig-0-0", 40960, A100, "mig"),)),
    GpuNode("e2e-crash-0", "crash", (("GPU-e2e-crash-0-0", 24576, A10, "hami-core"),)),
    GpuNode("e2e-ha-0", "ha", (("GPU-e2e-ha-0-0", 24576, A10, "hami-core"),)),
    # Seed 004: two InfiniBand clusters, ib-a with two single-card nodes, ib-b with three.
    *(
        GpuNode(
            f"e2e-ib-{c}-{i}",
            "ib",
            ((f"GPU-e2e-ib-{c}-{i}-0", 24576, A10, "hami-core"),),
            ib_cluster=f"ib-{c}",
        )
        for c, n in (("a", 2), ("b", 3))
        for i in range(n)
    ),
    *(GpuNode(f"e2e-worker-{i}", "cpu", cpu="8", capacity=True) for i in range(4)),
)


async def create_nodes(admin: AioClusterClient, specs: Sequence[GpuNode] = NODE_SET) -> None:
    now = datetime.now(UTC)
    for spec in specs:
        with contextlib.suppress(AlreadyExists):
            await admin.create(NODES, spec.node())
        await admin.patch(NODES, spec.name, spec.status(now), subresource="status")


async def delete_nodes(admin: AioClusterClient, specs: Sequence[GpuNode] = NODE_SET) -> None:
    """The nodes and their ledgers (a ledger outlives its node: the controller keeps it while pods
    hold GPUs there)."""
    for spec in specs:
        with contextlib.suppress(NotFound):
            await admin.delete(NODES, spec.name)
        with contextlib.suppress(NotFound):
            await admin.delete(LEDGERS, spec.name)


async def heartbeat(admin: AioClusterClient, interval: float = 10.0) -> None:
    """The kubelets' stand-in: keep Ready fresh, or a real node lifecycle controller (40 s grace)
    marks the nodes NotReady and taints them mid-run."""
    while True:
        await asyncio.sleep(interval)
        now = datetime.now(UTC)
        for spec in NODE_SET:
            with contextlib.suppress(KubeError):
                await admin.patch(NODES, spec.name, spec.status(now), subresource="status")


async def device_plugin(admin: AioClusterClient) -> None:
    """The device plugin's stand-in: every bound suite pod in ``bind-phase=allocating`` succeeds
    (on a node the plugin's Allocate writes this when the kubelet starts the pod)."""
    selector = f"{SUITE_LABEL}=e2e"

    async def confirm(pod: Obj) -> None:
        meta = pod.get("metadata") or {}
        if (meta.get("annotations") or {}).get("volcano.sh/bind-phase") != "allocating":
            return
        if not (pod.get("spec") or {}).get("nodeName") or meta.get("deletionTimestamp"):
            return
        with contextlib.suppress(NotFound):
            await admin.patch(
                PODS,
                meta["name"],
                {"metadata": {"annotations": {"volcano.sh/bind-phase": "success"}}},
                namespace=meta["namespace"],
            )

    while True:
        try:
            listed = await admin.list(PODS, label_selector=selector)
            for pod in listed.items:
                await confirm(pod)
            async for event in admin.watch(
                PODS, resource_version=listed.resource_version, label_selector=selector, timeout_seconds=60
            ):
                if event.type in ("ADDED", "MODIFIED"):
                    await confirm(event.object)
        except Expired:
            continue
        except KubeError:
            await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def background(*coros: Awaitable[None]) -> AsyncIterator[None]:
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


__all__ = [
    "A10",
    "A100",
    "BY_KIND",
    "CLUSTER_ROLES",
    "CONTROLLER_SA",
    "EVENTS_V1",
    "IB_LABEL",
    "LEASE",
    "NAMESPACE",
    "NODE_SET",
    "OPT_IN_LABEL",
    "POOL_LABEL",
    "QUEUES",
    "RELEASE",
    "SUITE_LABEL",
    "WEBHOOK_SA",
    "Backend",
    "ClusterBackend",
    "DoubleBackend",
    "GpuNode",
    "Guard",
    "HarnessError",
    "ServeProcess",
    "background",
    "create_nodes",
    "delete_nodes",
    "device_plugin",
    "ensure_volcano_crds",
    "free_port",
    "heartbeat",
    "service_account_ready",
    "until",
    "whoami",
]

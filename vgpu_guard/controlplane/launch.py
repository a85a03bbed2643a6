"""Start and stop etcd, kube-apiserver, kube-controller-manager and kube-scheduler on loopback ports.

What it sets up is what the product and its tests need from a real cluster, with 1.20's flags:
token authentication (an admin in ``system:masters``, the scheduler as ``system:kube-scheduler`` so
bootstrap RBAC applies to it), RBAC, ServiceAccount signing keys and the ServiceAccount admission
plugin, the controller manager (namespace deletion, ServiceAccount tokens, garbage collection, node
lifecycle) and the scheduler. etcd keeps its data on tmpfs when there is one: the control plane is
thrown away after each run and fsync on a shared disk dominates its write latency otherwise.

Every process is started in its own session with its log in ``<dir>/logs``; ``state.json`` records
the PIDs and the command lines, so ``stop`` ends exactly the processes ``start`` started (a PID that
now belongs to something else is left alone).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from vgpu_guard.controlplane.build import Binaries

READY_SECONDS = 90.0
STOP_SECONDS = 15.0
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc"
# A resource nothing of ours watches, kept out of the watch cache so that a watch from a
# resourceVersion older than etcd's last compaction really ends in 410 (the contract suite's probe).
UNCACHED_RESOURCE = "podtemplates"
# kube-apiserver's default is 5 min; the contract probe waits for the next compaction to pass its
# resourceVersion (it waited ~30 s at 20 s). Every cached resource keeps its own watch window.
COMPACTION_INTERVAL = "5s"
ADMIN_USER = "vgpu-guard-admin"


class StartError(Exception):
    """A component did not come up; the message names it and ends with its log's tail."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@dataclass
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int

    @classmethod
    def pick(cls) -> Ports:
        return cls(free_port(), free_port(), free_port(), free_port(), free_port())


@dataclass
class ControlPlane:
    """One control plane in ``directory``; ``start()`` brings it up, ``stop()`` ends it."""

    binaries: Binaries
    directory: Path
    scheduler_args: list[str] = field(default_factory=list)
    apiserver_args: list[str] = field(default_factory=list)
    ports: Ports = field(default_factory=Ports.pick)
    admin_token: str = field(default_factory=lambda: secrets.token_hex(16))
    _processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _etcd_data: Path | None = None

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def logs(self) -> Path:
        return self.directory / "logs"

    # -- start ---------------------------------------------------------------------------------
    def start(self) -> None:
        for name, port in vars(self.ports).items():
            if not _port_free(port):
                raise StartError(f"port {port} for {name} is in use on 127.0.0.1")
        self.directory.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        try:
            self._write_credentials()
            self._start_etcd()
            self._start_apiserver()
            self._write_kubeconfigs()
            self._start("kube-controller-manager", self._controller_manager_argv())
            self._start("kube-scheduler", self._scheduler_argv())
            self._wait_healthy("kube-controller-manager", self.ports.controller_manager)
            self._wait_healthy("kube-scheduler", self.ports.scheduler)
        except BaseException:
            self.stop()
            raise
        self._write_state()

    def _write_credentials(self) -> None:
        pki = self.directory / "pki"
        pki.mkdir(exist_ok=True)
        key = pki / "sa.key"
        if not key.exists():
            subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
            subprocess.run(
                ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pki / "sa.pub")],
                check=True,
                capture_output=True,
            )
        self._scheduler_token = secrets.token_hex(16)
        self._manager_token = secrets.token_hex(16)
        (pki / "tokens.csv").write_text(
            f'{self.admin_token},{ADMIN_USER},uid-admin,"system:masters"\n'
            f"{self._scheduler_token},system:kube-scheduler,uid-scheduler\n"
            f'{self._manager_token},system:kube-controller-manager,uid-kcm,"system:masters"\n'
        )
        os.chmod(pki / "tokens.csv", 0o600)

    def _start_etcd(self) -> None:
        shm = Path("/dev/shm")
        base = shm if shm.is_dir() and os.access(shm, os.W_OK) else self.directory
        self._etcd_data = Path(tempfile.mkdtemp(prefix="vgpu-guard-etcd-", dir=base))
        client = f"http://127.0.0.1:{self.ports.etcd_client}"
        peer = f"http://127.0.0.1:{self.ports.etcd_peer}"
        argv = [
            str(self.binaries.etcd),
            f"--data-dir={self._etcd_data}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=default={peer}",
            "--quota-backend-bytes=8589934592",
        ]
        self._start("etcd", argv)
        self._wait("etcd", lambda: _http_ok(f"{client}/health", None, None, '"health":"true"'))

    def _start_apiserver(self) -> None:
        pki = self.directory / "pki"
        argv = [
            str(self.binaries.path("kube-apiserver")),
            f"--etcd-servers=http://127.0.0.1:{self.ports.etcd_client}",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports.apiserver}",
            "--insecure-port=0",
            f"--cert-dir={pki}",
            f"--token-auth-file={pki / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--api-audiences={SERVICE_ACCOUNT_ISSUER}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--allow-privileged=true",
            f"--watch-cache-sizes={UNCACHED_RESOURCE}#0",
            f"--etcd-compaction-interval={COMPACTION_INTERVAL}",
            *self.apiserver_args,
        ]
        self._start("kube-apiserver", argv)
        self._wait(
            "kube-apiserver",
            lambda: _http_ok(f"{self.server}/readyz", self.ca_file, self.admin_token, "ok"),
        )

    @property
    def ca_file(self) -> Path:
        # kube-apiserver writes a self-signed certificate followed by its CA into --cert-dir.
        return self.directory / "pki" / "apiserver.crt"

    def _kubeconfig(self, user: str, token: str) -> str:
        ca = base64.b64encode(self.ca_file.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "vgpu-guard", "cluster": {"server": self.server, "certificate-authority-data": ca}}
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": "vgpu-guard", "context": {"cluster": "vgpu-guard", "user": user}}],
            "current-context": "vgpu-guard",
        }
        return json.dumps(config, indent=2) + "\n"

    def _write_kubeconfigs(self) -> None:
        for path, user, token in (
            (self.kubeconfig, ADMIN_USER, self.admin_token),
            (self.directory / "scheduler.kubeconfig", "system:kube-scheduler", self._scheduler_token),
            (
                self.directory / "controller-manager.kubeconfig",
                "system:kube-controller-manager",
                self._manager_token,
            ),
        ):
            path.write_text(self._kubeconfig(user, token))
            os.chmod(path, 0o600)

    def _controller_manager_argv(self) -> list[str]:
        pki = self.directory / "pki"
        return [
            str(self.binaries.path("kube-controller-manager")),
            f"--kubeconfig={self.directory / 'controller-manager.kubeconfig'}",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={self.ca_file}",
            "--use-service-account-credentials=false",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports.controller_manager}",
            "--port=0",
            # Fake nodes have no kubelet: the suites heartbeat them through nodes/status. A long
            # grace period keeps a node Ready across a slow moment of a 2-core machine, and lets
            # the oracle keep its 800 nodes for a whole run with a heartbeat every 100 s (at
            # every 20 s they were a third of the oracle's API traffic).
            "--node-monitor-grace-period=300s",
            # The default 20 QPS takes ~25 s to lift the not-ready taint TaintNodesByCondition puts
            # on 500 new nodes (one PATCH each); the oracle creates that many in one wave.
            "--kube-api-qps=200",
            "--kube-api-burst=400",
            # A claim created in the moment before its volume reaches the PV controller's cache
            # waits for the next sync (default 15 s); the oracle waits on such claims every wave.
            "--pvclaimbinder-sync-period=1s",
        ]

    def _scheduler_argv(self) -> list[str]:
        return [
            str(self.binaries.path("kube-scheduler")),
            f"--kubeconfig={self.directory / 'scheduler.kubeconfig'}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.ports.scheduler}",
            "--port=0",
            *self.scheduler_args,
        ]

    def _start(self, name: str, argv: list[str]) -> None:
        log = (self.logs / f"{name}.log").open("ab")
        self._processes[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )
        log.close()

    def _wait(self, name: str, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + READY_SECONDS
        process = self._processes[name]
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise StartError(f"{name} exited with code {process.returncode}\n{self.log_tail(name)}")
            if ready():
                return
            time.sleep(0.2)
        raise StartError(f"{name} was not ready within {READY_SECONDS:.0f}s\n{self.log_tail(name)}")

    def _wait_healthy(self, name: str, port: int) -> None:
        # /healthz on the components' secure port is always allowed (no authentication needed).
        self._wait(name, lambda: _http_ok(f"https://127.0.0.1:{port}/healthz", None, None, "ok"))

    def log_tail(self, name: str, size: int = 3000) -> str:
        path = self.logs / f"{name}.log"
        try:
            data = path.read_bytes()[-size:].decode(errors="replace")
        except OSError:
            return f"(no log at {path})"
        return f"--- last lines of {path} ---\n{data}"

    def pids(self) -> dict[str, int]:
        """The running components' process ids by name (etcd, kube-apiserver, ...): benchmarks
        read their CPU time."""
        return {name: process.pid for name, process in self._processes.items()}

    def _write_state(self) -> None:
        state = {
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "etcd_data": str(self._etcd_data),
            "processes": {n: {"pid": p.pid, "argv0": str(p.args[0])} for n, p in self._processes.items()},  # type: ignore[index]
        }
        (self.directory / "state.json").write_text(json.dumps(state, indent=2) + "\n")

    # -- stop ----------------------------------------------------------------------------------
    def stop(self) -> None:
        """End the processes this object started (newest first) and remove etcd's data."""
        for name in reversed(list(self._processes)):
            _terminate(self._processes[name].pid, str(self._processes[name].args[0]))  # type: ignore[index]
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._processes[name].wait(timeout=1)
        self._processes.clear()
        if self._etcd_data is not None:
            shutil.rmtree(self._etcd_data, ignore_errors=True)
            self._etcd_data = None
        with contextlib.suppress(FileNotFoundError):
            (self.directory / "state.json").unlink()

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_recorded(directory: Path) -> list[str]:
    """``stop`` from another process: end what ``<directory>/state.json`` records; returns their names."""
    state_file = directory / "state.json"
    try:
        state = json.loads(state_file.read_text())
    except FileNotFoundError:
        return []
    stopped = []
    for name, proc in reversed(list(state.get("processes", {}).items())):
        if _terminate(int(proc["pid"]), str(proc["argv0"])):
            stopped.append(name)
    data = state.get("etcd_data")
    if data:
        shutil.rmtree(data, ignore_errors=True)
    state_file.unlink()
    return stopped


def _runs(pid: int, argv0: str) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return False
    return cmdline == argv0


def _terminate(pid: int, argv0: str) -> bool:
    """SIGTERM, then SIGKILL after STOP_SECONDS, only if ``pid`` still runs ``argv0``."""
    if not _runs(pid, argv0):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_SECONDS
    while time.monotonic() < deadline:
        if not _runs(pid, argv0) or _zombie(pid):
            return True
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return True


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def _http_ok(url: str, ca_file: Path | None, token: str | None, expect: str) -> bool:
    if ca_file is not None and not ca_file.exists():
        return False  # kube-apiserver writes its certificate during start-up
    context = ssl.create_default_context(cafile=str(ca_file)) if ca_file else ssl._create_unverified_context()
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=2, context=context) as response:
            return expect in response.read().decode(errors="replace")
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False

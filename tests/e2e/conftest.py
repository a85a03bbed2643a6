"""Fixtures of the end-to-end suite: one installation per backend, one namespace per story.

    guard    (package) the backend's API server with the chart installed through the API, the
             suite's nodes, the kubelet and device-plugin stand-ins, and the local processes
             e2e-webhook-0 and e2e-controller-0 running; parametrised over the backends
             "double" (always) and "cluster" (E2E_KUBECONFIG or the project control plane,
             tests/real_cluster.py)
    env      (story) a fresh namespace, an admin client, the default processes running again,
             and tear-down that undoes the story's faults even when it fails

The installation lives as long as the e2e package runs (its processes would otherwise keep placing
vgpu-guard pods while later suites, such as the oracle, use the same control plane). Tear-down runs
on failure too: the package's in ``finally`` (webhook configurations first, then
the processes, the chart's objects and the nodes), each story's in its fixture.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e.harness import (
    NODE_SET,
    OPT_IN_LABEL,
    POOL_LABEL,
    SUITE_LABEL,
    Backend,
    ClusterBackend,
    DoubleBackend,
    GpuNode,
    Guard,
    background,
    create_nodes,
    delete_nodes,
    device_plugin,
    heartbeat,
    service_account_ready,
)
from tests.real_cluster import RealCluster, deselect_real_cluster_items
from vgpu_guard.engine.ledger import Allocation, decode_ledger
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.errors import NotFound
from vgpu_guard.kube.resources import LEDGERS, NAMESPACES, PODS, Resource

Obj = dict[str, Any]
WEBHOOK_0 = "e2e-webhook-0"
CONTROLLER_0 = "e2e-controller-0"
# Fixtures that stop webhook-0 and start the webhook as a Volcano user runs it: ``env`` does not
# start webhook-0 for a story that asks for one (a start and a stop, ~2 s, for nothing).
VOLCANO_FIXTURES = frozenset({"volcano_mode", "volcano"})

BACKENDS = ["double", "cluster"]
# The marker of stories that drive kubectl or Helm (test_clients.py and test_ledger_columns.py
# whole, one story of test_default_scope.py): they run on the cluster backend only. The API double
# serves JSON only (no OpenAPI, Tables, strategic merge patch, server-side apply, protobuf or
# impersonation: docs/apidouble.md) and a real client's fidelity is what the real control plane
# proves; the double's stories go through our own JSON client (AioClusterClient).
REAL_CLIENTS_ONLY = "real_clients_only"
# Pools of nodes a story creates for itself (and deletes after it).
STORY_POOLS = {"arbiter", "commit", "gone", "isolation", "isolation-b", "migration"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The double's runs of kubectl and Helm stories are left out (``REAL_CLIENTS_ONLY``); the
    cluster backend's stories only where no real cluster can be had."""
    on_double = [i for i in items if _backend_of(i) == "double" and i.get_closest_marker(REAL_CLIENTS_ONLY)]
    if on_double:
        config.hook.pytest_deselected(items=on_double)
        items[:] = [i for i in items if i not in on_double]
    deselect_real_cluster_items(config, items, lambda item: _backend_of(item) == "cluster")


def _backend_of(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("backend_name") if callspec is not None else None


@pytest.fixture(scope="package", params=BACKENDS)
def backend_name(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


async def _backend(
    name: str, workdir: Path, request: pytest.FixtureRequest
) -> DoubleBackend | ClusterBackend:
    backend: DoubleBackend | ClusterBackend
    if name == "double":
        backend = DoubleBackend(workdir)
    else:
        real: RealCluster = request.getfixturevalue("real_api")
        backend = ClusterBackend(workdir, str(real.kubeconfig))
    await backend.start()
    return backend


@pytest_asyncio.fixture(scope="package", loop_scope="session")
async def guard(
    backend_name: str, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> AsyncIterator[Guard]:
    workdir = tmp_path_factory.mktemp(f"e2e-{backend_name}")
    backend = await _backend(backend_name, workdir, request)
    clients: list[AioClusterClient] = []
    try:
        for _ in range(3):
            clients.append(await AioClusterClient.from_kubeconfig(str(backend.admin_kubeconfig)))
        admin, beat, plugin = clients
        installed = Guard(backend, workdir, admin)
        try:
            await installed.install()
            await create_nodes(admin)
            async with background(heartbeat(beat), device_plugin(plugin)):
                await installed.ensure("webhook", WEBHOOK_0)
                await installed.ensure("controller", CONTROLLER_0)
                yield installed
        finally:
            try:
                await installed.uninstall()
            finally:
                await delete_nodes(admin)
    finally:
        for c in clients:
            await c.close()
        await backend.close()


@dataclass
class Env:
    """One story's view: the admin client, its namespace, and what to undo afterwards."""

    guard: Guard
    api: AioClusterClient
    ns: str
    undo: list[Callable[[], Awaitable[Any]]] = field(default_factory=list)

    @property
    def backend(self) -> Backend:
        return self.guard.backend

    async def create(self, resource: Resource, obj: Obj, *, dry_run: bool = False) -> tuple[Obj, list[str]]:
        """Create ``obj``; returns what the API server stored and the Warning headers it sent."""
        before = len(self.api.warnings)
        namespace = self.ns if resource.namespaced else None
        out = await self.api.create(resource, obj, namespace=namespace, dry_run=dry_run)
        return out, self.api.warnings[before:]

    async def pod(self, name: str) -> Obj:
        return await self.api.get(PODS, name, namespace=self.ns)

    async def pods(self) -> list[Obj]:
        return (await self.api.list(PODS, namespace=self.ns)).items

    async def events(self, name: str) -> list[Obj]:
        from tests.e2e.harness import EVENTS_V1

        items = (await self.api.list(EVENTS_V1, namespace=self.ns)).items
        return [e for e in items if (e.get("involvedObject") or {}).get("name") == name]

    async def ledger(self, node: str) -> Obj | None:
        try:
            return await self.api.get(LEDGERS, node)
        except NotFound:
            return None


def entries_of(ledger: Obj | None) -> list[Allocation]:
    """A stored GPULedger's entries, decoded as vgpu-guard reads them (none when there is no
    ledger): the object holds each entry as one line of text (engine/ledger.py)."""
    return list(decode_ledger(ledger).allocations.values()) if ledger is not None else []


def gpu_pod(
    name: str,
    memory: int | str,
    *,
    pool: str,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> Obj:
    """A vGPU pod as users write it for Volcano (schedulerName volcano), pinned to a suite pool."""
    limits = {"volcano.sh/vgpu-number": "1", "volcano.sh/vgpu-memory": str(memory)}
    assert pool in {n.pool for n in NODE_SET} | STORY_POOLS, pool
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {SUITE_LABEL: "e2e", **(labels or {})},
            "annotations": dict(annotations or {}),
        },
        "spec": {
            "schedulerName": "volcano",
            "nodeSelector": {POOL_LABEL: pool},
            "containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}],
        },
    }


def plain_pod(name: str, annotations: dict[str, str] | None = None) -> Obj:
    """A pod that asks for no GPU."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {SUITE_LABEL: "e2e"}, "annotations": dict(annotations or {})},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


async def new_namespace(guard: Guard, api: AioClusterClient, *, opt_in: bool = True) -> str:
    """A fresh story namespace, labelled in when the chart runs in the namespaceOptIn scope, and
    ready for pods (its ``default`` ServiceAccount exists, with a token where the server needs one)."""
    labels = {SUITE_LABEL: "e2e"}
    if guard.opt_in and opt_in:
        labels[OPT_IN_LABEL] = "enabled"
    namespace = await api.create(
        NAMESPACES,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"generateName": "e2e-", "labels": labels}},
    )
    name: str = namespace["metadata"]["name"]
    await service_account_ready(api, name)
    return name


async def drop_namespace(api: AioClusterClient, namespace: str) -> None:
    """Delete a story namespace. Bound pods on kubelet-less nodes never finish a graceful deletion
    (and would keep the namespace Terminating): they are deleted with grace period 0 first."""
    for pod in (await api.list(PODS, namespace=namespace)).items:
        with contextlib.suppress(NotFound):
            await api.delete(PODS, pod["metadata"]["name"], namespace=namespace, grace_period_seconds=0)
    with contextlib.suppress(NotFound):
        await api.delete(NAMESPACES, namespace)


@pytest_asyncio.fixture(loop_scope="session")
async def env(guard: Guard, request: pytest.FixtureRequest) -> AsyncIterator[Env]:
    if VOLCANO_FIXTURES.isdisjoint(request.fixturenames):
        await guard.ensure("webhook", WEBHOOK_0)
    await guard.ensure("controller", CONTROLLER_0)
    api = await AioClusterClient.from_kubeconfig(str(guard.backend.admin_kubeconfig))
    story = Env(guard, api, await new_namespace(guard, api))
    try:
        yield story
    finally:
        try:
            for action in reversed(story.undo):
                await action()
            for identity, proc in guard.processes.items():
                if identity not in (WEBHOOK_0, CONTROLLER_0):
                    await proc.stop()
            await drop_namespace(api, story.ns)
        finally:
            for proc in guard.processes.values():
                print(f"----- {proc.identity} (last lines) -----\n{proc.tail(3000)}")
            await api.close()


@contextlib.asynccontextmanager
async def story_nodes(env: Env, *specs: GpuNode) -> AsyncIterator[None]:
    """A story's own GPU nodes, Ready, gone with their ledgers afterwards. One second for the
    webhook's node cache to take them in: a write before that is refused ("registers no vGPU
    devices"), never let through."""
    try:
        await create_nodes(env.api, specs)
        await asyncio.sleep(1)
        yield
    finally:
        await delete_nodes(env.api, specs)

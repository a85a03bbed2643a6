"""A cluster on the API double for allocation-controller tests: CRDs, nodes, pods, a fake plugin."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from tests.apidouble_support.faults import FaultPlan
from tests.controller.listed_inputs import ListedInputs
from tests.engine.allocation_testkit import config, gpu_node, vgpu_pod
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.apidouble.store import Store
from vgpu_guard.controller.allocation import AllocationController
from vgpu_guard.controller.inputs import CachedInputs
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.ledger import LedgerViolation, NodeLedger, check_invariants, decode_ledger
from vgpu_guard.kube.client import typed_items
from vgpu_guard.kube.resources import CRDS, LEASES, LEDGERS, NODES, PODS

__all__ = ["Cluster", "FakeClock", "config", "gpu_node", "running", "until", "vgpu_pod"]

Obj = dict[str, Any]


class FakeClock:
    """Unix seconds that only move when a test says so."""

    def __init__(self, now: float = 1_750_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _crd(path: str) -> Obj:
    text = resources.files("vgpu_guard").joinpath(path).read_text()
    loaded: Obj = yaml.safe_load(text)
    return loaded


class Cluster:
    """One API double, any number of controller replicas on it, and a device plugin stand-in."""

    def __init__(self, nodes: Iterable[Obj] = (), *, cfg: GuardConfig | None = None) -> None:
        self.clock = FakeClock()
        self.store = Store(seed=4, clock=lambda: datetime.fromtimestamp(self.clock(), UTC))
        for path in (
            "data/crds/gpuledgers.vgpu-guard.io.yaml",
            "data/crds/volcano/scheduling.volcano.sh_queues.yaml",
            "data/crds/volcano/scheduling.volcano.sh_podgroups.yaml",
        ):
            self.store.create(CRDS, _crd(path))
        for node in nodes:
            self.store.create(NODES, node)
        self.config = cfg or config()

    def replica(
        self,
        identity: str = "r1",
        faults: FaultPlan | None = None,
        registry: CollectorRegistry | None = None,
    ) -> AllocationController:
        client = MemoryClusterClient(self.store, faults=faults)
        return AllocationController(
            client,
            self.config,
            identity=identity,
            clock=self.clock,
            registry=registry if registry is not None else CollectorRegistry(),
            inputs=ListedInputs(client),
        )

    # --- objects ---------------------------------------------------------------------------------

    def create_pod(self, pod: Obj) -> Obj:
        pod = dict(pod)
        pod["metadata"] = {k: v for k, v in pod["metadata"].items() if k not in ("uid", "creationTimestamp")}
        return self.store.create(PODS, pod, namespace=pod["metadata"].get("namespace", "default"))

    def pod(self, name: str, namespace: str = "default") -> Obj:
        return self.store.get(PODS, name, namespace=namespace)

    def pods(self) -> list[Obj]:
        return self.store.list(PODS).items

    def delete_pod(self, name: str, namespace: str = "default") -> None:
        self.store.delete(PODS, name, namespace=namespace, grace_period_seconds=0)

    def finish_pod(self, name: str, phase: str = "Succeeded", namespace: str = "default") -> None:
        self.store.patch(PODS, name, {"status": {"phase": phase}}, namespace=namespace, subresource="status")

    def ledgers(self) -> dict[str, NodeLedger]:
        return {led.node: led for led in (decode_ledger(o) for o in self.store.list(LEDGERS).items)}

    def view(self) -> ClusterView:
        return ClusterView.from_objects(typed_items(self.store.list(NODES).items, NODES), self.config)

    def violations(self) -> list[LedgerViolation]:
        view = self.view()
        out: list[LedgerViolation] = []
        for name, ledger in self.ledgers().items():
            info = view.nodes.get(name)
            if info is not None:
                out.extend(check_invariants(ledger, info, memory_factor=self.config.nvidia.gpu_memory_factor))
        return out

    def plugin(self) -> int:
        """The device plugin's kubelet Allocate: every allocating pod succeeds. Returns how many."""
        done = 0
        # Only bound pods can be in a handshake; the selector spares copying the pending ones.
        for pod in self.store.list(PODS, field_selector="spec.nodeName!=").items:
            notes: Mapping[str, str] = pod["metadata"].get("annotations") or {}
            if notes.get("volcano.sh/bind-phase") == "allocating" and pod["spec"].get("nodeName"):
                self.store.patch(
                    PODS,
                    pod["metadata"]["name"],
                    {"metadata": {"annotations": {"volcano.sh/bind-phase": "success"}}},
                    namespace=pod["metadata"]["namespace"],
                )
                done += 1
        return done

    async def converge(self, *replicas: AllocationController, rounds: int = 40) -> None:
        """Settle every replica and let the plugin confirm, until nothing moves."""
        for _ in range(rounds):
            moved = False
            for replica in replicas:
                results = await replica.settle()
                moved |= any(r.changed for r in results)
            moved |= self.plugin() > 0
            if not moved:
                return
        raise AssertionError("the cluster did not converge")

    def bound(self) -> dict[str, str]:
        return {
            p["metadata"]["name"]: p["spec"]["nodeName"] for p in self.pods() if p["spec"].get("nodeName")
        }

    def condition(self, name: str) -> Mapping[str, Any] | None:
        conditions = self.pod(name).get("status", {}).get("conditions") or []
        return next((c for c in conditions if c.get("type") == "PodScheduled"), None)

    def events(self, reason: str) -> list[Obj]:
        from vgpu_guard.kube.resources import EVENTS

        return [e for e in self.store.list(EVENTS).items if e.get("reason") == reason]

    def bound_with_assignment(
        self, name: str, *, node: str, ids: str, memory: int, namespace: str = "default"
    ) -> Obj:
        """A pod some earlier scheduler bound (Volcano, or before installation): for adoption."""
        pod = vgpu_pod(name, memory=memory, namespace=namespace)
        pod["spec"]["schedulerName"] = "volcano"
        created = self.create_pod(pod)
        self.store.bind(
            namespace,
            name,
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {
                    "name": name,
                    "annotations": {
                        "volcano.sh/vgpu-ids-new": ids,
                        "volcano.sh/vgpu-node": node,
                        "volcano.sh/bind-phase": "success",
                    },
                },
                "target": {"kind": "Node", "name": node},
            },
        )
        return created


def seed_000() -> Cluster:
    """8 GPUs of 24 GiB; 7 fully held by pods bound before vgpu-guard (adopted on the first pass)."""
    cluster = Cluster([gpu_node("gpu-0", 8)])
    for i in range(7):
        cluster.bound_with_assignment(
            f"busy-{i}", node="gpu-0", ids=f"GPU-gpu-0-{i},NVIDIA,24576,0:", memory=24576
        )
    return cluster


@contextlib.asynccontextmanager
async def running(inputs: CachedInputs) -> AsyncIterator[None]:
    """``inputs``' informers running (and synced) for the block."""
    task = asyncio.ensure_future(inputs.run())
    try:
        await asyncio.wait_for(inputs.wait_synced(), 5)
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def until(check: Callable[[], object]) -> None:
    """Wait (up to 3 s) for a watch to deliver what ``check`` looks for."""
    for _ in range(300):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


def lease_held_by_another(cluster: Cluster, now: float) -> None:
    """The controller's Lease in ``default``, renewed at ``now`` by another replica for an hour."""
    renewed = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    cluster.store.create(
        LEASES,
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "vgpu-guard-controller", "namespace": "default"},
            "spec": {"holderIdentity": "leader", "leaseDurationSeconds": 3600, "renewTime": renewed},
        },
    )

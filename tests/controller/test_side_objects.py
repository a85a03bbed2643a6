"""Claims, volumes and namespaces: read from caches started at the first pass that needs them.

Before, every pass with a pending pod listed all namespaces once any placed pod had required
anti-affinity (and claims and volumes for a pod with a claim): on the oracle's real control plane
that was 464 namespace LISTs for 100 cases.
"""

from __future__ import annotations

import functools
import operator
from collections import Counter
from typing import Any

import pytest

from tests.controller.allocation_testkit import Cluster, gpu_node, running, until, vgpu_pod
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.controller import inputs as inputs_module
from vgpu_guard.controller.allocation import AllocationController
from vgpu_guard.controller.inputs import CachedInputs
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.resources import NAMESPACES, Resource

Obj = dict[str, Any]
ANTI = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}
        ]
    }
}


class CountingClient(MemoryClusterClient):
    """The double's client, counting LISTs by resource (and refusing some, when told to)."""

    def __init__(self, *args: Any, refuse: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lists: Counter[str] = Counter()
        self.refuse = refuse

    async def list(self, resource: Resource, **kwargs: Any) -> Any:
        self.lists[resource.plural] += 1
        if resource.plural in self.refuse:
            raise KubeError(f'{resource.plural} is forbidden: User "vgpu-guard" cannot list', code=403)
        return await super().list(resource, **kwargs)


async def test_side_caches_start_at_the_first_need_and_are_read_from_memory_after() -> None:
    cluster = Cluster([gpu_node("a", 1)])
    client = CountingClient(cluster.store)
    inputs = CachedInputs(client)
    async with running(inputs):
        await inputs.read(cluster.config)
        assert client.lists["namespaces"] == 0 and client.lists["persistentvolumeclaims"] == 0
        side = await inputs.side_objects(volumes=False, namespaces=True)
        assert "default" in {n["metadata"]["name"] for n in side.namespaces} and side.claims == ()
        assert client.lists["persistentvolumeclaims"] == 0  # not asked for: never started
        again = await inputs.side_objects(volumes=False, namespaces=True)
        assert again.version == side.version and client.lists["namespaces"] == 1
        generation = inputs.generation
        inputs.changed.clear()
        cluster.store.create(NAMESPACES, {"metadata": {"name": "team-b", "labels": {"tier": "gold"}}})
        await until(lambda: ("", "team-b") in inputs.namespaces.items)
        # A relabelled or new namespace can change an affinity verdict: a pass must look again.
        assert inputs.generation > generation and inputs.changed.is_set()
        fresh = await inputs.side_objects(volumes=True, namespaces=True)
        assert fresh.version != side.version and "team-b" in {n["metadata"]["name"] for n in fresh.namespaces}
        assert client.lists["namespaces"] == 1 and client.lists["persistentvolumeclaims"] == 1


async def test_a_side_cache_that_cannot_list_fails_the_pass_with_its_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(inputs_module, "SIDE_SYNC_SECONDS", 0.3)
    cluster = Cluster([gpu_node("a", 1)])
    inputs = CachedInputs(CountingClient(cluster.store, refuse=("namespaces",)))
    async with running(inputs):
        with pytest.raises(KubeError) as refused:
            await inputs.side_objects(volumes=False, namespaces=True)
    assert str(refused.value) == (
        'namespaces could not be read in 0.3 s (KubeError: namespaces is forbidden: User "vgpu-guard" '
        "cannot list); the pass is retried"
    )


async def test_passes_with_anti_affinity_pods_list_namespaces_once() -> None:
    cluster = Cluster([gpu_node("a", 2), gpu_node("b", 2)])
    client = CountingClient(cluster.store)
    inputs = CachedInputs(client)
    controller = AllocationController(
        client, cluster.config, identity="r1", clock=cluster.clock, inputs=inputs
    )
    async with running(inputs):
        pods = [vgpu_pod("db-0", memory=1000, affinity=ANTI)] + [
            vgpu_pod(f"w-{i}", memory=1000) for i in range(4)
        ]
        for pod in pods:
            cluster.create_pod(pod)
            await until(
                functools.partial(operator.contains, inputs.pods.items, ("default", pod["metadata"]["name"]))
            )
            await controller.settle()
            cluster.plugin()  # the device plugin confirms: the node takes the next pod
            await until(lambda: all(p["spec"].get("nodeName") for p in inputs.pods.items.values()))
    assert all(p["spec"].get("nodeName") for p in cluster.pods())
    assert client.lists["namespaces"] == 1  # four passes with a pending pod, one LIST

"""What the controller does when a node's vGPU registration changes (issue 36).

A registration out of range (11 cards of 999999999999999999 MiB) is unreadable: the node is named in
a Warning Event and in ``vgpu_guard_node_registration_invalid``, gets no vGPU pod, and every other
node keeps placing. A registration that shrinks or grows is reflected in the GPULedger's summary
(``kubectl get gpuledgers``'s FREE-MIB) by one write of that ledger, without waiting for an
allocation to change it.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from tests.controller.allocation_testkit import Cluster, gpu_node, running, until, vgpu_pod
from tests.controller.listed_inputs import ListedInputs
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.controller.allocation import AllocationController
from vgpu_guard.controller.inputs import CachedInputs
from vgpu_guard.kube.resources import LEDGERS, NODES

Obj = dict[str, Any]
REGISTER = "volcano.sh/node-vgpu-register"
HUGE = "".join(f"GPU-gpu-b-{i},10,999999999999999999,NVIDIA-NVIDIA A10,true,hami-core:" for i in range(11))


def replica(cluster: Cluster) -> tuple[AllocationController, CollectorRegistry]:
    registry = CollectorRegistry()
    client = MemoryClusterClient(cluster.store)
    controller = AllocationController(
        client,
        cluster.config,
        identity="r1",
        clock=cluster.clock,
        registry=registry,
        inputs=ListedInputs(client),
    )
    return controller, registry


def register(cluster: Cluster, node: str, records: str) -> None:
    cluster.store.patch(NODES, node, {"metadata": {"annotations": {REGISTER: records}}})


def summary(cluster: Cluster, node: str) -> Obj:
    found: Obj = cluster.store.get(LEDGERS, node)["spec"]["summary"]
    return found


def writes(registry: CollectorRegistry) -> float:
    value = registry.get_sample_value(
        "vgpu_guard_ledger_writes_total", {"writer": "controller", "result": "written"}
    )
    return value or 0.0


async def test_an_unreadable_registration_is_named_and_every_other_node_keeps_placing() -> None:
    huge = gpu_node("gpu-b", 1)
    huge["metadata"]["annotations"][REGISTER] = HUGE
    cluster = Cluster([gpu_node("gpu-a", 1), huge])
    controller, registry = replica(cluster)
    cluster.create_pod(vgpu_pod("canary", memory=4096))
    await cluster.converge(controller)

    assert cluster.bound() == {"canary": "gpu-a"}
    (event,) = cluster.events("InvalidGPURegistration")
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "Node"
    assert event["involvedObject"]["name"] == "gpu-b"
    assert event["message"].startswith(
        "the vGPU registration of node gpu-b cannot be read: record 1 ('GPU-gpu-b-0,10,999999999999999999,"
    )
    assert "expected an integer (MiB) of at most 16777216" in event["message"]
    assert registry.get_sample_value("vgpu_guard_node_registration_invalid", {"node": "gpu-b"}) == 1
    assert registry.get_sample_value("vgpu_guard_node_registration_invalid", {"node": "gpu-a"}) is None

    # Told once; fixed, the series goes.
    await cluster.converge(controller)
    assert len(cluster.events("InvalidGPURegistration")) == 1
    register(cluster, "gpu-b", "GPU-gpu-b-0,10,24576,NVIDIA-NVIDIA A10,true,hami-core:")
    await cluster.converge(controller)
    assert registry.get_sample_value("vgpu_guard_node_registration_invalid", {"node": "gpu-b"}) is None
    cluster.create_pod(vgpu_pod("pinned", memory=4096, node_selector={"kubernetes.io/hostname": "gpu-b"}))
    await cluster.converge(controller)
    assert cluster.bound()["pinned"] == "gpu-b"


async def test_the_ledger_summary_follows_a_registration_that_shrinks_without_an_allocation() -> None:
    cluster = Cluster([gpu_node("gpu-a", 1)])
    controller, registry = replica(cluster)
    cluster.create_pod(vgpu_pod("web", memory=4096))
    await cluster.converge(controller)
    assert summary(cluster, "gpu-a")["freeMemoryMiB"] == 24576 - 4096
    entries = cluster.ledgers()["gpu-a"].allocations
    before = writes(registry)

    register(cluster, "gpu-a", "GPU-gpu-a-0,10,16384,NVIDIA-NVIDIA A10,true,hami-core:")
    await cluster.converge(controller)

    shrunk = summary(cluster, "gpu-a")
    assert (shrunk["registeredMemoryMiB"], shrunk["freeMemoryMiB"]) == (16384, 16384 - 4096)
    assert shrunk["perGPU"][0].startswith("GPU-gpu-a-0 index=0 memoryMiB=4096/16384 ")
    assert cluster.ledgers()["gpu-a"].allocations == entries
    assert writes(registry) == before + 1  # one write of that ledger, and no more once it matches
    await cluster.converge(controller)
    assert writes(registry) == before + 1


async def test_a_label_change_does_not_rewrite_a_summary_that_still_matches() -> None:
    cluster = Cluster([gpu_node("gpu-a", 1)])
    controller, registry = replica(cluster)
    cluster.create_pod(vgpu_pod("web", memory=4096))
    await cluster.converge(controller)
    before = writes(registry)
    cluster.store.patch(NODES, "gpu-a", {"metadata": {"labels": {"team": "a"}}})
    await cluster.converge(controller)
    assert writes(registry) == before


async def test_a_start_does_not_rewrite_every_ledgers_summary() -> None:
    """A start sees every node for the first time; comparing and rewriting each ledger's summary
    then was one write per node (5,000 at a start of bench/controller_scale_bench.py) that delayed
    new pods' bindings by ~0.5 s. Only a registration that changes while the controller runs is due."""
    cluster = Cluster([gpu_node("gpu-a", 1), gpu_node("gpu-b", 1)])
    first, _ = replica(cluster)
    for name in ("a", "b"):
        cluster.create_pod(
            vgpu_pod(name, memory=4096, node_selector={"kubernetes.io/hostname": f"gpu-{name}"})
        )
    await cluster.converge(first)
    register(cluster, "gpu-a", "GPU-gpu-a-0,10,12288,NVIDIA-NVIDIA A10,true,hami-core:")  # while no one runs
    restarted, registry = replica(cluster)
    await cluster.converge(restarted)
    assert writes(registry) == 0
    register(cluster, "gpu-b", "GPU-gpu-b-0,10,12288,NVIDIA-NVIDIA A10,true,hami-core:")  # while it runs
    await cluster.converge(restarted)
    assert writes(registry) == 1
    assert summary(cluster, "gpu-b")["freeMemoryMiB"] == 12288 - 4096


async def test_on_the_informers_a_summary_that_still_matches_is_not_rewritten() -> None:
    """As ``serve`` runs it (CachedInputs: ledgers kept decoded, cached_ledger): the summary is
    kept with the cached ledger, so a registration change that leaves it equal writes nothing; a
    cache that dropped it made every registration change a ledger write."""
    cluster = Cluster([gpu_node("gpu-a", 1)])
    client = MemoryClusterClient(cluster.store)
    inputs = CachedInputs(client)
    registry = CollectorRegistry()
    controller = AllocationController(
        client, cluster.config, identity="r1", clock=cluster.clock, registry=registry, inputs=inputs
    )
    async with running(inputs):
        cluster.create_pod(vgpu_pod("web", memory=4096))
        await until(lambda: ("default", "web") in inputs.pods.items)
        await controller.run_once()
        await until(lambda: "gpu-a" in {k[1] for k in inputs.cluster.ledgers.items})
        await controller.run_once()
        before = writes(registry)
        records = cluster.store.get(NODES, "gpu-a")["metadata"]["annotations"][REGISTER]
        register(cluster, "gpu-a", records.replace("NVIDIA-NVIDIA A10", "NVIDIA-NVIDIA A10G"))
        await until(lambda: "A10G" in str(inputs.cluster.nodes.items[("", "gpu-a")]))
        for _ in range(3):
            await controller.run_once()
        assert writes(registry) == before
        register(cluster, "gpu-a", records.replace(",24576,", ",20480,"))  # free memory: the summary changes
        await until(lambda: ",20480," in str(inputs.cluster.nodes.items[("", "gpu-a")]))
        await controller.run_once()
        assert writes(registry) == before + 1

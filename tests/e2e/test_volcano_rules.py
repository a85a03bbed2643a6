"""Volcano's device rules through the arbiter, end to end (issue 43 item 5).

Both backends, the webhook as a Volcano user runs it (``scheduling.routing`` off) and a binder that
writes what Volcano writes, as ``system:serviceaccount:volcano-system:volcano-scheduler``
(tests/e2e/volcano.py). A registration whose health reads ``True`` (Volcano's ``strconv.ParseBool``)
and registers one UUID twice costs that card, not the node: the node's other cards take the pods.
A 100-core assignment onto a card in use and a 0-core one onto a card at 100 % are refused, as
Volcano's own fit refuses them, naming the GPU and its holders.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import Env, entries_of, gpu_pod, story_nodes
from tests.e2e.harness import GpuNode
from tests.e2e.test_arbiter import A10, CARD, notes, used_per_gpu, volcano_mode
from tests.e2e.volcano import Binder, Device, Version
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.resources import PODS

pytestmark = pytest.mark.asyncio(loop_scope="session")

__all__ = ["volcano_mode"]  # the fixture, used by name

Obj = dict[str, Any]
POOL = "arbiter"
_DUP_GPUS = tuple((f"GPU-e2e-rules-dup-{c}", CARD, A10, "hami-core") for c in range(2))
# Every record healthy as "True" (not the plugin's "true"), and card 0 registered again last.
DUP = GpuNode(
    "e2e-rules-dup",
    POOL,
    _DUP_GPUS,
    registration="".join(f"{u},10,{m},{t},True,{mode}:" for u, m, t, mode in (*_DUP_GPUS, _DUP_GPUS[0])),
)
CORES = GpuNode(
    "e2e-rules-cores", POOL, tuple((f"GPU-e2e-rules-cores-{c}", CARD, A10, "hami-core") for c in range(3))
)
D0, D1 = DUP.gpus[0][0], DUP.gpus[1][0]
C0, C1, C2 = (g[0] for g in CORES.gpus)
REFUSED_AFTER = "refused before it lands, and Volcano decides again on its next session"


async def vgpu_pod(env: Env, name: str, memory: int, cores: int | None = None) -> Obj:
    obj = gpu_pod(name, memory, pool=POOL)
    if cores is not None:
        obj["spec"]["containers"][0]["resources"]["limits"]["volcano.sh/vgpu-cores"] = str(cores)
    pod, _ = await env.create(PODS, obj)
    return pod


async def refusal(binder: Binder, pod: Obj, node: str, device: Device) -> str:
    with pytest.raises(KubeError) as error:
        await binder.bind(pod, node, [device])
    assert error.value.code == 403
    return error.value.message


@pytest.mark.parametrize("version", ["1.16", "1.15"])
async def test_health_true_and_a_duplicate_uuid_cost_one_card_not_the_node(
    env: Env, volcano_mode: AioClusterClient, version: Version
) -> None:
    """The issue measured 59 of 59 assignments refused on such a node while Volcano kept using
    it. Its healthy, singly registered card takes every pod Volcano binds there; the card
    registered twice is refused, named with the records, so the operator knows what to fix."""
    binder = Binder(volcano_mode, version)
    async with story_nodes(env, DUP):
        pods = [await vgpu_pod(env, f"dup-{i}", 6144) for i in range(5)]
        for pod in pods[:4]:
            await binder.bind(pod, DUP.name, [Device(D1, 6144)])
        message = await refusal(binder, pods[4], DUP.name, Device(D0, 6144))
        assert (
            f"GPU {D0} on node {DUP.name} is registered twice in volcano.sh/node-vgpu-register (records 1 and "
            "3): Volcano 1.13+ counts a pod on one copy only, so it takes no new assignment until the device "
            f"plugin registers it once; the assignment of pod {env.ns}/dup-4 is {REFUSED_AFTER}"
        ) in message
        stored = await env.pods()
        assert used_per_gpu(stored) == {D1: 4 * 6144}
        assert sorted(p["metadata"]["name"] for p in stored if p["spec"].get("nodeName") == DUP.name) == [
            f"dup-{i}" for i in range(4)
        ]
        ledger = await env.ledger(DUP.name)
        assert ledger is not None
        assert sorted(a.name for a in entries_of(ledger) if a.namespace == env.ns) == [
            f"dup-{i}" for i in range(4)
        ]


async def test_exclusive_cores_as_volcano_refuses_them(env: Env, volcano_mode: AioClusterClient) -> None:
    """A 100-core assignment onto a card one pod holds (0 cores) is refused, and so is a 0-core
    one onto a card whose cores two pods took (70 + 30); each refusal names the GPU and its
    holders. The same assignments onto an empty card land."""
    binder = Binder(volcano_mode, "1.16")
    async with story_nodes(env, CORES):
        small = await vgpu_pod(env, "small", 1024)
        await binder.bind(small, CORES.name, [Device(C0, 1024, 0)])
        whole = await vgpu_pod(env, "whole", 1024, cores=100)
        message = await refusal(binder, whole, CORES.name, Device(C0, 1024, 100))
        assert (
            f"GPU {C0} on node {CORES.name} is in use, and {env.ns}/whole asks 100% cores, which Volcano gives "
            f"only a GPU no pod holds (its exclusive rule) (held by {env.ns}/small); the assignment of pod "
            f"{env.ns}/whole is {REFUSED_AFTER}"
        ) in message
        for name, cores in (("seventy", 70), ("thirty", 30)):
            await binder.bind(
                await vgpu_pod(env, name, 1024, cores=cores), CORES.name, [Device(C1, 1024, cores)]
            )
        zero = await vgpu_pod(env, "zero", 1024)
        message = await refusal(binder, zero, CORES.name, Device(C1, 1024, 0))
        assert (
            f"GPU {C1} on node {CORES.name} has all its cores taken (100%), and {env.ns}/zero asks 0% cores, "
            f"which Volcano never gives a GPU whose cores are all taken (held by {env.ns}/seventy, "
            f"{env.ns}/thirty); the assignment of pod {env.ns}/zero is {REFUSED_AFTER}"
        ) in message
        await binder.bind(whole, CORES.name, [Device(C2, 1024, 100)])
        await binder.bind(zero, CORES.name, [Device(C0, 1024, 0)])
        stored = {p["metadata"]["name"]: p for p in await env.pods()}
        assert {n: p["spec"].get("nodeName") for n, p in stored.items()} == dict.fromkeys(
            ("small", "whole", "seventy", "thirty", "zero"), CORES.name
        )
        assert notes(stored["whole"])["volcano.sh/vgpu-ids-new"].startswith(f"{C2},")

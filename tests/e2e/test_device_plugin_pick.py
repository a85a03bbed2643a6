"""What the device plugin will pick, end to end on both backends (issue 43 item 8).

Volcano 1.15 PATCHes an assignment onto a Pending pod and discards the session: the annotations stay
(``Release`` only rolls back its cache). A later session binds another pod to the same node with the
same number of devices. volcano-vgpu-device-plugin serves the kubelet's Allocate with the oldest
``vgpu-time`` of that node and count (``GetPendingPod``), so when the bound pod starts, its container
would get the Pending pod's GPUs. The controller says so on both pods and the Node before that
happens, counts it in ``vgpu_guard_device_plugin_stale_picks``, and the count goes when the runbook's
remedy is applied. The writes are Volcano's, as its scheduler's ServiceAccount makes them; the pods
carry no suite label, so the device-plugin stand-in does not confirm the bound one (its kubelet has
not started it yet: the moment the plugin's pick is still ahead).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e.conftest import CONTROLLER_0, WEBHOOK_0, Env, gpu_pod
from tests.e2e.harness import EVENTS_V1, SUITE_LABEL, until
from tests.e2e.volcano import volcano_client
from vgpu_guard.engine.assignment import assignment_annotations
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.resources import PODS

pytestmark = pytest.mark.asyncio(loop_scope="session")

Obj = dict[str, Any]
VOLCANO_MODE = "e2e-webhook-volcano"
NODE = "e2e-a10-0"
IDS = "GPU-e2e-a10-0-0,NVIDIA,12288,0:"
REASON = "DevicePluginStalePick"
GAUGE = "vgpu_guard_device_plugin_stale_picks"


@pytest_asyncio.fixture(loop_scope="session")
async def volcano(env: Env) -> AsyncIterator[AioClusterClient]:
    """The webhook as a Volcano user runs it (routing off), and a client that is Volcano's scheduler."""
    await env.guard.processes[WEBHOOK_0].stop()
    await env.guard.ensure("webhook", VOLCANO_MODE, {"VGPU_GUARD__SCHEDULING__ROUTING": "false"})
    async with volcano_client(env.backend, env.api) as client:
        yield client


async def unconfirmed_pod(env: Env, name: str) -> Obj:
    """A Volcano pod the device-plugin stand-in leaves alone (no suite label)."""
    pod = gpu_pod(name, 12288, pool="seed-000")
    del pod["metadata"]["labels"][SUITE_LABEL]
    created, _ = await env.create(PODS, pod)
    assert created["spec"]["schedulerName"] == "volcano"
    return created


async def gauge(env: Env) -> float:
    for line in (await env.guard.processes[CONTROLLER_0].metrics()).splitlines():
        if line.startswith(f"{GAUGE} "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{GAUGE} is not exported")


async def test_a_discarded_1_15_assignment_older_than_a_bound_pods_is_reported_on_both_pods_and_the_node(
    env: Env, volcano: AioClusterClient
) -> None:
    before = await gauge(env)
    await unconfirmed_pod(env, "left")
    web = await unconfirmed_pod(env, "web")
    now = int(time.time())
    # Volcano 1.15's session a minute ago: the PATCH of left (GPUDevices.Allocate), then the
    # statement discarded (nothing undoes the PATCH).
    stale = assignment_annotations(NODE, IDS, now - 60)
    await volcano.patch(PODS, "left", {"metadata": {"annotations": stale}}, namespace=env.ns)
    # A later session binds web there: >= 1.16's Binding carries its assignment.
    meta = web["metadata"]
    await volcano.bind(
        env.ns, "web", node=NODE, annotations=assignment_annotations(NODE, IDS, now), uid=meta["uid"]
    )
    assert not (await env.pod("left"))["spec"].get("nodeName")

    async def reported() -> dict[str, str] | None:
        found = {
            e["involvedObject"]["name"]: e["message"]
            for name in ("left", "web")
            for e in await env.events(name)
            if e.get("reason") == REASON and e.get("type") == "Warning"
        }
        for e in (await env.api.list(EVENTS_V1, namespace="default")).items:
            names_both = f"{env.ns}/left" in e.get("message", "") and f"{env.ns}/web" in e.get("message", "")
            if e.get("reason") == REASON and e["involvedObject"].get("kind") == "Node" and names_both:
                found[e["involvedObject"]["name"]] = e["message"]
        return found if len(found) == 3 else None

    messages = await until("the stale pick reported on both pods and the Node", reported, within=60.0)
    assert set(messages) == {"left", "web", NODE}
    assert f"its container gets the assignment of pod {env.ns}/left" in messages["web"]
    assert (
        f"when pod {env.ns}/web, bound there, starts, its container gets this pod's assignment"
        in messages["left"]
    )
    assert f"pod {env.ns}/web would get the assignment of pod {env.ns}/left" in messages[NODE]
    for message in messages.values():
        assert (
            f"remove the assignment from pod {env.ns}/left (kubectl annotate pod -n {env.ns} left " in message
        )
        assert "Volcano >= 1.16 writes the assignment only with the Binding" in message
    assert await gauge(env) == before + 1

    # The remedy, as a cluster admin: the Pending pod's assignment removed (the webhook lets
    # system:masters write allocation annotations); nothing is left to hand to web's container.
    cleared = dict.fromkeys(stale)
    await env.api.patch(PODS, "left", {"metadata": {"annotations": cleared}}, namespace=env.ns)

    async def gone() -> bool:
        return await gauge(env) == before

    await until("the stale pick no longer counted", gone, within=60.0)
    assert not set(stale) & set((await env.pod("left"))["metadata"].get("annotations") or {})

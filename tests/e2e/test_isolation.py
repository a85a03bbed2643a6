"""One bad object never stops placement anywhere else (issue 36), end to end on both backends.

Each bad object is written where the webhooks do not look (the release's own namespace, which
every scope of the chart leaves out, as a namespace below 1.28 that is not opted in would be; a
Node's registration, which no webhook of ours judges), so what is tested is the controller. For
each, a canary vGPU pod on another node binds within 5 s, and the bad object is named in an Event
and a metric of the controller:

- a forged pod bound to a node with 11 devices of 999999999999999999 MiB (whose sum once overflowed
  the ledger's int64 summary, and kube-apiserver refused every write of that ledger);
- a node registering 11 cards of 999999999999999999 MiB;
- a pod in the plugin's handshake with ``bind-time: 9999999999``, which kept its node busy for ever:
  released by the timeout with an Event, and the node takes the next pod.

Then two concurrent ``spec.parent`` updates on two Queues (admission judges each against the
queues as they were, so both can pass): the controller's queue audit names the cycle on both
Queues, with the patch that breaks it, and in ``vgpu_guard_queue_parent_cycles``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.e2e.conftest import CONTROLLER_0, Env, entries_of, gpu_pod
from tests.e2e.harness import A10, EVENTS_V1, NAMESPACE, GpuNode, until
from vgpu_guard.kube.errors import KubeError, NotFound
from vgpu_guard.kube.resources import LEDGERS, NODES, PODS, QUEUES

pytestmark = pytest.mark.asyncio(loop_scope="session")

Obj = dict[str, Any]
CANARY_SECONDS = 5.0
HUGE = 999999999999999999
CARD = 24576
NODE_A = GpuNode("e2e-iso-a", "isolation", (("GPU-e2e-iso-a-0", CARD, A10, "hami-core"),))
NODE_B = GpuNode("e2e-iso-b", "isolation-b", (("GPU-e2e-iso-b-0", CARD, A10, "hami-core"),))


@contextlib.asynccontextmanager
async def story_nodes(env: Env, *extra: Obj) -> AsyncIterator[None]:
    """e2e-iso-a (the canary's pool), e2e-iso-b and ``extra`` Node objects, gone with their
    ledgers after the story."""
    now = datetime.now(UTC)
    names = [NODE_A.name, NODE_B.name, *(o["metadata"]["name"] for o in extra)]
    try:
        for spec in (NODE_A, NODE_B):
            await env.api.create(NODES, spec.node())
            await env.api.patch(NODES, spec.name, spec.status(now), subresource="status")
        for obj in extra:
            await env.api.create(NODES, obj)
            await env.api.patch(NODES, obj["metadata"]["name"], NODE_B.status(now), subresource="status")
        yield
    finally:
        for name in names:
            with contextlib.suppress(NotFound):
                await env.api.delete(NODES, name)
            with contextlib.suppress(NotFound):
                await env.api.delete(LEDGERS, name)


async def outside_pod(env: Env, name: str, node: str, annotations: dict[str, str]) -> Obj:
    """A pod bound to ``node`` at CREATE in the release's namespace (no webhook of ours looks there),
    deleted after the story."""

    async def drop() -> None:
        with contextlib.suppress(NotFound):
            await env.api.delete(PODS, name, namespace=NAMESPACE, grace_period_seconds=0)

    env.undo.append(drop)
    limits = {"volcano.sh/vgpu-number": "1"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "busybox", "resources": {"limits": limits}}],
        },
    }
    created: Obj = await env.api.create(PODS, pod, namespace=NAMESPACE)
    return created


async def canary_binds(env: Env, name: str, pool: str) -> tuple[str, float]:
    """Create a 4 GiB vGPU pod in ``pool``; returns its node and the seconds until it was bound."""
    started = time.monotonic()
    await env.create(PODS, gpu_pod(name, 4096, pool=pool))

    async def bound() -> str | None:
        node: str | None = (await env.pod(name))["spec"].get("nodeName")
        return node

    node = await until(f"{name} bound", bound, within=30.0)
    return node, time.monotonic() - started


async def event(env: Env, namespace: str, kind: str, name: str, reason: str) -> Obj:
    async def find() -> Obj | None:
        for e in (await env.api.list(EVENTS_V1, namespace=namespace)).items:
            involved = e.get("involvedObject") or {}
            if (involved.get("kind"), involved.get("name"), e.get("reason")) == (kind, name, reason):
                return e
        return None

    found: Obj = await until(f"a {reason} Event on {kind} {name}", find, within=30.0)
    return found


def sample(metrics: str, name: str, labels: str = "") -> float | None:
    """One sample of the Prometheus text exposition (None: the series is absent)."""
    for line in metrics.splitlines():
        if line.startswith(f"{name}{labels} "):
            return float(line.rsplit(" ", 1)[1])
    return None


async def controller_sample(env: Env, name: str, labels: str, *, at_least: float) -> float:
    async def read() -> float | None:
        value = sample(await env.guard.processes[CONTROLLER_0].metrics(), name, labels)
        return value if value is not None and value >= at_least else None

    found: float = await until(f"{name}{labels} >= {at_least}", read, within=30.0)
    return found


async def test_a_forged_pod_with_11_huge_devices_is_named_and_every_other_node_keeps_placing(
    env: Env,
) -> None:
    devices = ":".join(f"GPU-{NODE_B.name}-0,NVIDIA,{HUGE},0" for _ in range(11)) + ":"
    async with story_nodes(env):
        await asyncio.sleep(1)  # the controller's node cache
        forged = await outside_pod(
            env,
            "forged",
            NODE_B.name,
            {
                "volcano.sh/bind-phase": "success",
                "volcano.sh/vgpu-node": NODE_B.name,
                "volcano.sh/vgpu-ids-new": devices,
            },
        )
        node, seconds = await canary_binds(env, "canary", "isolation")
        print(f"canary bound to {node} in {seconds:.2f} s beside the forged pod")
        assert node == NODE_A.name
        assert seconds < CANARY_SECONDS

        found = await event(env, NAMESPACE, "Pod", "forged", "InvalidAssignmentEntry")
        assert found["type"] == "Warning"
        assert f"GPU-{NODE_B.name}-0,NVIDIA,{HUGE},0" in found["message"]
        assert "and 6 more" in found["message"]  # five named, the rest counted
        assert await controller_sample(
            env, "vgpu_guard_assignment_mismatches_total", '{kind="invalid-entry"}', at_least=11
        )
        # Nothing of it reached the ledger: every device was unreadable.
        ledger = await env.ledger(NODE_B.name)
        assert forged["metadata"]["uid"] not in {e.pod_uid for e in entries_of(ledger)}


async def test_a_registration_of_11_huge_cards_is_named_and_every_other_node_keeps_placing(env: Env) -> None:
    huge = GpuNode("e2e-iso-huge", "isolation-b").node()
    huge["metadata"]["annotations"] = {
        "volcano.sh/node-vgpu-register": "".join(
            f"GPU-e2e-iso-huge-{i},10,{HUGE},{A10},true,hami-core:" for i in range(11)
        )
    }
    async with story_nodes(env, huge):
        node, seconds = await canary_binds(env, "canary", "isolation")
        print(f"canary bound to {node} in {seconds:.2f} s beside the huge registration")
        assert node == NODE_A.name
        assert seconds < CANARY_SECONDS
        found = await event(env, "default", "Node", "e2e-iso-huge", "InvalidGPURegistration")
        assert found["type"] == "Warning"
        assert found["message"].startswith(
            "the vGPU registration of node e2e-iso-huge cannot be read: record 1 "
            f"('GPU-e2e-iso-huge-0,10,{HUGE},"
        )
        assert await controller_sample(
            env, "vgpu_guard_node_registration_invalid", '{node="e2e-iso-huge"}', at_least=1
        )


async def test_a_bind_time_in_the_future_is_released_by_the_timeout_with_an_event(env: Env) -> None:
    """A pod in the plugin's handshake (bind-phase allocating) with bind-time 9999999999 used to keep
    e2e-iso-b busy for ever: no new vGPU pod was bound there. It counts as timed out at once."""
    async with story_nodes(env):
        await asyncio.sleep(1)
        await outside_pod(
            env,
            "stuck",
            NODE_B.name,
            {
                "volcano.sh/bind-phase": "allocating",
                "volcano.sh/vgpu-node": NODE_B.name,
                "volcano.sh/bind-time": "9999999999",
                "volcano.sh/vgpu-ids-new": f"GPU-{NODE_B.name}-0,NVIDIA,1024,0:",
            },
        )
        node, seconds = await canary_binds(env, "next", "isolation-b")
        print(f"the next pod bound to {node} in {seconds:.2f} s after the future bind-time")
        assert node == NODE_B.name
        assert seconds < CANARY_SECONDS
        found = await event(env, NAMESPACE, "Pod", "stuck", "AllocationTimeout")
        assert found["type"] == "Warning"
        assert found["message"].startswith("its volcano.sh/bind-time 9999999999 is ")
        assert f"node {NODE_B.name} is released for the next pod" in found["message"]


# -- two concurrent Queue parent updates ---------------------------------------------------------
def queue(name: str) -> Obj:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name, "labels": {"e2e.vgpu-guard.io/suite": "e2e"}},
        "spec": {"weight": 1},
    }


async def test_two_concurrent_parent_updates_that_close_a_cycle_are_reported_with_the_way_out(
    env: Env,
) -> None:
    """``qx.parent=qy`` and ``qy.parent=qx`` sent at once. Admission judges each against the queues
    as they were (our webhook from its cache, as Volcano's from its lister), so both can be admitted;
    when one is denied the story tries again (at most 10 rounds). The controller's audit then names
    the cycle on both Queues and counts it; the patch its message gives is admitted and clears it."""
    qx, qy = "e2e-cycle-x", "e2e-cycle-y"

    async def drop() -> None:
        for name in (qy, qx):
            with contextlib.suppress(NotFound):
                await env.api.patch(QUEUES, name, {"spec": {"parent": "root"}})
        for name in (qy, qx):
            with contextlib.suppress(NotFound):
                await env.api.delete(QUEUES, name)

    env.undo.append(drop)
    await env.create(QUEUES, queue(qx))
    await env.create(QUEUES, queue(qy))
    admitted_in = 0
    for attempt in range(1, 11):
        await asyncio.sleep(1)  # the webhook's queue cache has the queues as they are now
        outcomes = await asyncio.gather(
            env.api.patch(QUEUES, qx, {"spec": {"parent": qy}}),
            env.api.patch(QUEUES, qy, {"spec": {"parent": qx}}),
            return_exceptions=True,
        )
        if not any(isinstance(o, BaseException) for o in outcomes):
            admitted_in = attempt
            break
        for o in outcomes:
            assert isinstance(o, dict) or (isinstance(o, KubeError) and o.code == 403), o
        for name in (qx, qy):
            await env.api.patch(QUEUES, name, {"spec": {"parent": "root"}})
    else:
        pytest.fail("in 10 rounds the two parent updates were never both admitted")
    print(f"both parent updates admitted in round {admitted_in}")
    stored = {name: (await env.api.get(QUEUES, name))["spec"]["parent"] for name in (qx, qy)}
    assert stored == {qx: qy, qy: qx}

    patch = '{"spec":{"parent":"root"}}'
    for name in (qx, qy):
        found = await event(env, "default", "Queue", name, "QueueParentCycle")
        assert found["type"] == "Warning"
        assert found["message"].startswith(
            f"[queue-hierarchy] spec.parent: queues {qx} -> {qy} -> {qx} form a parent cycle"
        )
        assert found["message"].endswith(f"kubectl patch queue {qx} --type merge -p '{patch}'")
    assert await controller_sample(env, "vgpu_guard_queue_parent_cycles", "", at_least=1)

    # The way out the message gives is admitted, and the audit sees the cycle gone.
    await env.api.patch(QUEUES, qx, {"spec": {"parent": "root"}})

    async def cleared() -> bool:
        value = sample(await env.guard.processes[CONTROLLER_0].metrics(), "vgpu_guard_queue_parent_cycles")
        return value == 0

    await until("the cycle gauge back at 0", cleared, within=30.0)

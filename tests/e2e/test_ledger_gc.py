"""A removed node's GPULedger goes once nothing is held there, on both backends (controller/ledger_gc.py).

vgpu-guard's controller places the pod (the suite's routing mode); the Node is then deleted, as an
operator removes a machine. The pod's entry keeps the ledger while the pod exists (its card is
still counted); once the pod is gone the entry is released and the ledger deleted: nothing of the
machine is left in ``kubectl get gpuledgers``.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from tests.e2e.conftest import Env, entries_of, gpu_pod, story_nodes
from tests.e2e.harness import A10, GpuNode, until
from vgpu_guard.kube.errors import NotFound
from vgpu_guard.kube.resources import NODES, PODS

pytestmark = pytest.mark.asyncio(loop_scope="session")

GONE = GpuNode("e2e-gone-0", "gone", (("GPU-e2e-gone-0-0", 24576, A10, "hami-core"),))


async def test_a_deleted_nodes_ledger_is_kept_while_a_pod_holds_it_and_deleted_after(env: Env) -> None:
    async with story_nodes(env, GONE):
        await env.create(PODS, gpu_pod("gone-one", 1000, pool="gone"))

        async def bound() -> bool:
            return bool((await env.pod("gone-one"))["spec"].get("nodeName") == GONE.name)

        await until("the controller binds the pod on the story's node", bound)
        await env.api.delete(NODES, GONE.name)
        await asyncio.sleep(2)  # passes run on the node's DELETE: none may drop a held ledger
        assert [e.name for e in entries_of(await env.ledger(GONE.name))] == ["gone-one"]

        with contextlib.suppress(NotFound):  # the pod garbage collector may have been first
            await env.api.delete(PODS, "gone-one", namespace=env.ns, grace_period_seconds=0)

        async def deleted() -> bool:
            return await env.ledger(GONE.name) is None

        await until("the controller deletes the gone node's empty ledger", deleted)

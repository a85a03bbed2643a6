"""kube-scheduler as the oracle: for random fleets, does each node fit the pod? Ours must agree.

``ORACLE_CASES`` (default 500) cases in waves of ``ORACLE_SLOTS`` (default 25), from a base seed
printed with every result; ``ORACLE_SEED=<seed>`` replays a run. For each case and each of its
nodes, that node alone is left untainted and the pod is offered to both schedulers: kube-scheduler
binds the plain twin <=> our controller binds the vGPU twin, on every node. A disagreement is
reported as a table (constraints the case used, seed, node, our verdict, kube-scheduler's).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections import Counter

import pytest
from prometheus_client import CollectorRegistry

from tests.builders import default_config
from tests.oracle.cases import generate
from tests.oracle.runner import Oracle, Row, zone_key
from tests.real_cluster import RealCluster
from vgpu_guard.controller.run import run_controller
from vgpu_guard.kube.aio import AioClusterClient

pytestmark = pytest.mark.asyncio(loop_scope="session")

CASES = int(os.environ.get("ORACLE_CASES", "500"))
# Each scheduler judges a probe against every node of every slot's fleets and retries its refused
# probes on every pod event, so a case costs more the more run beside it: on 2 cores, 500 cases
# took 428 CPU-s (231 s) in waves of 50, 369 CPU-s (207 s) in waves of 25, 360 CPU-s (221 s) in 16.
SLOTS = int(os.environ.get("ORACLE_SLOTS", "25"))


def _table(rows: list[Row], base: int) -> str:
    lines = [
        f"ORACLE_SEED={base}: {len(rows)} disagreements",
        "constraints | case seed | node | ours | kube-scheduler",
    ]
    for r in rows:
        ours = "binds" if r.ours.fits else f"refuses: {r.ours.message}"
        kube = "binds" if r.kube.fits else f"refuses: {r.kube.message}"
        lines.append(f"{','.join(r.features)} | {r.seed} | {r.node} | {ours} | {kube}")
    return "\n".join(lines)


@pytest.mark.heavy
@pytest.mark.timeout(900)
async def test_per_node_feasibility_agrees_with_kube_scheduler(
    real_api: RealCluster, reliability_report: object
) -> None:
    base = int(os.environ.get("ORACLE_SEED") or random.SystemRandom().randrange(1_000_000))
    admin = await AioClusterClient.from_kubeconfig(str(real_api.kubeconfig))
    oracle = Oracle(admin, SLOTS)
    rows: list[Row] = []
    controller: asyncio.Task[None] | None = None
    try:
        await oracle.setup()
        # Our side runs as `serve controller` runs it (informers, Lease, binder), on its own as
        # kube-scheduler does; the oracle only creates pods and reads both sides' verdicts. Its node
        # cache is the oracle's (as serve shares one): no probe before it shows the render.
        controller = asyncio.create_task(
            run_controller(
                admin,
                default_config(),
                cluster=oracle.cluster,
                identity="oracle",
                registry=CollectorRegistry(),
                lease_namespace="default",
                lease_name="vgpu-guard-oracle",
            )
        )
        for start in range(0, CASES, SLOTS):
            wave = [
                (slot, generate(base * 10_000 + i, zone_key(slot)))
                for slot, i in enumerate(range(start, min(start + SLOTS, CASES)))
            ]
            rows.extend(await oracle.run_wave(wave, alive=controller))
    finally:
        if controller is not None:
            controller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await controller
        await oracle.teardown()
        await admin.close()
    disagreements = [r for r in rows if r.ours.fits != r.kube.fits]
    fits = sum(r.kube.fits for r in rows)
    used = Counter(f for r in rows for f in r.features)
    reliability_report(  # type: ignore[operator]
        f"oracle ORACLE_SEED={base}: {CASES} cases, {len(rows)} per-node verdicts ({fits} fit, "
        f"{len(rows) - fits} refused), {len(rows) - len(disagreements)} agree; {oracle.rewrites} node "
        f"writes redone, {oracle.reruns} cases run again after node drift; constraints exercised: "
        + ", ".join(f"{k} {v}" for k, v in sorted(used.items()))
    )
    assert not disagreements, _table(disagreements, base)

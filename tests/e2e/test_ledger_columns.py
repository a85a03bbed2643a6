"""``kubectl get gpuledgers`` answers "which GPU is full" in its default table (the real control
plane only: conftest.REAL_CLIENTS_ONLY).

The header test in ``test_clients`` derives the columns from the CRD; this one pins what a row
says once a pod is bound: the node's one GPU by uuid, the memory reserved and free, and the
fullest card's percentage, as the real ``kubectl`` prints them (``-o wide`` adds vGPUs and MIG).
The pod asks for a quarter of the suite's A10 (24576 MiB), so every figure is exact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.clients import Kubectl
from tests.e2e.conftest import Env, gpu_pod
from tests.e2e.harness import until

pytestmark = [pytest.mark.asyncio(loop_scope="session"), pytest.mark.real_clients_only]

NODE, GPU, POOL = "e2e-a10-0", "GPU-e2e-a10-0-0", "seed-000"
MEMORY = 6144
HEADER = [
    "NAME",
    "NODE",
    "PODS",
    "GPUS",
    "FULL",
    "MEMORY-MIB",
    "FREE-MIB",
    "FULLEST-MEM%",
    "FULLEST-GPU",
    "AGE",
]
ROW = [NODE, NODE, "1", "1", "0", str(MEMORY), str(24576 - MEMORY), "25", GPU]


@pytest.fixture
def kubectl(env: Env, tmp_path: Path) -> Kubectl:
    return Kubectl(env.backend.admin_kubeconfig, tmp_path / "kube-cache")


async def _bound_alone(env: Env, name: str) -> dict[str, Any] | None:
    """The node's ledger once it holds the story's pod and nothing else (earlier stories' pods
    are deleted with their namespaces, and the controller releases their entries)."""
    pod = await env.pod(name)
    ledger = await env.ledger(NODE)
    if not pod["spec"].get("nodeName") or ledger is None:
        return None
    summary = ledger["spec"].get("summary") or {}
    return ledger if summary.get("pods") == 1 and summary.get("memoryMiB") == MEMORY else None


async def test_default_table_names_the_fullest_gpu_and_its_memory(env: Env, kubectl: Kubectl) -> None:
    applied = await kubectl(
        "apply", "-n", env.ns, "-f", "-", stdin=yaml.safe_dump(gpu_pod("quarter", MEMORY, pool=POOL))
    )
    assert applied.code == 0, applied.transcript()
    await until(f"pod quarter bound alone on {NODE}", lambda: _bound_alone(env, "quarter"))
    assert GPU in (await env.pod("quarter"))["metadata"]["annotations"]["volcano.sh/vgpu-ids-new"]

    table = await kubectl("get", "gpuledgers", NODE)
    assert (table.code, table.stderr) == (0, ""), table.transcript()
    header, row = table.stdout.splitlines()
    assert header.split() == HEADER
    assert row.split()[:-1] == ROW  # the last cell is the age

    wide = await kubectl("get", "gpuledgers", NODE, "-o", "wide")
    assert (wide.code, wide.stderr) == (0, ""), wide.transcript()
    header, row = wide.stdout.splitlines()
    assert header.split() == [*HEADER[:-1], "VGPUS", "MIG", "AGE"]  # the CRD lists Age last
    assert row.split()[:-1] == [*ROW, "1", "0"]


async def test_a_ledger_write_owns_the_entries_as_one_field(env: Env, kubectl: Kubectl) -> None:
    """``allocations`` is an atomic list: the API server tracks one field for all entries, not
    each entry's fields (a map list cost ~40 % more CPU per write and doubled the object)."""
    applied = await kubectl(
        "apply", "-n", env.ns, "-f", "-", stdin=yaml.safe_dump(gpu_pod("quarter", MEMORY, pool=POOL))
    )
    assert applied.code == 0, applied.transcript()
    ledger = await until(f"pod quarter bound alone on {NODE}", lambda: _bound_alone(env, "quarter"))
    managed = ledger["metadata"].get("managedFields")
    owned = [json.dumps(m.get("fieldsV1")) for m in managed or ()]
    assert any('"f:allocations": {}' in fields for fields in owned), owned
    assert not any('"k:{' in fields for fields in owned), owned


async def test_status_reports_the_bound_pod_on_its_gpu(env: Env, kubectl: Kubectl) -> None:
    """``vgpu-guard status -o json`` against the same cluster (the real API server too): the node's
    GPU holds the story's pod, with the same figures as the ledger's columns."""
    import asyncio
    import contextlib
    import io
    import json

    from vgpu_guard.cli.main import main

    applied = await kubectl(
        "apply", "-n", env.ns, "-f", "-", stdin=yaml.safe_dump(gpu_pod("quarter", MEMORY, pool=POOL))
    )
    assert applied.code == 0, applied.transcript()
    await until(f"pod quarter bound alone on {NODE}", lambda: _bound_alone(env, "quarter"))
    out = io.StringIO()

    def run() -> int:
        with contextlib.redirect_stdout(out):
            return main(["status", "--kubeconfig", str(env.backend.admin_kubeconfig), "-o", "json"])

    assert await asyncio.to_thread(run) == 0
    status = json.loads(out.getvalue())
    [node] = [n for n in status["nodes"] if n["name"] == NODE]
    [gpu] = [g for g in node["summary"]["perGPU"] if g["uuid"] == GPU]
    assert (gpu["pods"], gpu["memoryMiB"], gpu["registeredMemoryMiB"], gpu["memoryPercent"]) == (
        1,
        MEMORY,
        24576,
        25,
    ), gpu

"""``vgpu-guard status``: golden text and JSON from objects, then the command against the API double
over HTTPS, and one clear line (exit 2) when the cluster cannot be read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.engine.allocation_testkit import config, gpu_node, vgpu_pod
from tests.engine.test_queues import queue
from vgpu_guard.apidouble.server import serve_double
from vgpu_guard.cli.app import run as run_cli
from vgpu_guard.cli.status import FleetStatus, fleet_status, render_text, status_json
from vgpu_guard.engine.ledger import (
    Allocation,
    ContainerGrant,
    DeviceGrant,
    MigSlot,
    NodeLedger,
    encode_ledger,
)
from vgpu_guard.engine.ledger_summary import ledger_summary
from vgpu_guard.kube.resources import CRDS, LEDGERS, NAMESPACES, NODES, PODS, QUEUES

CRDS_DIR = Path(__file__).resolve().parents[2] / "vgpu_guard" / "data" / "crds"
A100 = "NVIDIA-A100-PCIE-40GB"
Obj = dict[str, Any]


def held(uid: str, name: str, *devices: DeviceGrant) -> Allocation:
    return Allocation(uid, "team-a", name, "q1", (ContainerGrant(0, "main", devices),))


def nodes() -> list[Obj]:
    return [
        gpu_node("gpu-0", 4),
        gpu_node("mig-0", 2, mode="mig", card_type=A100, memory=40960, split=7),
        gpu_node("cpu-only", []),
    ]


def ledgers() -> list[Obj]:
    gpu0 = NodeLedger(
        "gpu-0",
        {
            "u1": held(
                "u1", "train", DeviceGrant("GPU-gpu-0-0", 24576, 50), DeviceGrant("GPU-gpu-0-1", 12288, 0)
            ),
            "u2": held("u2", "infer", DeviceGrant("GPU-gpu-0-1", 6144, 30)),
        },
    )
    mig0 = NodeLedger(
        "mig-0",
        {"u3": held("u3", "notebook", DeviceGrant("GPU-mig-0-0", 10240, 0, MigSlot("0", "2g.10gb", 0)))},
    )
    # A hand-edited summary claims the node is empty: status recomputes from the entries.
    forged = encode_ledger(gpu0, {"pods": 0, "memoryMiB": 0, "freeMemoryMiB": 98304})
    return [forged, encode_ledger(mig0, ledger_summary(mig0, None))]


def pending(name: str, message: str | None, *, scheduler: str = "vgpu-guard") -> Obj:
    pod = vgpu_pod(name, memory=30000, namespace="team-b")
    pod["spec"]["schedulerName"] = scheduler
    if message is not None:
        pod["status"] = {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
            ],
        }
    return pod


NO_ROOM = (
    "0/2 nodes are available: 3 GPUs have no free memory, 1 GPU has 24576 MiB free < 30000 MiB requested"
)


def pods() -> list[Obj]:
    return [
        pending("big", NO_ROOM),
        pending("fresh", None),
        pending("other-scheduler", None, scheduler="volcano"),
    ]


def queues() -> list[Obj]:
    return [
        queue("q1", {"volcano.sh/vgpu-memory": "98304"}),
        queue("q2", {"volcano.sh/vgpu-memory": "40960", "volcano.sh/vgpu-number": "4"}),
    ]


def status() -> FleetStatus:
    return fleet_status(nodes=nodes(), ledgers=ledgers(), pods=pods(), queues=queues(), config=config())


GOLDEN = """\
2 GPU nodes, 6 GPUs (1 full), 53248/180224 MiB reserved (29%), 3 pods holding GPUs, 1 MIG instance in use

NODE   MODE       GPUS  FULL  MEMORY-MiB   MEM%  CORES%  PODS  MIG  FULLEST-GPU
gpu-0  hami-core  4     1     43008/98304  43%   80/400  2     0    GPU-gpu-0-0 (100%)
mig-0  mig        2     0     10240/81920  12%   0/200   1     1    GPU-mig-0-0 (25%)

Pending vGPU pods: 2
  team-b/big  Unschedulable: 0/2 nodes are available: 3 GPUs have no free memory, 1 GPU has 24576 MiB free < …
  team-b/fresh  no decision yet; is the vgpu-guard controller running and leading?

Queue guarantees: all queues against cluster capacity
  volcano.sh/vgpu-memory: 77% guaranteed, 139264 of 180224 (2 Ready nodes); q1 98304, q2 40960
  volcano.sh/vgpu-number: 7% guaranteed, 4 of 54 (2 Ready nodes); q2 4
"""


def test_golden_text() -> None:
    assert render_text(status()) == GOLDEN


def test_json_is_complete_and_recomputed_from_the_entries() -> None:
    out = status_json(status())
    assert [n["name"] for n in out["nodes"]] == ["gpu-0", "mig-0"]
    gpu0 = out["nodes"][0]
    assert (gpu0["mode"], gpu0["problem"]) == ("hami-core", None)
    assert {
        k: gpu0["summary"][k] for k in ("pods", "memoryMiB", "freeMemoryMiB", "fullGPUs", "fullestGPU")
    } == {
        "pods": 2,
        "memoryMiB": 43008,
        "freeMemoryMiB": 55296,
        "fullGPUs": 1,
        "fullestGPU": "GPU-gpu-0-0",
    }
    assert out["pending"][0] == {
        "namespace": "team-b",
        "name": "big",
        "reason": "Unschedulable",
        "message": NO_ROOM,
    }
    assert out["queues"][1] == {
        "resource": "volcano.sh/vgpu-number",
        "guaranteed": "4",
        "capacity": "54 (2 Ready nodes)",
        "percent": 7,
        "exceeded": False,
        "queues": {"q2": "4"},
    }


def test_problems_one_screen_limits_and_an_empty_fleet() -> None:
    broken = {"apiVersion": "vgpu-guard.io/v1alpha1", "kind": "GPULedger", "metadata": {"name": "gone"},
              "spec": {"nodeName": "gone", "allocations": "x"}}  # fmt: skip
    orphan = encode_ledger(NodeLedger("old", {"u9": held("u9", "stale", DeviceGrant("GPU-old-0", 100, 0))}))
    many = [pending(f"p{i:02}", "queue q1 is full") for i in range(12)]
    over = [queue("q1", {"volcano.sh/vgpu-memory": "200000"})]
    text = render_text(
        fleet_status(nodes=nodes()[:1], ledgers=[broken, orphan], pods=many, queues=over, config=config())
    )
    assert text == (
        "3 GPU nodes, 4 GPUs (0 full), 100/98304 MiB reserved (0%), 1 pod holding GPUs, 0 MIG instances in use\n"
        "\n"
        "NODE   MODE       GPUS  FULL  MEMORY-MiB  MEM%  CORES%  PODS  MIG  FULLEST-GPU\n"
        "gone   -          0     0     0/0         -     0/0     0     0    -\n"
        "gpu-0  hami-core  4     0     0/98304     0%    0/400   0     0    GPU-gpu-0-0 (0%)\n"
        "old    -          0     0     100/0       -     0/0     1     0    -\n"
        "  gone: ledger unreadable, figures left out: GPULedger gone: spec.allocations must be a list\n"
        "  old: no Node of this name (deleted?); figures from its ledger only\n"
        "\n"
        "Pending vGPU pods: 12\n"
        + "".join(f"  team-b/p{i:02}  Unschedulable: queue q1 is full\n" for i in range(10))
        + "  ... and 2 more (-o json lists them all)\n"
        "\n"
        "Queue guarantees: all queues against cluster capacity\n"
        "  volcano.sh/vgpu-memory: 203% guaranteed, 200000 of 98304 (1 Ready node)  OVER CAPACITY; q1 200000\n"
    )
    empty = fleet_status(nodes=[], ledgers=[], pods=[], queues=[], config=config())
    assert render_text(empty) == (
        "0 GPU nodes, 0 GPUs (0 full), 0/0 MiB reserved (-), 0 pods holding GPUs, 0 MIG instances in use\n"
        "\n"
        "Pending vGPU pods: 0\n"
        "\n"
        "Queue guarantees: none\n"
    )


def test_a_long_pending_reason_keeps_its_remedy_within_the_width() -> None:
    message = (
        "vgpu-guard places only pods that request vGPU, and this pod names it as its scheduler without "
        "asking for any; remove spec.schedulerName or add a volcano.sh/vgpu-number limit"
    )
    text = render_text(
        fleet_status(nodes=[], ledgers=[], pods=[pending("p", message)], queues=[], config=config())
    )
    line = next(line for line in text.splitlines() if "team-b/p" in line)
    assert line.endswith("…; remove spec.schedulerName or add a volcano.sh/vgpu-number limit")
    assert line.startswith("  team-b/p  Unschedulable: vgpu-guard places") and len(line) <= 110


# --- the command, against the API double over HTTPS -------------------------------------------------


async def test_status_against_the_served_double(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serve_double(tmp_path) as api:
        for crd in sorted(CRDS_DIR.rglob("*.yaml")):
            api.store.create(CRDS, yaml.safe_load(crd.read_text()))
        api.store.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}}
        )
        for node in nodes():
            api.store.create(NODES, node)
        for ledger in ledgers():
            api.store.create(LEDGERS, ledger)
        for obj in pods():
            api.store.create(PODS, obj, namespace="team-b")
            if "status" in obj:  # a create drops status, as the real server does
                name = obj["metadata"]["name"]
                api.store.patch(
                    PODS, name, {"status": obj["status"]}, namespace="team-b", subresource="status"
                )
        for obj in queues():
            api.store.create(QUEUES, obj)
        argv = ["status", "--kubeconfig", str(api.kubeconfig)]
        # asyncio.run inside the command needs a thread of its own: this test's loop is running.
        import asyncio

        code = await asyncio.to_thread(run_cli, argv)
        text = capsys.readouterr()
        code_json = await asyncio.to_thread(run_cli, [*argv, "-o", "json"])
        out = json.loads(capsys.readouterr().out)
    assert (code, text.err) == (0, "")
    assert text.out == GOLDEN
    assert code_json == 0
    assert out == json.loads(json.dumps(status_json(status())))


def test_an_unreachable_cluster_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    assert run_cli(["status", "--kubeconfig", str(kubeconfig), "--timeout", "2"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(
        "error: cannot read the cluster at https://127.0.0.1:9: list vgpu-guard.io/v1alpha1/gpuledgers: "
    )
    # The error's own remedy, once (status adds nothing to it for an unreachable server).
    assert captured.err.endswith("; the connection to the API server failed (a retry may succeed)\n")
    assert captured.err.count("\n") == 1


def test_no_kubeconfig_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")  # ignored: status never uses a pod's account
    monkeypatch.setenv("HOME", str(tmp_path))
    assert run_cli(["status"]) == 2
    assert capsys.readouterr().err == (
        f"error: no kubeconfig: {tmp_path}/.kube/config (the default path) does not exist and this is not a pod "
        "in a cluster (no KUBERNETES_SERVICE_HOST); pass --kubeconfig FILE or set KUBECONFIG\n"
    )


def test_status_adds_only_the_permissions_it_needs_to_an_errors_own_remedy() -> None:
    from vgpu_guard.cli.status import _remedy
    from vgpu_guard.kube.errors import Forbidden, Invalid, Unavailable

    assert _remedy(Forbidden("no")) == (
        "; status needs get/list on nodes, pods, gpuledgers.vgpu-guard.io and queues.scheduling.volcano.sh"
    )
    assert _remedy(Unavailable("down")) == ""
    assert _remedy(Invalid("odd")) == ""

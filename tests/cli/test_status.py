"""``vgpu-guard status``: golden text and JSON from objects, then the command against the API double
over HTTPS, and one clear line (exit 2) when the cluster cannot be read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from tests.apidouble_support.http.server import serve_double
from tests.builders import config_with
from tests.controller.allocation_testkit import Cluster
from tests.engine.allocation_testkit import config, gpu_node, vgpu_pod
from tests.engine.test_queues import queue
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
from vgpu_guard.kube.client import typed_items
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
    pod = vgpu_pod(name, memory=30000, namespace="team-b", mode="hami-core")  # as the webhook left it
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


def unseen(name: str, **spec: Any) -> Obj:
    """A vGPU pod the webhook never mutated: no mode stamped, Volcano's scheduler."""
    pod = vgpu_pod(name, memory=8192, namespace="legacy")
    pod["spec"].update({"schedulerName": "volcano", **spec})
    return pod


def pods() -> list[Obj]:
    done = unseen("done", nodeName="gpu-0")
    done["status"] = {"phase": "Succeeded"}
    return [
        pending("big", NO_ROOM),
        pending("fresh", None),
        pending("other-scheduler", None, scheduler="volcano"),
        unseen("bound-by-volcano", nodeName="gpu-0"),
        unseen("waiting"),
        done,
        {  # no vGPU at all: not ours to see
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "plain", "namespace": "legacy"},
            "spec": {"containers": [{"name": "web", "image": "nginx"}]},
        },
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

Ledger violations: 0

Pending vGPU pods: 2
  team-b/big  Unschedulable: 0/2 nodes are available: 3 GPUs have no free memory, 1 GPU has 24576 MiB free <
    30000 MiB requested
  team-b/fresh  no decision yet; is the vgpu-guard controller running and leading?

vGPU pods the webhook never saw: 2 (made before vgpu-guard, outside its namespaces, or while it failed open)
  legacy/bound-by-volcano  on gpu-0: no volcano.sh/vgpu-mode annotation, which the webhook stamps on every
    vGPU pod
  legacy/waiting  pending: no volcano.sh/vgpu-mode annotation, which the webhook stamps on every vGPU pod

Queue guarantees: all queues against cluster capacity
  volcano.sh/vgpu-memory: 77% guaranteed, 139264 of 180224 (2 Ready nodes); q1 98304, q2 40960
  volcano.sh/vgpu-number: 7% guaranteed, 4 of 54 (2 Ready nodes); q2 4
"""


def test_golden_text() -> None:
    assert render_text(status(), width=110) == GOLDEN


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
        "3 GPU nodes, 4 GPUs (0 full), 0/98304 MiB reserved (0%), 1 pod holding GPUs, 0 MIG instances in use\n"
        "\n"
        "NODE   MODE       GPUS  FULL  MEMORY-MiB  MEM%  CORES%  PODS  MIG  FULLEST-GPU\n"
        "gone   -          0     0     0/0         -     0/0     0     0    -\n"
        "gpu-0  hami-core  4     0     0/98304     0%    0/400   0     0    GPU-gpu-0-0 (0%)\n"
        "old    -          0     0     0/0         -     0/0     1     0    -\n"
        "  gone: ledger unreadable, figures left out: GPULedger gone: spec.allocations must be a list\n"
        "  old: no Node of this name (deleted?); its ledger holds 100 MiB for 1 pod, not counted above\n"
        "\n"
        "Ledger violations: 0\n"
        "\n"
        "Pending vGPU pods: 12\n"
        + "".join(f"  team-b/p{i:02}  Unschedulable: queue q1 is full\n" for i in range(10))
        + "  ... and 2 more (-o json lists them all)\n"
        "\n"
        "vGPU pods the webhook never saw: 0\n"
        "\n"
        "Queue guarantees: all queues against cluster capacity\n"
        "  volcano.sh/vgpu-memory: 203% guaranteed, 200000 of 98304 (1 Ready node)  OVER CAPACITY; q1 200000\n"
    )
    empty = fleet_status(nodes=[], ledgers=[], pods=[], queues=[], config=config())
    assert render_text(empty) == (
        "0 GPU nodes, 0 GPUs (0 full), 0/0 MiB reserved (-), 0 pods holding GPUs, 0 MIG instances in use\n"
        "\n"
        "Ledger violations: 0\n"
        "\n"
        "Pending vGPU pods: 0\n"
        "\n"
        "vGPU pods the webhook never saw: 0\n"
        "\n"
        "Queue guarantees: none\n"
    )


LONG = (
    "vgpu-guard places only pods that request vGPU, and this pod names it as its scheduler without "
    "asking for any; remove spec.schedulerName or add a volcano.sh/vgpu-number limit"
)


@pytest.mark.parametrize("width", [60, 110, 240])
def test_a_long_pending_reason_is_shown_whole_within_the_width(width: int) -> None:
    """Issue 38: the reason was cut at a fixed 110 columns, remedy and all on a narrow terminal."""
    text = render_text(
        fleet_status(nodes=[], ledgers=[], pods=[pending("p", LONG)], queues=[], config=config()), width=width
    )
    lines = text.split("Pending vGPU pods: 1\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert all(len(line) <= width for line in lines)
    assert lines[0].startswith("  team-b/p  Unschedulable: vgpu-guard places")
    assert all(line.startswith("    ") for line in lines[1:])
    assert " ".join(line.strip() for line in lines) == f"team-b/p  Unschedulable: {LONG}"


def test_the_width_is_the_terminals(monkeypatch: pytest.MonkeyPatch) -> None:
    from vgpu_guard.cli.status import terminal_width

    monkeypatch.setenv("COLUMNS", "72")
    assert terminal_width() == 72
    monkeypatch.setenv("COLUMNS", "12")  # too narrow to read: wrapped at 40 instead
    assert terminal_width() == 40


def test_json_lists_the_pods_the_webhook_never_saw() -> None:
    assert status_json(status())["unseen"] == [
        {
            "namespace": "legacy",
            "name": "bound-by-volcano",
            "node": "gpu-0",
            "why": "no volcano.sh/vgpu-mode annotation, which the webhook stamps on every vGPU pod",
        },
        {
            "namespace": "legacy",
            "name": "waiting",
            "node": None,
            "why": "no volcano.sh/vgpu-mode annotation, which the webhook stamps on every vGPU pod",
        },
    ]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (
            {"annotations": {"volcano.sh/vgpu-mode": "mig"}},
            "MIG mode without vgpu-guard.io/mig-profile, which the webhook stamps on every MIG pod",
        ),
        (
            {"annotations": {"volcano.sh/vgpu-mode": "hami-core"}, "routing": True},
            "schedulerName volcano, where the webhook routes vGPU pods to vgpu-guard",
        ),
        ({"annotations": {"volcano.sh/vgpu-mode": "hami-core"}, "exempt": True}, None),
        ({"annotations": {"volcano.sh/vgpu-mode": "hami-core"}}, None),
    ],
    ids=["mig-without-profile", "not-routed", "exempt-namespace", "marked"],
)
def test_what_marks_a_pod_the_webhook_saw(change: dict[str, Any], why: str | None) -> None:
    pod = unseen("p")
    pod["metadata"]["annotations"] = change["annotations"]
    settings: dict[str, Any] = {}
    if change.get("routing"):
        settings["scheduling"] = {"routing": True}
    if change.get("exempt"):
        settings["admission"] = {"exemptNamespaces": ["legacy"]}
    found = fleet_status(nodes=[], ledgers=[], pods=[pod], queues=[], config=config_with(**settings)).unseen
    assert [p.why for p in found] == ([why] if why else [])


# --- the command, against the API double over HTTPS -------------------------------------------------


async def test_status_against_the_served_double(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async with serve_double(tmp_path) as api:
        for crd in sorted(CRDS_DIR.rglob("*.yaml")):
            api.store.create(CRDS, yaml.safe_load(crd.read_text()))
        for namespace in ("team-b", "legacy"):
            api.store.create(
                NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            )
        for node in nodes():
            api.store.create(NODES, node)
        for ledger in ledgers():
            api.store.create(LEDGERS, ledger)
        for obj in pods():
            namespace = obj["metadata"]["namespace"]
            api.store.create(PODS, obj, namespace=namespace)
            if "status" in obj:  # a create drops status, as the real server does
                name = obj["metadata"]["name"]
                api.store.patch(
                    PODS, name, {"status": obj["status"]}, namespace=namespace, subresource="status"
                )
        for obj in queues():
            api.store.create(QUEUES, obj)
        # The double's context, beside a current-context that reaches nothing: --context picks it.
        kubeconfig = yaml.safe_load(api.kubeconfig.read_text())
        (context,) = kubeconfig["contexts"]
        unreachable = {"name": "gone", "context": {**context["context"], "cluster": "gone"}}
        kubeconfig["clusters"].append({"name": "gone", "cluster": {"server": "https://127.0.0.1:9"}})
        kubeconfig["contexts"].append(unreachable)
        kubeconfig["current-context"] = "gone"
        two = tmp_path / "two-contexts"
        two.write_text(yaml.safe_dump(kubeconfig))
        argv = ["status", "--kubeconfig", str(two), "--context", context["name"]]
        monkeypatch.setenv("COLUMNS", "110")
        # asyncio.run inside the command needs a thread of its own: this test's loop is running.
        import asyncio

        code = await asyncio.to_thread(run_cli, argv)
        text = capsys.readouterr()
        code_json = await asyncio.to_thread(run_cli, [*argv, "-o", "json"])
        out = json.loads(capsys.readouterr().out)
        monkeypatch.setenv("COLUMNS", "70")
        narrow = await asyncio.to_thread(run_cli, argv)
        narrow_text = capsys.readouterr().out
    assert (code, text.err) == (0, "")
    assert text.out == GOLDEN
    assert code_json == 0
    assert out == json.loads(json.dumps(status_json(status())))
    # COLUMNS is honoured: the table keeps its columns, every reason is wrapped whole within 70.
    assert narrow == 0
    pending = narrow_text.split("Pending vGPU pods: 2\n")[1].split("\n\n")[0]
    assert pending.splitlines() == [
        "  team-b/big  Unschedulable: 0/2 nodes are available: 3 GPUs have no",
        "    free memory, 1 GPU has 24576 MiB free < 30000 MiB requested",
        "  team-b/fresh  no decision yet; is the vgpu-guard controller running",
        "    and leading?",
    ]


def _unreachable_kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig with one context, ``x``, whose server nothing listens on."""
    kubeconfig = tmp_path / "kubeconfig"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    kubeconfig.write_text(yaml.safe_dump(config))
    return kubeconfig


def test_an_unknown_context_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = _unreachable_kubeconfig(tmp_path)
    assert run_cli(["status", "--kubeconfig", str(kubeconfig), "--context", "prod"]) == 2
    assert capsys.readouterr().err == (
        f"error: kubeconfig {kubeconfig} (--kubeconfig): --context 'prod' names no entry of contexts; "
        f"run `kubectl config get-contexts --kubeconfig {kubeconfig}` and pass one of them\n"
    )


def test_an_unreachable_cluster_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig = _unreachable_kubeconfig(tmp_path)
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


# --- a forged assignment on a device the node does not register (issue 38 item 2) ------------------


def _forged_fleet() -> Cluster:
    """gpu-0 registers 8 cards of 24576 MiB; Volcano bound two pods (36864 MiB on two of them), and a
    pod created with a forged assignment naming a card gpu-0 does not have was bound in a namespace
    the webhooks did not cover, then adopted by the controller."""
    cluster = Cluster([gpu_node("gpu-0", 8)])
    cluster.bound_with_assignment("train", node="gpu-0", ids="GPU-gpu-0-0,NVIDIA,24576,0:", memory=24576)
    cluster.bound_with_assignment("infer", node="gpu-0", ids="GPU-gpu-0-1,NVIDIA,12288,0:", memory=12288)
    cluster.bound_with_assignment("forged", node="gpu-0", ids="GPU-not-here,NVIDIA,24576,0:", memory=24576)
    return cluster


def _objects_status(cluster: Cluster) -> FleetStatus:
    return fleet_status(
        nodes=typed_items(cluster.store.list(NODES).items, NODES),
        ledgers=typed_items(cluster.store.list(LEDGERS).items, LEDGERS),
        pods=cluster.pods(),
        queues=[],
        config=cluster.config,
    )


async def test_status_counts_registered_devices_and_names_every_violation_as_the_metrics_do() -> None:
    """status showed gpu-0 at 61440/196608 with no violation line: it added the 24576 MiB held on a
    uuid the node does not register, which the controller's metrics leave out (36,864 MiB) and its
    vgpu_guard_ledger_violations counts. Now both count from the same engine code, and every
    violation counted is a line."""
    cluster = _forged_fleet()
    registry = CollectorRegistry()
    await cluster.converge(cluster.replica(registry=registry))
    assert set(cluster.ledgers()["gpu-0"].allocations) == {p["metadata"]["uid"] for p in cluster.pods()}
    metric_used = sum(
        registry.get_sample_value(
            "vgpu_guard_gpu_memory_used_bytes", {"node": "gpu-0", "gpu": f"GPU-gpu-0-{i}"}
        )
        or 0
        for i in range(8)
    )
    metric_violations = registry.get_sample_value("vgpu_guard_ledger_violations", {"node": "gpu-0"})
    assert (metric_used // 2**20, metric_violations) == (36864, 1)

    status = _objects_status(cluster)
    [node] = status.nodes
    assert sum(g.memory_mib for g in node.cards) * 2**20 == metric_used
    assert len(node.violations) == metric_violations
    text = render_text(status, width=110)
    assert text.splitlines()[0].startswith("1 GPU node, 8 GPUs (1 full), 36864/196608 MiB reserved (18%)")
    assert "gpu-0  hami-core  8     1     36864/196608  18%   0/800   3     0    GPU-gpu-0-0 (100%)" in text
    assert (
        "\nLedger violations: 1 (vgpu_guard_ledger_violations counts the same)\n"
        "  gpu-0: GPU GPU-not-here is not registered on node gpu-0 but held by default/forged (24576 MiB, not counted\n"
        "    above)\n"
    ) in text
    assert status_json(status)["nodes"][0]["violations"] == [
        {
            "gpu": "GPU-not-here",
            "kind": "unknown-gpu",
            "message": "GPU GPU-not-here is not registered on node gpu-0 but held by default/forged "
            "(24576 MiB, not counted above)",
        }
    ]


def test_every_violation_counted_gets_a_line() -> None:
    """Each broken invariant the controller counts is named (one screen: the first ten, then how many
    more); over-capacity cards stay counted as reserved, their excess named."""
    node = gpu_node("gpu-0", 2)
    over = NodeLedger(
        "gpu-0",
        {
            f"u{i}": held(
                f"u{i}", f"p{i}", DeviceGrant("GPU-gpu-0-0", 12288, 0), DeviceGrant(f"GPU-gone-{i}", 1, 0)
            )
            for i in range(12)
        },
    )
    status = fleet_status(nodes=[node], ledgers=[encode_ledger(over)], pods=[], queues=[], config=config())
    lines = render_text(status).split("\nLedger violations: ", 1)[1].split("\n\n", 1)[0].splitlines()
    assert lines[0] == "14 (vgpu_guard_ledger_violations counts the same)"
    assert lines[1].startswith(
        "  gpu-0: GPU GPU-gone-0 is not registered on node gpu-0 but held by team-a/p0 (1 MiB"
    )
    assert lines[-1] == "  ... and 4 more (-o json lists them all)"
    assert len(status_json(status)["nodes"][0]["violations"]) == 14
    assert any("GPU GPU-gpu-0-0 on node gpu-0: 147456 MiB reserved > 24576 MiB capacity" in v.message
               for v in status.nodes[0].violations)  # fmt: skip

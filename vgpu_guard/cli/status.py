"""``vgpu-guard status``: one screen on the fleet's GPUs, read from a cluster through a kubeconfig.

Per node: GPUs, mode, memory and cores reserved against what the device plugin registered, pods,
MIG instances in use, the fullest GPU; then the vGPU pods still Pending with the reason the
controller gave them (their PodScheduled=False condition), and the Volcano queues' guarantees
against cluster capacity. ``-o json`` gives the same, complete and untruncated, for scripts.

The figures are recomputed from the ledger entries and the nodes' registrations with the same code
the controller uses (engine/ledger_summary.py), never taken from the ledgers' stored summary: that
is derived and may be stale or hand-edited. ``fleet_status`` is pure (objects in, ``FleetStatus``
out), so the rendering is golden-tested without a cluster; only ``run`` talks to the API server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_guard.cli.argtypes import positive_seconds
from vgpu_guard.cli.wording import plural
from vgpu_guard.configfile import ConfigError, load_config
from vgpu_guard.engine.cluster import ClusterView, NodeInfo
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.devices import REGISTER_ANNOTATION
from vgpu_guard.engine.ledger import LedgerError, NodeLedger, decode_ledger
from vgpu_guard.engine.ledger_summary import GpuSummary, fullest, gpu_summaries, ledger_summary
from vgpu_guard.engine.rules.queues_validate import QueueTree, audit_queues, format_amount
from vgpu_guard.engine.violations import clip
from vgpu_guard.kube.client import ClusterClient, list_all
from vgpu_guard.kube.errors import Forbidden, KubeError
from vgpu_guard.kube.resources import LEDGERS, NODES, PODS, QUEUES

__all__ = ["FleetStatus", "add_parser", "fleet_status", "render_text", "run", "status_json"]

Obj = Mapping[str, Any]

# One screen: beyond these, the text says how many more (``-o json`` lists everything).
PENDING_SHOWN = 10
QUEUES_SHOWN = 6
MESSAGE_WIDTH = 110


@dataclass(frozen=True)
class NodeStatus:
    """One node that registers GPUs or has a ledger; ``problem``: why its figures are incomplete."""

    name: str
    info: NodeInfo | None
    ledger: NodeLedger
    gpus: tuple[GpuSummary, ...]
    problem: str | None = None

    @property
    def cards(self) -> tuple[GpuSummary, ...]:
        return tuple(g for g in self.gpus if g.registered_mib is not None)

    @property
    def fullest(self) -> GpuSummary | None:
        return fullest(self.gpus)


@dataclass(frozen=True)
class PendingPod:
    namespace: str
    name: str
    reason: str
    message: str


@dataclass(frozen=True)
class QueueResource:
    """One guaranteed resource: every queue's share, the total, and the cluster's capacity."""

    resource: str
    guaranteed: str
    capacity: str
    percent: int | None
    exceeded: bool
    queues: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class FleetStatus:
    nodes: tuple[NodeStatus, ...]
    pending: tuple[PendingPod, ...]
    queues: tuple[QueueResource, ...]
    memory_factor: int


def _meta(obj: Obj) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _pending(pods: Iterable[Obj], scheduler: str) -> tuple[PendingPod, ...]:
    """Pods for our scheduler, not bound, not ended or ending; reason from PodScheduled=False."""
    out = []
    for pod in pods:
        spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
        status = pod.get("status") if isinstance(pod.get("status"), Mapping) else {}
        assert isinstance(spec, Mapping) and isinstance(status, Mapping)
        if spec.get("schedulerName") != scheduler or spec.get("nodeName"):
            continue
        if status.get("phase") in ("Succeeded", "Failed") or _meta(pod).get("deletionTimestamp"):
            continue
        raw_conditions = status.get("conditions")
        conditions: list[Any] = raw_conditions if isinstance(raw_conditions, list) else []
        condition = next(
            (c for c in conditions if isinstance(c, Mapping) and c.get("type") == "PodScheduled"), None
        )
        if condition is not None and condition.get("status") == "False":
            reason, message = str(condition.get("reason") or ""), str(condition.get("message") or "")
        else:
            reason, message = "", "no decision yet; is the vgpu-guard controller running and leading?"
        meta = _meta(pod)
        out.append(
            PendingPod(str(meta.get("namespace") or "default"), str(meta.get("name")), reason, message)
        )
    return tuple(sorted(out, key=lambda p: (p.namespace, p.name)))


def _queues(view: ClusterView, config: GuardConfig) -> tuple[QueueResource, ...]:
    tree = QueueTree.from_queues(view.queues.values())
    out = []
    for resource, usage in sorted(audit_queues(view, config).resources.items()):
        amount = usage.capacity.amount
        out.append(
            QueueResource(
                resource=resource,
                guaranteed=format_amount(resource, usage.guaranteed),
                capacity=usage.capacity.describe(resource),
                percent=int(usage.guaranteed * 100 / amount) if amount else None,
                exceeded=usage.exceeded,
                queues=tuple(
                    (name, format_amount(resource, tree.own(name, resource)))
                    for name in sorted(tree.guarantees)
                    if tree.own(name, resource) > 0
                ),
            )
        )
    return tuple(out)


def fleet_status(
    *,
    nodes: Iterable[Obj],
    ledgers: Iterable[Obj],
    pods: Iterable[Obj],
    queues: Iterable[Obj],
    config: GuardConfig,
) -> FleetStatus:
    """The fleet as ``status`` shows it, from raw API objects (bad ones are reported, never fatal)."""
    factor = config.nvidia.gpu_memory_factor
    nodes = list(nodes)
    view = ClusterView.from_objects([*nodes, *queues], config)
    # Nodes without a registration are CPU nodes, not GPU nodes with a problem: left out.
    registering = {
        str(_meta(o).get("name"))
        for o in nodes
        if isinstance(_meta(o).get("annotations"), Mapping)
        and _meta(o)["annotations"].get(REGISTER_ANNOTATION)
    }
    decoded: dict[str, NodeLedger] = {}
    problems: dict[str, str] = {}
    for obj in ledgers:
        try:
            ledger = decode_ledger(obj)
        except LedgerError as e:
            problems[str(_meta(obj).get("name"))] = f"ledger unreadable, figures left out: {e}"
            continue
        decoded[ledger.node] = ledger
    names = {n.name for n in view.nodes.values() if n.gpus} | registering | set(decoded) | set(problems)
    out = []
    for name in sorted(names):
        info = view.nodes.get(name)
        ledger = decoded.get(name) or NodeLedger(node=name)
        problem = problems.get(name) or (
            info.gpu_problem
            if info is not None
            else "no Node of this name (deleted?); figures from its ledger only"
        )
        gpus = tuple(gpu_summaries(ledger, info, memory_factor=factor))
        out.append(NodeStatus(name, info, ledger, gpus, problem))
    return FleetStatus(
        nodes=tuple(out),
        pending=_pending(pods, config.scheduling.scheduler_name),
        queues=_queues(view, config),
        memory_factor=factor,
    )


# --- text ----------------------------------------------------------------------------------------


def _percent(part: int, whole: int) -> str:
    return f"{part * 100 // whole}%" if whole else "-"


def _table(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]


def _node_row(node: NodeStatus) -> list[str]:
    cards = node.cards
    registered = sum(g.registered_mib or 0 for g in cards)
    used = sum(g.memory_mib for g in node.gpus)
    fullest = node.fullest
    return [
        node.name,
        (node.info.mode if node.info is not None and node.info.mode else "-"),
        str(len(cards)),
        str(sum(1 for g in cards if g.full)),
        f"{used}/{registered}",
        _percent(used, registered),
        f"{sum(g.cores for g in node.gpus)}/{100 * len(cards)}",
        str(len(node.ledger.allocations)),
        str(sum(g.mig_instances for g in node.gpus)),
        f"{fullest.uuid} ({fullest.memory_percent}%)" if fullest is not None else "-",
    ]


def render_text(status: FleetStatus) -> str:
    """The one-screen text (golden-tested): a headline, the node table, pending pods, queues."""
    cards = [g for n in status.nodes for g in n.cards]
    used = sum(g.memory_mib for n in status.nodes for g in n.gpus)
    registered = sum(g.registered_mib or 0 for g in cards)
    pods = sum(len(n.ledger.allocations) for n in status.nodes)
    mig = sum(g.mig_instances for n in status.nodes for g in n.gpus)
    lines = [
        f"{plural(len(status.nodes), 'GPU node')}, {plural(len(cards), 'GPU')} "
        f"({sum(1 for g in cards if g.full)} full), {used}/{registered} MiB reserved "
        f"({_percent(used, registered)}), {plural(pods, 'pod')} holding GPUs, "
        f"{plural(mig, 'MIG instance')} in use",
    ]
    if status.nodes:
        header = [
            "NODE",
            "MODE",
            "GPUS",
            "FULL",
            "MEMORY-MiB",
            "MEM%",
            "CORES%",
            "PODS",
            "MIG",
            "FULLEST-GPU",
        ]
        lines += ["", *_table([header, *(_node_row(n) for n in status.nodes)])]
        lines += [f"  {n.name}: {n.problem}" for n in status.nodes if n.problem]
    lines += ["", f"Pending vGPU pods: {len(status.pending)}"]
    for pod in status.pending[:PENDING_SHOWN]:
        because = f"{pod.reason}: {pod.message}" if pod.reason else pod.message
        head = f"  {pod.namespace}/{pod.name}  "
        # The remedy at the end of the message is kept whole: what to do must survive the width.
        lines.append(head + clip(because, max(MESSAGE_WIDTH - len(head), 40)))
    if len(status.pending) > PENDING_SHOWN:
        lines.append(f"  ... and {len(status.pending) - PENDING_SHOWN} more (-o json lists them all)")
    lines += [
        "",
        f"Queue guarantees: {'none' if not status.queues else 'all queues against cluster capacity'}",
    ]
    for q in status.queues:
        share = f"{q.percent}% guaranteed" if q.percent is not None else "guaranteed"
        shares = ", ".join(f"{name} {amount}" for name, amount in q.queues[:QUEUES_SHOWN])
        more = f" and {len(q.queues) - QUEUES_SHOWN} more" if len(q.queues) > QUEUES_SHOWN else ""
        over = "  OVER CAPACITY" if q.exceeded else ""
        lines.append(f"  {q.resource}: {share}, {q.guaranteed} of {q.capacity}{over}; {shares}{more}")
    return "\n".join(lines) + "\n"


def status_json(status: FleetStatus) -> dict[str, Any]:
    """Everything, untruncated; per node the same summary the controller stores in the ledger."""
    return {
        "nodes": [
            {
                "name": n.name,
                "mode": n.info.mode if n.info is not None else None,
                "problem": n.problem,
                "summary": ledger_summary(n.ledger, n.info, status.memory_factor),
            }
            for n in status.nodes
        ],
        "pending": [
            {"namespace": p.namespace, "name": p.name, "reason": p.reason, "message": p.message}
            for p in status.pending
        ],
        "queues": [
            {
                "resource": q.resource,
                "guaranteed": q.guaranteed,
                "capacity": q.capacity,
                "percent": q.percent,
                "exceeded": q.exceeded,
                "queues": dict(q.queues),
            }
            for q in status.queues
        ],
    }


# --- the command ---------------------------------------------------------------------------------


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "status",
        help="one screen on the fleet's GPUs: memory, cores, pods, MIG, pending pods, queues",
        description="Read nodes, GPU ledgers, pods and Volcano queues from a cluster and summarise "
        "the GPUs. Exit 0; 2 when the cluster cannot be read.",
    )
    parser.add_argument(
        "--kubeconfig", metavar="FILE", help="kubeconfig (default: $KUBECONFIG, else ~/.kube/config)"
    )
    parser.add_argument("--config", metavar="FILE", help="vgpu-guard config file (scheduler name, ...)")
    parser.add_argument(
        "--device-config", metavar="FILE", help="the plugin's device-config.yaml (gpuMemoryFactor)"
    )
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text")
    parser.add_argument(
        "--timeout", type=positive_seconds, default=10.0, help="seconds per API request (default 10)"
    )
    parser.set_defaults(func=run)


async def read_fleet(client: ClusterClient, config: GuardConfig) -> FleetStatus:
    """Ledgers first, then pods (the controller's order), nodes and queues; raises ``KubeError``."""
    ledgers = await list_all(client, LEDGERS, optional=True)
    pods = await list_all(client, PODS)
    nodes = await list_all(client, NODES)
    queues = await list_all(client, QUEUES, optional=True)
    return fleet_status(nodes=nodes, ledgers=ledgers, pods=pods, queues=queues, config=config)


def _remedy(error: KubeError) -> str:
    """What status adds to the error's own remedy (kube/errors.py): the permissions it needs."""
    if isinstance(error, Forbidden):
        return (
            "; status needs get/list on nodes, pods, gpuledgers.vgpu-guard.io and "
            "queues.scheduling.volcano.sh"
        )
    return ""


async def _main(args: argparse.Namespace, config: GuardConfig) -> int:
    from vgpu_guard.kube.aio import AioClusterClient

    try:
        client = await AioClusterClient.from_kubeconfig(args.kubeconfig, request_timeout=args.timeout)
    except KubeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    server = str(client.api.configuration.host)
    try:
        status = await read_fleet(client, config)
    except KubeError as e:
        print(f"error: cannot read the cluster at {server}: {e}{_remedy(e)}", file=sys.stderr)
        return 2
    finally:
        await client.close()
    if args.output == "json":
        print(json.dumps(status_json(status), indent=2))
    else:
        sys.stdout.write(render_text(status))
    return 0


def run(args: argparse.Namespace) -> int:
    from vgpu_guard.cli.serve import kubeconfig_problem

    try:
        config = load_config(args.config, device_config=args.device_config)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    # Not in a pod: the service account is never used, so KUBERNETES_SERVICE_HOST is ignored here.
    environ = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    problem = kubeconfig_problem(args.kubeconfig, environ)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    return asyncio.run(_main(args, config))

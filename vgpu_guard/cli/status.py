"""``vgpu-guard status``: one screen on the fleet's GPUs, read from a cluster through a kubeconfig.

Per node: GPUs, mode, memory and cores reserved against what the device plugin registered, pods,
MIG instances in use, the fullest GPU; then the vGPU pods still Pending with the reason the
controller gave them (their PodScheduled=False condition), the vGPU pods our webhook never saw, and
the Volcano queues' guarantees against cluster capacity. Reasons are shown whole, wrapped at the
terminal's width (``COLUMNS``): a cut reason loses its remedy, which is the part to act on.
``-o json`` gives the same, complete, for scripts.

"Never saw": a vGPU pod without the marks our mutating webhook leaves on every vGPU pod it admits
(the ``volcano.sh/vgpu-mode`` annotation; the MIG profile on a MIG pod; our scheduler name when
routing is on). Such a pod was made before vgpu-guard was installed, in a namespace the webhooks do
not cover (with the opt-in preset, namespaces not opted in), or while the webhook failed open: its
request was never checked and, unless the controller adopted it, its GPUs are the ones a ledger
can miss. Pods of ``admission.exemptNamespaces`` are skipped by design, and so are not listed.

The figures are recomputed from the ledger entries and the nodes' registrations with the same code
the controller uses (engine/ledger_summary.py), never taken from the ledgers' stored summary: that
is derived and may be stale or hand-edited. Like the controller's metrics, they count only the GPUs
a node registers: memory an entry holds on a uuid the node does not register (a forged assignment,
a card gone) has no capacity to be judged against, and is a ledger violation instead. Violations
are the controller's own ``check_invariants``, one line each, so every one ``status`` counts is
named (``vgpu_guard_ledger_violations`` also counts, until their pods end, entries the controller
raised to their pod's assignment: those leave no trace in the objects).

``fleet_status`` is pure (objects in, ``FleetStatus`` out), so the rendering is golden-tested
without a cluster; only ``run`` talks to the API server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vgpu_guard.cli.argtypes import positive_seconds
from vgpu_guard.cli.wording import plural
from vgpu_guard.configfile import ConfigError, load_config
from vgpu_guard.engine.annotations import MIG_PROFILE, VGPU_MODE
from vgpu_guard.engine.cluster import ClusterView, NodeInfo
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.devices import REGISTER_ANNOTATION
from vgpu_guard.engine.ledger import LedgerError, LedgerViolation, NodeLedger, check_invariants, decode_ledger
from vgpu_guard.engine.ledger_summary import GpuSummary, fullest, gpu_summaries, summary_fields
from vgpu_guard.engine.objects import ObjMap as Obj
from vgpu_guard.engine.rules.queues_validate import QueueTree, audit_queues, format_amount
from vgpu_guard.engine.untrusted import as_mapping
from vgpu_guard.engine.vgpu_request import requests_vgpu
from vgpu_guard.kube.client import ClusterClient, list_all
from vgpu_guard.kube.errors import Forbidden, KubeError
from vgpu_guard.kube.resources import LEDGERS, NODES, PODS, QUEUES

__all__ = ["FleetStatus", "add_parser", "fleet_status", "render_text", "run", "status_json", "terminal_width"]


# One screen: beyond these, the text says how many more (``-o json`` lists everything).
PENDING_SHOWN = 10
UNSEEN_SHOWN = 10
VIOLATIONS_SHOWN = 10
QUEUES_SHOWN = 6
# Text is wrapped to the terminal, but never narrower than this: below it nothing reads.
MIN_WIDTH = 40


@dataclass(frozen=True)
class NodeStatus:
    """One node that registers GPUs or has a ledger; ``problem``: why its figures are incomplete;
    ``violations``: the ledger's broken invariants against the registration (``check_invariants``)."""

    name: str
    info: NodeInfo | None
    ledger: NodeLedger
    gpus: tuple[GpuSummary, ...]
    problem: str | None = None
    violations: tuple[LedgerViolation, ...] = ()

    @property
    def cards(self) -> tuple[GpuSummary, ...]:
        """The GPUs the node registers: the only ones counted (the controller's metrics alike)."""
        return tuple(g for g in self.gpus if g.registered_mib is not None)

    @property
    def unregistered(self) -> tuple[GpuSummary, ...]:
        """Uuids the ledger holds but the node does not register: not counted, reported."""
        return tuple(g for g in self.gpus if g.registered_mib is None)

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
class UnseenPod:
    """A vGPU pod without our webhook's marks; ``node`` when bound, ``why`` the missing mark."""

    namespace: str
    name: str
    node: str | None
    why: str


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
    unseen: tuple[UnseenPod, ...] = ()


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


def _missing_mark(pod: Obj, config: GuardConfig) -> str | None:
    """Which of the marks our mutation leaves on every vGPU pod this one lacks (None: it has them)."""
    annotations = as_mapping(_meta(pod).get("annotations"))
    mode = annotations.get(VGPU_MODE)
    if mode is None:
        return f"no {VGPU_MODE} annotation, which the webhook stamps on every vGPU pod"
    if mode == "mig" and MIG_PROFILE not in annotations:
        return f"MIG mode without {MIG_PROFILE}, which the webhook stamps on every MIG pod"
    ours = config.scheduling.scheduler_name
    scheduler = as_mapping(pod.get("spec")).get("schedulerName") or "default-scheduler"
    if config.scheduling.routing and scheduler != ours:
        return f"schedulerName {scheduler}, where the webhook routes vGPU pods to {ours}"
    return None


def _unseen(pods: Iterable[Obj], config: GuardConfig) -> tuple[UnseenPod, ...]:
    """Live vGPU pods outside the exempt namespaces that lack our webhook's marks."""
    out = []
    for pod in pods:
        meta, spec = _meta(pod), as_mapping(pod.get("spec"))
        namespace = str(meta.get("namespace") or "default")
        ended = as_mapping(pod.get("status")).get("phase") in ("Succeeded", "Failed")
        if ended or meta.get("deletionTimestamp") or namespace in config.admission.exempt_namespaces:
            continue
        why = _missing_mark(pod, config) if requests_vgpu(spec, config.nvidia) else None
        if why is not None:
            node = spec.get("nodeName")
            out.append(UnseenPod(namespace, str(meta.get("name")), str(node) if node else None, why))
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


def _gone(ledger: NodeLedger, gpus: Sequence[GpuSummary]) -> str:
    """A ledger whose Node is gone: nothing is registered, so nothing is counted; say what it holds."""
    held = sum(g.memory_mib for g in gpus)
    pods = plural(len(ledger.allocations), "pod")
    return f"no Node of this name (deleted?); its ledger holds {held} MiB for {pods}, not counted above"


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
    nodes, pods = list(nodes), list(pods)
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
        gpus = tuple(gpu_summaries(ledger, info, memory_factor=factor))
        problem = problems.get(name) or (info.gpu_problem if info is not None else _gone(ledger, gpus))
        violations = tuple(check_invariants(ledger, info, memory_factor=factor)) if info is not None else ()
        out.append(NodeStatus(name, info, ledger, gpus, problem, violations))
    return FleetStatus(
        nodes=tuple(out),
        pending=_pending(pods, config.scheduling.scheduler_name),
        queues=_queues(view, config),
        memory_factor=factor,
        unseen=_unseen(pods, config),
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
    used = sum(g.memory_mib for g in cards)
    fullest = node.fullest
    return [
        node.name,
        (node.info.mode if node.info is not None and node.info.mode else "-"),
        str(len(cards)),
        str(sum(1 for g in cards if g.full)),
        f"{used}/{registered}",
        _percent(used, registered),
        f"{sum(g.cores for g in cards)}/{100 * len(cards)}",
        str(len(node.ledger.allocations)),
        str(sum(g.mig_instances for g in cards)),
        f"{fullest.uuid} ({fullest.memory_percent}%)" if fullest is not None else "-",
    ]


def terminal_width() -> int:
    """The terminal's columns (``COLUMNS`` first, as ``shutil`` reads them; 110 when not a terminal)."""
    return max(shutil.get_terminal_size((110, 24)).columns, MIN_WIDTH)


def _wrapped(head: str, text: str, width: int) -> list[str]:
    """``head`` then ``text``, whole, over as many lines as ``width`` needs (indented under head)."""
    return textwrap.wrap(
        head + text,
        width=max(width, MIN_WIDTH),
        subsequent_indent="    ",
        break_long_words=False,
        break_on_hyphens=False,
    ) or [head.rstrip()]


def _headline(status: FleetStatus) -> str:
    cards = [g for n in status.nodes for g in n.cards]
    used = sum(g.memory_mib for g in cards)
    registered = sum(g.registered_mib or 0 for g in cards)
    pods = sum(len(n.ledger.allocations) for n in status.nodes)
    mig = sum(g.mig_instances for g in cards)
    return (
        f"{plural(len(status.nodes), 'GPU node')}, {plural(len(cards), 'GPU')} "
        f"({sum(1 for g in cards if g.full)} full), {used}/{registered} MiB reserved "
        f"({_percent(used, registered)}), {plural(pods, 'pod')} holding GPUs, "
        f"{plural(mig, 'MIG instance')} in use"
    )


def _node_lines(status: FleetStatus) -> list[str]:
    if not status.nodes:
        return []
    header = ["NODE", "MODE", "GPUS", "FULL", "MEMORY-MiB", "MEM%", "CORES%", "PODS", "MIG", "FULLEST-GPU"]
    lines = ["", *_table([header, *(_node_row(n) for n in status.nodes)])]
    return lines + [f"  {n.name}: {n.problem}" for n in status.nodes if n.problem]


def _violation_text(node: NodeStatus, violation: LedgerViolation) -> str:
    """The controller's message; on a uuid the node does not register, what it holds there too."""
    if violation.kind != "unknown-gpu":
        return violation.message
    held = sum(g.memory_mib for g in node.unregistered if g.uuid == violation.gpu)
    return f"{violation.message} ({held} MiB, not counted above)"


def _violation_lines(status: FleetStatus, width: int) -> list[str]:
    found = [(n, v) for n in status.nodes for v in n.violations]
    why = " (vgpu_guard_ledger_violations counts the same)" if found else ""
    lines = ["", *_wrapped("", f"Ledger violations: {len(found)}{why}", width)]
    for node, violation in found[:VIOLATIONS_SHOWN]:
        lines += _wrapped(f"  {node.name}: ", _violation_text(node, violation), width)
    if len(found) > VIOLATIONS_SHOWN:
        lines.append(f"  ... and {len(found) - VIOLATIONS_SHOWN} more (-o json lists them all)")
    return lines


def _pending_lines(status: FleetStatus, width: int) -> list[str]:
    lines = ["", f"Pending vGPU pods: {len(status.pending)}"]
    for pod in status.pending[:PENDING_SHOWN]:
        because = f"{pod.reason}: {pod.message}" if pod.reason else pod.message
        lines += _wrapped(f"  {pod.namespace}/{pod.name}  ", because, width)
    if len(status.pending) > PENDING_SHOWN:
        lines.append(f"  ... and {len(status.pending) - PENDING_SHOWN} more (-o json lists them all)")
    return lines


def _unseen_lines(status: FleetStatus, width: int) -> list[str]:
    count = len(status.unseen)
    why = " (made before vgpu-guard, outside its namespaces, or while it failed open)" if count else ""
    lines = ["", *_wrapped("", f"vGPU pods the webhook never saw: {count}{why}", width)]
    for pod in status.unseen[:UNSEEN_SHOWN]:
        where = f"on {pod.node}" if pod.node else "pending"
        lines += _wrapped(f"  {pod.namespace}/{pod.name}  {where}: ", pod.why, width)
    if count > UNSEEN_SHOWN:
        lines.append(f"  ... and {count - UNSEEN_SHOWN} more (-o json lists them all)")
    return lines


def _queue_lines(status: FleetStatus, width: int) -> list[str]:
    lines = [
        "",
        f"Queue guarantees: {'none' if not status.queues else 'all queues against cluster capacity'}",
    ]
    for q in status.queues:
        share = f"{q.percent}% guaranteed" if q.percent is not None else "guaranteed"
        shares = ", ".join(f"{name} {amount}" for name, amount in q.queues[:QUEUES_SHOWN])
        more = f" and {len(q.queues) - QUEUES_SHOWN} more" if len(q.queues) > QUEUES_SHOWN else ""
        over = "  OVER CAPACITY" if q.exceeded else ""
        lines += _wrapped(
            f"  {q.resource}: ", f"{share}, {q.guaranteed} of {q.capacity}{over}; {shares}{more}", width
        )
    return lines


def render_text(status: FleetStatus, *, width: int = 110) -> str:
    """The one-screen text (golden-tested): a headline, the node table, ledger violations, pending
    pods, pods the webhook never saw, queues; reasons wrapped whole at ``width`` (the command:
    ``terminal_width``)."""
    lines = [
        _headline(status),
        *_node_lines(status),
        *_violation_lines(status, width),
        *_pending_lines(status, width),
        *_unseen_lines(status, width),
        *_queue_lines(status, width),
    ]
    return "\n".join(lines) + "\n"


def status_json(status: FleetStatus) -> dict[str, Any]:
    """Everything, untruncated; per node the summary the controller stores in the ledger, each GPU
    as an object of fields (the ledger writes each as one line of text with the same names)."""
    return {
        "nodes": [
            {
                "name": n.name,
                "mode": n.info.mode if n.info is not None else None,
                "problem": n.problem,
                "summary": summary_fields(n.ledger, n.info, status.memory_factor),
                "violations": [
                    {"gpu": v.gpu, "kind": v.kind, "message": _violation_text(n, v)} for v in n.violations
                ],
            }
            for n in status.nodes
        ],
        "pending": [
            {"namespace": p.namespace, "name": p.name, "reason": p.reason, "message": p.message}
            for p in status.pending
        ],
        "unseen": [
            {"namespace": p.namespace, "name": p.name, "node": p.node, "why": p.why} for p in status.unseen
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
    parser.add_argument(
        "--context", metavar="NAME", help="the kubeconfig context to use (default: its current-context)"
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
        client = await AioClusterClient.from_kubeconfig(
            args.kubeconfig, context=args.context, request_timeout=args.timeout
        )
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
        sys.stdout.write(render_text(status, width=terminal_width()))
    return 0


def _kubeconfig_problem(kubeconfig: str | None, context: str | None) -> str | None:
    """Why the kubeconfig (and ``--context``) cannot work, in one line; None: try it."""
    from vgpu_guard.cli.live_cluster import kubeconfig_error
    from vgpu_guard.cli.serve import kubeconfig_problem

    # Not in a pod: the service account is never used, so KUBERNETES_SERVICE_HOST is ignored here.
    environ = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
    listed = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if context is None or (not kubeconfig and len(listed) > 1):
        return kubeconfig_problem(kubeconfig, environ)  # several files are merged by the library
    path = kubeconfig or (listed[0] if listed else str(Path.home() / ".kube" / "config"))
    return kubeconfig_error(path, context)


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config, device_config=args.device_config)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    problem = _kubeconfig_problem(args.kubeconfig, args.context)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    return asyncio.run(_main(args, config))

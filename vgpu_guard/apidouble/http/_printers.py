"""Server-side printing of the built-in kinds users list most: pods, nodes and namespaces.

kubectl's Table request is answered with the columns kube-apiserver 1.20 prints
(pkg/printers/internalversion/printers.go: printPod, printNode, printNamespace), cells computed
as there and always wide (priority-1 columns included: kubectl hides them without ``-o wide``).
Other built-in kinds are not printed by the double; kubectl's Accept names JSON, so they get
JSON and kubectl prints name and age itself.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from vgpu_guard.apidouble.http._openapi import builtin_document
from vgpu_guard.engine.objects import Obj

__all__ = ["PRINTERS", "age", "column_definitions", "human_duration"]

Row = tuple[list[Any], list[Obj]]  # cells, row conditions


def _doc(definition: str, field: str) -> str:
    props = builtin_document()["definitions"][definition]["properties"]
    return str(props[field].get("description", ""))


def _meta(field: str) -> str:
    return _doc("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", field)


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d{hours % 24}h" if hours % 24 else f"{hours // 24}d"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = hours // 24
        return f"{days // 365}y{days % 365}d" if days % 365 else f"{days // 365}y"
    return f"{hours // 24 // 365}y"


def age(obj: Obj, now: datetime) -> str:
    """translateTimestampSince: ``<unknown>`` without a timestamp."""
    stamp = (obj.get("metadata") or {}).get("creationTimestamp")
    if not stamp:
        return "<unknown>"
    when = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return human_duration((now - when).total_seconds())


def _col(name: str, kind: str, description: str, priority: int = 0, fmt: str = "") -> Obj:
    return {"name": name, "type": kind, "format": fmt, "description": description, "priority": priority}


def column_definitions(plural: str) -> list[Obj]:
    core = "io.k8s.api.core.v1."
    name = _col("Name", "string", _meta("name"), fmt="name")
    created = _meta("creationTimestamp")
    if plural == "pods":
        return [
            name,
            _col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
            _col("Status", "string", "The aggregate status of the containers in this pod."),
            _col(
                "Restarts", "integer", "The number of times the containers in this pod have been restarted."
            ),
            _col("Age", "string", created),
            _col("IP", "string", _doc(core + "PodStatus", "podIP"), 1),
            _col("Node", "string", _doc(core + "PodSpec", "nodeName"), 1),
            _col("Nominated Node", "string", _doc(core + "PodStatus", "nominatedNodeName"), 1),
            _col("Readiness Gates", "string", _doc(core + "PodSpec", "readinessGates"), 1),
        ]
    if plural == "nodes":
        info, status = core + "NodeSystemInfo", core + "NodeStatus"
        return [
            name,
            _col("Status", "string", "The status of the node"),
            _col("Roles", "string", "The roles of the node"),
            _col("Age", "string", created),
            _col("Version", "string", _doc(info, "kubeletVersion")),
            _col("Internal-IP", "string", _doc(status, "addresses"), 1),
            _col("External-IP", "string", _doc(status, "addresses"), 1),
            _col("OS-Image", "string", _doc(info, "osImage"), 1),
            _col("Kernel-Version", "string", _doc(info, "kernelVersion"), 1),
            _col("Container-Runtime", "string", _doc(info, "containerRuntimeVersion"), 1),
        ]
    return [name, _col("Status", "string", "The status of the namespace"), _col("Age", "string", created)]


def _container_reason(c: Obj, reason: str) -> tuple[str, bool]:
    """One container status's say on the pod's reason; (reason, ready and running)."""
    state = c.get("state") or {}
    waiting, done = state.get("waiting") or None, state.get("terminated") or None
    if waiting is not None and waiting.get("reason"):
        return waiting["reason"], False
    if done is not None and done.get("reason"):
        return done["reason"], False
    if done is not None:
        signal = done.get("signal") or 0
        return (f"Signal:{signal}" if signal else f"ExitCode:{done.get('exitCode') or 0}"), False
    return reason, bool(c.get("ready")) and state.get("running") is not None


def _init_reason(pod: Obj) -> str | None:
    """The reason while init containers have not all succeeded (None once they have)."""
    init_specs = (pod.get("spec") or {}).get("initContainers") or []
    for i, c in enumerate((pod.get("status") or {}).get("initContainerStatuses") or []):
        state = c.get("state") or {}
        done, waiting = state.get("terminated"), state.get("waiting")
        if done is not None and (done.get("exitCode") or 0) == 0:
            continue
        if done is not None:
            if done.get("reason"):
                return "Init:" + str(done["reason"])
            signal = done.get("signal") or 0
            return f"Init:Signal:{signal}" if signal else f"Init:ExitCode:{done.get('exitCode') or 0}"
        if waiting is not None and waiting.get("reason") and waiting["reason"] != "PodInitializing":
            return "Init:" + str(waiting["reason"])
        return f"Init:{i}/{len(init_specs)}"
    return None


def print_pod(pod: Obj, now: datetime) -> Row:
    spec, status, meta = pod.get("spec") or {}, pod.get("status") or {}, pod.get("metadata") or {}
    phase = status.get("phase") or ""
    reason = status.get("reason") or phase
    restarts = sum(int(c.get("restartCount") or 0) for c in status.get("initContainerStatuses") or [])
    ready = 0
    init = _init_reason(pod)
    if init is not None:
        reason = init
    else:
        restarts, running = 0, False
        for c in reversed(status.get("containerStatuses") or []):
            restarts += int(c.get("restartCount") or 0)
            reason, up = _container_reason(c, reason)
            running, ready = running or up, ready + up
        if reason == "Completed" and running:
            conditions = status.get("conditions") or []
            is_ready = any(x.get("type") == "Ready" and x.get("status") == "True" for x in conditions)
            reason = "Running" if is_ready else "NotReady"
    if meta.get("deletionTimestamp"):
        reason = "Unknown" if status.get("reason") == "NodeLost" else "Terminating"
    ips = [p.get("ip") for p in status.get("podIPs") or [] if p.get("ip")]
    gates = spec.get("readinessGates") or []
    true_types = {x.get("type") for x in status.get("conditions") or [] if x.get("status") == "True"}
    gated = f"{sum(g.get('conditionType') in true_types for g in gates)}/{len(gates)}" if gates else "<none>"
    cells = [
        meta.get("name", ""), f"{ready}/{len(spec.get('containers') or [])}", reason, restarts, age(pod, now),
        ips[0] if ips else "<none>", spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>", gated,
    ]  # fmt: skip
    row_conditions: list[Obj] = []
    if phase in ("Succeeded", "Failed"):
        message = "The pod has completed successfully." if phase == "Succeeded" else "The pod failed."
        row_conditions = [{"type": "Completed", "status": "True", "reason": phase, "message": message}]
    return cells, row_conditions


def print_node(node: Obj, now: datetime) -> Row:
    meta, status = node.get("metadata") or {}, node.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    shown = ["Unknown"] if ready is None else ["Ready" if ready.get("status") == "True" else "NotReady"]
    if (node.get("spec") or {}).get("unschedulable"):
        shown.append("SchedulingDisabled")
    roles: set[str] = set()
    for key, value in (meta.get("labels") or {}).items():
        if key.startswith("node-role.kubernetes.io/") and key.split("/", 1)[1]:
            roles.add(key.split("/", 1)[1])
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    info = status.get("nodeInfo") or {}

    def address(kind: str) -> str:
        return next((a["address"] for a in status.get("addresses") or [] if a.get("type") == kind), "<none>")

    cells = [
        meta.get("name", ""), ",".join(shown), ",".join(sorted(roles)) or "<none>", age(node, now),
        info.get("kubeletVersion", ""), address("InternalIP"), address("ExternalIP"),
        info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]  # fmt: skip
    return cells, []


def print_namespace(ns: Obj, now: datetime) -> Row:
    phase = (ns.get("status") or {}).get("phase", "")
    return [(ns.get("metadata") or {}).get("name", ""), phase, age(ns, now)], []


PRINTERS: dict[tuple[str, str], Callable[[Obj, datetime], Row]] = {
    ("", "pods"): print_pod,
    ("", "nodes"): print_node,
    ("", "namespaces"): print_namespace,
}

"""Rendering a ``SimulationResult``: the JSON document and the text report.

Kept apart from the simulation so the core never prints and both renderings read one result. The
JSON shape is pinned by docs/simulate.schema.json; its ``admission`` entries are ``review``'s
(``admission_entry``) plus who sent the request and what came of it. The text report is for
people: a few aligned tables of one line per object, then each denial, each distinct warning and
each distinct reason a pod is not bound once, with what it applies to; ``verbose`` (``-v``) puts
every object's details on indented lines under its row instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from itertools import groupby
from typing import Any

from vgpu_guard.cli.admission_entries import admission_entry
from vgpu_guard.cli.simulation import Admitted, DeviceOutcome, PodOutcome, SimulationResult, VolcanoRun
from vgpu_guard.cli.wording import plural
from vgpu_guard.engine.rules.queues_validate import QueueTree, format_amount

__all__ = ["to_json", "to_text"]


def _percent(part: Fraction | int, whole: Fraction | int) -> int | None:
    # Floor, as the webhook's own messages do: 90% is never shown for 89.99 %.
    return int(Fraction(part) * 100 / Fraction(whole)) if whole else None


def _admission(entry: Admitted) -> dict[str, Any]:
    return {
        **admission_entry(entry.source, entry.result),
        "username": entry.username,
        "api_error": entry.api_error,
        "pods": list(entry.pods),
        "note": entry.note,
    }


def _device(device: DeviceOutcome) -> dict[str, Any]:
    return {
        "uuid": device.uuid,
        "memory": device.memory,
        "cores": device.cores,
        "mig_profile": device.mig_profile,
    }


def _pod(pod: PodOutcome) -> dict[str, Any]:
    return {
        "namespace": pod.namespace,
        "name": pod.name,
        "phase": pod.phase,
        "node": pod.node,
        "devices": [_device(d) for d in pod.devices],
        "reason": pod.reason,
        "scheduler": pod.scheduler,
        "priority": pod.priority,
        "existing": pod.existing,
        "source": pod.source,
    }


def _queues(result: SimulationResult) -> list[dict[str, Any]]:
    tree = QueueTree.from_queues(result.view.queues.values())
    out = []
    for name in sorted(result.view.queues):
        guarantee = tree.guarantees.get(name, {})
        out.append(
            {
                "name": name,
                "parent": tree.parents.get(name) or None,
                "guarantee": {r: format_amount(r, v) for r, v in sorted(guarantee.items())},
                "findings": [v.render() for v in result.queues.findings.get(name, ())],
            }
        )
    return out


def _totals(result: SimulationResult) -> list[dict[str, Any]]:
    return [
        {
            "resource": resource,
            "guaranteed": format_amount(resource, use.guaranteed),
            "capacity": format_amount(resource, use.capacity.amount),
            "nodes": use.capacity.nodes,
            "percent": _percent(use.guaranteed, use.capacity.amount),
            "exceeded": use.exceeded,
        }
        for resource, use in sorted(result.queues.resources.items())
    ]


def _volcano(run: VolcanoRun) -> dict[str, Any]:
    return {
        "version": run.version.name,
        "sequence": run.version.sequence,
        "stale_cache": run.stale_cache,
        "sessions": [
            {
                "session": record.number,
                "enqueued": list(record.enqueued),
                "binds": [
                    {
                        "pod": b.pod,
                        "node": b.node,
                        "assignment": b.ids,
                        "result": b.result,
                        "step": b.step,
                        "message": b.message,
                    }
                    for b in record.binds
                ],
                "waiting": [{"pod": pod, "reason": reason} for pod, reason in record.unplaced],
                "discarded": list(record.discarded),
                "running": list(record.running),
            }
            for record in run.sessions
        ],
    }


def to_json(result: SimulationResult) -> dict[str, Any]:
    """The ``-o json`` document (docs/simulate.schema.json)."""
    return {
        "scenario": result.scenario,
        "scheduling": {
            "mode": result.mode,
            "note": result.note,
            "scheduler": result.scheduler,
            "passes": result.passes,
            "sessions": len(result.volcano.sessions),
        },
        "volcano": _volcano(result.volcano),
        "admission": [_admission(a) for a in result.admission],
        "pods": [_pod(p) for p in result.pods],
        "gpus": [
            {
                "node": g.node,
                "uuid": g.uuid,
                "model": g.model,
                "mode": g.mode,
                "memory_total": g.memory_total,
                "memory_used": g.memory_used,
                "cores_used": g.cores_used,
                "pods": list(g.pods),
            }
            for g in result.gpus
        ],
        "queues": _queues(result),
        "queue_totals": _totals(result),
        "violations": list(result.violations),
        "controller_warnings": list(result.warnings),
    }


# --- text ----------------------------------------------------------------------------------------


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, indent: str = "  ") -> list[str]:
    """Columns padded to their widest cell; the last column is not padded (no trailing blanks)."""
    widths = [max(len(str(r[i])) for r in [headers, *rows]) for i in range(len(headers) - 1)]

    def line(cells: Sequence[str]) -> str:
        padded = [str(c).ljust(w) for c, w in zip(cells, widths, strict=False)] + [str(cells[-1])]
        return (indent + "  ".join(padded)).rstrip()

    return [line(headers), *(line(r) for r in rows)]


def _ref(entry: dict[str, Any]) -> str:
    return f"{entry['namespace']}/{entry['name']}" if entry["namespace"] else str(entry["name"])


def _who(username: str) -> str:
    return username.rsplit(":", 1)[-1]


def _verdict(entry: dict[str, Any]) -> str:
    return "allowed" if entry["allowed"] else "DENIED"


def _entry_details(admitted: Admitted, entry: dict[str, Any]) -> list[str]:
    """-v's lines under a row: why it was denied first, then warnings, API error, pods, note."""
    details = [*entry["message"].splitlines(), *(f"warning: {w}" for w in entry["warnings"])]
    if admitted.api_error:
        details.append(f"API server: {admitted.api_error}")
    if admitted.pods:
        details.append(f"creates {plural(len(admitted.pods), 'pod')}")
    if admitted.note:
        details.append(admitted.note)
    return details


def _group_row(members: list[tuple[Admitted, dict[str, Any]]], workload: str) -> tuple[list[str], list[str]]:
    first, entry = members[0]
    cells = [
        f"  {_verdict(entry)}",
        "Pod",
        f"{plural(len(members), 'pod')} of {workload}",
        f"by {_who(first.username)}",
    ]
    return cells, _entry_details(first, entry)


def _object_row(admitted: Admitted, entry: dict[str, Any]) -> tuple[list[str], list[str]]:
    where = f"by {_who(admitted.username)}" if admitted.workload else entry["source"]
    cells = [("  " if admitted.workload else "") + _verdict(entry), str(entry["kind"]), _ref(entry), where]
    return cells, _entry_details(admitted, entry)


def _admission_rows(result: SimulationResult, *, verbose: bool) -> list[tuple[list[str], list[str]]]:
    """(cells, -v's detail lines) per row; a workload's pods that fared alike share one row (without
    -v their warnings may differ: they are grouped after the table)."""
    entries = [(a, _admission(a)) for a in result.admission]
    rows: list[tuple[list[str], list[str]]] = []
    for workload, group in groupby(entries, key=lambda pair: pair[0].workload):  # a Job's pods follow it
        members = list(group)
        alike = {
            (e["allowed"], e["message"], a.api_error, *((tuple(e["warnings"]),) if verbose else ()))
            for a, e in members
        }
        if workload and len(alike) == 1:
            rows.append(_group_row(members, workload))
        else:
            rows.extend(_object_row(a, e) for a, e in members)
    return rows


def _admission_text(result: SimulationResult, *, verbose: bool) -> list[str]:
    denied = sum(1 for a in result.admission if not a.result.decision.allowed)
    lines = [f"ADMISSION ({plural(len(result.admission), 'request')}, {denied} denied)"]
    rows = _admission_rows(result, verbose=verbose)
    table = _table(["RESULT", "KIND", "OBJECT", "FROM"], [cells for cells, _ in rows])
    lines.append(table[0])
    for row_line, (_, details) in zip(table[1:], rows, strict=True):
        lines.append(row_line)
        if verbose:  # every line of a detail under the row, however many lines a message has
            lines.extend(f"        {line}" for d in details for line in str(d).splitlines())
    return lines if verbose else [*lines, *_refusals_text(result), *_warnings_text(result)]


def _refusals_text(result: SimulationResult) -> list[str]:
    """Each distinct denial (or API server refusal) once, with the objects it refused."""
    seen: dict[str, list[tuple[str, str]]] = {}
    for admitted in result.admission:
        decision = admitted.result.decision
        if not decision.allowed or admitted.api_error:
            why = decision.message if not decision.allowed else f"API server: {admitted.api_error}"
            seen.setdefault(why, []).append(_admitted_ref(admitted))
    lines = [line for why, refs in seen.items() for line in _listed(_objects(refs), why)]
    return ["  Why denied:", *lines] if lines else []


def _listed(what: str, text: str) -> list[str]:
    """``what: text`` on one line, a multi-line text's other lines indented under it."""
    first, *more = text.splitlines() or [""]
    return [f"    {what}: {first}", *(f"      {line}" for line in more)]


def _objects(refs: Sequence[tuple[str, str]]) -> str:
    """``(object, workload)`` pairs in words: a workload's pods counted, others named."""
    parts = []
    for workload, group in groupby(refs, key=lambda ref: ref[1]):
        names = [name for name, _ in group]
        parts.append(
            f"{plural(len(names), 'pod')} of {workload}" if workload and len(names) > 1 else names[0]
        )
    if len(parts) <= 3:
        return ", ".join(parts)
    noun = "pod" if all(" " not in name for name, _ in refs) else "object"  # Pods are named bare
    return f"{plural(len(refs), noun)}: {', '.join(parts[:2])} and {len(parts) - 2} more"


def _admitted_ref(admitted: Admitted) -> tuple[str, str]:
    entry = _admission(admitted)
    name = _ref(entry) if entry["kind"] == "Pod" else f"{entry['kind']} {_ref(entry)}"
    return name, admitted.workload


def _warnings_text(result: SimulationResult) -> list[str]:
    """Each distinct warning of the mutation once, with the objects it was given for."""
    seen: dict[str, list[tuple[str, str]]] = {}
    for admitted in result.admission:
        if admitted.result.decision.allowed:  # a denied object's warnings come with its denial
            for warning in dict.fromkeys(admitted.result.warnings):
                seen.setdefault(warning.removeprefix("vgpu-guard: "), []).append(_admitted_ref(admitted))
    if not seen:
        return []
    head = f"  Warnings ({plural(len(seen), 'distinct warning')}; -v shows each under its object):"
    return [head, *(f"    {warning}: {_objects(refs)}" for warning, refs in seen.items())]


def _devices(pod: PodOutcome) -> str:
    parts = []
    for d in pod.devices:
        if d.mig_profile:
            parts.append(f"{d.uuid} MIG {d.mig_profile} ({d.memory} MiB)")
        else:
            parts.append(f"{d.uuid} {d.memory} MiB" + (f" {d.cores}% cores" if d.cores else ""))
    return ", ".join(parts) or "-"


def _pod_rows(result: SimulationResult) -> list[list[str]]:
    return [
        [
            p.key + (" (running before)" if p.existing else ""),
            p.phase,
            str(p.priority),
            p.scheduler,
            p.node or "-",
            _devices(p),
        ]
        for p in result.pods
    ]


def _pods_text(result: SimulationResult, *, verbose: bool) -> list[str]:
    counts = {
        phase: sum(1 for p in result.pods if p.phase == phase) for phase in ("Bound", "Pending", "Rejected")
    }
    lines = [f"PODS ({len(result.pods)}: " + ", ".join(f"{n} {phase}" for phase, n in counts.items()) + ")"]
    if not result.pods:
        return [*lines, "  (no pods)"]
    table = _table(["POD", "PHASE", "PRIO", "SCHEDULER", "NODE", "DEVICES"], _pod_rows(result))
    if not verbose:
        return [*lines, *table, *_reasons_text(result)]
    lines.append(table[0])
    previous = None
    for row_line, pod in zip(table[1:], result.pods, strict=True):
        lines.append(row_line)
        if pod.reason:
            reason = pod.reason if pod.reason != previous else "(same reason as above)"
            lines.extend(f"      {line}" for line in reason.splitlines())
        previous = pod.reason
    return lines


def _reasons_text(result: SimulationResult) -> list[str]:
    """Each distinct reason a pod is not bound once, with the pods it holds back."""
    workloads = {_admitted_ref(a)[0]: a.workload for a in result.admission}
    seen: dict[str, list[tuple[str, str]]] = {}
    for pod in result.pods:
        if pod.reason:
            seen.setdefault(pod.reason, []).append((pod.key, workloads.get(pod.key, "")))
    if not seen:
        return []
    return [
        "  Why not bound:",
        *(line for reason, refs in seen.items() for line in _listed(_objects(refs), reason)),
    ]


def _gpus_text(result: SimulationResult) -> list[str]:
    lines = ["GPU LEDGER (memory in MiB, cores in % of the card)"]
    if not result.gpus:
        return [*lines, "  (no node registers GPUs)"]
    rows = [
        [
            g.node,
            g.uuid,
            g.model.removeprefix("NVIDIA-"),
            g.mode,
            f"{g.memory_used:>6} / {g.memory_total:<6}",
            f"{g.cores_used:>3}",
            ", ".join(g.pods) or "-",
        ]
        for g in result.gpus
    ]
    lines += _table(["NODE", "GPU", "MODEL", "MODE", "MEMORY USED", "CORES", "PODS"], rows)
    if result.violations:
        lines.append("  OVER CAPACITY:")
        lines += [f"    {v}" for v in result.violations]
    else:
        lines.append("  No GPU holds more than its memory, cores or slices.")
    if result.warnings:
        # What vgpu-guard's controller warned about (its Warning Events), e.g. the device plugin's
        # stale pick: shown here because it is about what the GPUs will be handed.
        lines.append("  VGPU-GUARD WARNINGS (the controller's Warning Events):")
        lines += [f"    {w}" for w in result.warnings]
    return lines


def _queues_text(result: SimulationResult) -> list[str]:
    queues = _queues(result)
    lines = ["QUEUES"]
    if not queues:
        return [*lines, "  (no queues)"]
    rows = [
        [q["name"], q["parent"] or "-", ", ".join(f"{r} {v}" for r, v in q["guarantee"].items()) or "-"]
        for q in queues
    ]
    lines += _table(["QUEUE", "PARENT", "GUARANTEE"], rows)
    lines += [f"      {q['name']}: {f}" for q in queues for f in q["findings"]]
    totals = _totals(result)
    if totals:
        lines += ["", "QUEUE GUARANTEES AGAINST CAPACITY"]
        rows = [
            [
                t["resource"],
                t["guaranteed"],
                f"{t['capacity']} ({t['nodes']} nodes)",
                "-" if t["percent"] is None else f"{t['percent']}%",
                "EXCEEDED" if t["exceeded"] else "ok",
            ]
            for t in totals
        ]
        lines += _table(["RESOURCE", "GUARANTEED", "CAPACITY", "USE", "STATE"], rows)
    return lines


def _volcano_text(result: SimulationResult) -> list[str]:
    """One row per Volcano session, then every refused assignment: the arbiter's whole message
    under the first (the others read alike; -o json has each)."""
    run = result.volcano
    refused = [(r.number, b) for r in run.sessions for b in r.binds if b.result != "bound"]
    written = sum(len(r.binds) for r in run.sessions)
    lines = [
        f"VOLCANO ({plural(len(run.sessions), 'session')}: {plural(written, 'assignment')} written, "
        f"{written - len(refused)} bound, {len(refused)} refused)"
    ]
    if not any(r.binds or r.unplaced for r in run.sessions):
        enqueued = sum(len(r.enqueued) for r in run.sessions)
        return [*lines, f"  {plural(enqueued, 'PodGroup')} enqueued; no pod waited for Volcano to place it"]
    rows = [
        [
            str(r.number),
            str(len(r.enqueued)),
            *(str(sum(1 for b in r.binds if b.result == k)) for k in ("bound", "denied", "failed")),
            str(len(r.unplaced)),
        ]
        for r in run.sessions
    ]
    lines += _table(["SESSION", "ENQUEUED", "BOUND", "DENIED", "FAILED", "WAITING"], rows)
    if not refused:
        return lines
    lines += ["", "REFUSED ASSIGNMENTS (Volcano decides each again on its next session)"]
    rows = [
        [str(n), b.result, b.pod, b.node, b.ids, "PATCH" if b.step == "patch" else "Binding"]
        for n, b in refused
    ]
    table = _table(["SESSION", "RESULT", "POD", "NODE", "ASSIGNMENT", "WRITE"], rows)
    lines += table[:2]
    lines += [f"        {line}" for line in refused[0][1].message.splitlines()]
    lines += table[2:]
    return lines


def _header(result: SimulationResult) -> list[str]:
    run = result.volcano
    stale = "on" if run.stale_cache else "off"
    return [
        f"vgpu-guard simulate: {result.scenario}",
        f"Mode: {result.note}.",
        f"Volcano: a model of {run.version.describe}; stale cache (#3616) {stale} ({run.stale_cache_from}); "
        f"{plural(len(run.sessions), 'session')}; vgpu-guard's controller settled in "
        f"{result.passes} pass{'' if result.passes == 1 else 'es'}.",
        "Legend: session = one Volcano scheduling cycle (enqueue, allocate, bind); pass = one round of "
        "vgpu-guard's controller over every pod; ledger = the GPULedger, vgpu-guard's record of what each "
        "GPU holds; bound = on a node, its GPUs in the ledger; denied = refused by the arbiter before it "
        "reached the pod; Pending = waits (reason below); Rejected = never created (admission or the API "
        "server refused it). Pods of other schedulers are listed, not placed.",
    ]


def to_text(result: SimulationResult, *, verbose: bool = False) -> str:
    """The human report: header, admission, pods, GPU ledger, queues, one summary line. One line per
    object; each distinct warning and reason once, with what it applies to (``verbose``: every
    object's details under its row)."""
    bound = sum(1 for p in result.pods if p.phase == "Bound")
    pending = sum(1 for p in result.pods if p.phase == "Pending")
    rejected = sum(1 for p in result.pods if p.phase == "Rejected")
    denied = sum(1 for a in result.admission if not a.result.decision.allowed)
    sections = [
        _header(result),
        _admission_text(result, verbose=verbose),
        _volcano_text(result),
        _pods_text(result, verbose=verbose),
        _gpus_text(result),
        _queues_text(result),
        [
            f"Summary: {plural(bound, 'pod')} bound, {pending} pending, {rejected} rejected; "
            f"{denied} of {plural(len(result.admission), 'admission request')} denied; "
            + (
                f"{len(result.violations)} GPU invariant(s) broken."
                if result.violations
                else "no GPU overcommitted."
            )
        ],
    ]
    return "\n\n".join("\n".join(s) for s in sections) + "\n"

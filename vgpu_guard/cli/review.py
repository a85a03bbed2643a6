"""``vgpu-guard review``: the webhook's decisions on YAML files, offline.

Like ``kyverno apply`` or ``gator test``: the same engine call the webhook makes, on every object
of the given files, against the cluster ``cluster_source`` chooses (a live one through
``--kubeconfig``, a file, the files' own Nodes, or the built-in one; the first line names it). Objects are
reviewed in order and each admitted Queue is visible to the next (so a set of queues is judged as
``kubectl apply -f`` would build it up), as is the IB cluster a gang's first member records
(also when validation then denies that member: the mutating call created it first, as in a cluster).
Exit 0: all allowed; 1: any denied; 2: unreadable input.

What ``simulate`` stores as the cluster's state (Nodes, running Pods, ...: ``is_cluster_state``)
is read as the cluster, never judged: a verdict on a Node is noise in every report. Several files
without ``--cluster``/``--kubeconfig`` are each judged against their own cluster, as ``simulate``
would run each: pooling the Nodes of unrelated stories judges every story against a cluster none
of them describes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vgpu_guard.cli.admission_entries import admission_entry
from vgpu_guard.cli.cluster_source import (
    ClusterSource,
    add_cluster_arguments,
    choose_cluster,
    is_cluster_state,
)
from vgpu_guard.cli.documents import (
    Document,
    InputError,
    add_input_arguments,
    expand_paths,
    limits_from,
    read_each,
    warn_about,
)
from vgpu_guard.cli.policy_report import policy_reports, report_name, report_time
from vgpu_guard.cli.report import rule_results, summary
from vgpu_guard.cli.wording import plural
from vgpu_guard.cli.workload_pods import CONTROLLER_USERS
from vgpu_guard.cli.yaml_output import dump_yaml, dump_yaml_all
from vgpu_guard.configfile import ConfigError, load_config
from vgpu_guard.engine.admission import ReviewResult, request_for, review_object
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.volcano_job import is_volcano_job, volcano_job_pods, volcano_podgroup

__all__ = [
    "EPILOG",
    "OUTPUTS",
    "Judged",
    "add_output_argument",
    "add_parser",
    "load_view",
    "output_formats",
    "review_documents",
    "run",
]

EXIT_OK, EXIT_DENIED, EXIT_INPUT = 0, 1, 2
OUTPUTS = ("text", "json", "yaml", "policyreport")
EPILOG = """exit codes:
  0  every object allowed (warnings, mutations and audit findings allowed too), or --exit-zero
  1  at least one object denied
  2  unusable input: unreadable or over-limit file, invalid YAML, bad --config or --cluster,
     or a --kubeconfig that cannot be read"""
REVIEW_JSON = """one result per object and rule (rule, path, action deny|warn|audit|mutate,
                message, fix), a summary and each object's verdict, patch and mutated object;
                schema: docs/review-report.schema.json"""


def output_formats(json_help: str) -> str:
    """The epilog's ``-o`` section: one line per choice (argparse has no per-choice help)."""
    return f"""output formats (-o):
  text          a readable summary (the default)
  json          {json_help}
  yaml          the same document as json, in YAML
  policyreport  the results as wgpolicyk8s.io/v1alpha2 PolicyReports (YAML): one per namespace,
                a ClusterPolicyReport for cluster-scoped objects, as Kyverno reports them: a
                policy per rule family with category and severity, results only for judged
                objects, named after the input"""


def add_output_argument(parser: argparse.ArgumentParser) -> None:
    """``-o``, the same choices on ``review`` and ``simulate`` (each described in the epilog)."""
    parser.add_argument(
        "-o",
        "--output",
        choices=OUTPUTS,
        default="text",
        help="output format (default: text); each is described under 'output formats' below",
    )


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "review",
        help="run the admission decisions on YAML files, offline",
        description="Run exactly the webhook's decision code on every object in the files.",
        epilog=f"{output_formats(REVIEW_JSON)}\n\n{EPILOG}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input_arguments(parser, metavar="FILE", what="objects to review", required=True)
    add_cluster_arguments(parser, what="each file")
    parser.add_argument("--config", metavar="FILE", help="vgpu-guard config file")
    parser.add_argument(
        "--device-config", metavar="FILE", help="the plugin's device-config.yaml (or its ConfigMap)"
    )
    parser.add_argument(
        "--as",
        dest="username",
        default="kubernetes-admin",
        help="user the requests come from (default: kubernetes-admin)",
    )
    add_output_argument(parser)
    parser.add_argument(
        "--exit-zero",
        action="store_true",
        help="exit 0 when objects are denied (the output still says so): to publish a report from CI",
    )
    parser.set_defaults(func=run)


EACH_OWN = "each file's own (--cluster FILE or --kubeconfig PATH judges every file against one)"


@dataclass(frozen=True)
class Judged:
    """Files judged against one cluster: ``file`` names the one file, or is empty when every input
    shares the cluster; ``context`` holds the inputs read as cluster state."""

    file: str
    cluster: str
    context: tuple[Document, ...]
    reviewed: tuple[tuple[Document, ReviewResult], ...]


def load_view(cluster: ClusterSource, inputs: Sequence[Document], config: GuardConfig) -> ClusterView:
    """The cluster to review against, with the input's own cluster state (Nodes...) on top."""
    objects = [d.object for d in cluster.documents]
    objects += [d.object for d in inputs if is_cluster_state(d.object)]
    return ClusterView.from_objects(objects, config, source=cluster.name)


def _with_recorded(view: ClusterView, result: ReviewResult) -> ClusterView:
    """``view`` with what the mutating call recorded (a GangPlacement): in a cluster it was created
    before the validating call, so it exists even when that call denied the object."""
    for recorded in result.persist:
        view = view.with_admitted(recorded)
    return view


def _with_gang(view: ClusterView, job: dict[str, Any], config: GuardConfig) -> ClusterView:
    """After a Volcano Job is admitted: its PodGroup, and the IB cluster its first member records
    (what ``simulate`` creates before the next object), so the next gang counts this one's. The
    member itself is not reported (the job controller creates it, not the file), but what its
    mutating call records exists whatever its validating call says."""
    view = view.with_admitted(volcano_podgroup(job))
    for first in volcano_job_pods(job, limit=1):
        user = CONTROLLER_USERS[("batch.volcano.sh", "Job")]
        view = _with_recorded(view, review_object(request_for(first, username=user), view, config))
    return view


def review_documents(
    documents: Sequence[Document], view: ClusterView, config: GuardConfig, *, username: str
) -> list[tuple[Document, ReviewResult]]:
    """Review in order; the next object sees each admitted one, and whatever admission recorded."""
    results = []
    for document in documents:
        result = review_object(request_for(document.object, username=username), view, config)
        results.append((document, result))
        view = _with_recorded(view, result)
        if result.decision.allowed:
            view = view.with_admitted(result.object)
            if is_volcano_job(result.object):
                view = _with_gang(view, dict(result.object), config)
    return results


def _groups(args: argparse.Namespace) -> list[tuple[str, list[Document]]]:
    """The inputs, one group per file unless one cluster is given (or there is one file)."""
    each = read_each(expand_paths(args.filename, recursive=args.recursive), limits_from(args))
    if args.cluster is not None or args.kubeconfig is not None or len(each) == 1:
        return [("", [d for _, documents in each for d in documents])]
    return each


def judge(args: argparse.Namespace, config: GuardConfig) -> list[Judged]:
    """Every group against its cluster; raises ``InputError`` naming the file."""
    out = []
    groups = _groups(args)
    for file, documents in groups:
        cluster = choose_cluster(
            documents,
            cluster=args.cluster,
            kubeconfig=args.kubeconfig,
            context=args.context,
            limits=limits_from(args),
            what="file" if file else "input",
        )
        warn_about([*cluster.documents, *documents])
        context = tuple(d for d in documents if is_cluster_state(d.object))
        judged = [d for d in documents if not is_cluster_state(d.object)]
        view = load_view(cluster, context, config)
        reviewed = review_documents(judged, view, config, username=args.username)
        out.append(Judged(file, view.source, context, tuple(reviewed)))
    return out


def _plural_kind(n: int, kind: str) -> str:
    return f"{n} {kind}{'' if n == 1 else ('es' if kind.endswith('s') else 's')}"


def _context(context: Sequence[Document], *, nodes: bool) -> str:
    """What was read as cluster state, e.g. "7 running Pods" (Nodes only with ``nodes``)."""
    kinds = Counter(
        "running Pod" if d.object.get("kind") == "Pod" else str(d.object.get("kind")) for d in context
    )
    shown = [(k, n) for k, n in kinds.items() if nodes or k not in ("Node", "HyperNode")]
    return ", ".join(_plural_kind(n, k) for k, n in shown)


def _entry_lines(entry: dict[str, Any]) -> list[str]:
    ref = f"{entry['kind']} {entry['namespace'] + '/' if entry['namespace'] else ''}{entry['name']}"
    verdict = "allowed" if entry["allowed"] else "DENIED "  # as simulate's RESULT column
    patch = entry["patch"] and entry["allowed"]
    extra = f"  ({plural(len(entry['patch']), 'patch op')})" if patch else ""
    lines = [f"{verdict} {ref}  [{entry['source']}]{extra}"]
    lines.extend(f"    {line}" for line in entry["message"].splitlines())
    lines.extend(f"    warning: {w}" for w in entry["warnings"])
    return lines


def _file_header(group: Judged) -> str:
    """One file's line: its cluster and what it brought as cluster state, or why nothing is judged."""
    state = _context(group.context, nodes=not group.reviewed)
    if group.reviewed:
        also = f"; {state} read as cluster state" if state else ""
        return f"{group.file}: {len(group.reviewed)} object(s) against {group.cluster}{also}"
    if not state:
        return f"{group.file}: no objects"
    hint = "; pass the file as --cluster FILE to judge others against it" if "Node" in state else ""
    return f"{group.file}: nothing to judge ({state}: cluster state{hint})"


def _headline(groups: Sequence[Judged], count: int) -> str:
    """The first line: the one cluster (and the input's cluster state), or that each file has its own."""
    if len(groups) > 1 or groups[0].file:
        return (
            f"Reviewed {count} object(s) in {plural(len(groups), 'file')}, each against its own cluster "
            "(--cluster FILE or --kubeconfig PATH judges every file against one)."
        )
    state = _context(groups[0].context, nodes=not count)
    if not count and "Node" in state:
        return (
            f"Nothing to judge: the input is cluster state ({state}); pass it as --cluster FILE to "
            "judge other files against it."
        )
    also = f" {state} read as cluster state." if state else ""
    return f"Reviewed {count} object(s) against {groups[0].cluster}.{also}"


def _text(groups: Sequence[Judged]) -> str:
    entries = [admission_entry(d.source, r) for g in groups for d, r in g.reviewed]
    lines = [_headline(groups, len(entries))]
    for group in groups:
        body = [line for d, r in group.reviewed for line in _entry_lines(admission_entry(d.source, r))]
        lines += ["", _file_header(group), *body] if group.file else ["", *body] if body else []
    denied = sum(1 for e in entries if not e["allowed"])
    lines += ["", f"{len(entries) - denied} allowed, {denied} denied."]
    return "\n".join(lines) + "\n"


def _report(groups: Sequence[Judged]) -> dict[str, Any]:
    """The JSON/YAML document (docs/review-report.schema.json)."""
    pairs = [(d.source, r) for g in groups for d, r in g.reviewed]
    entries = [{**admission_entry(d.source, r), "cluster": g.cluster} for g in groups for d, r in g.reviewed]
    denied = sum(1 for e in entries if not e["allowed"])
    results = rule_results(pairs)
    single = len(groups) == 1 and not groups[0].file
    return {
        "cluster": groups[0].cluster if single else EACH_OWN,
        "summary": summary(len(entries), denied, results),
        "results": results,
        "objects": entries,
    }


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config, device_config=args.device_config)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INPUT
    try:
        groups = judge(args, config)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INPUT
    pairs = [(d.source, r) for g in groups for d, r in g.reviewed]
    denied = sum(1 for _, r in pairs if not r.decision.allowed)
    if args.output == "policyreport":
        name = report_name("review", args.filename)
        sys.stdout.write(dump_yaml_all(policy_reports(pairs, config=config, name=name, now=report_time())))
    elif args.output == "json":
        sys.stdout.write(json.dumps(_report(groups), indent=2) + "\n")
    elif args.output == "yaml":
        sys.stdout.write(dump_yaml(_report(groups)))
    else:
        sys.stdout.write(_text(groups))
    return EXIT_OK if denied == 0 or args.exit_zero else EXIT_DENIED

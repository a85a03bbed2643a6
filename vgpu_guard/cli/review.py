"""``vgpu-guard review``: the webhook's decisions on YAML files, offline.

Like ``kyverno apply`` or ``gator test``: the same engine call the webhook makes, on every object
of the given files, against the cluster ``cluster_source`` chooses (a live one through
``--kubeconfig``, a file, the files' own Nodes, or the built-in one; the first line names it). Objects are
reviewed in order and each admitted Queue is visible to the next (so a set of queues is judged as
``kubectl apply -f`` would build it up). Exit 0: all allowed; 1: any denied; 2: unreadable input.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from vgpu_guard.cli.admission_entries import admission_entry
from vgpu_guard.cli.cluster_source import ClusterSource, add_cluster_arguments, choose_cluster
from vgpu_guard.cli.documents import (
    Document,
    InputError,
    add_input_arguments,
    limits_from,
    read_inputs,
    warn_about,
)
from vgpu_guard.cli.report import policy_reports, rule_results, summary
from vgpu_guard.cli.wording import plural
from vgpu_guard.cli.yaml_output import dump_yaml, dump_yaml_all
from vgpu_guard.configfile import ConfigError, load_config
from vgpu_guard.engine.admission import ReviewResult, request_for, review_object
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig

__all__ = [
    "EPILOG",
    "OUTPUTS",
    "add_output_argument",
    "add_parser",
    "load_view",
    "output_formats",
    "review_documents",
    "run",
]

# Input kinds that describe the cluster rather than ask admission for anything: seen, not judged.
_CLUSTER_KINDS = frozenset({"Node", "HyperNode"})
EXIT_OK, EXIT_DENIED, EXIT_INPUT = 0, 1, 2
OUTPUTS = ("text", "json", "yaml", "policyreport")
EPILOG = """exit codes:
  0  every object allowed (warnings, mutations and audit findings allowed too)
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
                a ClusterPolicyReport for cluster-scoped objects, as Kyverno reports them"""


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
    add_cluster_arguments(parser, what="input")
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
    parser.set_defaults(func=run)


def load_view(cluster: ClusterSource, inputs: list[Document], config: GuardConfig) -> ClusterView:
    """The cluster to review against, with the input's own Nodes and HyperNodes on top."""
    objects = [d.object for d in cluster.documents]
    objects += [d.object for d in inputs if d.object.get("kind") in _CLUSTER_KINDS]
    return ClusterView.from_objects(objects, config, source=cluster.name)


def review_documents(
    documents: list[Document], view: ClusterView, config: GuardConfig, *, username: str
) -> list[tuple[Document, ReviewResult]]:
    """Review in order; each admitted object is added to the view the next one sees."""
    results = []
    for document in documents:
        result = review_object(request_for(document.object, username=username), view, config)
        results.append((document, result))
        if result.decision.allowed:
            view = view.with_admitted(result.object)
            for recorded in result.persist:
                view = view.with_admitted(recorded)
    return results


def _text(entries: list[dict[str, Any]], source: str) -> str:
    lines = [f"Reviewed {len(entries)} object(s) against {source}.", ""]
    for e in entries:
        ref = f"{e['kind']} {e['namespace'] + '/' if e['namespace'] else ''}{e['name']}"
        verdict = "allowed" if e["allowed"] else "DENIED "  # as simulate's RESULT column
        extra = f"  ({plural(len(e['patch']), 'patch op')})" if e["patch"] and e["allowed"] else ""
        lines.append(f"{verdict} {ref}  [{e['source']}]{extra}")
        lines.extend(f"    {line}" for line in e["message"].splitlines())
        lines.extend(f"    warning: {w}" for w in e["warnings"])
    denied = sum(1 for e in entries if not e["allowed"])
    lines += ["", f"{len(entries) - denied} allowed, {denied} denied."]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config, device_config=args.device_config)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INPUT
    try:
        documents = read_inputs(args.filename, recursive=args.recursive, limits=limits_from(args))
        cluster = choose_cluster(
            documents,
            cluster=args.cluster,
            kubeconfig=args.kubeconfig,
            context=args.context,
            limits=limits_from(args),
            what="input",
        )
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INPUT
    warn_about([*cluster.documents, *documents])
    view = load_view(cluster, documents, config)
    reviewed = review_documents(documents, view, config, username=args.username)
    entries = [admission_entry(d.source, r) for d, r in reviewed]
    pairs = [(d.source, r) for d, r in reviewed]
    denied = sum(1 for e in entries if not e["allowed"])
    if args.output == "policyreport":
        sys.stdout.write(dump_yaml_all(policy_reports(pairs)))
    elif args.output in ("json", "yaml"):
        results = rule_results(pairs)
        report = {
            "cluster": view.source,
            "summary": summary(len(entries), denied, results),
            "results": results,
            "objects": entries,
        }
        if args.output == "json":
            sys.stdout.write(json.dumps(report, indent=2) + "\n")
        else:
            sys.stdout.write(dump_yaml(report))
    else:
        sys.stdout.write(_text(entries, view.source))
    return EXIT_OK if denied == 0 else EXIT_DENIED

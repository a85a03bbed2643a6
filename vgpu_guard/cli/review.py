"""``vgpu-guard review``: the webhook's decisions on YAML files, offline.

Like ``kyverno apply`` or ``gator test``: the same engine call the webhook makes, on every object
of the given files, against a cluster described in a file (or the built-in one). Objects are
reviewed in order and each admitted Queue is visible to the next (so a set of queues is judged as
``kubectl apply -f`` would build it up). Exit 0: all allowed; 1: any denied; 2: unreadable input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from vgpu_guard.cli.admission_entries import admission_entry
from vgpu_guard.cli.documents import Document, InputError, read_documents
from vgpu_guard.configfile import ConfigError, load_config
from vgpu_guard.engine.admission import ReviewResult, request_for, review_object
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig

__all__ = ["BUILTIN_CLUSTER", "add_parser", "load_view", "review_documents", "run"]

BUILTIN_CLUSTER = Path(__file__).resolve().parent.parent / "data" / "builtin-cluster.yaml"
EXIT_OK, EXIT_DENIED, EXIT_INPUT = 0, 1, 2


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "review",
        help="run the admission decisions on YAML files, offline",
        description="Run exactly the webhook's decision code on every object in the files.",
    )
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        metavar="FILE",
        help="YAML file of objects to review (repeatable; - for stdin)",
    )
    parser.add_argument(
        "--cluster",
        metavar="FILE",
        help="YAML of Nodes, Queues, PodGroups, Pods describing the cluster (default: built-in)",
    )
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
    parser.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text")
    parser.set_defaults(func=run)


def load_view(path: str | None, config: GuardConfig) -> ClusterView:
    """The cluster to review against: a file of objects, or the documented built-in cluster."""
    if path is None:
        documents = read_documents(str(BUILTIN_CLUSTER))
        return ClusterView.from_objects(
            [d.object for d in documents], config, source="built-in example cluster"
        )
    documents = read_documents(path)
    return ClusterView.from_objects([d.object for d in documents], config, source=f"cluster file {path}")


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
        verdict = "ALLOWED" if e["allowed"] else "DENIED "
        extra = f"  ({len(e['patch'])} patch op(s))" if e["patch"] and e["allowed"] else ""
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
        view = load_view(args.cluster, config)
        documents = [d for path in args.filename for d in read_documents(path)]
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INPUT
    entries = [
        admission_entry(d.source, r)
        for d, r in review_documents(documents, view, config, username=args.username)
    ]
    if args.output == "json":
        sys.stdout.write(json.dumps({"cluster": view.source, "results": entries}, indent=2) + "\n")
    elif args.output == "yaml":
        sys.stdout.write(yaml.safe_dump({"cluster": view.source, "results": entries}, sort_keys=False))
    else:
        sys.stdout.write(_text(entries, view.source))
    return EXIT_OK if all(e["allowed"] for e in entries) else EXIT_DENIED

"""``vgpu-guard simulate``: the webhook and the controller on an in-memory cluster, offline.

Platform engineers try a policy change before touching a cluster; a newcomer sees the product
work in one command. Without ``-f`` it runs the built-in scenario (the seeds' stories, see
vgpu_guard/data/scenarios/default.yaml). Exit 0 when the simulation completed, whatever it found
(denials and Pending pods are outcomes); 2 for unreadable input or a scenario it cannot run.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml

from vgpu_guard.cli.documents import (
    Document,
    InputError,
    Limits,
    add_input_arguments,
    limits_from,
    read_documents,
)
from vgpu_guard.cli.report import policy_reports, rule_results, summary
from vgpu_guard.cli.review import BUILTIN_CLUSTER, BUILTIN_SOURCE, add_output_argument
from vgpu_guard.cli.scenario import Scenario, default_scenario, load_scenario
from vgpu_guard.cli.simulate_report import to_json, to_text
from vgpu_guard.cli.simulation import SimulationError, simulate
from vgpu_guard.configfile import ConfigError, load_config

__all__ = ["add_parser", "run", "with_cluster"]

EXIT_OK, EXIT_INPUT = 0, 2
EPILOG = """exit codes:
  0  the simulation completed, whatever it found (denials and Pending pods are outcomes)
  2  unusable input: unreadable or over-limit file, invalid YAML, bad --config,
     or a scenario the in-memory cluster cannot run"""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="run admission and the allocation controller on a scenario, on an in-memory cluster",
        description=(
            "Send every object of the scenario through the webhook's decision code, run the allocation "
            "controller against an in-memory API server until nothing changes, and report where every "
            "pod landed, the per-GPU ledger and the queue guarantees. Without -f: the built-in scenario."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input_arguments(
        parser, metavar="SCENARIO", what="YAML of Nodes, Queues, Pods, workloads...", required=False
    )
    parser.add_argument("--config", metavar="FILE", help="vgpu-guard config file")
    parser.add_argument(
        "--device-config", metavar="FILE", help="the plugin's device-config.yaml (or its ConfigMap)"
    )
    parser.add_argument(
        "--cluster",
        metavar="FILE",
        help=(
            "YAML of Nodes (and Queues...) the scenario runs on, before its own objects "
            "(default: the scenario's Nodes, or the built-in example cluster when it has none)"
        ),
    )
    add_output_argument(parser)
    parser.set_defaults(func=run)


def with_cluster(scenario: Scenario, cluster: str | None, limits: Limits) -> Scenario:
    """The scenario on ``--cluster FILE``, or on the built-in cluster when it brings no Nodes.

    The same cluster ``review`` judges against, so the two commands never disagree on capacity;
    the report's first line names it.
    """
    if cluster is None and any(d.object.get("kind") == "Node" for d in scenario.documents):
        return scenario
    if cluster is None:
        documents = read_documents(str(BUILTIN_CLUSTER), limits)
        named = tuple(
            Document(f"builtin-cluster.yaml#{d.source.rpartition('#')[2]}", d.object) for d in documents
        )
        where = f"{BUILTIN_SOURCE} (the scenario brings no Nodes; --cluster FILE for yours)"
    else:
        named = tuple(read_documents(cluster, limits))
        where = f"cluster file {cluster}"
    return Scenario(source=f"{scenario.source} on {where}", documents=named + scenario.documents)


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config, device_config=args.device_config)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INPUT
    try:
        scenario = (
            load_scenario(args.filename, recursive=args.recursive, limits=limits_from(args))
            if args.filename
            else default_scenario()
        )
        scenario = with_cluster(scenario, args.cluster, limits_from(args))
        result = simulate(scenario, config)
    except (InputError, SimulationError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INPUT
    pairs = [(a.source, a.result) for a in result.admission]
    if args.output == "policyreport":
        sys.stdout.write(yaml.safe_dump_all(policy_reports(pairs, config), sort_keys=False))
    elif args.output in ("json", "yaml"):
        results = rule_results(pairs, config)
        denied = sum(1 for a in result.admission if not a.result.decision.allowed)
        report: dict[str, Any] = {
            **to_json(result),
            "results": results,
            "summary": summary(len(result.admission), denied, results),
        }
        if args.output == "json":
            sys.stdout.write(json.dumps(report, indent=2) + "\n")
        else:
            sys.stdout.write(yaml.safe_dump(report, sort_keys=False))
    else:
        sys.stdout.write(to_text(result))
    return EXIT_OK

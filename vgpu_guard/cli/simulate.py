"""``vgpu-guard simulate``: the webhook and the controller on an in-memory cluster, offline.

Platform engineers try a policy change before touching a cluster; a newcomer sees the product
work in one command. Without ``-f`` it runs the built-in scenario (every example's story, see
vgpu_guard/data/scenarios/default.yaml). The cluster it runs on is chosen as ``review`` chooses
its own (``cluster_source``), and the first line names it. Exit 0 when the simulation completed,
whatever it found (denials and Pending pods are outcomes); 2 for unreadable input or a scenario
it cannot run.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from vgpu_guard.cli.cluster_source import ClusterSource, add_cluster_arguments, choose_cluster
from vgpu_guard.cli.documents import InputError, add_input_arguments, limits_from, warn_about
from vgpu_guard.cli.policy_report import policy_reports, report_name
from vgpu_guard.cli.report import rule_results, summary
from vgpu_guard.cli.review import add_output_argument, output_formats
from vgpu_guard.cli.scenario import Scenario, default_scenario, load_scenario
from vgpu_guard.cli.simulate_report import to_json, to_text
from vgpu_guard.cli.simulation import EPOCH, SimulationError, simulate
from vgpu_guard.cli.simulation_mode import Mode, simulation_config
from vgpu_guard.cli.yaml_output import dump_yaml, dump_yaml_all
from vgpu_guard.configfile import ConfigError, load_config
from vgpu_guard.volcano.binder import DEFAULT_VERSION

__all__ = ["add_mode_arguments", "add_parser", "mode_from", "run", "with_cluster"]

EXIT_OK, EXIT_INPUT = 0, 2
DESCRIPTION = """Send every object of the scenario through the webhook's decision code, run a model of
Volcano (job controller and scheduler sessions, its writes arbitrated by the webhook's ledger
arbiter) and vgpu-guard's allocation controller against an in-memory API server until nothing
changes, and report where every pod landed, the per-GPU ledger and the queue guarantees. Without
-f: the built-in scenario. Volcano mode (Volcano schedules, the arbiter reserves every GPU
assignment) unless --routing or the configuration's scheduling.routing says otherwise."""
SIMULATE_JSON = """the mode, every admission request, every Volcano session (bound, refused
                and why), where every pod landed (node, devices) or why it waits, the GPU
                ledger, queues against capacity, and review's results and summary; schema:
                docs/simulate.schema.json"""
EPILOG = """exit codes:
  0  the simulation completed, whatever it found (denials and Pending pods are outcomes)
  1  not used: to fail a CI step on a denial, run vgpu-guard review on the same files
  2  unusable input: unreadable or over-limit file, invalid YAML, bad --config or --cluster,
     a --kubeconfig that cannot be read, a --volcano-version the model does not know, or a
     scenario the in-memory cluster cannot run"""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="run admission, a Volcano model and the controller on a scenario, in memory",
        description=DESCRIPTION,
        epilog=f"{output_formats(SIMULATE_JSON)}\n\n{EPILOG}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_input_arguments(
        parser, metavar="SCENARIO", what="YAML of Nodes, Queues, Pods, workloads...", required=False
    )
    parser.add_argument("--config", metavar="FILE", help="vgpu-guard config file")
    parser.add_argument(
        "--device-config", metavar="FILE", help="the plugin's device-config.yaml (or its ConfigMap)"
    )
    add_cluster_arguments(parser, what="the scenario")
    add_mode_arguments(parser)
    add_output_argument(parser)
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="text output: every admission's warnings, notes and created pods under its row, every "
        "pod's reason under it (default: one line per object, warnings and reasons grouped)",
    )
    parser.set_defaults(func=run)


def add_mode_arguments(parser: argparse.ArgumentParser) -> None:
    """--routing, --volcano-version and --volcano-stale-cache (see cli/simulation_mode.py)."""
    parser.add_argument(
        "--routing",
        action="store_true",
        help="routing mode: vgpu-guard's controller places vGPU pods (default: volcano mode, unless "
        "--config sets scheduling.routing)",
    )
    parser.add_argument(
        "--volcano-version",
        metavar="X.Y",
        default=DEFAULT_VERSION,
        help="the Volcano release whose writes the model makes: 1.16 and later put the assignment on "
        "the Binding, 1.10-1.15 PATCH it onto the pod, then bind (default: %(default)s)",
    )
    parser.add_argument(
        "--volcano-stale-cache",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="reproduce Volcano #3616: a session does not count its own placements, so three 12 GiB "
        "pods land on one 24 GiB card (default: on for the built-in scenario, off with -f)",
    )


def mode_from(args: argparse.Namespace) -> Mode:
    """The mode the arguments ask for; the stale cache defaults on for the built-in scenario only."""
    if args.volcano_stale_cache is None:
        stale, why = (
            not args.filename,
            "the built-in scenario's default" if not args.filename else "the default",
        )
    else:
        stale, why = (
            args.volcano_stale_cache,
            "--volcano-stale-cache" if args.volcano_stale_cache else "--no-volcano-stale-cache",
        )
    return Mode(
        routing=True if args.routing else None,
        volcano_version=args.volcano_version,
        stale_cache=stale,
        stale_cache_from=why,
    )


def with_cluster(scenario: Scenario, cluster: ClusterSource) -> Scenario:
    """The scenario on ``cluster``, named in the report's first line (``... on <cluster>``)."""
    return Scenario(
        source=f"{scenario.source} on {cluster.name}", documents=scenario.documents, cluster=cluster.documents
    )


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
        cluster = choose_cluster(
            scenario.documents,
            cluster=args.cluster,
            kubeconfig=args.kubeconfig,
            context=args.context,
            limits=limits_from(args),
            what="scenario",
        )
        warn_about([*cluster.documents, *scenario.documents])
        scenario = with_cluster(scenario, cluster)
        result = simulate(scenario, config, mode_from(args))
    except (InputError, SimulationError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INPUT
    pairs = [(a.source, a.result) for a in result.admission]
    if args.output == "policyreport":
        # Stamped with the simulated clock's start: the same scenario prints the same report.
        name = report_name("simulate", args.filename or ["default-scenario"])
        judged_with = simulation_config(config, mode_from(args))[0]  # IB pinning on, as the run had it
        reports = policy_reports(pairs, config=judged_with, name=name, now=int(EPOCH))
        sys.stdout.write(dump_yaml_all(reports))
    elif args.output in ("json", "yaml"):
        results = rule_results(pairs)
        denied = sum(1 for a in result.admission if not a.result.decision.allowed)
        report: dict[str, Any] = {
            **to_json(result),
            "results": results,
            "summary": summary(len(result.admission), denied, results),
        }
        if args.output == "json":
            sys.stdout.write(json.dumps(report, indent=2) + "\n")
        else:
            sys.stdout.write(dump_yaml(report))
    else:
        sys.stdout.write(to_text(result, verbose=args.verbose))
    return EXIT_OK

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

from vgpu_guard.cli.documents import InputError
from vgpu_guard.cli.scenario import default_scenario, load_scenario
from vgpu_guard.cli.simulate_report import to_json, to_text
from vgpu_guard.cli.simulation import SimulationError, simulate
from vgpu_guard.configfile import ConfigError, load_config

__all__ = ["add_parser", "run"]

EXIT_OK, EXIT_INPUT = 0, 2


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="run admission and the allocation controller on a scenario, on an in-memory cluster",
        description=(
            "Send every object of the scenario through the webhook's decision code, run the allocation "
            "controller against an in-memory API server until nothing changes, and report where every "
            "pod landed, the per-GPU ledger and the queue guarantees. Without -f: the built-in scenario."
        ),
    )
    parser.add_argument(
        "-f",
        "--filename",
        action="append",
        metavar="SCENARIO",
        help="multi-document YAML of Nodes, Queues, Pods, workloads... (repeatable; - for stdin)",
    )
    parser.add_argument("--config", metavar="FILE", help="vgpu-guard config file")
    parser.add_argument(
        "--device-config", metavar="FILE", help="the plugin's device-config.yaml (or its ConfigMap)"
    )
    parser.add_argument("-o", "--output", choices=("text", "json"), default="text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config, device_config=args.device_config)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INPUT
    try:
        scenario = load_scenario(args.filename) if args.filename else default_scenario()
        result = simulate(scenario, config)
    except (InputError, SimulationError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INPUT
    if args.output == "json":
        sys.stdout.write(json.dumps(to_json(result), indent=2) + "\n")
    else:
        sys.stdout.write(to_text(result))
    return EXIT_OK

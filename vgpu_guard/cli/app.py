"""The ``vgpu-guard`` command: one subcommand per module, each with ``add_parser`` and ``run``."""

from __future__ import annotations

import argparse
import importlib

from vgpu_guard import __version__

__all__ = ["build_parser", "run"]

# Subcommand modules; each exposes add_parser(subparsers) and sets ``func`` (its run) as a default.
_COMMANDS = ("review", "simulate", "serve", "certs", "sandbox", "status", "cleanup", "label_ns")


# The exit codes every command shares, so a CI step can tell "denied" from "could not judge";
# each command's own --help says what its codes mean for it.
EPILOG = """\
exit codes (review's and simulate's --help say what each means for them):
  0  ok: every object allowed (review), the run completed (simulate, status, certs, serve, sandbox,
     cleanup, label-ns)
  1  denied: at least one object denied (review); certs, sandbox, cleanup and label-ns also use it
     when they refuse or a component, deletion or label fails (the reason is on stderr)
  2  unusable input or cluster: an unreadable, over-limit or invalid file or flag, or a
     kubeconfig or API server that cannot be read"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vgpu-guard",
        description="Admission webhook and policy controller for Volcano vGPU clusters.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"vgpu-guard {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMANDS:
        try:
            module = importlib.import_module(f"vgpu_guard.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"vgpu_guard.cli.{name}":
                raise
            continue
        module.add_parser(subparsers)
    return parser


def run(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result

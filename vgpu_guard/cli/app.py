"""The ``vgpu-guard`` command: one subcommand per module, each with ``add_parser`` and ``run``."""

from __future__ import annotations

import argparse
import importlib

from vgpu_guard import __version__

__all__ = ["build_parser", "run"]

# Subcommand modules; each exposes add_parser(subparsers) and sets ``func`` (its run) as a default.
_COMMANDS = ("review", "simulate", "serve", "certs", "sandbox", "status")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vgpu-guard",
        description="Admission webhook and policy controller for Volcano vGPU clusters.",
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

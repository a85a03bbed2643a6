"""``scripts/control-plane build|start|stop|status``: the real control plane from the command line.

``start`` leaves the four processes running in the background (state in ``--dir``) and prints the
kubeconfig path; ``stop`` ends exactly those. Exit codes: 0 done, 1 a build or start failed (the
message ends with the component's log tail), 2 this machine cannot build it (the message says what
it needs).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vgpu_guard.controlplane.build import (
    BuildError,
    Unavailable,
    cache_dir,
    cache_problem,
    cache_root,
    ensure_built,
)
from vgpu_guard.controlplane.launch import ControlPlane, StartError, stop_recorded


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="scripts/control-plane",
        description="Build (once per machine, cached) and run kube-apiserver, kube-controller-manager, "
        "kube-scheduler 1.20.2 from Debian's source with etcd from Debian's etcd-server.",
        epilog="Exit codes: 0 done; 1 a build or start failed; 2 this machine cannot build it.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build into the cache, or reuse a verified cached build")
    build.add_argument("--force", action="store_true", help="rebuild even when the cache is valid")
    for name, text in (("start", "start in the background"), ("stop", "stop what start started")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument(
            "--dir", type=Path, default=cache_root() / "run", help="state and logs (default: %(default)s)"
        )
    sub.add_parser("status", help="say whether a verified build is cached")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "status":
            problem = cache_problem(cache_dir())
            print(problem or f"cached and verified: {cache_dir()}")
            return 0 if problem is None else 1
        if args.command == "stop":
            stopped = stop_recorded(args.dir)
            print(
                f"stopped {', '.join(stopped)}" if stopped else f"nothing recorded as running in {args.dir}"
            )
            return 0
        binaries = ensure_built(lambda line: print(line, flush=True), force=getattr(args, "force", False))
        if args.command == "build":
            print(f"control plane {binaries.version}: {binaries.bin_dir} (source: {binaries.source_dir})")
            return 0
        if (args.dir / "state.json").exists():
            print(
                f"{args.dir} already has a running control plane: scripts/control-plane stop --dir {args.dir}"
            )
            return 1
        plane = ControlPlane(binaries, args.dir)
        plane.start()
        print(f"control plane running at {plane.server}\nexport KUBECONFIG={plane.kubeconfig}")
        return 0
    except Unavailable as e:
        print(f"control-plane: {e}", file=sys.stderr)
        return 2
    except (BuildError, StartError) as e:
        print(f"control-plane: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

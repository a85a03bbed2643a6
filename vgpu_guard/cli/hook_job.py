"""What the chart's hook commands share (``cleanup``, ``label-ns``): one client, every item tried.

A Helm hook Job retries a failed pod, so a hook command tries every item even when one fails (each
one done is one problem fewer), names each outcome on stdout, and exits 0 (all done), 1 (an API
call failed; the reason on stderr) or 2 (no usable kubeconfig or in-cluster account).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from vgpu_guard.cli.serve import cluster_client
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import KubeError

__all__ = ["add_kubeconfig_argument", "each_item"]

T = TypeVar("T")


def add_kubeconfig_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="kubeconfig to use (default: the pod's service account in a cluster, else $KUBECONFIG "
        "or ~/.kube/config)",
    )


async def each_item(
    kubeconfig: str | None, items: Iterable[T], act: Callable[[ClusterClient, T], Awaitable[str]]
) -> int:
    """Connect once, ``act`` on every item (printing what it says), close; the exit code above.
    ``act`` handles the answers that count as done (a NotFound) and raises the others."""
    try:
        client = await cluster_client(kubeconfig)
    except KubeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    failed = False
    try:
        for item in items:
            try:
                print(await act(client, item))
            except KubeError as e:
                print(f"error: {e}", file=sys.stderr)
                failed = True
    finally:
        # Every answer is in; a pool that fails to close changes nothing.
        with contextlib.suppress(KubeError):
            await client.close()
    return 1 if failed else 0

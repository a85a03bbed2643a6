"""Which cluster ``review`` and ``simulate`` judge against: one choice, made the same way for both.

Capacity decides verdicts (a queue's guarantee, a gang's IB cluster, the largest card), so the two
commands must never judge the same file against different clusters, and must say which one they
used in their first line. In order:

1. ``--kubeconfig PATH`` (``--context NAME``): a live cluster's Nodes, Queues, PodGroups and
   HyperNodes, read once, read-only (``live_cluster``);
2. ``--cluster FILE``: the objects of a file;
3. the input's own Nodes, when it brings any (a scenario that describes its cluster);
4. the built-in example cluster (vgpu_guard/data/builtin-cluster.yaml), saying how to pick yours.

The input's own cluster-state objects (Nodes, HyperNodes...) are added on top of 1, 2 and 4, as
``kubectl apply`` of the same files would add them.

Which input objects describe the cluster rather than ask admission for anything is decided here
too (``is_cluster_state``), once for both commands: ``simulate`` stores them as they are, ``review``
reads them as its cluster and judges the rest. A file's Nodes are never a verdict.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vgpu_guard.cli.documents import Document, InputError, Limits, read_documents

__all__ = [
    "BUILTIN_CLUSTER",
    "BUILTIN_NAME",
    "ClusterSource",
    "add_cluster_arguments",
    "choose_cluster",
    "is_cluster_state",
]

BUILTIN_CLUSTER = Path(__file__).resolve().parent.parent / "data" / "builtin-cluster.yaml"
BUILTIN_NAME = "built-in example cluster"
# Kinds that describe the cluster as it stands: stored (simulate) or read (review), never judged.
STATE_KINDS = frozenset({"Node", "Namespace", "PriorityClass", "HyperNode", "ConfigMap"})


def is_cluster_state(obj: Mapping[str, Any]) -> bool:
    """True for objects that exist before the files are applied: the state kinds, and Pods that
    already have ``spec.nodeName`` (running pods, with their assignment annotations)."""
    if obj.get("kind") in STATE_KINDS:
        return True
    spec = obj.get("spec")
    return obj.get("kind") == "Pod" and isinstance(spec, Mapping) and bool(spec.get("nodeName"))


@dataclass(frozen=True)
class ClusterSource:
    """The cluster's objects (stored or seen as they are, before the input's) and its name.

    ``name`` is what the first line of the output and the reports' ``cluster`` field say.
    """

    name: str
    documents: tuple[Document, ...]


def add_cluster_arguments(parser: argparse.ArgumentParser, *, what: str) -> None:
    """``--cluster FILE`` or ``--kubeconfig PATH`` [``--context NAME``], the same on both commands
    (``what``: the files' name in the help, "each file" when every file has its own cluster)."""
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--cluster",
        metavar="FILE",
        help=(
            "YAML of Nodes, Queues, PodGroups (HyperNodes...) describing the cluster to judge "
            f"against (default: {what}'s own Nodes, or the built-in example cluster when it has none)"
        ),
    )
    group.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help=(
            "read the cluster to judge against from a live API server, read-only: its Nodes, "
            "Queues, PodGroups and HyperNodes (nothing is written)"
        ),
    )
    parser.add_argument(
        "--context", metavar="NAME", help="the kubeconfig context to use (default: its current-context)"
    )


def _has_nodes(documents: Sequence[Document]) -> bool:
    return any(d.object.get("kind") == "Node" for d in documents)


def choose_cluster(
    inputs: Sequence[Document],
    *,
    cluster: str | None,
    kubeconfig: str | None,
    context: str | None = None,
    limits: Limits,
    what: str,
) -> ClusterSource:
    """The cluster for ``inputs`` (see the module's order); raises ``InputError`` naming the file."""
    if context is not None and kubeconfig is None:
        # Silently reviewing against another cluster than the one named would read as a pass.
        raise InputError(f"--context {context} names a kubeconfig context: add --kubeconfig PATH")
    if kubeconfig is not None:
        from vgpu_guard.cli.live_cluster import read_live_cluster  # the API client only when asked

        live = read_live_cluster(kubeconfig, context=context)
        return ClusterSource(live.name, live.documents)
    if cluster is not None:
        return ClusterSource(f"cluster file {cluster}", tuple(read_documents(cluster, limits)))
    if _has_nodes(inputs):
        count = sum(1 for d in inputs if d.object.get("kind") == "Node")
        return ClusterSource(f"the {what}'s own Nodes ({count})", ())
    documents = read_documents(str(BUILTIN_CLUSTER), limits)
    named = tuple(
        Document(f"builtin-cluster.yaml#{d.source.rpartition('#')[2]}", d.object) for d in documents
    )
    return ClusterSource(
        f"{BUILTIN_NAME} (the {what} brings no Nodes; --cluster FILE or --kubeconfig PATH for yours)", named
    )

"""``vgpu-guard label-ns``: give namespaces the name label Kubernetes 1.21+ sets on every one.

Every webhook's ``namespaceSelector`` keeps ``kube-system``, ``kube-node-lease``, the release
namespace and the exempt namespaces out by ``kubernetes.io/metadata.name NotIn [...]``. The API server
sets that label on every namespace from 1.21 (the NamespaceDefaultLabelName feature, GA in 1.22);
on 1.20 no namespace has it, a ``NotIn`` then matches every namespace, and the system namespaces and
our own would reach webhooks that, below 1.28, see every pod. The chart's pre-install and
pre-upgrade hook (rendered below 1.21 only) runs this command on the namespaces it excludes, so the
selector means on 1.20 what it means on 1.21+.

Why the kube label rather than one of ours: the selector stays one expression on every version,
and after an upgrade to 1.21+ the API server keeps the same value (it sets the label to the
namespace's name on every write). On 1.20 the label is an ordinary one: whoever may patch a
namespace may set it, so the install docs ask to let only administrators patch namespaces.

Exit codes: 0 every named namespace carries the label, or does not exist (named on stdout: it is
labelled on the next upgrade); 1 a patch failed (the server's reason on stderr; the Job retries);
2 no usable kubeconfig or in-cluster account.
"""

from __future__ import annotations

import argparse
import asyncio
import re

from vgpu_guard.cli.hook_job import add_kubeconfig_argument, each_item
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import NotFound
from vgpu_guard.kube.resources import NAMESPACES

__all__ = ["NAME_LABEL", "add_parser", "run"]

# The label kube-apiserver 1.21+ sets on every namespace, to the namespace's name.
NAME_LABEL = "kubernetes.io/metadata.name"

# Kubernetes' IsDNS1123Label: what a namespace name may be.
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def _namespace(text: str) -> str:
    if len(text) > 63 or not _LABEL.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a namespace name: lowercase letters, digits and '-', starting and "
            "ending with a letter or digit, at most 63 characters"
        )
    return text


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``label-ns`` under the main ``vgpu-guard`` parser."""
    parser = subparsers.add_parser(
        "label-ns",
        help="label namespaces with their name as 1.21+ does (the chart's hook on 1.20)",
        description=(
            f"Set the label {NAME_LABEL}=<name> on each NAMESPACE, as kube-apiserver 1.21 and later "
            "does on every namespace, so the webhooks' namespaceSelectors exclude them on 1.20 too. "
            "A namespace that does not exist is skipped and named."
        ),
        epilog=(
            "exit codes:\n"
            "  0  every namespace is labelled (or does not exist, and is named)\n"
            "  1  a patch failed (the reason is on stderr)\n"
            "  2  no usable kubeconfig or in-cluster service account"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("namespaces", nargs="+", metavar="NAMESPACE", type=_namespace)
    add_kubeconfig_argument(parser)
    parser.set_defaults(func=run)


async def _label_one(client: ClusterClient, name: str) -> str:
    # A merge patch needs no GET (one right less) and is the same write every time.
    try:
        await client.patch(NAMESPACES, name, {"metadata": {"labels": {NAME_LABEL: name}}})
    except NotFound:
        return f"namespace/{name} not found: skipped (`helm upgrade` labels it once it exists)"
    return f"namespace/{name} labelled {NAME_LABEL}={name}"


def run(args: argparse.Namespace) -> int:
    """Label every named namespace; the exit code as the module docstring says."""
    return asyncio.run(each_item(args.kubeconfig, dict.fromkeys(args.namespaces), _label_one))

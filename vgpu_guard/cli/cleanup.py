"""``vgpu-guard cleanup``: delete the webhook configurations of a release (the chart's pre-delete hook).

Why a subcommand of our own rather than a kubectl image: the hook runs on the product's image, the
one image an air-gapped GPU fleet mirrors anyway; ``registry.k8s.io/kubectl`` would be one more to
mirror, and an uninstall would hang on its pull. What it does is what
``kubectl delete mutatingwebhookconfiguration/NAME validatingwebhookconfiguration/NAME
--ignore-not-found --wait=false`` did, with one right less: a DELETE by name needs no GET.

Exit codes: 0 both configurations are gone (deleted now, or already absent); 1 a deletion failed
(the server's reason on stderr; the Job retries); 2 no usable kubeconfig or in-cluster account.
"""

from __future__ import annotations

import argparse
import asyncio
import re
from collections.abc import Awaitable, Callable

from vgpu_guard.cli.hook_job import add_kubeconfig_argument, each_item
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import NotFound
from vgpu_guard.kube.resources import MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS, Resource

__all__ = ["add_parser", "run"]

# Kubernetes' IsDNS1123Subdomain: what an object name may be (a Helm release name may hold dots).
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _object_name(text: str) -> str:
    if len(text) > 253 or not _SUBDOMAIN.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a valid object name: lowercase letters, digits, '-' and '.', starting "
            "and ending with a letter or digit, at most 253 characters"
        )
    return text


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``cleanup`` under the main ``vgpu-guard`` parser."""
    parser = subparsers.add_parser(
        "cleanup",
        help="delete the release's webhook configurations (the chart's pre-delete hook)",
        description=(
            "Delete the MutatingWebhookConfiguration and the ValidatingWebhookConfiguration named "
            "NAME, so the API server stops calling the webhook before its pods go. Absent ones count "
            "as deleted."
        ),
        epilog=(
            "exit codes:\n"
            "  0  both configurations are gone (deleted now or already absent)\n"
            "  1  a deletion failed (the reason is on stderr)\n"
            "  2  no usable kubeconfig or in-cluster service account"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--webhook-configuration",
        required=True,
        metavar="NAME",
        type=_object_name,
        help="name of both webhook configurations (the chart's full name, e.g. vgpu-guard)",
    )
    add_kubeconfig_argument(parser)
    parser.set_defaults(func=run)


def _delete(name: str) -> Callable[[ClusterClient, Resource], Awaitable[str]]:
    async def delete(client: ClusterClient, resource: Resource) -> str:
        what = f"{resource.kind.lower()}/{name}"
        try:
            await client.delete(resource, name)
        except NotFound:
            return f"{what} not found (already gone)"
        return f"{what} deleted"

    return delete


def run(args: argparse.Namespace) -> int:
    """Delete both configurations; the exit code as the module docstring says."""
    # Both are tried even when one fails: each one gone is one webhook fewer that can block.
    resources = (MUTATING_WEBHOOKS, VALIDATING_WEBHOOKS)
    return asyncio.run(each_item(args.kubeconfig, resources, _delete(args.webhook_configuration)))

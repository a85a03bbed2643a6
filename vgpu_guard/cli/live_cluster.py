"""``--kubeconfig``: a live cluster's Nodes, Queues, PodGroups and HyperNodes, read once, read-only.

``review`` and ``simulate`` judge files against the capacity a cluster really has: the same
objects the webhook's caches list (``vgpu_guard.kube.view_cache``), through the same production
adapter (``AioClusterClient``), but one paged LIST per resource and no watch. Nothing is written.

Only what admission decides on is read; a resource the server does not serve (Volcano or its
HyperNode CRD not installed) counts as empty and the summary says so, because "this cluster has no
Queues" is an answer, not an error. Every failure is one ``InputError`` line naming the kubeconfig.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vgpu_guard.cli.documents import Document, InputError
from vgpu_guard.cli.serve import kubeconfig_problem
from vgpu_guard.kube.aio import AioClusterClient
from vgpu_guard.kube.client import list_all
from vgpu_guard.kube.errors import KubeError, NotFound, Unsupported
from vgpu_guard.kube.resources import HYPERNODES, NODES, PODGROUPS, QUEUES, Resource

__all__ = ["LiveCluster", "kubeconfig_error", "read_live_cluster"]

_RESOURCES = (NODES, QUEUES, PODGROUPS, HYPERNODES)
_PAGE = 500
# Metadata a stored copy keeps: the server's bookkeeping (uid, resourceVersion, managedFields...)
# would be refused or rewritten by the simulated API server, and admission reads none of it.
_KEPT_METADATA = ("name", "namespace", "labels", "annotations", "ownerReferences")


@dataclass(frozen=True)
class LiveCluster:
    """What was read, and one phrase for the report: which kubeconfig, context and how many objects."""

    name: str
    documents: tuple[Document, ...]


def _load(path: str) -> Any:
    try:
        return yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None


def kubeconfig_error(path: str, context: str | None) -> str | None:
    """Why ``--kubeconfig PATH`` (``--context NAME``) cannot work, in one line (None: try it).

    Checked before the client library loads it: the library prints its own message (``Config not
    found``) and then raises another, and users would read two contradicting errors.
    """
    where = f"kubeconfig {path} (--kubeconfig)"
    if not Path(path).is_file():
        return f"{where}: no such file; pass the path of a kubeconfig, e.g. ~/.kube/config"
    data = _load(path)
    if context is None or not isinstance(data, Mapping):
        return kubeconfig_problem(path, {})  # serve's checks: readable, YAML, current-context
    contexts = data.get("contexts")
    names = [c.get("name") for c in contexts if isinstance(c, Mapping)] if isinstance(contexts, list) else []
    if context not in names:
        return (
            f"{where}: --context {context!r} names no entry of contexts; "
            f"run `kubectl config get-contexts --kubeconfig {path}` and pass one of them"
        )
    return None


def _context(path: str, context: str | None) -> str:
    """The context that will be used: ``--context``, else the file's current-context."""
    if context:
        return context
    data = _load(path)  # kubeconfig_error has vouched for it
    current = data.get("current-context") if isinstance(data, Mapping) else None
    return str(current or "?")


def _clean(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    kept = {k: meta[k] for k in _KEPT_METADATA if meta.get(k)}
    return {**obj, "metadata": kept}


async def _list_all(client: AioClusterClient, resource: Resource) -> list[dict[str, Any]] | None:
    """Every object of ``resource`` (paged), or None when the server does not serve it."""
    try:
        return [_clean(o) for o in await list_all(client, resource, page_size=_PAGE)]
    except (NotFound, Unsupported):
        return None


async def _read(
    path: str, context: str | None, request_timeout: float
) -> dict[Resource, list[dict[str, Any]] | None]:
    client = await AioClusterClient.from_kubeconfig(path, context=context, request_timeout=request_timeout)
    try:
        return {r: await _list_all(client, r) for r in _RESOURCES}
    finally:
        await client.close()


def _count(resource: Resource, items: list[dict[str, Any]] | None) -> str:
    if items is None:
        return f"no {resource.kind} API"
    return f"{len(items)} {resource.kind}{'' if len(items) == 1 else 's'}"


def read_live_cluster(path: str, *, context: str | None = None, timeout: float = 30.0) -> LiveCluster:
    """Read the cluster of ``path`` (``--context`` or its current one); raises ``InputError``."""
    problem = kubeconfig_error(path, context)
    if problem is not None:
        raise InputError(problem)
    used = _context(path, context)
    where = f"kubeconfig {path}, context {used}"
    try:
        found = asyncio.run(_read(path, context, timeout))
    except KubeError as e:
        raise InputError(f"{where}: cannot read the cluster: {e}") from e
    documents = tuple(
        Document(f"{where}: {r.kind} {o['metadata'].get('name')}", o)
        for r, items in found.items()
        for o in items or ()
    )
    counts = ", ".join(_count(r, items) for r, items in found.items())
    return LiveCluster(name=f"live cluster of {where} (read-only: {counts})", documents=documents)

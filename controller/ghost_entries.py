"""Ledger entries whose pod the cache does not hold: is the pod gone, or is the cache behind?

A cache may lag the ledgers it is compared with: a pod created and reserved moments ago can be
missing from it. Releasing such an entry would free capacity a bound pod may use, so before a
release for "deleted" the pod is read from the server. Few missing in a namespace: one GET each;
many (a namespace deleted while the controller was down: 3,000 ghosts took 46-57 s one GET at a
time, issue 36): one paginated LIST of that namespace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from vgpu_guard.controller.world import World
from vgpu_guard.engine.ledger import Allocation
from vgpu_guard.kube.bounded import gather_bounded
from vgpu_guard.kube.client import ClusterClient, list_all
from vgpu_guard.kube.errors import NotFound
from vgpu_guard.kube.resources import PODS

__all__ = ["CONFIRM_BY_GET", "confirm_missing"]

# Ledger entries missing from the pod cache in one namespace confirmed by a GET each; more are
# confirmed by one LIST of the namespace (the same fresh read, after the ledgers were read).
CONFIRM_BY_GET = 16


def _uid(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("uid")) if isinstance(meta, Mapping) else ""


async def confirm_missing(
    client: ClusterClient, world: World, dirty: Iterable[str], *, concurrency: int
) -> set[str]:
    """The UIDs among ``dirty`` that hold ledger entries, are missing from the cache, and are alive."""
    missing = [
        world.ledgers[name].allocations[uid]
        for uid in dirty
        if uid not in world.records
        for name in sorted(world.entries.get(uid, ()))
    ]
    by_namespace: dict[str, list[Allocation]] = {}
    for entry in missing:
        by_namespace.setdefault(entry.namespace, []).append(entry)
    listed = [ns for ns, entries in by_namespace.items() if len(entries) > CONFIRM_BY_GET]
    singles = [e for ns, entries in by_namespace.items() if ns not in listed for e in entries]
    alive: set[str] = set()

    async def confirm(entry: Allocation) -> None:
        try:
            pod = await client.get(PODS, entry.name, namespace=entry.namespace)
        except NotFound:
            return
        if _uid(pod) == entry.pod_uid:
            alive.add(entry.pod_uid)

    async def confirm_namespace(namespace: str) -> None:
        wanted = {e.pod_uid for e in by_namespace[namespace]}
        pods = await list_all(client, PODS, namespace=namespace)
        alive.update(wanted & {_uid(p) for p in pods})

    await gather_bounded(
        [*(confirm_namespace(ns) for ns in listed), *(confirm(e) for e in singles)], concurrency
    )
    return alive

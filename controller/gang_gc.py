"""Releasing gangs' IB-cluster reservations when the gang is over.

A GangPlacement reserves capacity in its cluster for the members not yet placed. It goes when its
PodGroup is deleted or Completed and no pod of the group is still alive (the owner reference lets
a real cluster's garbage collector delete it with the PodGroup too; this pass also covers gangs
whose PodGroup never existed and Completed groups). Deletes carry the object's uid as a
precondition, so a placement re-created for a new gang of the same name is never removed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.gang import gang_of, stale_placements
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import Conflict, KubeError, NotFound
from vgpu_guard.kube.resources import GANG_PLACEMENTS
from vgpu_guard.logs import audit

__all__ = ["release_stale_placements"]

log = logging.getLogger("vgpu_guard.controller.gangs")


def _live(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status")
    return not (isinstance(status, Mapping) and status.get("phase") in ("Succeeded", "Failed"))


async def release_stale_placements(
    client: ClusterClient, view: ClusterView, pods: Iterable[Mapping[str, Any]]
) -> list[tuple[str, str]]:
    """Delete the placements ``view`` shows stale given ``pods``; returns (namespace, group) of those
    deleted. The run loop passes its caches, so a settled controller sends no request here unless
    something is to be deleted. Never raises for API errors (logged; the next round tries again)."""
    if not view.gang_placements:
        return []
    live = frozenset((g[0], g[1]) for p in pods if _live(p) and (g := gang_of(p)) is not None)
    deleted = []
    for namespace, group in stale_placements(view, live_groups=live):
        uid = view.gang_placements[(namespace, group)].get("metadata", {}).get("uid")
        try:
            await client.delete(GANG_PLACEMENTS, group, namespace=namespace, uid=uid)
        except (NotFound, Conflict):
            continue  # already gone, or replaced by a new gang of the same name
        except KubeError as e:
            log.warning("cannot release gang placement %s/%s: %s", namespace, group, e)
            continue
        deleted.append((namespace, group))
        audit("gang-released", namespace=namespace, group=group)
    return deleted

"""The Queues a Queue write is judged against: read from the API server, not from the watch cache.

The guarantee rule sums every Queue's ``spec.guarantee``. The cache that feeds the view learns of
a Queue from its watch event, a few milliseconds after the API server stored it, and
``kubectl apply -f queues.yaml`` sends the next CREATE as soon as the previous one returned: a
cached sum then misses the Queue just created and admits a set that together exceeds the cluster,
the over-guarantee that crashed the scheduler. Queue writes are rare and administrative, so each
write pays one LIST of Queues (a quorum read: what the API server has stored, whichever
replica of ours answers). The same holds for a DELETE: a child Queue created a moment ago must
keep its parent from being deleted. Nodes, which the capacity side reads, still come from the
cache: they change by themselves, and the controller's audit covers capacity that shrinks later.

If the LIST fails (API error or timeout), the cached view is used, as before this read existed,
and the log says so: an API server that just called us is up, and refusing every Queue write
while it is slow would block administrators for nothing.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from types import MappingProxyType

from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.decision import AdmissionRequest
from vgpu_guard.kube.client import ClusterClient, list_all
from vgpu_guard.kube.errors import KubeError
from vgpu_guard.kube.resources import QUEUES

__all__ = ["LIVE_READ_SECONDS", "with_stored_queues"]

log = logging.getLogger("vgpu_guard.webhook")

# Well inside the Queue webhook's timeoutSeconds (the chart's default is 10 s).
LIVE_READ_SECONDS = 2.0


async def with_stored_queues(
    request: AdmissionRequest, view: ClusterView, client: ClusterClient | None
) -> ClusterView:
    """``view`` with its Queues as the API server stores them now (for a Queue write)."""
    if (
        client is None
        or request.resource != "queues"
        or request.group != QUEUES.group
        or not view.synced  # the decision is a 503 "cluster state unknown" either way
    ):
        return view
    try:
        async with asyncio.timeout(LIVE_READ_SECONDS):
            items = await list_all(client, QUEUES)
    except (KubeError, TimeoutError) as e:
        log.warning(
            "could not read the Queues from the API server; judging this Queue on the cached ones",
            extra={"fields": {"queue": request.name, "error": str(e) or type(e).__name__}},
        )
        return view
    # The clients give list items their kind (kube/client.py typed_items), as the cache's are.
    by_name = {str((obj.get("metadata") or {}).get("name") or ""): obj for obj in items}
    by_name.pop("", None)
    return replace(view, queues=MappingProxyType(by_name))

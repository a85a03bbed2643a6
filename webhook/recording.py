"""Recording what admission decided before answering: a gang's GangPlacement.

The only API write on the admission path, and only for a gang's first member: the IB cluster of a
gang must be the same on every webhook replica, so the choice is created as an object and the API
server arbitrates. Create wins: answer with our choice. ``AlreadyExists``: another replica (or
an earlier member this replica's cache has not seen yet) decided first; put its object into the
view and decide again, which now stamps its cluster. Dry run records nothing (the webhook declares
``sideEffects: NoneOnDryRun``). A failure to record is a retriable 503, never a silent split gang.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpu_guard.engine.admission import Phase, decide
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.decision import AdmissionDecision, AdmissionRequest
from vgpu_guard.engine.gang import gang_of, ib_enabled
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import AlreadyExists, KubeError
from vgpu_guard.kube.resources import GANG_PLACEMENTS, PODGROUPS

__all__ = ["decide_and_record"]

# Each round either records (done) or learns the object that beat us (the next round stamps it).
_MAX_ROUNDS = 3


def _cannot_record(why: str) -> AdmissionDecision:
    return AdmissionDecision(
        allowed=False,
        code=503,
        message=(
            f"[ib-cluster] vgpu-guard could not record the gang's IB cluster ({why}); retry in a few seconds"
        ),
        rules=("ib-cluster",),
    )


async def _with_podgroup(
    request: AdmissionRequest, view: ClusterView, config: GuardConfig, client: ClusterClient | None
) -> ClusterView:
    """Make sure a gang member's PodGroup is in the view before its cluster is chosen.

    Volcano's job controller creates the PodGroup and then the pods at once; the watch that feeds
    our cache can lag by a few milliseconds, and without the PodGroup the gang would be sized as one
    member and possibly pinned to a cluster too small for it. So on a cache miss, and only then, the
    webhook reads the PodGroup (one GET). Not found: the pod's group really has no PodGroup.
    """
    pod = request.object
    if client is None or pod is None or request.resource != "pods" or not ib_enabled(config):
        return view
    member = gang_of(pod)
    if (
        member is None
        or (member[0], member[1]) in view.podgroups
        or (member[0], member[1]) in view.gang_placements
    ):
        return view
    try:
        return view.with_admitted(await client.get(PODGROUPS, member[1], namespace=member[0]))
    except KubeError:
        return view  # NotFound: no PodGroup; other errors: decide on what the cache has


def _where(obj: Mapping[str, Any]) -> tuple[str, str]:
    metadata = obj.get("metadata")
    assert isinstance(metadata, Mapping)
    return str(metadata.get("namespace") or "default"), str(metadata.get("name"))


async def decide_and_record(
    request: AdmissionRequest,
    view: ClusterView,
    config: GuardConfig,
    *,
    phase: Phase,
    client: ClusterClient | None,
) -> AdmissionDecision:
    """``decide``, then create what the decision says must exist before the answer goes out."""
    view = await _with_podgroup(request, view, config, client)
    for _ in range(_MAX_ROUNDS):
        decision = decide(request, view, config, phase=phase)
        if not decision.persist or request.dry_run or not decision.allowed:
            return decision
        if client is None:
            return _cannot_record("this webhook has no API client")
        try:
            for obj in decision.persist:
                if obj.get("kind") != "GangPlacement":
                    raise ValueError(
                        f"admission asked to record a {obj.get('kind')}; only GangPlacements are"
                    )
                namespace, _ = _where(obj)
                await client.create(GANG_PLACEMENTS, obj, namespace=namespace)
            return decision
        except AlreadyExists:
            for obj in decision.persist:
                namespace, name = _where(obj)
                try:
                    view = view.with_admitted(await client.get(GANG_PLACEMENTS, name, namespace=namespace))
                except KubeError as e:
                    return _cannot_record(f"reading the existing placement failed: {e.message}")
        except KubeError as e:
            return _cannot_record(e.message)
    return _cannot_record("the gang's placement kept changing while it was being recorded")

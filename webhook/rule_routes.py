"""What a rule route answers: every admission route but the arbiter's, and ``simulate`` too.

``/mutate/pods``, ``/validate/pods``, ``/validate/workloads`` and ``/validate/queues`` decide with
the rules (engine/admission.py) on the cached view, after the container cap and, for a Queue
write, the Queues as stored (fresh_queues.py); what the decision must record before the answer
goes out (a gang's GangPlacement) is created through the API (recording.py). One function, so
``simulate``, which has no HTTP in front of it, decides every object exactly as the webhook does:
the same cap, the same reads, the same recording through its client.
"""

from __future__ import annotations

from vgpu_guard.engine.admission import Phase, too_many_containers
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.decision import AdmissionDecision, AdmissionRequest
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.webhook.fresh_queues import with_stored_queues
from vgpu_guard.webhook.recording import decide_and_record

__all__ = ["decide_by_rules"]


async def decide_by_rules(
    request: AdmissionRequest,
    view: ClusterView,
    config: GuardConfig,
    *,
    phase: Phase,
    client: ClusterClient | None,
) -> AdmissionDecision:
    """The container cap first (rules walk containers), then the rules' decision on ``view`` (with
    the stored Queues for a Queue write), recorded before it is returned."""
    too_large = too_many_containers(request.object, config.webhook.max_containers)
    if too_large is not None:
        return too_large
    view = await with_stored_queues(request, view, client)
    return await decide_and_record(request, view, config, phase=phase, client=client)

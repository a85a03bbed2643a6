"""The two webhook calls of a CREATE, for ``simulate``: the core's sequence over the webhook's route.

What kube-apiserver does around the calls (defaulting, mutate then validate on the mutated object,
the warnings of both joined and clipped) is ``engine.admission.admission_sequence``, the one copy
offline ``review`` runs too. Here each call is the webhook's own route function
(webhook/rule_routes.py: the container cap, the stored Queues for a Queue write, the rules, and
the GangPlacement a gang's first member records through the API before the answer), on the view
its caches hold when that call is made: the validating call sees what the mutating one created.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from vgpu_guard.engine.admission import Phase, ReviewResult, admission_sequence
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.decision import AdmissionDecision, AdmissionRequest
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.webhook.rule_routes import decide_by_rules

__all__ = ["admit"]


async def admit(
    request: AdmissionRequest,
    views: Callable[[], Awaitable[ClusterView]],
    config: GuardConfig,
    client: ClusterClient,
) -> ReviewResult:
    """Both webhook calls for ``request`` (see the module docstring); ``views`` gives the view of
    each call, ``client`` is the webhook's (what it records is created through it)."""

    async def webhook_call(call: AdmissionRequest, phase: Phase) -> AdmissionDecision:
        return await decide_by_rules(call, await views(), config, phase=phase, client=client)

    return await admission_sequence(request, webhook_call)

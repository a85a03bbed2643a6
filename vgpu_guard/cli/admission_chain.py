"""What kube-apiserver does with a CREATE before storing it, for ``simulate``: the two webhook calls.

Defaults, then the mutating webhook, then the validating webhook on the mutated object. Each
webhook call is the webhook's own route function (webhook/rule_routes.py: the container cap,
the stored Queues for a Queue write, the rules, and the GangPlacement a gang's first member
records through the API before the answer), on the view its caches hold when the call is made.
What kube-apiserver adds is here and only here: its defaulting (``server_defaults``), the order
of the two calls, and the warnings of both answers joined and clipped as it returns them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

from vgpu_guard.engine.admission import ReviewResult, server_defaults
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.decision import AdmissionRequest
from vgpu_guard.engine.violations import clip_warnings
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
    if request.object is not None:
        request = replace(request, object=server_defaults(request.object))
    mutated = await decide_by_rules(request, await views(), config, phase="mutate", client=client)
    obj = mutated.object if mutated.object is not None else (request.object or {})
    if not mutated.allowed:
        return ReviewResult(decision=mutated, patch=(), warnings=mutated.warnings, object=obj)
    validate = replace(request, object=obj)
    validated = await decide_by_rules(validate, await views(), config, phase="validate", client=client)
    warnings = tuple(clip_warnings([*mutated.warnings, *validated.warnings]))
    return ReviewResult(
        decision=validated, patch=mutated.patch, warnings=warnings, object=obj, persist=mutated.persist
    )

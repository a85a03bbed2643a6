"""The webhook's ledger arbiter in front of the in-memory API server, for ``simulate``.

In a cluster the API server sends every write that carries a GPU assignment to the webhook entry
``pod-assignments.vgpu-guard.io`` (a ``pods/binding`` CREATE, a pod or ``pods/status`` UPDATE),
whose handler is ``webhook.arbiter.Arbiter``. ``simulate`` has no HTTP in between, so this
``AdmissionRunner`` (the double's admission seam, apidouble/frontend.py) does what the API server
and the webhook's route do for those writes, and nothing else: the request is built as kube-
apiserver sends it and decoded by the webhook's own ``to_engine``, the decision is the same
``Arbiter`` instance's (the reservation is written to the in-memory GPULedger by the webhook's
``LedgerWriter``), and a denial reaches the writer as the API server words it. Every other write
passes: pod CREATEs went through the webhook's rule routes already (admission_chain.py).
"""

from __future__ import annotations

import uuid

from vgpu_guard.apidouble.identity import UserInfo
from vgpu_guard.apidouble.store import Pending
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.objects import Obj
from vgpu_guard.kube.errors import error_from_status
from vgpu_guard.webhook.arbiter import Arbiter
from vgpu_guard.webhook.review import ReviewRequest, encode_response, to_engine

__all__ = ["ARBITER_WEBHOOK", "InProcessArbiter", "arbitrated"]

# The chart's arbiter entry on Kubernetes 1.28+ (the in-memory API server says 1.33).
ARBITER_WEBHOOK = "pod-assignments.vgpu-guard.io"


def arbitrated(pending: Pending) -> bool:
    """The writes the chart's arbiter entry receives: pod and pods/status UPDATEs, Binding CREATEs."""
    if pending.info.key != ("", "pods"):
        return False
    if pending.operation == "UPDATE":
        return pending.subresource in ("", "status")
    return pending.operation == "CREATE" and pending.subresource == "binding"


def review_request(pending: Pending, user: UserInfo) -> ReviewRequest:
    """The AdmissionReview request kube-apiserver would send for ``pending``, decoded as the webhook does."""
    group, version, kind = pending.kind
    request: Obj = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "subResource": pending.subresource,
        "name": pending.name,
        "namespace": pending.namespace,
        "operation": pending.operation,
        "userInfo": user.as_review(),
        "object": pending.object,
        "oldObject": pending.old,
        "dryRun": pending.dry_run,
    }
    return ReviewRequest.model_validate(request)


class InProcessArbiter:
    """An ``AdmissionRunner`` that calls ``arbiter`` for the writes ``arbitrated`` selects."""

    def __init__(self, arbiter: Arbiter, config: GuardConfig) -> None:
        self.arbiter = arbiter
        self.config = config
        self.decisions = 0  # how many writes the arbiter decided (tests)

    def active(self) -> bool:
        return True

    async def mutate(self, pending: Pending, user: UserInfo) -> None:
        return None  # the arbiter's entry is a validating webhook

    async def validate(self, pending: Pending, user: UserInfo) -> None:
        if not arbitrated(pending):
            return
        review = review_request(pending, user)
        decision = await self.arbiter.admit(to_engine(review), self.config)
        self.decisions += 1
        if decision.allowed:
            return
        # What the API server answers the writer (errors/statuserror.go ToStatusErr).
        status = encode_response(review.uid, decision)["response"]["status"]
        message = f'admission webhook "{ARBITER_WEBHOOK}" denied the request: {status["message"]}'
        raise error_from_status(status["code"], {**status, "message": message})

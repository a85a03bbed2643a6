"""An in-memory API server for the Volcano model's tests, which records every pod write it admits.

The model only speaks the ``ClusterClient`` protocol, so the tests give it ``MemoryClusterClient``
over a ``Store`` with Volcano's CRDs, and a ``Recorder`` in the admission seam (where the webhook's
arbiter sits in ``simulate``) to see exactly which writes a version makes, and to refuse some.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from vgpu_guard.apidouble import service_account
from vgpu_guard.apidouble.client import MemoryClusterClient
from vgpu_guard.apidouble.frontend import Frontend
from vgpu_guard.apidouble.identity import UserInfo
from vgpu_guard.apidouble.store import Pending, Store
from vgpu_guard.cli.packaged_crds import packaged_crd
from vgpu_guard.kube.errors import Forbidden
from vgpu_guard.kube.resources import CRDS, NODES, PODGROUPS, PODS

Obj = dict[str, Any]
EPOCH = 1_750_000_000.0
VOLCANO = service_account("volcano-system", "volcano-scheduler")


@dataclass(frozen=True)
class Write:
    """One pod write as admission saw it: ``UPDATE ''`` (a patch), ``CREATE binding`` ..."""

    operation: str
    subresource: str
    name: str
    annotations: dict[str, str]
    user: str


@dataclass
class Recorder:
    """An ``AdmissionRunner`` that records pod writes and refuses those ``refuse`` picks."""

    writes: list[Write] = field(default_factory=list)
    refuse: Callable[[Write], bool] = lambda _write: False

    def active(self) -> bool:
        return True

    async def mutate(self, pending: Pending, user: UserInfo) -> None:
        return None

    async def validate(self, pending: Pending, user: UserInfo) -> None:
        if pending.info.key != ("", "pods") or pending.object is None:
            return
        notes = dict((pending.object.get("metadata") or {}).get("annotations") or {})
        write = Write(pending.operation, pending.subresource, pending.name, notes, user.username)
        self.writes.append(write)
        if self.refuse(write):
            raise Forbidden('admission webhook "test" denied the request: no', code=403, reason="Forbidden")


class Cluster:
    """A store with Volcano's CRDs, a recorder in front of it, and clients for the model."""

    def __init__(self) -> None:
        self.now = EPOCH
        self.store = Store(seed=3, clock=lambda: datetime.fromtimestamp(self.now, UTC))
        for name in (
            "scheduling.volcano.sh_podgroups.yaml",
            "batch.volcano.sh_jobs.yaml",
            "scheduling.volcano.sh_queues.yaml",
        ):
            self.store.create(CRDS, packaged_crd(f"data/crds/volcano/{name}"))
        self.recorder = Recorder()
        self.frontend = Frontend(self.store, admission=self.recorder)

    def clock(self) -> float:
        return self.now

    def client(self, user: UserInfo = VOLCANO) -> MemoryClusterClient:
        return MemoryClusterClient(self.store, frontend=self.frontend, user=user)

    def add(self, *objects: Obj) -> list[Obj]:
        """Store objects as they are (no admission): nodes, pods, podgroups."""
        kinds = {"Node": NODES, "Pod": PODS, "PodGroup": PODGROUPS}
        return [
            self.store.create(kinds[obj["kind"]], obj, namespace=obj["metadata"].get("namespace"))
            for obj in objects
        ]

    def pod(self, name: str) -> Obj:
        return self.store.get(PODS, name, namespace="default")

"""Leader election on a ``coordination.k8s.io/v1`` Lease, through ``ClusterClient``.

Why our own small loop instead of ``kubernetes.aio.leaderelection``: that module talks to the
API with its own client objects, outside our ``ClusterClient`` seam (so not against the API
double, not with our errors), and reads the wall clock itself. The algorithm is client-go's:
acquire when the Lease is free or expired (``renewTime + leaseDurationSeconds`` passed), renew
while holding it, and every write is a CAS on the Lease's resourceVersion.

Leadership only avoids duplicate work: the ledger's CAS keeps allocations correct even when two
replicas believe they lead (a paused process wakes up still "leading").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import Conflict, KubeError, NotFound
from vgpu_guard.kube.resources import LEASES

__all__ = ["LeaderElector"]

log = logging.getLogger("vgpu_guard.controller.leader")


def _micro_time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(raw: object) -> float | None:
    if not isinstance(raw, str) or not raw:
        return None
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class LeaderElector:
    """One replica's view of a Lease; call ``try_acquire_or_renew`` every ``retry_period``."""

    def __init__(
        self,
        client: ClusterClient,
        *,
        name: str,
        namespace: str,
        identity: str,
        clock: Callable[[], float],
        lease_duration: int = 15,
    ) -> None:
        self.client = client
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.clock = clock
        self.lease_duration = lease_duration
        self.leading = False
        # Who held the Lease when this replica last read it (for the log line of a lost Lease).
        self.holder = ""
        # Set after the first round, won or lost: the replica is then "holding or waiting" (ready).
        self.attempted = False
        # The API error that ended the last round (None: the round reached the Lease). A failing
        # Lease (namespace deleted, RBAC revoked) is logged once, not on every retry.
        self.error: str | None = None

    async def try_acquire_or_renew(self) -> bool:
        """One round; returns whether this replica leads now. API errors mean "not leading"."""
        before = self.error
        self.error = None
        try:
            return await self._round()
        finally:
            self.attempted = True
            if self.error is not None and self.error != before:
                log.warning("%s; retrying with backoff, logged again only if the error changes", self.error)
            elif self.error is None and before is not None:
                log.info("Lease %s/%s is reachable again", self.namespace, self.name)

    async def _round(self) -> bool:
        now = self.clock()
        try:
            lease = await self.client.get(LEASES, self.name, namespace=self.namespace)
        except NotFound:
            lease = None
        except KubeError as e:
            self.error = f"cannot read Lease {self.namespace}/{self.name}: {e}"
            self.leading = False
            return False
        try:
            if lease is None:
                await self.client.create(LEASES, self._lease(now, transitions=0), namespace=self.namespace)
                self.leading = True
                return True
            spec: dict[str, Any] = lease.get("spec") or {}
            holder = spec.get("holderIdentity")
            self.holder = str(holder or "")
            renewed = _parse_time(spec.get("renewTime")) or 0.0
            duration = int(spec.get("leaseDurationSeconds") or self.lease_duration)
            if holder != self.identity and holder and renewed + duration > now:
                self.leading = False
                return False
            transitions = int(spec.get("leaseTransitions") or 0) + (0 if holder == self.identity else 1)
            body = self._lease(now, transitions=transitions)
            body["metadata"]["resourceVersion"] = lease["metadata"]["resourceVersion"]
            if holder == self.identity and spec.get("acquireTime"):
                body["spec"]["acquireTime"] = spec["acquireTime"]
            await self.client.replace(LEASES, body)
            self.leading = True
            return True
        except Conflict:
            self.leading = False  # someone else wrote first; try again next round
            return False
        except KubeError as e:
            self.error = f"cannot write Lease {self.namespace}/{self.name}: {e}"
            self.leading = False
            return False

    async def release(self) -> None:
        """Give the Lease up on shutdown so another replica takes over at once."""
        if not self.leading:
            return
        try:
            lease = await self.client.get(LEASES, self.name, namespace=self.namespace)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["leaseDurationSeconds"] = 1
                await self.client.replace(LEASES, lease)
        except KubeError as e:
            log.warning("cannot release Lease %s/%s: %s", self.namespace, self.name, e)
        self.leading = False

    def _lease(self, now: float, *, transitions: int) -> dict[str, Any]:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.lease_duration,
                "acquireTime": _micro_time(now),
                "renewTime": _micro_time(now),
                "leaseTransitions": transitions,
            },
        }

"""Writes the PodGroup status of the gangs our controller schedules (routing mode).

The decision is engine/podgroup_status.py's; this shell feeds it each pass's gang decisions and
follows a gang it wrote a waiting status for until its members are bound (then ``Running``), since
a gang whose members are all bound has no pending member left to bring it into a decision.

The Volcano PodGroup CRD has no status subresource, so the status is a merge patch of the object,
preconditioned on the resourceVersion it was computed from: a concurrent write (Volcano's
scheduler, another replica) wins, and the next pass computes again from what it wrote.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.podgroup_status import GangState, podgroup_status
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import Conflict, KubeError, NotFound
from vgpu_guard.kube.resources import PODGROUPS

__all__ = ["GangKey", "GangStatusWriter"]

log = logging.getLogger("vgpu_guard.controller.gang_status")

GangKey = tuple[str, str]  # (namespace, PodGroup name)


class GangStatusWriter:
    """``write`` once per pass, after the pass's bindings."""

    def __init__(self, client: ClusterClient, *, clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self.clock = clock
        # Gangs decided by us and not yet Running (placed, or waiting): minMember, until their
        # PodGroup says ``Running``; a gang bound in full has no pending member to bring it back.
        self._following: dict[GangKey, int] = {}
        # What was last sent per gang, from which resourceVersion: not sent again until the cache
        # shows a newer object (our own patch, or someone else's write).
        self._sent: dict[GangKey, str] = {}

    async def write(
        self, decided: Mapping[GangKey, GangState], view: ClusterView, bound: Mapping[GangKey, int]
    ) -> list[str]:
        """Write what ``decided`` (this pass's gang decisions) and the followed gangs call for;
        returns the errors (the pass reports them; nothing here stops other gangs)."""
        states = dict(decided)
        for key, min_member in list(self._following.items()):
            if key not in states:
                states[key] = GangState(min_member=min_member, bound=bound.get(key, 0), pending=0)
        errors: list[str] = []
        for key, state in states.items():
            error = await self._write_one(key, state, view.podgroups.get(key))
            if error is not None:
                errors.append(error)
        return errors

    async def _write_one(
        self, key: GangKey, state: GangState, podgroup: Mapping[str, Any] | None
    ) -> str | None:
        if podgroup is None:
            self._forget(key)
            return None
        meta = podgroup.get("metadata")
        version = str(meta.get("resourceVersion") or "") if isinstance(meta, Mapping) else ""
        if version and self._sent.get(key) == version:
            return None  # our write from this version is on its way to the cache
        raw = podgroup.get("status")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock()))
        status = podgroup_status(
            raw if isinstance(raw, Mapping) else None, state, now=now, transition_id=str(uuid.uuid4())
        )
        running = state.bound >= state.min_member
        if status is None:
            if running:
                self._forget(key)
            else:  # placed and binding, or waiting as already written: Running comes later
                self._following[key] = state.min_member
            return None
        body: dict[str, Any] = {"status": status}
        if version:
            body["metadata"] = {"resourceVersion": version}
        try:
            await self.client.patch(PODGROUPS, key[1], body, namespace=key[0])
        except (Conflict, NotFound) as e:
            log.info("PodGroup %s/%s status not written, computed again next pass: %s", *key, e)
            return None
        except KubeError as e:
            return f"PodGroup {key[0]}/{key[1]} status: {e}"
        self._sent[key] = version
        if running:
            self._forget(key)
        else:
            self._following[key] = state.min_member
        return None

    def follows(self, key: GangKey) -> bool:
        """True while the gang is decided by us and not yet written Running: a member's binding
        must then bring a pass (it may complete the gang, and its members without vGPU wait for it)."""
        return key in self._following

    def _forget(self, key: GangKey) -> None:
        self._following.pop(key, None)
        self._sent.pop(key, None)

"""Deleting the GPULedger of a node that is gone, once it holds nothing.

A ledger outlives its Node by design: the entries of pods still bound there keep their cards
counted until the reconciler releases them (the pods go when the pod garbage collector removes
the pods of a deleted node). Once the last entry is released, the ledger of a gone node counts
for nothing, yet it stayed in ``kubectl get gpuledgers`` for good, and every writer kept its copy.

It is deleted when all of these hold, and by a request that loses to any write since:

- the node is missing from the node cache, and a GET says it is gone: a cache behind a node
  created moments ago must not cost that node its ledger;
- the cached ledger holds no entry (an unreadable ledger is never deleted: it may hold some);
- the DELETE carries the cached ledger's uid and resourceVersion as preconditions, so a
  reservation written since (the arbiter, for a Binding to a node Volcano's cache still holds)
  wins with a 409, and the ledger is looked at again when it next changes.

Only ledgers and nodes that changed are looked at (the pass's ``changes``), so a settled fleet
costs nothing here; a node re-created under the same name gets a new ledger from its first write.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from vgpu_guard.engine.ledger import NodeLedger
from vgpu_guard.kube.client import ClusterClient
from vgpu_guard.kube.errors import Conflict, KubeError, NotFound
from vgpu_guard.kube.resources import LEDGERS, NODES
from vgpu_guard.logs import audit

__all__ = ["LedgerCollector"]

log = logging.getLogger("vgpu_guard.controller.ledgers")


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


class LedgerCollector:
    """The ledgers of gone nodes, deleted once empty; ``consider`` the names a pass saw change."""

    def __init__(self, client: ClusterClient) -> None:
        self.client = client
        self._candidates: set[str] = set()
        self._failing: set[str] = set()  # warned once: a refusal (RBAC) must not flood the log

    def consider(self, names: Iterable[str]) -> None:
        """Nodes whose ledger or Node object changed (appeared, went, or was rewritten)."""
        self._candidates.update(names)

    def _due(
        self, ledgers: Mapping[str, NodeLedger], raw: Mapping[str, Any], nodes: Mapping[str, Any]
    ) -> list[str]:
        """The candidates that are empty ledgers of nodes the cache does not hold; the others are
        dropped (a later change makes them candidates again)."""
        due = [
            name
            for name in sorted(self._candidates)
            if name not in nodes and name in raw and name in ledgers and not ledgers[name].allocations
        ]
        self._candidates.clear()
        return due

    async def collect(
        self, ledgers: Mapping[str, NodeLedger], raw: Mapping[str, Any], nodes: Mapping[str, Any]
    ) -> list[str]:
        """Delete the empty ledgers of gone nodes among the candidates; returns the names deleted.
        ``ledgers``: the decoded ledgers (unreadable ones absent); ``raw``: the cached objects;
        ``nodes``: the node cache. Never raises for API errors: logged, and the ledger is looked at
        again in the next pass."""
        deleted = []
        for name in self._due(ledgers, raw, nodes):
            done = await self._delete(name, _meta(raw[name]))
            if done is None:
                self._candidates.add(name)
                continue
            self._failing.discard(name)  # settled either way: a later failure is said again
            if done:
                deleted.append(name)
        return deleted

    async def _delete(self, name: str, meta: Mapping[str, Any]) -> bool | None:
        """True: deleted; False: nothing to do (the node is there, the ledger gone or written
        since); None: the API failed, try again."""
        try:
            await self.client.get(NODES, name)
            return False  # the node cache is behind: the node is there
        except NotFound:
            pass
        except KubeError as e:
            self._warn(f"cannot check whether node {name} is gone: {e}", name)
            return None
        try:
            await self.client.delete(
                LEDGERS,
                name,
                uid=str(meta.get("uid") or "") or None,
                resource_version=str(meta.get("resourceVersion") or "") or None,
            )
        except (NotFound, Conflict):
            return False  # already gone, or written since: looked at again on its next change
        except KubeError as e:
            self._warn(f"cannot delete the GPULedger of gone node {name}: {e}", name)
            return None
        audit("ledger-deleted", node=name, reason="node gone, no entry left")
        return True

    def _warn(self, message: str, name: str) -> None:
        if name not in self._failing:
            self._failing.add(name)
            log.warning("%s (retried every pass; said once)", message)

"""A pass's inputs read by fresh LISTs, for tests and benchmarks that drive passes one at a time.

Production and ``simulate`` read through ``CachedInputs`` (controller/inputs.py). This source
lists everything every pass, ledgers first (see controller/allocation.py), so a test can change
the store and run the next pass without informers: a pod missing from the list is really gone
(``fresh``). It lived in the product while ``simulate`` used it (issue 45 moved ``simulate`` to
the informers).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vgpu_guard.controller.inputs import PassInputs, SideObjects
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.objects import Obj
from vgpu_guard.kube.client import ClusterClient, list_all
from vgpu_guard.kube.informer import key_of
from vgpu_guard.kube.resources import (
    LEDGERS,
    NAMESPACES,
    NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    PODGROUPS,
    PODS,
    QUEUES,
)

__all__ = ["ListedInputs"]


def _name(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata")
    return str(meta.get("name") or "") if isinstance(meta, Mapping) else ""


class ListedInputs:
    """Fresh LISTs every pass: ledgers FIRST, then pods (see controller/allocation.py)."""

    def __init__(self, client: ClusterClient) -> None:
        self.client = client

    async def read(self, config: GuardConfig) -> PassInputs:
        ledgers = await list_all(self.client, LEDGERS)
        pods = await list_all(self.client, PODS)
        nodes = await list_all(self.client, NODES)
        queues = await list_all(self.client, QUEUES, optional=True)
        podgroups = await list_all(self.client, PODGROUPS, optional=True)
        view = ClusterView.from_objects([*nodes, *queues, *podgroups], config)
        return PassInputs(
            ledgers={_name(o): o for o in ledgers},
            pods={key_of(o): o for o in pods},
            nodes={_name(o): o for o in nodes},
            view=view,
        )

    async def side_objects(self, *, volumes: bool, namespaces: bool) -> SideObjects:
        return SideObjects(
            claims=await list_all(self.client, PERSISTENT_VOLUME_CLAIMS, optional=True) if volumes else (),
            volumes=await list_all(self.client, PERSISTENT_VOLUMES, optional=True) if volumes else (),
            namespaces=await list_all(self.client, NAMESPACES) if namespaces else (),
        )

    def wrote_ledger(self, obj: Obj) -> None:
        """Nothing to remember: the next pass lists again."""

    def bound(self, pod: Mapping[str, Any], node: str, annotations: Mapping[str, str]) -> None:
        """Nothing to remember: the next pass lists again."""

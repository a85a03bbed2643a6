"""Queue DELETE (issue 22): a parent with children is not deleted, as Volcano's webhook refuses it."""

from __future__ import annotations

from typing import Any

from tests.builders import config_with, default_config
from vgpu_guard.engine.admission import decide
from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.decision import AdmissionRequest


def _queue(name: str, parent: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"weight": 1, **({"parent": parent} if parent else {})}
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


QUEUES = [_queue("root"), _queue("a", "root"), *(_queue(f"a{i}", "a") for i in range(7))]


def _delete(name: str, view: ClusterView, **config: Any) -> Any:
    request = AdmissionRequest(
        kind="Queue",
        group="scheduling.volcano.sh",
        resource="queues",
        operation="DELETE",
        object=None,
        old_object=next(q for q in QUEUES if q["metadata"]["name"] == name),
        namespace="",
        name=name,
        username="admin",
        groups=(),
        uid="u",
    )
    cfg = config_with(**config) if config else default_config()
    return decide(request, view, cfg, phase="validate")


def test_many_children_are_listed_up_to_five() -> None:
    view = ClusterView.from_objects(QUEUES, default_config())
    decision = _delete("a", view)
    assert (decision.allowed, decision.code) == (False, 403)
    assert decision.message == (
        "[queue-hierarchy] metadata.name: a is the parent of 7 queue(s) (a0, a1, a2, a3, a4 and 2 more); deleting "
        "it would orphan them; delete those queues or move them to another parent (spec.parent) first"
    )
    assert _delete("a3", view).allowed is True


def test_the_rule_action_applies_and_an_unsynced_view_is_retriable() -> None:
    view = ClusterView.from_objects(QUEUES, default_config())
    warned = _delete("a", view, admission={"rules": {"queue-hierarchy": "warn"}})
    assert warned.allowed is True and warned.warnings[0].startswith(
        "[queue-hierarchy] metadata.name: a is the parent"
    )
    unsynced = ClusterView.from_objects(QUEUES, default_config(), synced=False)
    assert (_delete("a3", unsynced).allowed, _delete("a3", unsynced).code) == (False, 503)

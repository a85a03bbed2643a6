"""The size cap on the containers of one object (rule ``object-too-large``).

Rules walk every container of every pod spec an object holds (a Deployment's template, a CronJob's
job template, a Volcano Job's tasks); an object with a hundred thousand of them would hold a webhook
worker for seconds. The cap comes first, before any rule, and it is decided here in the core so that
``review`` and ``simulate`` refuse what the webhook refuses (``webhook.maxContainers``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["count_containers", "too_large"]

_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
# Where pod specs sit in the objects we review: Pod, workload templates, CronJob, Volcano Job tasks.
_DESCEND = ("spec", "template", "jobTemplate")


def count_containers(obj: Mapping[str, Any] | None) -> tuple[int, str]:
    """All containers of an object's pod specs, and the path of the largest list (cheap: no full walk)."""
    total, largest, largest_path = 0, -1, "spec"
    stack: list[tuple[Any, str]] = [(obj, "")]
    while stack:
        node, path = stack.pop()
        if not isinstance(node, Mapping):
            continue
        for key in _CONTAINER_LISTS:
            items = node.get(key)
            if isinstance(items, list):
                total += len(items)
                if len(items) > largest:
                    largest, largest_path = len(items), f"{path}{key}"
        for key in _DESCEND:
            if key in node:
                stack.append((node[key], f"{path}{key}."))
        tasks = node.get("tasks")
        if isinstance(tasks, list):
            stack.extend((task, f"{path}tasks[{i}].") for i, task in enumerate(tasks))
    return total, largest_path


def too_large(obj: Mapping[str, Any] | None, limit: int) -> str | None:
    """The denial when ``obj`` holds more than ``limit`` containers, else None."""
    total, path = count_containers(obj)
    if total <= limit:
        return None
    return (
        f"[object-too-large] {path}: {total} containers in one object exceed this webhook's limit of "
        f"{limit} (webhook.maxContainers); split the object, or raise webhook.maxContainers"
    )

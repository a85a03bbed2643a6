"""Resource amounts the way kube-scheduler counts them: whole units, exact, no floats.

``cpu`` in millicores (``Quantity.MilliValue``, rounded up), everything else in whole units
(``Quantity.Value``, rounded up): bytes for memory and ephemeral-storage, a count for ``pods`` and
for extended resources such as ``volcano.sh/vgpu-memory``. A pod's request is what
NodeResourcesFit computes (noderesources/fit.go ``computePodResourceRequest``): the sum over app
containers, raised to the largest init container in each resource, plus ``spec.overhead``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from vgpu_guard.engine.quantity import QuantityError, parse_quantity
from vgpu_guard.engine.untrusted import as_list, as_mapping

__all__ = ["Resources", "add_into", "amount", "pod_requests", "scheduler_units"]

Resources = dict[str, int]


def scheduler_units(name: str, value: Fraction) -> int:
    """An exact amount in the scheduler's unit for ``name`` (rounded up, as Quantity does)."""
    return math.ceil(value * 1000) if name == "cpu" else math.ceil(value)


def amount(name: str, raw: object) -> int:
    """One quantity in the scheduler's unit for ``name``; raises ``QuantityError``."""
    return scheduler_units(name, parse_quantity(raw).value)


def _resources(raw: object) -> Resources:
    out: Resources = {}
    for name, quantity in as_mapping(raw).items():
        try:
            out[str(name)] = amount(str(name), quantity)
        except QuantityError:
            continue  # the API server refuses such a pod; a file's typo counts as nothing
    return out


def add_into(total: Resources, more: Mapping[str, int], sign: int = 1) -> None:
    for name, value in more.items():
        total[name] = total.get(name, 0) + sign * value


def pod_requests(spec: Mapping[str, Any]) -> Resources:
    """The pod's effective request (app containers summed, init containers' maximum, overhead)."""
    total: Resources = {}
    for container in as_list(spec.get("containers")):
        add_into(total, _resources(as_mapping(as_mapping(container).get("resources")).get("requests")))
    for container in as_list(spec.get("initContainers")):
        for name, value in _resources(
            as_mapping(as_mapping(container).get("resources")).get("requests")
        ).items():
            if value > total.get(name, 0):
                total[name] = value
    add_into(total, _resources(spec.get("overhead")))
    return total

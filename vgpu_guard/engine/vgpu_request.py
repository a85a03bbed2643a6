"""Reading the vGPU request out of a pod spec.

A container asks for vGPU with up to four extended resources (names from the device config):
number of cards, memory per card (MiB x gpuMemoryFactor), cores per card (percent), or memory as a
percentage. Volcano reads LIMITS; the API server copies limits into requests for extended
resources. We read limits first, then requests, and remember where each value came from so every
message can name the exact field.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from vgpu_guard.engine.config import NvidiaConfig
from vgpu_guard.engine.quantity import ParsedQuantity, QuantityError, parse_quantity
from vgpu_guard.engine.untrusted import as_mapping

__all__ = [
    "CONTAINER_LISTS",
    "ContainerVgpu",
    "VgpuKey",
    "VgpuValue",
    "requests_vgpu",
    "resource_names",
    "vgpu_containers",
]

CONTAINER_LISTS = ("initContainers", "containers")
VgpuKey = Literal["number", "memory", "cores", "percentage"]
VGPU_KEYS: tuple[VgpuKey, ...] = ("number", "memory", "cores", "percentage")


def resource_names(nvidia: NvidiaConfig) -> dict[VgpuKey, str]:
    """Our short keys mapped to the configured resource names."""
    return {
        "number": nvidia.resource_count_name,
        "memory": nvidia.resource_memory_name,
        "cores": nvidia.resource_core_name,
        "percentage": nvidia.resource_memory_percentage_name,
    }


BYTE_SUFFIXES = frozenset({"Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "M", "G", "T", "P", "E"})


@dataclass(slots=True)
class VgpuValue:
    """One vGPU resource of one container, as written and as parsed.

    Not frozen (nor is ``ContainerVgpu``): these are built per parse and read at once, never
    shared or hashed, and a frozen dataclass's ``__init__`` costs ~1 µs more per object, which
    halved ``vgpu_containers`` on the controller's per-pod path when dropped."""

    raw: object
    container_path: str
    part: str  # "limits" or "requests": where the value was found
    resource: str
    quantity: ParsedQuantity | None
    error: str | None
    # The value when it is a valid whole number, else None (validation reports why).
    integer: int | None

    @property
    def path(self) -> str:
        """Where the value sits, for messages (built on demand: most pods never need it)."""
        return f"{self.container_path}.resources.{self.part}[{self.resource}]"

    @property
    def byte_suffixed(self) -> bool:
        """Written with a suffix that makes it a byte count (``12Gi``, ``12G``), not a plain count.

        kube-apiserver canonicalises quantities before admission: a user's ``3000`` reaches the
        webhook as ``3k`` and ``12000`` as ``12k``, so ``k`` (and ``e3`` exponents) are plain counts.
        Binary suffixes never come from an integer count; ``M`` and up would be a million MiB or
        more on one GPU, a byte count in all but name."""
        return self.quantity is not None and self.quantity.suffix in BYTE_SUFFIXES


@dataclass(slots=True)
class ContainerVgpu:
    """The vGPU resources of one container (only those it sets)."""

    list_name: str
    index: int
    name: str
    prefix: str
    values: Mapping[VgpuKey, VgpuValue] = field(default_factory=dict)

    @property
    def path(self) -> str:
        return f"{self.prefix}.{self.list_name}[{self.index}]"

    def integer(self, key: VgpuKey) -> int | None:
        value = self.values.get(key)
        return value.integer if value is not None else None


def requests_vgpu(spec: Mapping[str, Any], nvidia: NvidiaConfig) -> bool:
    """Whether any container sets a vGPU resource: the cheap test every request starts with."""
    names = set(resource_names(nvidia).values())
    for list_name in CONTAINER_LISTS:
        containers = spec.get(list_name)
        for container in containers if isinstance(containers, list) else ():
            resources = container.get("resources") if isinstance(container, Mapping) else None
            if not isinstance(resources, Mapping):
                continue
            for part in ("limits", "requests"):
                values = resources.get(part)
                if isinstance(values, Mapping) and not names.isdisjoint(values):
                    return True
    return False


def vgpu_containers(
    spec: Mapping[str, Any], nvidia: NvidiaConfig, *, prefix: str = "spec"
) -> Iterator[ContainerVgpu]:
    """Yield every container (init containers first) that sets any vGPU resource."""
    names = resource_names(nvidia)
    for list_name in CONTAINER_LISTS:
        containers = spec.get(list_name)
        if not isinstance(containers, list):
            continue
        for index, container in enumerate(containers):
            if not isinstance(container, Mapping):
                continue
            resources = as_mapping(container.get("resources"))
            limits, requests = as_mapping(resources.get("limits")), as_mapping(resources.get("requests"))
            if not limits and not requests:
                continue
            path = f"{prefix}.{list_name}[{index}]"
            values: dict[VgpuKey, VgpuValue] = {}
            for key, resource in names.items():
                if resource in limits:
                    raw, part = limits[resource], "limits"
                elif resource in requests:
                    raw, part = requests[resource], "requests"
                else:
                    continue
                try:
                    quantity = parse_quantity(raw)
                except QuantityError as e:
                    values[key] = VgpuValue(raw, path, part, resource, None, str(e), None)
                    continue
                value = quantity.value
                integer = value.numerator if value.denominator == 1 else None
                values[key] = VgpuValue(raw, path, part, resource, quantity, None, integer)
            if values:
                yield ContainerVgpu(
                    list_name=list_name,
                    index=index,
                    name=str(container.get("name") or ""),
                    prefix=prefix,
                    values=values,
                )

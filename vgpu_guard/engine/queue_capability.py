"""Whether a pod's Volcano queue admits it: the queue exists, is Open, and has capability left.

The queue's ``capability`` for the vGPU resources has to hold what the queue's pods use plus
what this pod would take.

Volcano's proportion/capacity plugins refuse a pod over its queue's capability; vgpu-guard binds
the pods itself, so it has to refuse them too, with a message that says which limit and by how
much. The check runs twice: before the search (a Closed or missing queue refuses any pod) and on
the grants found (the capability counts what the pod really takes on those cards).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.engine.ledger import ContainerGrant
from vgpu_guard.engine.pod_request import PodRequest
from vgpu_guard.engine.quantity import QuantityError, parse_quantity

__all__ = ["pod_queue", "queue_refusal", "queue_vector"]


def pod_queue(pod: PodRequest, view: ClusterView) -> tuple[str, bool]:
    """The pod's queue and whether it was named explicitly (PodGroup ``spec.queue`` wins)."""
    if pod.group:
        podgroup = view.podgroups.get((pod.namespace, pod.group))
        spec = podgroup.get("spec") if podgroup is not None else None
        if isinstance(spec, Mapping) and isinstance(spec.get("queue"), str) and spec["queue"]:
            return spec["queue"], True
    if pod.queue:
        return pod.queue, True
    return "default", False


def queue_vector(containers: Sequence[ContainerGrant], factor: int) -> tuple[int, int, int]:
    """vGPU number, memory (plugin units) and cores that ``containers`` take."""
    grants = [d for c in containers for d in c.devices]
    return (len(grants), sum(d.memory for d in grants) // factor, sum(d.cores for d in grants))


def queue_refusal(
    view: ClusterView,
    config: GuardConfig,
    queue: str,
    explicit: bool,
    *,
    grants: Sequence[ContainerGrant],
    used: tuple[int, int, int],
) -> str | None:
    """Why ``queue`` refuses a pod taking ``grants`` while its pods hold ``used`` (None: it admits)."""
    obj = view.queues.get(queue)
    if obj is None:
        # Volcano creates "default" at installation; without it there are no queues to respect.
        if not explicit or queue == "default":
            return None
        return f"queue {queue} does not exist; create it or name an existing queue"
    status = obj.get("status")
    state = status.get("state") if isinstance(status, Mapping) else None
    if state not in (None, "", "Open"):
        return f"queue {queue} is {state}; only Open queues admit new pods"
    spec = obj.get("spec")
    capability = spec.get("capability") if isinstance(spec, Mapping) else None
    if not isinstance(capability, Mapping):
        return None
    nvidia = config.nvidia
    names = (nvidia.resource_count_name, nvidia.resource_memory_name, nvidia.resource_core_name)
    wanted = queue_vector(grants, nvidia.gpu_memory_factor)
    for i, resource in enumerate(names):
        if resource not in capability:
            continue
        try:
            limit = parse_quantity(capability[resource]).value
        except QuantityError:
            continue
        if used[i] + wanted[i] > limit:
            return (
                f"queue {queue} capability {resource}={capability[resource]} would be exceeded: "
                f"{used[i]} in use + {wanted[i]} requested; wait for the queue's pods to finish "
                "or raise its capability"
            )
    return None

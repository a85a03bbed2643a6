"""Fleets that grow: which pod rules depend on today's nodes, and whether more nodes may come.

Why: "no node has a card that large" is a fact about the nodes registered now. On a fleet whose
node groups scale (cluster-autoscaler, Karpenter), a node group scaling from zero offers exactly
the cards that do not exist yet, and denying the pod keeps the autoscaler from ever seeing the
demand that would add them. So on such fleets the capacity-dependent pod rules default to
``warn`` (the pod is admitted and stays Pending until a fitting node joins); on fixed fleets they
deny, because the pod could never run. An explicit ``admission.rules`` entry always wins.

How we know (``admission.fleetScaling``): ``scaling`` and ``fixed`` are the operator's word;
``auto`` looks at the node labels Karpenter puts on every node it provisions
(``karpenter.sh/nodepool``, and ``karpenter.sh/provisioner-name`` before v0.32). Karpenter
provisions nodes for pending pods by design, so its label is proof that the fleet can grow.
cluster-autoscaler leaves no mark on nodes: the managed-group labels
(``eks.amazonaws.com/nodegroup``, ``cloud.google.com/gke-nodepool``, ``kubernetes.azure.com/agentpool``)
are on every managed node whether its group autoscales or not, so taking them as a signal would
turn fixed managed fleets into "scaling" ones and their impossible pods into silent Pendings.
Those fleets say ``fleetScaling: scaling``. Without a signal, ``auto`` falls back to fixed.

The Queue guarantee check (``queue-guarantee-capacity``) is not here: an over-guarantee crashes
Volcano's scheduler (seed 001), so it denies on every fleet; bootstrapping a fleet whose queues
are applied before its nodes join sets ``admission.rules: {queue-guarantee-capacity: warn}``.
"""

from __future__ import annotations

from vgpu_guard.engine.cluster import ClusterView
from vgpu_guard.engine.config import Action, GuardConfig

__all__ = ["CAPACITY_RULES", "SCALING_LABELS", "fleet_config", "fleet_scales"]

# Pod rules whose verdict depends on the nodes registered now (README's rule table marks them).
CAPACITY_RULES: frozenset[str] = frozenset(
    {"vgpu-number-range", "vgpu-memory-too-large", "vgpu-mode-unavailable", "mig-no-profile"}
)

# Node labels that prove a node was provisioned on demand.
SCALING_LABELS: tuple[str, ...] = ("karpenter.sh/nodepool", "karpenter.sh/provisioner-name")


def fleet_scales(view: ClusterView, config: GuardConfig) -> bool:
    """True when node groups can grow: configured so, or (auto) a node carries a Karpenter label."""
    setting = config.admission.fleet_scaling
    if setting != "auto":
        return setting == "scaling"
    return view.any_node_labelled(SCALING_LABELS)


def fleet_config(config: GuardConfig, view: ClusterView) -> GuardConfig:
    """``config`` with the capacity rules defaulting to warn on a scaling fleet.

    Rules the operator configured keep their action; on a fixed fleet ``config`` is returned as is.
    """
    if not fleet_scales(view, config):
        return config
    configured = config.admission.rules
    defaults = {rule: Action.WARN for rule in CAPACITY_RULES if rule not in configured}
    if not defaults:
        return config
    admission = config.admission.model_copy(update={"rules": {**configured, **defaults}})
    return config.model_copy(update={"admission": admission})

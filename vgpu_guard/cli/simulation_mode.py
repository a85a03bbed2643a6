"""Which of vgpu-guard's two modes ``simulate`` runs, and the Volcano model beside it.

- ``volcano`` (the default, as the chart installs it: ``scheduling.routing`` off): Volcano
  schedules vGPU pods; every GPU assignment it writes is reserved by the webhook's arbiter in the
  node's GPULedger before it lands, or refused. simulate runs Volcano's model (vgpu_guard/volcano/)
  for the scheduling and the webhook's ``Arbiter`` for the reservations.
- ``routing`` (``--routing``, or ``scheduling.routing: true`` in ``--config``): the mutation gives
  vGPU pods vgpu-guard's schedulerName and vgpu-guard's controller places them. Volcano's model
  still runs (its job controller and enqueue action make Volcano Jobs' pods; it places only pods
  that kept ``schedulerName: volcano``).

The stale-cache switch reproduces Volcano #3616 in the model (each session ignores its own
placements); ``simulate`` turns it on for the built-in scenario, where the overcommit story needs it.
"""

from __future__ import annotations

from dataclasses import dataclass

from vgpu_guard.engine.config import GuardConfig
from vgpu_guard.volcano.binder import DEFAULT_VERSION

__all__ = ["SIMULATE_IB_LABEL", "Mode", "simulation_config"]

# The IB cluster label simulate uses when the configuration names none (the ib-gang example's nodes).
SIMULATE_IB_LABEL = "vgpu-guard.io/ib-cluster"


@dataclass(frozen=True)
class Mode:
    """What the command line asked for: routing forced on (None: the configuration decides,
    volcano mode when it says nothing), and the Volcano model's release and stale-cache switch."""

    routing: bool | None = None
    volcano_version: str = DEFAULT_VERSION
    stale_cache: bool = False
    # Where stale_cache came from, for the report ("--volcano-stale-cache", "the built-in scenario").
    stale_cache_from: str = "simulate's default"


def _routing(config: GuardConfig, mode: Mode) -> tuple[bool, str]:
    if mode.routing:
        return True, "scheduling.routing on, from --routing"
    if "routing" in config.scheduling.model_fields_set:
        return config.scheduling.routing, (
            f"scheduling.routing {'on' if config.scheduling.routing else 'off'}, from the configuration"
        )
    return False, "scheduling.routing off: the default, as the chart installs it"


def simulation_config(config: GuardConfig, mode: Mode | None = None) -> tuple[GuardConfig, str, str]:
    """The config to run, the mode's name (``volcano`` or ``routing``) and a sentence saying why
    and what it means; IB clusters are read from ``vgpu-guard.io/ib-cluster`` unless the
    configuration names a label or a HyperNode tier (the stories need IB pinning)."""
    routing, why = _routing(config, mode or Mode())
    scheduling, topology = config.scheduling, config.topology
    config = config.model_copy(update={"scheduling": scheduling.model_copy(update={"routing": routing})})
    if routing:
        note = (
            f"routing ({why}): vGPU pods get schedulerName {scheduling.scheduler_name} and vgpu-guard's "
            "controller places them"
        )
    else:
        note = (
            f"volcano ({why}): Volcano schedules vGPU pods; vgpu-guard's arbiter reserves each GPU "
            "assignment Volcano writes in the node's GPULedger, or refuses it"
        )
    if "ib_cluster_label" not in topology.model_fields_set and topology.hyper_node_tier is None:
        config = config.model_copy(
            update={"topology": topology.model_copy(update={"ib_cluster_label": SIMULATE_IB_LABEL})}
        )
        note += f"; IB clusters come from node label {SIMULATE_IB_LABEL} (simulate's default)"
    return config, "routing" if routing else "volcano", note

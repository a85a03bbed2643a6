"""The nodes waiting for the device plugin's handshake, and the handshakes that will not end.

The device plugin matches a kubelet Allocate to the pod with the oldest ``vgpu-time`` among pods
in ``bind-phase=allocating`` on its node (docs/design/ledger.md), so a node takes one new binding
at a time: these nodes are busy until the plugin confirms (or fails) or the handshake times out
(``scheduling.allocatingTimeoutSeconds``). A stuck handshake is reported once on its pod, and so
is one the plugin failed; a ``bind-time`` from the future beyond the clock skew counts as expired.
"""

from __future__ import annotations

from vgpu_guard.controller.reports import Reporter
from vgpu_guard.controller.world import World
from vgpu_guard.engine.config import GuardConfig

__all__ = ["CLOCK_SKEW_SECONDS", "Handshakes"]

# Seconds a time stamp from another clock (a pod's bind-time) may lie ahead of ours. Further ahead
# it is treated as expired: a bind-time of 9999999999 must not keep a node busy for ever (issue 36).
CLOCK_SKEW_SECONDS = 60


class Handshakes:
    """Which nodes are busy with a handshake this pass (node -> pod UID)."""

    def __init__(self, config: GuardConfig, world: World, reports: Reporter) -> None:
        self.config = config
        self.world = world
        self.reports = reports

    async def busy(self, now: int) -> dict[str, str]:
        """Nodes waiting for the plugin's handshake (node -> pod); warn once about stuck ones."""
        timeout = self.config.scheduling.allocating_timeout_seconds
        busy: dict[str, str] = {}
        for record in list(self.world.allocating.values()):
            ahead = record.bind_time - now
            if ahead <= CLOCK_SKEW_SECONDS and now - record.bind_time < timeout:
                busy[record.node] = record.uid
                continue
            why = (
                f"its volcano.sh/bind-time {record.bind_time} is {ahead}s ahead of this controller's clock "
                f"(more than the {CLOCK_SKEW_SECONDS}s skew allowed), so it counts as timed out"
                if ahead > CLOCK_SKEW_SECONDS
                else f"the device plugin has not confirmed the GPU assignment within {timeout}s "
                "(bind-phase still allocating)"
            )
            await self.reports.events.once(
                self.world.pods[record.uid],
                "AllocationTimeout",
                (
                    f"{why}; node {record.node} is released for the next pod; check "
                    "the volcano-vgpu-device-plugin logs on that node"
                ),
            )
        for record in list(self.world.failed.values()):
            await self.reports.events.once(
                self.world.pods[record.uid],
                "DeviceAllocationFailed",
                (
                    f"the device plugin reported bind-phase=failed on node {record.node}; the pod keeps "
                    "its GPU reservation until it ends; delete it so its controller recreates it"
                ),
            )
        return busy

"""The Volcano model as a long-running task against an API server (``vgpu-guard sandbox --volcano-model``).

Every period (Volcano's ``schedulePeriod``, 1 s) the job controller syncs every Volcano Job
(jobs.py: its PodGroup, then its pods once Inqueue) and the scheduler runs one session
(session.py). An API error ends neither: it is logged and the next period tries again, as
Volcano's controllers retry.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from vgpu_guard.kube.errors import KubeError
from vgpu_guard.volcano.jobs import JobController
from vgpu_guard.volcano.session import SessionRecord, VolcanoScheduler

__all__ = ["PERIOD_SECONDS", "run_volcano", "session_lines"]

log = logging.getLogger("vgpu_guard.volcano")

# Volcano's default schedulePeriod (cmd/scheduler/app/options/options.go).
PERIOD_SECONDS = 1.0


def _log_session(record: SessionRecord) -> None:
    for outcome in record.binds:
        if outcome.result != "bound":
            log.warning(
                "assignment refused",
                extra={
                    "fields": {
                        "pod": outcome.pod,
                        "node": outcome.node,
                        "step": outcome.step,
                        "error": outcome.message,
                    }
                },
            )
    if record.changed:
        bound = sum(1 for b in record.binds if b.result == "bound")
        log.info(
            "session",
            extra={"fields": {"session": record.number, "bound": bound, "enqueued": len(record.enqueued)}},
        )


def session_lines(record: SessionRecord) -> list[str]:
    """One line per assignment the session wrote: bound, or refused with the API server's answer."""
    return [
        f"session {record.number}: {b.pod} -> {b.node} {b.ids} {b.result}"
        + (f" ({'PATCH' if b.step == 'patch' else 'Binding'}): {b.message}" if b.result != "bound" else "")
        for b in record.binds
    ]


async def run_volcano(
    jobs: JobController,
    scheduler: VolcanoScheduler,
    *,
    period: float = PERIOD_SECONDS,
    report: Callable[[SessionRecord], None] = _log_session,
) -> None:
    """Sync Jobs and run a session every ``period`` seconds, until cancelled; ``report`` is told
    of every session (logged by default)."""
    while True:
        try:
            await jobs.sync()
            report(await scheduler.session())
        except KubeError as e:
            log.warning("Volcano model: API error, retrying next period", extra={"fields": {"error": str(e)}})
        await asyncio.sleep(period)

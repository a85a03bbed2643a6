"""Property: whatever the interleaving, crash or race, no ledger state ever overcommits a GPU, and
the ledger converges to exactly the live bound pods.

Two controller replicas share one API double. Hypothesis draws a program of steps for the race
machine (``allocation_race.RaceMachine``): pod creates, deletes and completions, gangs, node
changes (cordon, NotReady, add, remove), device registration changes, the plugin confirming
allocations, and passes of either or both replicas concurrently, each possibly hit by an API fault
at one call (failed before reaching the server, or applied with the answer lost) or killed at one
step boundary (a crash before or after its k-th API call; the replica is then replaced by a fresh
one, as a restarted process would be). Every ledger version the store ever holds is checked as it
is written. ``VGPU_GUARD_LONG=1`` (or ``pytest --long``) runs many more programs; the 100,000-
operation seeded run of the same machine is tests/reliability/test_allocation_safety.py.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, Literal, cast

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.controller.allocation_race import RaceMachine

LONG = bool(os.environ.get("VGPU_GUARD_LONG"))

pod_specs = st.tuples(st.sampled_from([4096, 8192, 12288, 24576]), st.sampled_from([1, 1, 1, 2]))
disturbance = st.one_of(
    st.none(),
    st.tuples(
        st.just("fault"),
        st.tuples(
            st.sampled_from(["bind", "replace", "create", "patch", "list"]),
            st.sampled_from(["before", "after"]),
            st.integers(0, 3),
        ),
    ),
    st.tuples(st.just("crash"), st.tuples(st.integers(0, 30), st.sampled_from(["before", "after"]))),
)
step = st.one_of(
    st.tuples(st.just("create"), pod_specs),
    st.tuples(st.just("gang"), st.integers(2, 3)),
    st.tuples(st.just("delete"), st.integers(0, 30)),
    st.tuples(st.just("finish"), st.integers(0, 30)),
    st.tuples(
        st.just("node"),
        st.tuples(
            st.sampled_from(["cordon", "uncordon", "notready", "ready", "add", "remove"]), st.integers(0, 5)
        ),
    ),
    st.tuples(
        st.just("register"),
        st.tuples(st.sampled_from(["grow", "shrink", "add-gpu", "remove-gpu", "split"]), st.integers(0, 5)),
    ),
    st.tuples(st.just("plugin"), st.none()),
    st.tuples(
        st.just("pass"),
        st.tuples(
            st.sampled_from(["r1", "r2", "both"]),
            disturbance,
            st.integers(0, 25),
            st.one_of(st.none(), st.tuples(pod_specs, st.integers(0, 12), st.booleans())),
        ),
    ),
)


async def run_program(steps: list[tuple[str, Any]]) -> None:
    machine = RaceMachine()
    for kind, arg in steps:
        if kind == "create":
            machine.create(*arg)
        elif kind == "gang":
            machine.gang(arg)
        elif kind in ("delete", "finish"):
            machine.end(arg, cast(Literal["delete", "finish"], kind))  # the branch's test: one of the two
        elif kind == "node":
            machine.node(*arg)
        elif kind == "register":
            machine.register(*arg)
        elif kind == "plugin":
            machine.plugin()
        elif kind == "pass":
            who, disturb, lag, inject = arg
            fault = disturb[1] if disturb and disturb[0] == "fault" else None
            crash = disturb[1] if disturb and disturb[0] == "crash" else None
            injected = None if inject is None else (inject[0][0], inject[0][1], inject[1])
            urgent = inject is not None and inject[2]
            await machine.run_pass(who, lag=lag, fault=fault, crash=crash, inject=injected, urgent=urgent)
    await machine.converge_and_check()


@settings(
    max_examples=400 if LONG else 25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(step, min_size=1, max_size=60 if LONG else 25))
def test_no_interleaving_crash_or_race_overcommits(steps: list[tuple[str, Any]]) -> None:
    asyncio.run(run_program(steps))

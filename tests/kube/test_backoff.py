"""The one retry policy (kube/backoff.py): exponential per key, bounded, jittered downwards only."""

from __future__ import annotations

import random

import pytest

from vgpu_guard.kube.backoff import Backoff


def test_delays_double_per_failure_of_a_key_up_to_the_maximum() -> None:
    backoff = Backoff(initial=1.0, maximum=8.0, jitter=0.0)
    assert [backoff.next("a") for _ in range(6)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert backoff.attempts("a") == 6


def test_keys_are_independent_and_reset_forgets_only_its_own() -> None:
    backoff = Backoff(initial=1.0, maximum=8.0, jitter=0.0)
    backoff.next("a"), backoff.next("a"), backoff.next("a")
    assert backoff.next("b") == 1.0
    backoff.reset("a")
    assert (backoff.attempts("a"), backoff.attempts("b")) == (0, 1)
    assert backoff.next("a") == 1.0
    assert backoff.failing() == 2


def test_the_default_key_serves_a_loop_that_retries_one_thing() -> None:
    backoff = Backoff(initial=0.5, maximum=4.0, jitter=0.0)
    assert (backoff.next(), backoff.next()) == (0.5, 1.0)
    backoff.reset()
    assert backoff.next() == 0.5


def test_jitter_only_shortens_and_a_long_outage_never_overflows() -> None:
    backoff = Backoff(initial=1.0, maximum=30.0, jitter=0.2, rng=random.Random(7))
    delays = [backoff.next("k") for _ in range(2_000)]
    assert all(0.8 <= d <= 30.0 for d in delays)
    assert min(delays[10:]) >= 24.0  # capped at 30 s, jittered down by at most 20 %


@pytest.mark.parametrize(
    ("initial", "maximum", "factor", "jitter"), [(0, 1, 2, 0), (2, 1, 2, 0), (1, 2, 0.5, 0), (1, 2, 2, 1)]
)
def test_a_policy_that_cannot_work_is_refused_with_its_values(
    initial: float, maximum: float, factor: float, jitter: float
) -> None:
    with pytest.raises(ValueError):
        Backoff(initial=initial, maximum=maximum, factor=factor, jitter=jitter)

"""The arbiter's refusal streaks (webhook/stuck_refusals.py): once per streak, bounded memory."""

from __future__ import annotations

from vgpu_guard.webhook.stuck_refusals import RefusalStreaks


def test_the_fifth_refusal_within_the_window_is_due_once_per_streak() -> None:
    streaks = RefusalStreaks(threshold=5, window=120)
    answers = [streaks.refused("uid-a", now=float(t)) for t in range(8)]
    assert answers == [None, None, None, None, 5, None, None, None]
    # The streak ends after the window: a new one starts, and is due again at its fifth.
    later = [streaks.refused("uid-a", now=200.0 + t) for t in range(5)]
    assert later == [None, None, None, None, 5]


def test_refusals_spread_wider_than_the_window_are_never_due() -> None:
    streaks = RefusalStreaks(threshold=5, window=120)
    assert all(streaks.refused("uid-a", now=t * 61.0) is None for t in range(10))


def test_a_reservation_ends_the_streak() -> None:
    streaks = RefusalStreaks(threshold=3, window=120)
    streaks.refused("uid-a", now=0.0)
    streaks.refused("uid-a", now=1.0)
    streaks.reserved("uid-a")
    assert streaks.refused("uid-a", now=2.0) is None


def test_memory_is_bounded_by_forgetting_the_oldest_streaks() -> None:
    streaks = RefusalStreaks(threshold=2, window=120, capacity=3)
    for uid in ("a", "b", "c", "d"):
        streaks.refused(uid, now=0.0)
    assert streaks.refused("a", now=1.0) is None  # forgotten: this is its first refusal again
    assert streaks.refused("d", now=1.0) == 2

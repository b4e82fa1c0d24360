"""The retention policy's decisions: how much a size pass removes, how slices are paced."""

from __future__ import annotations

import pytest

from coordinator.retention import (
    BUSY_PAUSE,
    BUSY_SLICE,
    IDLE_SLICE,
    TARGET_FRACTION,
    Pacer,
    events_over_budget,
)


def test_nothing_is_removed_under_the_budget():
    assert events_over_budget(used_bytes=900, events=9, max_size=1000) == 0
    assert events_over_budget(used_bytes=1000, events=10, max_size=1000) == 0
    assert events_over_budget(used_bytes=5000, events=0, max_size=1000) == 0


def test_over_the_budget_enough_oldest_events_go_to_reach_the_target():
    # 100 bytes an event, 1,500 bytes in use, budget 1,000: down to 800 -> 7 events
    assert events_over_budget(used_bytes=1500, events=15, max_size=1000) == 7
    remove = events_over_budget(used_bytes=2_000_000_000, events=6_000_000, max_size=10**9)
    assert (2_000_000_000 / 6_000_000) * (6_000_000 - remove) <= TARGET_FRACTION * 10**9
    assert events_over_budget(used_bytes=10**9, events=3, max_size=10) == 3  # never more than there are


def test_slices_are_sized_by_time_and_move_gradually():
    pacer = Pacer(first=100, least=10, most=1000)
    pacer.after(took=BUSY_SLICE * 4, busy=True)  # four times too slow: halved, not quartered
    assert pacer.size == 50
    for _ in range(20):
        pacer.after(took=BUSY_SLICE * 100, busy=True)
    assert pacer.size == 10  # never below least
    for _ in range(20):
        pacer.after(took=IDLE_SLICE / 100, busy=False)
    assert pacer.size == 1000  # nor above most


def test_while_requests_flow_compaction_pauses_after_each_slice_and_not_when_idle():
    pacer = Pacer(first=100, least=10, most=1000)
    assert pacer.after(took=0.0001, busy=True) == BUSY_PAUSE  # at least the least pause
    assert pacer.after(took=0.004, busy=True) == pytest.approx(0.016)  # four times the slice: a fifth of the writer's time
    assert pacer.after(took=0.004, busy=False) == 0.0

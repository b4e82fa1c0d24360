"""The ledger's retention policy, decided: how much to remove, and how to pace it.

``[ledger] keep`` and ``max_size`` are applied by the coordinator itself (server.py's
``_retain``): events older than ``keep`` go once an hour, and when the ledger's pages in
use pass ``max_size`` the oldest events go, whatever their age, until it is back under
``TARGET_FRACTION`` of the budget.  Either way a registry snapshot is saved first and
only what it covers is removed (``Ledger.compact`` keeps what restarts read).

Removal and the vacuum that returns the space run in slices, one write transaction
each, from a worker thread.  An append that arrives during a slice waits for it, so
slices are sized by time, not rows: ``Pacer`` grows or shrinks them to hold the write
lock about ``BUSY_SLICE`` while requests flow, and pauses between them so that
compaction takes at most about a fifth of the writer's time; when no request came for
a while, slices grow to ``IDLE_SLICE`` and follow each other without a pause.

Pure: the shell measures (pages, counts, clocks) and runs the slices.
"""

from __future__ import annotations

import math

AGE_PASS_EVERY = 3600.0  # seconds between removals of events older than `keep`
SIZE_CHECK_EVERY = 2.0  # seconds between looks at the pages in use (cheap pragmas)
TARGET_FRACTION = 0.8  # a size pass removes down to this fraction of max_size
BUSY_SLICE = 0.001  # seconds a slice may hold the write lock while requests flow
IDLE_SLICE = 0.020  # ... and while none came for IDLE_AFTER
IDLE_AFTER = 1.0  # seconds without a request before compaction takes bigger slices
BUSY_PAUSE = 0.005  # least pause between slices while requests flow
BUSY_SHARE = 0.2  # share of the writer's time compaction may take while requests flow


def events_over_budget(used_bytes: int, events: int, max_size: int) -> int:
    """How many of the oldest events to remove so that the pages in use fall under
    ``TARGET_FRACTION`` of ``max_size``, at the ledger's mean bytes per event (0 when
    under budget).  An estimate: the next size check corrects it either way."""
    if used_bytes <= max_size or events <= 0:
        return 0
    per_event = used_bytes / events
    return min(events, math.ceil((used_bytes - TARGET_FRACTION * max_size) / per_event))


class Pacer:
    """The size of the next slice (rows or pages) and the pause before it, from how
    long the last one took."""

    def __init__(self, first: int, least: int, most: int) -> None:
        self.size = first
        self.least = least
        self.most = most

    def after(self, took: float, busy: bool) -> float:
        """The last slice of ``self.size`` took ``took`` seconds; ``busy``: a request came
        recently.  Sets the next size; returns the pause before it (seconds)."""
        target = BUSY_SLICE if busy else IDLE_SLICE
        scale = target / took if took > 0 else 2.0
        scale = min(2.0, max(0.5, scale))  # move gradually: one slow slice is often noise
        self.size = int(min(self.most, max(self.least, self.size * scale)))
        if not busy:
            return 0.0
        return max(BUSY_PAUSE, took * (1 - BUSY_SHARE) / BUSY_SHARE)

"""The pause between two questions a client asks the coordinator about a job it waits for.

A check of a file or of a `python -c pass` ends tens of milliseconds after it was
accepted; a test suite or a landing takes seconds or minutes.  A fixed 0.2 s pause made
every quick check wait up to 0.2 s longer than its job; a short fixed pause would ask
about a long job hundreds of times a minute.  So the pause starts short and doubles up to
``LONGEST_PAUSE``: a quick job is answered soon after it ends, a long one is asked about
every 0.2 s as before.
"""

from __future__ import annotations

import time

FIRST_PAUSE = 0.01
LONGEST_PAUSE = 0.2


class Backoff:
    """``pause()`` sleeps ``FIRST_PAUSE``, then twice as long each time, at most ``LONGEST_PAUSE``."""

    def __init__(self, first: float = FIRST_PAUSE, longest: float = LONGEST_PAUSE) -> None:
        self.next = first
        self.longest = longest

    def pause(self) -> None:
        time.sleep(self.next)  # polling a job's state; its caller bounds the wait
        self.next = min(self.next * 2, self.longest)

"""The agent lifecycle: a session's states and the only ways it moves between them.

Theory
------
A session is ``alive`` from its ``hello`` until one of two things ends it:

* it went **silent** (no heartbeat for heartbeat x liveness, or a one-shot session's
  TTL ran out).  The holder may still be running and writing, so it becomes ``stale``
  and its paths are *held*: released with ``claim.expired`` and kept from everyone else
  for ``lock_delay`` seconds;
* it **left** (said bye, or its watched local process exited).  Nothing of it can still
  write, so it becomes ``gone`` and its paths are released with ``claim.released``, free
  at once.

Rule 1: ``stale`` and ``gone`` are final.  A stale or gone session never comes back: an
agent that speaks again opens a new session (``hello`` says why).

Rule 2: every transition is a row of ``TRANSITIONS``: the state it leaves, the event, the
state it enters, the ledger record that says so and how its claims are released.  A
pair not in the table is illegal: ``transition`` raises ``IllegalTransition`` and
changes nothing (the core asks it before it records anything).

Rule 3: replay follows the ledger.  The registry applies ``agent.stale``/``agent.left``
through the same table; a record the table refuses (it cannot have been written by the
core, which asks first) changes nothing rather than stopping a restart.
"""

from __future__ import annotations

import msgspec

from ledger import records as rec
from protocol.errors import LocalError

ALIVE, STALE, GONE = "alive", "stale", "gone"
STATES = (ALIVE, STALE, GONE)

SILENT = "silent"  # no heartbeat within the lease, or a one-shot TTL ran out
LEFT = "left"  # bye, or the watched process exited
EVENTS = (SILENT, LEFT)


class Transition(msgspec.Struct, frozen=True):
    to: str
    record: type[rec.AgentStale] | type[rec.AgentLeft]  # what the ledger says
    release: type[rec.ClaimExpired] | type[rec.ClaimReleased]  # how its claims go
    hold: bool  # keep its paths from everyone else for lock_delay


TRANSITIONS: dict[tuple[str, str], Transition] = {
    (ALIVE, SILENT): Transition(STALE, rec.AgentStale, rec.ClaimExpired, hold=True),
    (ALIVE, LEFT): Transition(GONE, rec.AgentLeft, rec.ClaimReleased, hold=False),
}

# The event each ending record stands for (replay reads records, not events).
EVENT_OF: dict[type, str] = {t.record: event for (_, event), t in TRANSITIONS.items()}


class IllegalTransition(LocalError):
    """An event the session's state does not accept; nothing was changed."""


def transition(state: str, event: str) -> Transition:
    """The row for (``state``, ``event``); raises ``IllegalTransition`` if there is none."""
    found = TRANSITIONS.get((state, event))
    if found is None:
        raise IllegalTransition(f"a session that is {state} cannot become {event} (only alive sessions end)")
    return found

"""What the pure core asks the shell to do.

The core never performs I/O: ``Core.receive`` and ``Core.tick`` return a list of these.
The shell's one rule: append every ``Record`` of a batch to the ledger (one
transaction, fsync'd when any record is ``durable``) *before* it performs any ``Send``
or ``Publish`` of that batch.
"""

from __future__ import annotations

from typing import Any

import msgspec


class Record(msgspec.Struct, frozen=True, kw_only=True):
    """A ledger event.  The registry changes only by applying these (see registry.py)."""

    kind: str
    agent: str | None = None
    session: str | None = None
    token: int | None = None
    data: dict[str, Any] = msgspec.field(default_factory=dict)
    durable: bool = False  # commit with a full fsync (token reservations, epochs)


class Send(msgspec.Struct, frozen=True):
    peer: Any  # opaque to the core: the shell's routing id
    message: Any


class Publish(msgspec.Struct, frozen=True, kw_only=True):
    kind: str
    message: Any  # a protocol.messages.Publication


class WatchPid(msgspec.Struct, frozen=True, kw_only=True):
    session: str
    pid: int
    pid_started: float | None = None


class UnwatchPid(msgspec.Struct, frozen=True, kw_only=True):
    session: str


class StopServing(msgspec.Struct, frozen=True, kw_only=True):
    reason: str


class StartJob(msgspec.Struct, frozen=True, kw_only=True):
    """Run a check, a verify suite or a plan (the shell's job runner does the work)."""

    job: str
    kind: str  # "check" | "verify" | "plan"
    agent: str | None
    request: Any  # the Check / Verify / PlanRun message


class Bug(msgspec.Struct, frozen=True, kw_only=True):
    """The core hit a bug handling a message; it answered ``internal`` and kept going.
    The shell logs ``text`` (a traceback)."""

    text: str


Effect = Record | Send | Publish | WatchPid | UnwatchPid | StopServing | StartJob | Bug

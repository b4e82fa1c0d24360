"""What the pure core asks the shell to do.

The core never performs I/O: ``Core.receive`` and ``Core.tick`` return a list of these.
The shell's one rule: append every ``Record`` of a batch to the ledger (one
transaction, fsync'd when any record's kind is ``DURABLE``) *before* it performs any
``Send`` or ``Publish`` of that batch.  ``Record`` is the ledger's own record type: the
typed catalogue of ledger/records.py.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ledger.records import Record


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

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


class Send(msgspec.Struct, frozen=True, gc=False):  # untracked: see protocol.messages.Message
    peer: Any  # opaque to the core: the shell's routing id
    message: Any


class Publish(msgspec.Struct, frozen=True, kw_only=True, gc=False):
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


class CheckUncommitted(msgspec.Struct, frozen=True, kw_only=True):
    """A session ended with claims: look for uncommitted changes to the released
    ``patterns`` in its ``worktree`` and report them (``Core.uncommitted_at_end``)."""

    session: str
    worktree: str
    patterns: list[str]


Effect = Record | Send | Publish | WatchPid | UnwatchPid | StopServing | StartJob | Bug | CheckUncommitted


class Outbox:
    """The effects of the core call in progress, in order: the core and its components
    append here, the call's entry point hands them to the shell (``flush``).

    ``mark`` is where the current message's effects begin, so the entry point can tell
    whether a handler recorded anything before it refused (it must not)."""

    def __init__(self) -> None:
        self.effects: list[Effect] = []
        self.mark = 0

    def append(self, effect: Effect) -> None:
        self.effects.append(effect)

    def begin_message(self) -> None:
        self.mark = len(self.effects)

    def recorded_since_mark(self) -> bool:
        return any(isinstance(e, Record) for e in self.effects[self.mark :])

    def flush(self) -> list[Effect]:
        out, self.effects = self.effects, []
        self.mark = 0
        return out

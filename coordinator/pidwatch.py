"""Watching local agents' processes, so a dead agent's claims are free at once.

A pid alone is not an identity: pids are reused.  Each watch carries the process's
create time as the agent saw it (psutil's ``create_time``); a process at that pid with
another create time is a different process, and the agent's is gone.

On Linux a pidfd (``os.pidfd_open``) becomes readable when the process exits: the
kernel pushes the exit to us, one fd per agent, no polling.  Elsewhere, or when pidfds
are unavailable, a task polls psutil every ``poll_interval``.
"""

from __future__ import annotations

import os
from typing import Awaitable, Callable

import trio

from protocol.procs import is_same_process, process_started

OnExit = Callable[[str, str], Awaitable[None]]  # (session, detail: how it was seen, "" for a plain exit)


class PidWatcher:
    def __init__(self, nursery: trio.Nursery, on_exit: OnExit, poll_interval: float = 0.5) -> None:
        self._nursery = nursery
        self._on_exit = on_exit
        self._poll_interval = poll_interval
        self._scopes: dict[str, trio.CancelScope] = {}

    def __len__(self) -> int:
        return len(self._scopes)

    def watch(self, session: str, pid: int, started: float | None) -> None:
        self.unwatch(session)
        scope = trio.CancelScope()
        self._scopes[session] = scope
        self._nursery.start_soon(self._watch_one, scope, session, pid, started)

    def unwatch(self, session: str) -> None:
        scope = self._scopes.pop(session, None)
        if scope is not None:
            scope.cancel()

    async def _watch_one(self, scope: trio.CancelScope, session: str, pid: int, started: float | None) -> None:
        with scope:
            detail = await self._wait_exit(pid, started)
        if not scope.cancel_called:
            self._scopes.pop(session, None)
            await self._on_exit(session, detail)

    async def _wait_exit(self, pid: int, started: float | None) -> str:
        pidfd = None
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            return "it was not running when watched"
        except (AttributeError, OSError, OverflowError):  # OverflowError: a pid past pid_t (the core refuses one)
            pidfd = None  # no pidfd support: poll instead
        try:
            # Check identity after opening: the fd now pins *this* process.
            if not is_same_process(pid, started):
                return "its pid belongs to another process now" if process_started(pid) else "it was not running when watched"
            if pidfd is not None:
                await trio.lowlevel.wait_readable(pidfd)
                return ""  # the kernel told us: a plain exit, nothing to add
            while is_same_process(pid, started):
                await trio.sleep(self._poll_interval)
            return "seen by polling"
        finally:
            if pidfd is not None:
                trio.lowlevel.notify_closing(pidfd)
                os.close(pidfd)

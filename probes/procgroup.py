"""Process groups: a command runs in a group of its own, and ends with nothing left.

A command probe starts its child with ``start_new_session=True`` (``open_in_own_group``),
so the child leads a new process group whose id is its pid, and everything it spawns
joins that group unless it detaches with its own ``setsid``.  ``end_process_group``
then leaves nothing of the group running: SIGTERM, then SIGKILL after a grace, also for
stragglers still in the group after the leader exited.
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import TYPE_CHECKING, Any

import psutil

if TYPE_CHECKING:  # trio is imported where it runs: `lockstep check` validates with this
    import trio  # module's callers and would otherwise pay trio's import (~50 ms) for nothing

TERM_GRACE = 0.5  # seconds between SIGTERM and SIGKILL to a command's process group
STRAGGLER_POLL = 0.02  # seconds between checks that a finished command's group is empty


async def open_in_own_group(argv: list[str], **options: Any) -> trio.Process:
    """``argv`` started with stdin from /dev/null, stdout and stderr piped, in a new
    session (its own process group); ``options`` as for ``trio.lowlevel.open_process``."""
    import trio

    return await trio.lowlevel.open_process(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        **options,
    )


def signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` (0: just test) to the group; False when nothing is in it."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        # PermissionError: the id now belongs to someone else's group, not ours.
        return False
    return True


def live_group_members(pgid: int) -> list[int]:
    """Pids in process group ``pgid`` that are not zombies.

    ``killpg(pgid, 0)`` alone cannot tell: a zombie is still a member, and orphans
    become zombies for good when PID 1 does not reap them (true in some containers).
    """
    if not os.path.isdir("/proc"):  # not Linux: psutil does the same, slower
        found = []
        for process in psutil.process_iter(["status"]):
            try:
                if os.getpgid(process.pid) == pgid and process.info["status"] != psutil.STATUS_ZOMBIE:
                    found.append(process.pid)
            except (ProcessLookupError, PermissionError):
                continue
        return found
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as file:
                stat_line = file.read()
        except OSError:  # exited meanwhile
            continue
        # Fields after "(comm)": state ppid pgrp ...; comm itself may hold spaces.
        fields = stat_line[stat_line.rindex(b")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != b"Z":
            found.append(int(entry))
    return found


async def group_alive(pgid: int) -> bool:
    import trio

    if not signal_group(pgid, 0):
        return False
    return bool(await trio.to_thread.run_sync(live_group_members, pgid))


async def end_process_group(process: trio.Process, grace: float = TERM_GRACE) -> None:
    """Leave nothing of ``process``'s group running: SIGTERM, then SIGKILL after
    ``grace`` seconds.  Idempotent; the leader is reaped before it returns.

    The leader was started with ``start_new_session`` so the group id is its pid.  The
    id cannot be reused while any member exists, so signalling it after the leader
    is reaped reaches only the command's own stragglers.
    """
    import trio

    pgid = process.pid
    if process.returncode is None:
        signal_group(pgid, signal.SIGTERM)
        with trio.move_on_after(grace):
            await process.wait()
        signal_group(pgid, signal.SIGKILL)  # members that ignored or trapped SIGTERM
        await process.wait()
    elif await group_alive(pgid):
        signal_group(pgid, signal.SIGTERM)
        with trio.move_on_after(grace):
            while await group_alive(pgid):
                await trio.sleep(STRAGGLER_POLL)
        signal_group(pgid, signal.SIGKILL)

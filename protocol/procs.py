"""Process identity: a pid plus its create time, so a reused pid is never mistaken
for the process an agent registered.  Both sides need it: the client sends the create
time with its pid, the coordinator's pid watch compares it."""

from __future__ import annotations

import psutil

CREATE_TIME_SLACK = 0.05  # seconds; both sides compute it with the same formula


def process_started(pid: int) -> float | None:
    """The create time of ``pid``, or None if there is no such process."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def is_same_process(pid: int, started: float | None) -> bool:
    now_started = process_started(pid)
    if now_started is None:
        return False
    try:
        if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return False
    except psutil.Error:
        return False
    return started is None or abs(now_started - started) <= CREATE_TIME_SLACK

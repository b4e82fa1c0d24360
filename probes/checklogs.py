"""The whole output of every check, kept as a file, with ring-like retention.

A report is cut to a budget (``probes.output``); the cut is what agents read first,
the file is what they read when the cut is not enough.  A ``command`` probe given a
``log`` path writes there everything its command printed, stdout and stderr
interleaved as they arrived, unbounded by the in-memory capture; its result names the
file (``details["log"]``), and so do the verify report and its JSON.

Layout: ``<state dir>/checks/<job>/<check>.log``, one directory per job, so ``lockstep
verify --full JOB`` lists one directory.  Retention is a ring over job directories:
after each job the oldest are removed until at most ``KEEP_RUNS`` remain and together
they hold at most ``KEEP_BYTES`` (the newest, the job just run, is always kept, even
when it alone is larger).  "Oldest" is by modification time, then by name.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

LOG_DIR = "checks"
KEEP_RUNS = 100
KEEP_BYTES = 256 * 1024 * 1024

_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


def _part(name: str) -> str:
    """``name`` as one safe path component (job ids and check names are already safe;
    anything else is made so rather than trusted)."""
    safe = _SAFE.sub("_", name).lstrip(".")
    return safe or "_"


def logs_root(state_dir: str | Path) -> Path:
    return Path(state_dir) / LOG_DIR


def job_dir(state_dir: str | Path, job: str) -> Path:
    return logs_root(state_dir) / _part(job)


def log_path(state_dir: str | Path, job: str, check: str) -> Path:
    """Where the whole output of check ``check`` of job ``job`` goes."""
    return job_dir(state_dir, job) / f"{_part(check)}.log"


def job_logs(state_dir: str | Path, job: str) -> list[Path]:
    """The log files kept for ``job``, by name; [] if none (never run, or pruned)."""
    folder = job_dir(state_dir, job)
    try:
        return sorted(p for p in folder.iterdir() if p.suffix == ".log" and p.is_file())
    except (FileNotFoundError, NotADirectoryError):
        return []


def _size(folder: Path) -> int:
    total = 0
    for entry in os.scandir(folder):
        try:
            total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    return total


def prune(state_dir: str | Path, keep_runs: int = KEEP_RUNS, keep_bytes: int = KEEP_BYTES) -> list[str]:
    """Remove the oldest job directories beyond the ring's bounds; returns the job
    directories removed, oldest first.  The newest one is always kept."""
    root = logs_root(state_dir)
    try:
        folders = [p for p in root.iterdir() if p.is_dir()]
    except FileNotFoundError:
        return []

    def age(folder: Path) -> tuple[int, str]:
        try:
            return (folder.stat().st_mtime_ns, folder.name)
        except OSError:
            return (0, folder.name)

    folders.sort(key=age, reverse=True)  # newest first
    kept_bytes = 0
    removed = []
    full = False  # a ring: once one is dropped, every older one goes too
    for rank, folder in enumerate(folders):
        size = _size(folder)
        full = full or (rank > 0 and (rank >= keep_runs or kept_bytes + size > keep_bytes))
        if not full:
            kept_bytes += size
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder.name)
    return removed[::-1]

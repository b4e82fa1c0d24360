"""Landing a branch through the coordinator's merge queue, as a blocking call.

``land(agent, ...)`` puts a branch in the queue and follows it to its verdict; the CLI
(``lockstep land``) and the MCP tool ``land`` are thin layers over it.  A landing can
wait in the queue and then run the checks for minutes, so only each request is bound by
the connect timeout; while the coordinator restarts (the queue resumes from its ledger)
the client keeps asking for ``RESTART_PATIENCE`` seconds, following a coordinator that
came back at another endpoint.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

from protocol import messages as m
from protocol.discovery import Place, locate
from protocol.errors import UsageError
from protocol.gitrefs import git_dirs, head_branch, read_ref

from .oneshot import CoordinatorUnreachable, expect, follow_coordinator, open_oneshot

POLL_INTERVAL = 0.2
RESTART_PATIENCE = 60.0  # seconds to keep asking while the coordinator is away

Progress = Callable[[m.Landing], None]


def branch_to_land(place: Place, branch: str | None) -> tuple[str, str]:
    """(refs/heads/NAME, its commit): ``branch``, else the worktree's; bad input if
    there is none or it does not exist."""
    if not place.in_git:
        raise UsageError(f"{place.worktree} is not in a git repository: there is no branch to land")
    if branch is None:
        ref = head_branch(place.worktree)
        if ref is None:
            raise UsageError("this worktree has no branch checked out (a detached HEAD): name one with --branch B")
    else:
        ref = branch if branch.startswith("refs/") else f"refs/heads/{branch}"
    dirs = git_dirs(place.worktree)
    common = dirs[1] if dirs else Path(place.repo_id)
    head = read_ref(common, ref)
    if head is None:
        raise UsageError(f"no branch {ref.removeprefix('refs/heads/')!r} in this repository")
    return ref, head


def land(agent: str, *, branch: str | None = None, endpoint: str | None = None, on_progress: Progress | None = None) -> m.Landing:
    """Queue the branch and follow it; returns the decided ``Landing``."""
    place = locate()
    ref, head = branch_to_land(place, branch)
    venv = os.environ.get("VIRTUAL_ENV", "")
    with open_oneshot(agent, endpoint=endpoint) as session:
        accepted = expect(session.call(lambda s: m.Land(session=s, branch=ref, head=head, cwd=os.getcwd(), venv=venv)), m.Accepted)
        fixed = endpoint or os.environ.get("LOCKSTEP_ENDPOINT")
        return follow(session.conn, accepted.job, None if fixed else place, on_progress)


def follow(conn, job: str, place: Place | None, on_progress: Progress | None = None) -> m.Landing:
    """Ask where landing ``job`` stands until it is decided."""
    away_since: float | None = None
    while True:
        try:
            landing = expect(conn.request(m.LandQuery(job=job)), m.Landing)
        except CoordinatorUnreachable:
            now = time.monotonic()
            away_since = away_since or now
            if now - away_since > RESTART_PATIENCE:
                raise
            follow_coordinator(place, conn)
            continue
        away_since = None
        if on_progress is not None:
            on_progress(landing)
        if landing.stage == "finished":
            return landing
        time.sleep(POLL_INTERVAL)

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
import subprocess
import time
from pathlib import Path
from typing import Callable

from protocol import curve
from protocol import messages as m
from protocol.discovery import Place, locate
from protocol.errors import UsageError
from protocol.gitrefs import git_dirs, head_branch, read_ref

from .oneshot import CoordinatorUnreachable, expect, follow_coordinator, open_oneshot
from .polling import Backoff

RESTART_PATIENCE = 60.0  # seconds to keep asking while the coordinator is away
BUNDLE_LIMIT = m.MAX_MESSAGE_BYTES - 16 * 1024  # a remote clone's branch travels in its land request

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


def branch_bundle(place: Place, ref: str, limit: int = BUNDLE_LIMIT) -> tuple[bytes, str]:
    """(``ref`` as a git bundle, "") for a coordinator on another host: the commits the
    clone's remote-tracking branches lack (those the coordinator's repository has when
    this clone came from it); (b"", why not) when it would not fit in one message."""
    made = subprocess.run(
        ["git", "bundle", "create", "-q", "-", ref, "--not", "--remotes"], cwd=place.worktree, capture_output=True, timeout=120,
    )
    if made.returncode != 0:  # e.g. nothing the remotes lack: the branch is there already
        return b"", (made.stderr.decode(errors="replace").strip().splitlines() or ["git bundle failed"])[-1]
    if len(made.stdout) > limit:
        return b"", f"the branch's commits make a {len(made.stdout)}-byte bundle, over the {limit} bytes one message may carry"
    return made.stdout, ""


def land(agent: str, *, branch: str | None = None, endpoint: str | None = None, on_progress: Progress | None = None,
         on_notice: Callable[[str], None] | None = None) -> m.Landing:
    """Queue the branch and follow it; returns the decided ``Landing``.  From a clone on
    another host the branch goes along as a bundle (the coordinator merges on its host)."""
    place = locate()
    ref, head = branch_to_land(place, branch)
    venv = os.environ.get("VIRTUAL_ENV", "")
    with open_oneshot(agent, endpoint=endpoint) as session:
        bundle = b""
        if curve.has_keys(session.conn.endpoint):  # joined: the coordinator's host lacks this clone's branches
            bundle, why = branch_bundle(place, ref)
            if not bundle and on_notice is not None:
                on_notice(f"lockstep land: {ref.removeprefix('refs/heads/')} is not sent with the landing ({why})")
        accepted = expect(session.call(lambda s: m.Land(session=s, branch=ref, head=head, cwd=os.getcwd(), venv=venv, bundle=bundle)), m.Accepted)
        fixed = endpoint or os.environ.get("LOCKSTEP_ENDPOINT")
        return follow(session.conn, accepted.job, None if fixed else place, on_progress)


def follow(conn, job: str, place: Place | None, on_progress: Progress | None = None) -> m.Landing:
    """Ask where landing ``job`` stands until it is decided."""
    away_since: float | None = None
    backoff = Backoff()
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
        backoff.pause()

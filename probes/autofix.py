"""Autofix checks of a verify run: after success only, in their agent's lane.

A formatter run after a failing test rewrites the lines the failure report points at,
and one run over the whole worktree rewrites files other agents hold.  So, for a verify
run's ``autofix`` checks (``[checks.NAME] autofix = true``):

1. They run only when every read-only check passed; otherwise each is reported as
   ``not run`` (a fail: the run is failing already) and nothing is changed.
2. Each runs alone (the pool's autofix lock) between a ``probes.changes`` snapshot of
   the worktree and a diff against it: the paths it changed go in its result
   (``details.changed``), so the ``verify.result`` ledger event lists them.
3. A changed path another agent holds (an exclusive claim, or a stale holder's lock
   delay: ``holder_of``) is put back as it was; the result lists it
   (``details.undone``, with its holder) and fails with ``changed held paths``, so the
   verify needs the agent's attention instead of passing with someone else's file
   rewritten.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Awaitable, Callable

import msgspec
import trio

from probes import changes
from probes.model import CHANGED_HELD_PATHS, FAIL, NOT_RUN, ProbeResult, ProbeSpec
from probes.pool import ProbePool

HolderOf = Callable[[str], "str | None"]  # repo-relative path -> another agent holding it
OnResult = Callable[[ProbeResult], Awaitable[None]]


def not_run(spec: ProbeSpec, failed: list[str]) -> ProbeResult:
    return ProbeResult(
        name=spec.name, kind=spec.kind, target=str(spec.params.get("shell") or spec.params.get("argv") or ""),
        verdict=FAIL, finding=NOT_RUN,
        reason=f"not run: autofix checks run only after every read-only check passed ({', '.join(failed)} failed).",
    )


async def run_fixers(
    pool: ProbePool, specs: list[ProbeSpec], worktree: Path, failed: list[str], holder_of: HolderOf, on_result: OnResult,
) -> list[ProbeResult]:
    """Run (or skip) the autofix ``specs`` of one verify run; see the module docstring.
    ``failed`` names the read-only checks that failed."""
    results = []
    for spec in specs:
        if failed:
            result = not_run(spec, failed)
        else:
            result = await _run_one(pool, spec, worktree, holder_of)
        await on_result(result)
        results.append(result)
    return results


async def _run_one(pool: ProbePool, spec: ProbeSpec, worktree: Path, holder_of: HolderOf) -> ProbeResult:
    try:
        before = await trio.to_thread.run_sync(changes.snapshot, worktree)
    except (OSError, subprocess.SubprocessError) as exc:
        return msgspec.structs.replace(not_run(spec, []), reason=f"not run: its changes could not be tracked ({exc}).")
    result = await pool.run(spec)
    try:
        changed = await trio.to_thread.run_sync(changes.changed_paths, worktree, before)
    except (OSError, subprocess.SubprocessError) as exc:
        reason = f"{result.reason} Its changes could not be listed ({exc})."
        return msgspec.structs.replace(result, verdict=FAIL, finding=result.finding or CHANGED_HELD_PATHS, reason=reason)
    details = {**result.details, "changed": changed}
    held = [(path, holder) for path in changed if (holder := holder_of(path)) is not None]
    if not held:
        return msgspec.structs.replace(result, details=details)
    undone, kept = [], []
    for path, holder in held:
        ok = await trio.to_thread.run_sync(changes.undo, worktree, path, before)
        (undone if ok else kept).append({"path": path, "holder": holder})
    details["undone"] = undone
    if kept:
        details["not_undone"] = kept
    listed = ", ".join(f"{p['path']} (held by {p['holder']})" for p in undone + kept)
    reason = f"{spec.name} changed paths other agents hold: {listed}; " + (
        "those changes were undone." if not kept else "some could not be undone (too large to keep): fix them by hand."
    )
    return msgspec.structs.replace(result, verdict=FAIL, finding=CHANGED_HELD_PATHS, reason=reason, details=details)


"""What every probe kind uses: results, paths against the agent's worktree, hashing,
and the wrapper that runs a synchronous check in a worker process."""

from __future__ import annotations

import os
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import msgspec

from probes.model import FAIL, PASS, PROBE_CRASHED, ProbeError, ProbeResult, ProbeSpec
from probes.output import errors_first
from protocol.files import sha256_regular


class Params(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of every kind's params: unknown keys are refused, so a typo such as
    ``sha265`` is a ``ProbeError``, not a silently skipped check."""


def resolve(spec: ProbeSpec, path: str) -> Path:
    """``path`` made absolute against the agent's worktree (``spec.cwd``)."""
    return Path(spec.cwd or os.getcwd(), path)  # an absolute ``path`` wins in Path()


def worktree_top(cwd: Path) -> Path:
    """The top of the worktree holding ``cwd`` (resolved): the nearest directory with a
    ``.git`` entry (a linked worktree's is a file); ``cwd`` itself outside any."""
    cwd = cwd.resolve()
    for folder in (cwd, *cwd.parents):
        if os.path.lexists(folder / ".git"):
            return folder
    return cwd


def inside_worktree(spec: ProbeSpec, path: str) -> tuple[Path, Path | None]:
    """``path`` resolved against ``spec.cwd`` (symlinks followed) and, when that is
    outside the worktree holding ``spec.cwd``, that worktree's top (else None)."""
    top = worktree_top(Path(spec.cwd or os.getcwd()))
    target = resolve(spec, path).resolve()
    return target, (None if target == top or top in target.parents else top)


def make_result(
    spec: ProbeSpec,
    target: str,
    *,
    finding: str | None = None,
    reason: str = "",
    output: str = "",
    details: dict[str, Any] | None = None,
    exit_code: int | None = None,
    duration: float = 0.0,
) -> ProbeResult:
    """A result whose verdict follows from ``finding``: none means pass."""
    return ProbeResult(
        name=spec.name,
        kind=spec.kind,
        target=target,
        verdict=PASS if finding is None else FAIL,
        exit_code=exit_code,
        duration=duration,
        finding=finding,
        reason=reason,
        output=output,
        details=details or {},
    )


def run_python_probe(probe: Callable[[ProbeSpec, Any], ProbeResult], spec: ProbeSpec, params: Params) -> ProbeResult:
    """Run one synchronous probe (in a worker process) and time it.

    An unexpected exception is a bug in the check, not in the claim: it becomes a
    ``probe crashed`` result with the traceback as output.  ``ProbeError`` (a bad spec
    found late) propagates.
    """
    started = time.perf_counter()
    try:
        result = probe(spec, params)
    except ProbeError:
        raise
    except Exception as exc:
        result = make_result(
            spec,
            _target_of(spec, params),
            finding=PROBE_CRASHED,
            reason=f"the {spec.kind} check raised {type(exc).__name__}: {exc}.",
            output=errors_first(traceback.format_exc()),
        )
    return msgspec.structs.replace(result, duration=time.perf_counter() - started)


# A file's SHA-256; ``OSError`` if it is not a regular file (a symlink to /dev/zero
# would be hashed until the probe's timeout, a FIFO would block).  The probes' name for it.
sha256_file = sha256_regular


def short(digest: str | None) -> str:
    return "nothing" if digest is None else digest[:12] + "…"




def _target_of(spec: ProbeSpec, params: Params) -> str:
    from probes.kinds import kinds

    return kinds()[spec.kind].target(spec, params)

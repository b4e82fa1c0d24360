"""``write``: the file an agent says it wrote has the bytes it says it wrote.

Params: ``path``, ``sha256`` (expected hex digest; in lockstep.toml usually supplied at
run time from the agent's claim).  The file is read back and hashed; missing,
unreadable or different -> ``write lost``.
"""

from __future__ import annotations

import os
import re
from typing import Annotated

from probes.kinds import Kind
from probes.kinds.common import (
    Params,
    inside_worktree,
    make_result,
    resolve,
    sha256_file,
    short,
)
from probes.model import WRITE_LOST, ProbeError, ProbeResult, ProbeSpec
from probes.schema import HexDigest, RelPath, in_toml

HEX_DIGEST = re.compile(r"[0-9a-fA-F]{64}")


class WriteParams(Params):
    path: Annotated[str, in_toml(RelPath)]
    sha256: Annotated[str, in_toml(HexDigest, optional=True)]


def check(label: str, params: WriteParams) -> None:
    if not HEX_DIGEST.fullmatch(params.sha256):
        raise ProbeError(f"{label}: sha256 must be 64 hex digits, got {params.sha256!r}")


def check_target(label: str, spec: ProbeSpec, params: WriteParams) -> None:
    """The file must be in the worktree the check runs in, after symlinks: the check
    reads the file with the coordinator's rights, and its verdict told whoever asked
    whether any file it could name (/etc/shadow, ../other-repo/.env) had a given hash."""
    try:
        target, top = inside_worktree(spec, params.path)
    except (OSError, RuntimeError, ValueError) as exc:  # a symlink loop (RuntimeError before 3.13), a NUL byte
        raise ProbeError(f"{label}: {params.path!r} cannot be resolved to a file ({exc})") from None
    if top is not None:
        via = "" if str(target) == os.path.normpath(resolve(spec, params.path)) else f" (it leads to {target})"
        raise ProbeError(f"{label}: {params.path} is outside the worktree {top}{via}: a write check reads only the repository's files")


def target(spec: ProbeSpec, params: WriteParams) -> str:
    return str(resolve(spec, params.path))


def probe_write(spec: ProbeSpec, params: WriteParams) -> ProbeResult:
    path = resolve(spec, params.path)
    expected = params.sha256.lower()
    actual: str | None = None
    try:
        actual = sha256_file(path)
    except FileNotFoundError:
        problem = f"{path} does not exist"
    except OSError as exc:
        problem = f"{path} cannot be read ({exc.strerror or exc})"
    else:
        problem = f"{path} has sha256 {short(actual)}, expected {short(expected)}"
    details = {"path": str(path), "expected": expected, "actual": actual}
    if actual == expected:
        return make_result(spec, str(path), reason=f"{path} has the expected sha256.", details=details)
    return make_result(
        spec,
        str(path),
        finding=WRITE_LOST,
        reason=f"{problem}: the write was lost or overwritten; write the file again.",
        details=details,
    )




KIND = Kind("write", WriteParams, check, probe_write, target, check_target=check_target)

"""``build``: a build produced a new artifact.

Params: ``dir`` (output folder), ``previous_hash`` (hex or null: the last hash the
ledger recorded; filled in at run time), ``pattern`` (glob, default ``*``, matched
recursively).  The newest regular file (largest mtime; ties broken by the lexically
greatest relative path) is hashed; none, or the same hash as ``previous_hash`` ->
``build produced nothing``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated, Any

from probes.kinds import Kind
from probes.kinds.common import Params, make_result, resolve, sha256_file, short
from probes.kinds.write import HEX_DIGEST
from probes.model import BUILD_PRODUCED_NOTHING, ProbeError, ProbeResult, ProbeSpec
from probes.schema import RUNTIME_ONLY, Glob, RelPath, in_toml


class BuildParams(Params):
    dir: Annotated[str, in_toml(RelPath)]
    previous_hash: Annotated[str | None, RUNTIME_ONLY] = None
    pattern: Annotated[str, in_toml(Glob)] = "*"


def check(label: str, params: BuildParams) -> None:
    if params.previous_hash is not None and not HEX_DIGEST.fullmatch(params.previous_hash):
        raise ProbeError(f"{label}: previous_hash must be 64 hex digits or null")
    if not params.pattern or os.path.isabs(params.pattern):
        raise ProbeError(f"{label}: pattern must be a relative glob such as '*.whl'")


def target(spec: ProbeSpec, params: BuildParams) -> str:
    return str(resolve(spec, params.dir))


def newest_artifact(folder: Path, pattern: str) -> Path | None:
    """The regular file under ``folder`` matching ``pattern`` with the largest mtime
    (ties: lexically greatest relative path), or None."""
    best: tuple[int, str] | None = None
    best_path: Path | None = None
    for candidate in folder.rglob(pattern):
        try:
            info = candidate.stat()
        except OSError:  # vanished or a dangling symlink: not an artifact
            continue
        if not stat.S_ISREG(info.st_mode):
            continue
        key = (info.st_mtime_ns, candidate.relative_to(folder).as_posix())
        if best is None or key > best:
            best, best_path = key, candidate
    return best_path


def probe_build(spec: ProbeSpec, params: BuildParams) -> ProbeResult:
    folder = resolve(spec, params.dir)
    previous = params.previous_hash.lower() if params.previous_hash else None
    details: dict[str, Any] = {"artifact": None, "hash": None, "previous_hash": previous}
    if not folder.is_dir():
        return make_result(
            spec, str(folder), finding=BUILD_PRODUCED_NOTHING, details=details,
            reason=f"the output folder {folder} does not exist; run the build there first.",
        )
    artifact = newest_artifact(folder, params.pattern)
    if artifact is None:
        return make_result(
            spec, str(folder), finding=BUILD_PRODUCED_NOTHING, details=details,
            reason=f"no file matching {params.pattern!r} under {folder}; the build wrote no artifact.",
        )
    digest = sha256_file(artifact)
    details.update(artifact=str(artifact), hash=digest)
    if digest == previous:
        return make_result(
            spec, str(folder), finding=BUILD_PRODUCED_NOTHING, details=details,
            reason=(
                f"the newest artifact {artifact.relative_to(folder)} has the hash recorded for "
                "the last build: nothing new was built."
            ),
        )
    return make_result(
        spec, str(folder), details=details,
        reason=f"new artifact {artifact.relative_to(folder)} (sha256 {short(digest)}).",
    )


KIND = Kind("build", BuildParams, check, probe_build, target)

"""``write``: the file an agent says it wrote has the bytes it says it wrote.

Params: ``path``, ``sha256`` (expected hex digest; in lockstep.toml usually supplied at
run time from the agent's claim).  The file is read back and hashed; missing,
unreadable or different -> ``write lost``.
"""

from __future__ import annotations

import re
from typing import Annotated

from probes.kinds import Kind
from probes.kinds.common import Params, make_result, resolve, sha256_file, short
from probes.model import WRITE_LOST, ProbeError, ProbeResult, ProbeSpec
from probes.schema import HexDigest, RelPath, in_toml

HEX_DIGEST = re.compile(r"[0-9a-fA-F]{64}")


class WriteParams(Params):
    path: Annotated[str, in_toml(RelPath)]
    sha256: Annotated[str, in_toml(HexDigest, optional=True)]


def check(label: str, params: WriteParams) -> None:
    if not HEX_DIGEST.fullmatch(params.sha256):
        raise ProbeError(f"{label}: sha256 must be 64 hex digits, got {params.sha256!r}")


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




KIND = Kind("write", WriteParams, check, probe_write, target)

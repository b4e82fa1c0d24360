"""The built-in probe catalogue's public face: validate a spec, find its kind, run it.

Each kind lives in its own module under ``probes/kinds/`` (params Struct, checks, the
check itself, its target); this module gathers them.  ``prepare(spec)`` validates a
spec and returns it with its typed params; the pool calls it before running anything,
so a bad spec raises and a bad *claim* fails.

Where each check runs (see ``probes.pool``): ``command`` (``on_loop``) is an async
function that drives a child process from the coordinator's trio loop; every other kind
is a plain synchronous function run in a worker process through ``run_python_probe``,
which times it and turns an unexpected exception into a ``probe crashed`` result.
"""

from __future__ import annotations

import math
import os
from typing import Any, Callable, Union

import msgspec

from probes.kinds import Kind, kinds
from probes.kinds.build import BuildParams, newest_artifact, probe_build
from probes.kinds.command import CommandParams, probe_command
from probes.kinds.common import (
    Params,
    make_result,
    resolve,
    run_python_probe,
    sha256_file,
)
from probes.kinds.handoff import HandoffParams, probe_handoff
from probes.kinds.http import (
    HttpParams,
    check_loopback_url,
    check_reachable,
    follow_json_path,
    parse_json_path,
    probe_http,
)
from probes.kinds.processes import ProcessesParams, probe_processes
from probes.kinds.write import WriteParams, probe_write
from probes.model import MAX_TIMEOUT, MIN_TIMEOUT, ProbeError, ProbeResult, ProbeSpec
from probes.procgroup import TERM_GRACE, end_process_group, live_group_members

__all__ = [
    "PARAMS_TYPES", "PYTHON_PROBES", "TERM_GRACE", "BuildParams", "CommandParams", "HandoffParams", "HttpParams",
    "Kind", "Params", "ProcessesParams", "WriteParams", "check_loopback_url", "check_reachable", "end_process_group",
    "follow_json_path", "kind_of", "live_group_members", "make_result", "newest_artifact", "parse_json_path",
    "prepare", "probe_build", "probe_command", "probe_handoff", "probe_http", "probe_processes", "probe_write",
    "resolve", "run_python_probe", "sha256_file", "target_of",
]

# Every kind's params Struct, by kind name.
PARAMS_TYPES: dict[str, type[Params]] = {name: kind.params for name, kind in kinds().items()}
AnyParams = Union[tuple(PARAMS_TYPES.values())]

# Kinds run in worker processes, looked up by the pool at each dispatch.
PYTHON_PROBES: dict[str, Callable[[ProbeSpec, Any], ProbeResult]] = {
    name: kind.run for name, kind in kinds().items() if not kind.on_loop
}


def kind_of(spec: ProbeSpec) -> Kind:
    return kinds()[spec.kind]


def target_of(spec: ProbeSpec, params: Params) -> str:
    """What a result names as checked: the path, command line, URL or pattern."""
    return kinds()[spec.kind].target(spec, params)


def prepare(spec: ProbeSpec) -> tuple[ProbeSpec, Params]:
    """Validate ``spec``; return it (``cwd`` filled in) with its typed params.

    Raises ``ProbeError`` with a sentence naming the probe and what is wrong.
    """
    if not isinstance(spec, ProbeSpec):
        raise ProbeError(f"expected a ProbeSpec, got {type(spec).__name__}")
    try:
        # Struct constructors do not check types; a round trip through convert does.
        spec = msgspec.convert(msgspec.structs.asdict(spec), ProbeSpec)
    except msgspec.ValidationError as exc:
        raise ProbeError(f"malformed probe spec: {exc}") from None
    label = f"probe {spec.name!r}"
    if not spec.name:
        raise ProbeError("a probe needs a non-empty name")
    kind = kinds().get(spec.kind)
    if kind is None:
        raise ProbeError(f"{label}: unknown kind {spec.kind!r}; known kinds: {', '.join(kinds())}")
    if not (math.isfinite(spec.timeout) and spec.timeout > 0):
        raise ProbeError(f"{label}: timeout must be a positive number of seconds, got {spec.timeout}")
    if not MIN_TIMEOUT <= spec.timeout <= MAX_TIMEOUT:
        raise ProbeError(f"{label}: timeout must be between {MIN_TIMEOUT:g} s and {MAX_TIMEOUT:g} s (a day), got {spec.timeout:g}")
    if spec.cwd is not None and not os.path.isabs(spec.cwd):
        raise ProbeError(f"{label}: cwd must be an absolute path, got {spec.cwd!r}")
    try:
        params = msgspec.convert(spec.params, kind.params)
    except msgspec.ValidationError as exc:
        raise ProbeError(f"{label} ({spec.kind}): bad params: {exc}") from None
    kind.check(label, params)
    if spec.cwd is None:
        # Pin it now: workers were spawned with whatever cwd the coordinator had then.
        spec = msgspec.structs.replace(spec, cwd=os.getcwd())
    if kind.check_target is not None:
        kind.check_target(label, spec, params)
    return spec, params

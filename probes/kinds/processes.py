"""``processes``: the processes an agent says it started are running.

Params: ``match`` (a Python regex, ``re.search``-ed against the process name and
against its command line joined with spaces; a plain word works as a substring),
``count`` (default 1), ``names`` (regexes that must each match at least one matched
process, so the finding names what is missing), ``exact`` (default false: more than
``count`` passes), ``exclude_pids`` (filled in at run time).  Zombies and the probing
process itself are not counted.  Too few, or a name missing -> ``processes missing``;
too many with ``exact`` -> ``unexpected processes``.
"""

from __future__ import annotations

import os
import re
from typing import Annotated, Any

import msgspec
import psutil

from probes.kinds import Kind
from probes.kinds.common import Params, make_result
from probes.model import (
    PROCESSES_MISSING,
    PROCESSES_UNEXPECTED,
    ProbeError,
    ProbeResult,
    ProbeSpec,
)
from probes.schema import RUNTIME_ONLY, Regex, RegexList, in_toml

# The most processes a count may ask for: Linux's largest pid_max (2**22); no machine runs
# more at once, so a larger count (2**63 - 1 was taken) could only ever fail.
MAX_COUNT = 4_194_304


class ProcessesParams(Params):
    match: Annotated[str, in_toml(Regex)]
    count: Annotated[int, in_toml(Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNT)])] = 1
    names: Annotated[list[str] | None, in_toml(RegexList)] = None
    exact: bool = False
    # Pids never counted: the requester's own (`lockstep check processes --match X`
    # has X in its command line).
    exclude_pids: Annotated[list[int], RUNTIME_ONLY] = []


def check(label: str, params: ProcessesParams) -> None:
    for pattern in [params.match, *(params.names or [])]:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ProbeError(f"{label}: {pattern!r} is not a valid regex: {exc}") from None
    if not 0 <= params.count <= MAX_COUNT:
        raise ProbeError(f"{label}: count must be from 0 to {MAX_COUNT}, got {params.count}")


def target(spec: ProbeSpec, params: ProcessesParams) -> str:
    return params.match


def probe_processes(spec: ProbeSpec, params: ProcessesParams) -> ProbeResult:
    pattern = re.compile(params.match)
    myself = os.getpid()
    matched: list[tuple[int, str, str]] = []  # pid, name, command line
    for process in psutil.process_iter(["pid", "name", "cmdline", "status"]):
        info = process.info
        if info["pid"] == myself or info["pid"] in params.exclude_pids or info["status"] == psutil.STATUS_ZOMBIE:
            continue
        name = info["name"] or ""
        command_line = " ".join(info["cmdline"] or ())
        if pattern.search(name) or pattern.search(command_line):
            matched.append((info["pid"], name, command_line))
    missing = [
        wanted
        for wanted in params.names or []
        if not any(re.search(wanted, name) or re.search(wanted, line) for _, name, line in matched)
    ]
    found = len(matched)
    details: dict[str, Any] = {
        "found": found,
        "expected": params.count,
        "exact": params.exact,
        "missing": missing,
        "pids": sorted(pid for pid, _, _ in matched)[:50],
    }
    label = f"processes matching {params.match!r}"
    if found < params.count or missing:
        why = f"{found} {label}, expected {'exactly' if params.exact else 'at least'} {params.count}"
        if missing:
            why += f"; none matches {', '.join(map(repr, missing))}"
        return make_result(
            spec, params.match, finding=PROCESSES_MISSING, details=details,
            reason=f"{why}: start the missing processes.",
        )
    if params.exact and found > params.count:
        return make_result(
            spec, params.match, finding=PROCESSES_UNEXPECTED, details=details,
            reason=f"{found} {label}, expected exactly {params.count}: stop the extra ones.",
        )
    return make_result(spec, params.match, details=details, reason=f"{found} {label} running.")


KIND = Kind("processes", ProcessesParams, check, probe_processes, target)

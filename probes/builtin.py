"""The built-in probe kinds: one small check per kind of claim.

Each kind has a params Struct (its schema: unknown keys are refused, so a typo such
as ``sha265`` is a ``ProbeError``, not a silently skipped check) and one function
``probe_<kind>(spec, params) -> ProbeResult``.  ``prepare(spec)`` validates a spec
and returns it with its typed params; the pool calls it before running anything, so
a bad spec raises and a bad *claim* fails.

Where each check runs (see ``probes.pool``): ``command`` is an async function that
drives a child process from the coordinator's trio loop; every other kind is a plain
synchronous function run in a worker process through ``run_python_probe``, which
times it and turns an unexpected exception into a ``probe crashed`` result.

Relative paths in params resolve against ``spec.cwd`` (the agent's worktree), never
against the worker's own working directory, because workers are shared by agents.

Kinds and their params:

``write``      ``path``, ``sha256`` (expected hex digest).  The file is read back and
               hashed; missing, unreadable or different -> ``write lost``.
``build``      ``dir`` (output folder), ``previous_hash`` (hex or null: the last hash
               the ledger recorded), ``pattern`` (glob, default ``*``, matched
               recursively).  The newest regular file (largest mtime; ties broken by
               the lexically greatest relative path) is hashed; none, or the same hash
               as ``previous_hash`` -> ``build produced nothing``.
``command``    ``argv`` (list) or ``shell`` (string run by ``/bin/sh -c``),
               ``expect_exit`` (default 0), ``creates`` (a path that must exist after
               the command and, if it existed before, must have a different mtime,
               size or hash), ``env`` (merged over the coordinator's environment).
               Runs with stdin from /dev/null in a new session (its own process group).
               At the timeout the group gets SIGTERM, then SIGKILL after
               ``TERM_GRACE`` s: result ``timed out`` with exit_code None.  When the
               command exits, whatever it left running in its group is ended the same
               way: a probe leaves nothing behind (a daemon meant to outlive it must
               detach with its own ``setsid``).  Wrong exit status -> ``command
               failed``; right status but ``creates`` unsatisfied -> ``side effect
               missing``.  Output: stderr then stdout, errors first.
``http``       ``url`` (http/https on localhost or a loopback address only, for now),
               ``status`` (default 200; null: any status), ``contains`` (substring of
               the body), ``json_path`` (``$.a.b[0].c``, ``['key']``, negative
               indexes), ``equals`` (the value there, or the whole JSON document when
               no json_path, must equal this; true is not 1), ``at_least`` (that value
               must be a number >= this).  GET, no proxy, redirects not followed (a
               3xx is the status seen).  Any miss -> ``endpoint failing``.
``processes``  ``match`` (a Python regex, ``re.search``-ed against the process name
               and against its command line joined with spaces; a plain word works
               as a substring), ``count`` (default 1), ``names`` (regexes that must
               each match at least one matched process, so the finding names what is
               missing), ``exact`` (default false: more than ``count`` passes).
               Zombies and the probing process itself are not counted.  Too few, or a
               name missing -> ``processes missing``; too many with ``exact`` ->
               ``unexpected processes``.
``handoff``    ``path`` (the handoff note), ``threshold`` (default 85),
               ``repo_root`` (default ``spec.cwd``).  Scored by
               ``probes.handoff.score_handoff``; missing note or below threshold ->
               ``handoff incomplete``.
"""

from __future__ import annotations

import hashlib
import http.client
import importlib.util
import ipaddress
import math
import os
import re
import shlex
import signal
import stat
import subprocess
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Annotated, Any, Callable, Union

import msgspec
import psutil
import trio

from probes.model import (
    BUILD_PRODUCED_NOTHING,
    COMMAND_FAILED,
    ENDPOINT_FAILING,
    FAIL,
    HANDOFF_INCOMPLETE,
    KIND_BUILD,
    KIND_COMMAND,
    KIND_HANDOFF,
    KIND_HTTP,
    KIND_PROCESSES,
    KIND_WRITE,
    PASS,
    PROBE_CRASHED,
    PROCESSES_MISSING,
    PROCESSES_UNEXPECTED,
    SIDE_EFFECT_MISSING,
    TIMED_OUT,
    WRITE_LOST,
    ProbeError,
    ProbeResult,
    ProbeSpec,
)
from probes.output import errors_first
from probes.schema import (
    RUNTIME_ONLY,
    Argv,
    Glob,
    HexDigest,
    LoopbackUrl,
    Regex,
    RegexList,
    RelPath,
    Text,
    in_toml,
)

# -- params -------------------------------------------------------------------------


class _Params(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    pass


# Each field's annotation also says how lockstep.toml writes it (probes.schema.in_toml):
# the [[probe]] schema is derived from these Structs (probes.config).


class WriteParams(_Params):
    path: Annotated[str, in_toml(RelPath)]
    sha256: Annotated[str, in_toml(HexDigest, optional=True)]


class BuildParams(_Params):
    dir: Annotated[str, in_toml(RelPath)]
    previous_hash: Annotated[str | None, RUNTIME_ONLY] = None
    pattern: Annotated[str, in_toml(Glob)] = "*"


class CommandParams(_Params):
    argv: Annotated[list[str] | None, in_toml(Argv)] = None
    shell: Annotated[str | None, in_toml(Text, key="cmd")] = None
    expect_exit: int = 0
    creates: Annotated[str | None, in_toml(RelPath)] = None
    env: dict[str, str] | None = None


class HttpParams(_Params):
    url: Annotated[str, in_toml(LoopbackUrl)]
    status: Annotated[int | None, in_toml(Annotated[int, msgspec.Meta(ge=100, le=599)])] = 200
    contains: Annotated[str | None, in_toml(Text)] = None
    json_path: Annotated[str | None, in_toml(Text)] = None
    # UNSET (absent) differs from null: {"equals": null} checks the value is null.
    equals: Any | msgspec.UnsetType = msgspec.UNSET
    at_least: int | float | None = None


class ProcessesParams(_Params):
    match: Annotated[str, in_toml(Regex)]
    count: Annotated[int, in_toml(Annotated[int, msgspec.Meta(ge=0)])] = 1
    names: Annotated[list[str] | None, in_toml(RegexList)] = None
    exact: bool = False
    # Pids never counted: the requester's own (`lockstep check processes --match X`
    # has X in its command line).
    exclude_pids: Annotated[list[int], RUNTIME_ONLY] = []


class HandoffParams(_Params):
    path: Annotated[str, in_toml(RelPath)]
    threshold: Annotated[int, in_toml(Annotated[int, msgspec.Meta(ge=0, le=100)])] = 85
    repo_root: Annotated[str | None, RUNTIME_ONLY] = None


Params = Union[WriteParams, BuildParams, CommandParams, HttpParams, ProcessesParams, HandoffParams]

PARAMS_TYPES: dict[str, type[_Params]] = {
    KIND_WRITE: WriteParams,
    KIND_BUILD: BuildParams,
    KIND_COMMAND: CommandParams,
    KIND_HTTP: HttpParams,
    KIND_PROCESSES: ProcessesParams,
    KIND_HANDOFF: HandoffParams,
}

_HEX_DIGEST = re.compile(r"[0-9a-fA-F]{64}")


# -- validation ---------------------------------------------------------------------


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
    params_type = PARAMS_TYPES.get(spec.kind)
    if params_type is None:
        raise ProbeError(f"{label}: unknown kind {spec.kind!r}; known kinds: {', '.join(PARAMS_TYPES)}")
    if not (math.isfinite(spec.timeout) and spec.timeout > 0):
        raise ProbeError(f"{label}: timeout must be a positive number of seconds, got {spec.timeout}")
    if spec.cwd is not None and not os.path.isabs(spec.cwd):
        raise ProbeError(f"{label}: cwd must be an absolute path, got {spec.cwd!r}")
    try:
        params = msgspec.convert(spec.params, params_type)
    except msgspec.ValidationError as exc:
        raise ProbeError(f"{label} ({spec.kind}): bad params: {exc}") from None
    _SEMANTIC_CHECKS[spec.kind](label, params)
    if spec.cwd is None:
        # Pin it now: workers were spawned with whatever cwd the coordinator had then.
        spec = msgspec.structs.replace(spec, cwd=os.getcwd())
    return spec, params


def _check_write(label: str, params: WriteParams) -> None:
    if not _HEX_DIGEST.fullmatch(params.sha256):
        raise ProbeError(f"{label}: sha256 must be 64 hex digits, got {params.sha256!r}")


def _check_build(label: str, params: BuildParams) -> None:
    if params.previous_hash is not None and not _HEX_DIGEST.fullmatch(params.previous_hash):
        raise ProbeError(f"{label}: previous_hash must be 64 hex digits or null")
    if not params.pattern or os.path.isabs(params.pattern):
        raise ProbeError(f"{label}: pattern must be a relative glob such as '*.whl'")


def _check_command(label: str, params: CommandParams) -> None:
    if (params.argv is None) == (params.shell is None):
        raise ProbeError(f"{label}: give exactly one of argv (a list) or shell (a string)")
    if params.argv is not None and not params.argv:
        raise ProbeError(f"{label}: argv is empty")
    if params.shell is not None and not params.shell.strip():
        raise ProbeError(f"{label}: shell is empty")


def _check_http(label: str, params: HttpParams) -> None:
    check_loopback_url(params.url)
    if params.json_path is not None:
        parse_json_path(params.json_path)
    if params.status is not None and not 100 <= params.status <= 599:
        raise ProbeError(f"{label}: status must be an HTTP status code, got {params.status}")


def _check_processes(label: str, params: ProcessesParams) -> None:
    for pattern in [params.match, *(params.names or [])]:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ProbeError(f"{label}: {pattern!r} is not a valid regex: {exc}") from None
    if params.count < 0:
        raise ProbeError(f"{label}: count must be >= 0")


def _check_handoff(label: str, params: HandoffParams) -> None:
    if not 0 <= params.threshold <= 100:
        raise ProbeError(f"{label}: threshold must be between 0 and 100")
    if params.repo_root is not None and not os.path.isabs(params.repo_root):
        raise ProbeError(f"{label}: repo_root must be an absolute path")
    if importlib.util.find_spec("probes.handoff") is None:
        raise ProbeError(f"{label}: handoff probes need probes.handoff, which is not installed")


_SEMANTIC_CHECKS: dict[str, Callable[[str, Any], None]] = {
    KIND_WRITE: _check_write,
    KIND_BUILD: _check_build,
    KIND_COMMAND: _check_command,
    KIND_HTTP: _check_http,
    KIND_PROCESSES: _check_processes,
    KIND_HANDOFF: _check_handoff,
}


def check_loopback_url(url: str) -> None:
    """Refuse (ProbeError) any URL that is not http(s) on localhost or loopback."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError on a malformed port
    except ValueError as exc:
        raise ProbeError(f"malformed url {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ProbeError(f"url {url!r} must be http:// or https:// with a host")
    host = parts.hostname
    if host == "localhost" or host.endswith(".localhost"):
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ProbeError(
            f"refusing {url!r}: http probes may only reach localhost or a loopback "
            "address (127.0.0.0/8, ::1) for now"
        )


def target_of(spec: ProbeSpec, params: Params) -> str:
    """What a result names as checked: the path, command line, URL or pattern."""
    if isinstance(params, CommandParams):
        return shlex.join(params.argv) if params.argv is not None else params.shell or ""
    if isinstance(params, HttpParams):
        return params.url
    if isinstance(params, ProcessesParams):
        return params.match
    if isinstance(params, BuildParams):
        return str(resolve(spec, params.dir))
    return str(resolve(spec, params.path))  # write, handoff


def resolve(spec: ProbeSpec, path: str) -> Path:
    """``path`` made absolute against the agent's worktree (``spec.cwd``)."""
    return Path(spec.cwd or os.getcwd(), path)  # an absolute ``path`` wins in Path()


# -- results ------------------------------------------------------------------------


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
            target_of(spec, params),
            finding=PROBE_CRASHED,
            reason=f"the {spec.kind} check raised {type(exc).__name__}: {exc}.",
            output=errors_first(traceback.format_exc()),
        )
    return msgspec.structs.replace(result, duration=time.perf_counter() - started)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _short(digest: str | None) -> str:
    return "nothing" if digest is None else digest[:12] + "…"


# -- write --------------------------------------------------------------------------


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
        problem = f"{path} has sha256 {_short(actual)}, expected {_short(expected)}"
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


# -- build --------------------------------------------------------------------------


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
        reason=f"new artifact {artifact.relative_to(folder)} (sha256 {_short(digest)}).",
    )


# -- command ------------------------------------------------------------------------

TERM_GRACE = 0.5  # seconds between SIGTERM and SIGKILL to a command's process group
DRAIN_GRACE = 1.0  # seconds to collect buffered output once the group is gone
STRAGGLER_POLL = 0.02  # seconds between checks that a finished command's group is empty
CAPTURE_HEAD = 64 * 1024  # bytes kept from the start of each stream ...
CAPTURE_TAIL = 192 * 1024  # ... and from its end; the middle is dropped and counted
_THREAD_FORMAT_ABOVE = 64 * 1024  # reorder bigger outputs off the trio thread


class _Capture:
    """The first ``CAPTURE_HEAD`` and last ``CAPTURE_TAIL`` bytes of a stream.

    Memory stays bounded whatever a command prints; compilers put the first error at
    the top and test runners put the summary at the bottom, so both ends are kept.
    """

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def feed(self, chunk: bytes) -> None:
        room = CAPTURE_HEAD - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            excess = len(self.tail) - CAPTURE_TAIL
            if excess > 0:
                del self.tail[:excess]
                self.dropped += excess

    def text(self) -> str:
        middle = f"\n… [{self.dropped} bytes not captured] …\n" if self.dropped else ""
        return self.head.decode(errors="replace") + middle + self.tail.decode(errors="replace")


async def _drain(stream: trio.abc.ReceiveStream, capture: _Capture) -> None:
    while chunk := await stream.receive_some(65536):
        capture.feed(chunk)


def _signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` (0: just test) to the group; False when nothing is in it."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        # PermissionError: the id now belongs to someone else's group, not ours.
        return False
    return True


def live_group_members(pgid: int) -> list[int]:
    """Pids in process group ``pgid`` that are not zombies.

    ``killpg(pgid, 0)`` alone cannot tell: a zombie is still a member, and orphans
    become zombies for good when PID 1 does not reap them (true in some containers).
    """
    if not os.path.isdir("/proc"):  # not Linux: psutil does the same, slower
        found = []
        for process in psutil.process_iter(["status"]):
            try:
                if os.getpgid(process.pid) == pgid and process.info["status"] != psutil.STATUS_ZOMBIE:
                    found.append(process.pid)
            except (ProcessLookupError, PermissionError):
                continue
        return found
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as file:
                stat_line = file.read()
        except OSError:  # exited meanwhile
            continue
        # Fields after "(comm)": state ppid pgrp ...; comm itself may hold spaces.
        fields = stat_line[stat_line.rindex(b")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != b"Z":
            found.append(int(entry))
    return found


async def _group_alive(pgid: int) -> bool:
    if not _signal_group(pgid, 0):
        return False
    return bool(await trio.to_thread.run_sync(live_group_members, pgid))


async def end_process_group(process: trio.Process, grace: float = TERM_GRACE) -> None:
    """Leave nothing of ``process``'s group running: SIGTERM, then SIGKILL after
    ``grace`` seconds.  Idempotent; the leader is reaped before it returns.

    The leader was started with ``start_new_session`` so the group id is its pid.  The
    id cannot be reused while any member exists, so signalling it after the leader
    is reaped reaches only the command's own stragglers.
    """
    pgid = process.pid
    if process.returncode is None:
        _signal_group(pgid, signal.SIGTERM)
        with trio.move_on_after(grace):
            await process.wait()
        _signal_group(pgid, signal.SIGKILL)  # members that ignored or trapped SIGTERM
        await process.wait()
    elif await _group_alive(pgid):
        _signal_group(pgid, signal.SIGTERM)
        with trio.move_on_after(grace):
            while await _group_alive(pgid):
                await trio.sleep(STRAGGLER_POLL)
        _signal_group(pgid, signal.SIGKILL)


def _fingerprint(path: Path) -> tuple[Any, ...] | None:
    """What ``creates`` compares before and after: None when absent."""
    try:
        info = path.stat()
    except OSError:
        return None
    digest = sha256_file(path) if stat.S_ISREG(info.st_mode) else None
    return (info.st_mtime_ns, info.st_size, digest)


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


async def probe_command(spec: ProbeSpec, params: CommandParams) -> ProbeResult:
    """Run the command in its own process group under ``spec.timeout``; see the
    module docstring.  Never blocks the trio loop: hashing and big reorders run in a
    thread."""
    argv = params.argv if params.argv is not None else ["/bin/sh", "-c", params.shell or ""]
    target = target_of(spec, params)
    creates = resolve(spec, params.creates) if params.creates else None
    before = await trio.to_thread.run_sync(_fingerprint, creates) if creates else None
    env = None if params.env is None else {**os.environ, **params.env}
    started = time.perf_counter()
    try:
        process = await trio.lowlevel.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=spec.cwd,
            env=env,
            start_new_session=True,
        )
    except OSError as exc:
        if spec.cwd is not None and not os.path.isdir(spec.cwd):
            why = f"its working directory {spec.cwd} does not exist"
        else:
            why = f"could not start {argv[0]!r} in {spec.cwd}: {exc.strerror or exc}"
        return make_result(
            spec, target, finding=COMMAND_FAILED, duration=time.perf_counter() - started,
            reason=f"{why}.", output=f"lockstep: command failed to start: {exc}",
        )
    stdout, stderr = _Capture(), _Capture()
    timed_out = False
    try:
        async with trio.open_nursery() as nursery:
            assert process.stdout is not None and process.stderr is not None
            nursery.start_soon(_drain, process.stdout, stdout)
            nursery.start_soon(_drain, process.stderr, stderr)
            with trio.move_on_after(spec.timeout) as deadline:
                await process.wait()
            timed_out = deadline.cancelled_caught
            await end_process_group(process)
            # Output already in the pipes is still read; a process outside the group
            # (it ran setsid) could hold them open forever, so stop after a grace.
            nursery.cancel_scope.deadline = trio.current_time() + DRAIN_GRACE
    finally:
        # Also on cancellation from outside: the group must not outlive the probe.
        with trio.CancelScope(shield=True):
            await end_process_group(process)
            for stream in (process.stdout, process.stderr):
                if stream is not None:
                    await stream.aclose()
    duration = time.perf_counter() - started

    exit_code = None if timed_out else process.returncode
    finding: str | None = None
    if timed_out:
        finding = TIMED_OUT
        reason = f"{target} did not finish within {spec.timeout:g} s; its process group was killed."
        note = f"lockstep: command failed: timed out after {spec.timeout:g} s, process group killed"
    elif exit_code != params.expect_exit:
        finding = COMMAND_FAILED
        reason = f"{target} {_describe_exit(exit_code)}, expected status {params.expect_exit}."
        note = f"lockstep: command failed: {_describe_exit(exit_code)}, expected {params.expect_exit}"
    else:
        reason = f"{target} exited with the expected status {exit_code}."
        note = ""
    details: dict[str, Any] = {"expect_exit": params.expect_exit}
    if creates is not None and finding is None:
        after = await trio.to_thread.run_sync(_fingerprint, creates)
        details["creates"] = str(creates)
        if after is None:
            finding = SIDE_EFFECT_MISSING
            reason = f"{target} exited {exit_code} but did not create {creates}."
        elif after == before:
            finding = SIDE_EFFECT_MISSING
            reason = f"{target} exited {exit_code} but left {creates} unchanged."
        if finding is not None:
            note = f"lockstep: command failed: side effect missing: {creates}"

    err_text, out_text = stderr.text(), stdout.text()
    joiner = "\n" if err_text and out_text and not err_text.endswith("\n") else ""
    text = (note + "\n" if note else "") + err_text + joiner + out_text
    if len(text) > _THREAD_FORMAT_ABOVE:
        output = await trio.to_thread.run_sync(errors_first, text)
    else:
        output = errors_first(text)
    return make_result(
        spec, target, finding=finding, reason=reason, output=output, details=details,
        exit_code=exit_code, duration=duration,
    )


# -- http ---------------------------------------------------------------------------

MAX_BODY = 1 << 20  # bytes of a response body read
# The pool's timeout must win over the socket's, so a hang reads "timed out".
_SOCKET_TIMEOUT_SLACK = 5.0


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Report a 3xx as it is: following it could leave loopback."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_JSON_PATH_STEP = re.compile(
    r"""\.([A-Za-z_][A-Za-z0-9_\-]*)|\[(-?\d+)\]|\[(?:'([^']*)'|"([^"]*)")\]"""
)
_MISSING = object()


def parse_json_path(path: str) -> tuple[str | int, ...]:
    """``$.a.b[0].c`` -> ``("a", "b", 0, "c")``; ProbeError outside the subset."""
    if not path.startswith("$"):
        raise ProbeError(f"json_path {path!r} must start with '$'")
    steps: list[str | int] = []
    position = 1
    while position < len(path):
        match = _JSON_PATH_STEP.match(path, position)
        if match is None:
            raise ProbeError(
                f"json_path {path!r}: cannot parse {path[position:]!r}; supported steps are "
                ".name, [index] and ['key']"
            )
        name, index, single, double = match.groups()
        if index is not None:
            steps.append(int(index))
        else:
            steps.append(next(s for s in (name, single, double) if s is not None))
        position = match.end()
    return tuple(steps)


def follow_json_path(document: Any, steps: tuple[str | int, ...]) -> Any:
    """The value at ``steps`` in ``document``, or ``_MISSING``."""
    for step in steps:
        if isinstance(step, int):
            if not isinstance(document, list) or not -len(document) <= step < len(document):
                return _MISSING
        elif not isinstance(document, dict) or step not in document:
            return _MISSING
        document = document[step]
    return document


def _json_equal(found: Any, expected: Any) -> bool:
    # JSON true is not 1: Python's == would say it is.
    if isinstance(found, bool) != isinstance(expected, bool):
        return False
    return found == expected


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _fetch(url: str, timeout: float) -> tuple[int, bytes]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())
    request = urllib.request.Request(url, headers={"User-Agent": "lockstep-probe"})
    try:
        with opener.open(request, timeout=timeout) as response:
            return response.status, response.read(MAX_BODY)
    except urllib.error.HTTPError as exc:  # a status is an answer, not a failure to reach
        try:
            body = exc.read(MAX_BODY) if exc.fp is not None else b""
        except OSError:
            body = b""
        return exc.code, body


def probe_http(spec: ProbeSpec, params: HttpParams) -> ProbeResult:
    url = params.url
    try:
        status, body = _fetch(url, spec.timeout + _SOCKET_TIMEOUT_SLACK)
    except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
        why = getattr(exc, "reason", None) or exc
        return make_result(
            spec, url, finding=ENDPOINT_FAILING, details={"status": None},
            reason=f"could not reach {url}: {why}; is the service running?",
        )
    problems: list[str] = []
    details: dict[str, Any] = {"status": status, "bytes": len(body)}
    if params.status is not None and status != params.status:
        problems.append(f"status {status}, expected {params.status}")
    text = body.decode(errors="replace")
    if params.contains is not None and params.contains not in text:
        problems.append(f"the body does not contain {params.contains!r}")
    wants_json = params.json_path is not None or params.equals is not msgspec.UNSET or params.at_least is not None
    if wants_json:
        where = params.json_path or "the JSON body"
        try:
            document = msgspec.json.decode(body)
        except msgspec.DecodeError:
            problems.append("the body is not JSON")
        else:
            value = follow_json_path(document, parse_json_path(params.json_path or "$"))
            if value is _MISSING:
                problems.append(f"{where} is not in the JSON body")
            else:
                if params.json_path is not None:
                    details["value"] = value
                if params.equals is not msgspec.UNSET and not _json_equal(value, params.equals):
                    problems.append(f"{where} is {value!r}, expected {params.equals!r}")
                if params.at_least is not None:
                    if not _is_number(value):
                        problems.append(f"{where} is {value!r}, not a number")
                    elif value < params.at_least:
                        problems.append(f"{where} is {value!r}, expected at least {params.at_least!r}")
    if not problems:
        return make_result(spec, url, reason=f"{url} answered {status} as expected.", details=details)
    more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
    return make_result(
        spec, url, finding=ENDPOINT_FAILING, details=details,
        reason=f"{url}: {problems[0]}{more}.",
        output=errors_first("\n".join(f"failed: {p}" for p in problems) + "\n" + text),
    )


# -- processes ----------------------------------------------------------------------


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


# -- handoff ------------------------------------------------------------------------


def probe_handoff(spec: ProbeSpec, params: HandoffParams) -> ProbeResult:
    # Imported here: probes.handoff is its own module with its own rubric, and only
    # this kind needs it.
    from probes.handoff import score_handoff

    path = resolve(spec, params.path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return make_result(
            spec, str(path), finding=HANDOFF_INCOMPLETE,
            details={"score": 0, "threshold": params.threshold, "missing": [f"no handoff note at {path}"]},
            reason=f"no readable handoff note at {path} ({exc.strerror or exc}); write it before handing off.",
        )
    repo_root = params.repo_root or spec.cwd or os.getcwd()
    score = score_handoff(text, repo_root, params.threshold)
    details = msgspec.to_builtins(score)  # score, threshold, passed, breakdown, missing...
    if score.passed:
        return make_result(
            spec, str(path), details=details,
            reason=f"the handoff note scores {score.score} (threshold {params.threshold}).",
        )
    listed = f"; first gap: {score.missing[0]}" if score.missing else ""
    return make_result(
        spec, str(path), finding=HANDOFF_INCOMPLETE, details=details,
        reason=f"the handoff note scores {score.score}, below the threshold {params.threshold}{listed}.",
    )


# Kinds run in worker processes, looked up by the pool at each dispatch.
PYTHON_PROBES: dict[str, Callable[[ProbeSpec, Any], ProbeResult]] = {
    KIND_WRITE: probe_write,
    KIND_BUILD: probe_build,
    KIND_HTTP: probe_http,
    KIND_PROCESSES: probe_processes,
    KIND_HANDOFF: probe_handoff,
}

"""``command``: a command exits as expected (and leaves the side effect it claims).

Params: ``argv`` (list) or ``shell`` (string run by ``/bin/sh -c``; ``cmd`` in
lockstep.toml), ``expect_exit`` (default 0), ``creates`` (a path that must exist after
the command and, if it existed before, must have a different mtime, size or hash),
``env`` (merged over the coordinator's environment), ``log`` (set by the job runner,
never in lockstep.toml: a file that receives the whole output, ``probes.checklogs``),
``whole_env`` (runtime only: ``env`` is the whole environment, not merged).

Runs with stdin from /dev/null in a new session (its own process group,
``probes.procgroup``).  At the timeout the group gets SIGTERM, then SIGKILL after
``TERM_GRACE`` s: result ``timed out`` with exit_code None.  When the command exits,
whatever it left running in its group is ended the same way: a probe leaves nothing
behind (a daemon meant to outlive it must detach with its own ``setsid``).  Wrong exit
status -> ``command failed``; right status but ``creates`` unsatisfied -> ``side effect
missing``.  Output: stderr then stdout, errors first.

The only kind that runs on the coordinator's trio loop (``on_loop``): it drives a
child process, so it needs no worker of its own.
"""

from __future__ import annotations

import os
import shlex
import signal
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from probes.kinds import Kind
from probes.kinds.common import Params, make_result, resolve, sha256_file
from probes.model import (
    COMMAND_FAILED,
    SIDE_EFFECT_MISSING,
    TIMED_OUT,
    ProbeError,
    ProbeResult,
    ProbeSpec,
)
from probes.output import errors_first
from probes.procgroup import TERM_GRACE, end_process_group, open_in_own_group
from probes.schema import RUNTIME_ONLY, Argv, RelPath, Text, in_toml

if TYPE_CHECKING:  # imported where it runs: `lockstep check` validates its parameters
    import trio  # with this module and would otherwise pay trio's import (~50 ms)

__all__ = ["TERM_GRACE", "CommandParams", "KIND", "probe_command"]

DRAIN_GRACE = 1.0  # seconds to collect buffered output once the group is gone
CAPTURE_HEAD = 64 * 1024  # bytes kept from the start of each stream ...
CAPTURE_TAIL = 192 * 1024  # ... and from its end; the middle is dropped and counted
LOG_LINE_HOLD = 64 * 1024  # bytes of an unfinished line held back from the log
# Bytes of a check's output its log file keeps from the start; past them only the
# streams' captured ends are added at exit, after a marker: a command printing GBs
# (``yes``) must not fill the disk before its timeout.
LOG_MAX_BYTES = 32 * 1024 * 1024
_THREAD_FORMAT_ABOVE = 64 * 1024  # reorder bigger outputs off the trio thread


class CommandParams(Params):
    argv: Annotated[list[str] | None, in_toml(Argv)] = None
    shell: Annotated[str | None, in_toml(Text, key="cmd")] = None
    expect_exit: int = 0
    creates: Annotated[str | None, in_toml(RelPath)] = None
    env: dict[str, str] | None = None
    log: Annotated[str | None, RUNTIME_ONLY] = None  # absolute path for the whole output
    # env is the command's whole environment, not merged over the coordinator's (the
    # verify suite's checks: probes.environment decides it).
    whole_env: Annotated[bool, RUNTIME_ONLY] = False


SIGNAL_MAX = 64  # SIGRTMAX on Linux: a returncode of -N means killed by signal N


def check(label: str, params: CommandParams) -> None:
    if (params.argv is None) == (params.shell is None):
        raise ProbeError(f"{label}: give exactly one of argv (a list) or shell (a string)")
    if params.argv is not None and not params.argv:
        raise ProbeError(f"{label}: argv is empty")
    if params.shell is not None and not params.shell.strip():
        raise ProbeError(f"{label}: shell is empty")
    if not -SIGNAL_MAX <= params.expect_exit <= 255:  # no process ends so: the check failed whatever ran
        raise ProbeError(f"{label}: expect_exit must be an exit status (0 to 255, or -N: killed by signal N), got {params.expect_exit}")
    bad = next((name for name in params.env or {} if not name or "=" in name), None)
    if bad is not None:  # the spawn refused it: an "internal error" of the job
        raise ProbeError(f"{label}: env: {bad!r} is not a variable name (it is empty or holds '=')")


def table_problem(params: dict[str, Any]) -> str | None:
    if ("cmd" in params) == ("argv" in params):
        return "a command probe needs exactly one of 'cmd' (a string) or 'argv' (a list)"
    return None


def target(spec: ProbeSpec, params: CommandParams) -> str:
    return shlex.join(params.argv) if params.argv is not None else params.shell or ""


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


class _Log:
    """The log file, cut at ``LOG_MAX_BYTES``; ``dropped`` counts what was not kept."""

    def __init__(self, file: Any) -> None:
        self.file = file
        self.written = 0
        self.dropped = 0

    def write(self, data: bytes | bytearray) -> None:
        room = LOG_MAX_BYTES - self.written
        if room > 0:
            self.file.write(data[:room])
            self.written += min(room, len(data))
        self.dropped += max(0, len(data) - max(room, 0))

    def close(self, ends: list[_Capture]) -> None:
        """Close the file; if it was cut, end it with each stream's captured end."""
        try:
            if self.dropped:
                self.file.write(f"\n… [{self.dropped} bytes not kept: the log keeps the first {LOG_MAX_BYTES} bytes, "
                                "then the end of stderr and of stdout] …\n".encode())
                for capture in ends:
                    self.file.write(bytes(capture.tail))
        except OSError:
            pass  # a full disk costs the log's end, never the check
        finally:
            self.file.close()


async def _drain(stream: trio.abc.ReceiveStream, capture: _Capture, log: Any) -> None:
    pending = bytearray()  # the stream's unfinished line, held back from the log
    while chunk := await stream.receive_some(65536):
        capture.feed(chunk)
        if log is None:
            continue
        # stdout and stderr share the log: write whole lines only, so a line of one
        # is never split by the other; a line longer than LOG_LINE_HOLD goes as is.
        # A buffered write to a local file lands in the page cache at once, so it is
        # done here rather than paying a thread hop per chunk.
        pending += chunk
        end = pending.rfind(b"\n") + 1 if len(pending) <= LOG_LINE_HOLD else len(pending)
        if end:
            log.write(pending[:end])
            del pending[:end]
    if log is not None and pending:
        log.write(pending)


def _open_log(path: str) -> tuple[Any, str | None]:
    """The log file opened for writing, or (None, why not): a log that cannot be
    written costs the full output, never the check."""
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        return _Log(open(path, "wb")), None  # noqa: SIM115 -- closed in probe_command's finally
    except OSError as exc:
        return None, f"could not write the full output to {path}: {exc.strerror or exc}"


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
    import trio

    argv = params.argv if params.argv is not None else ["/bin/sh", "-c", params.shell or ""]
    checked = target(spec, params)
    creates = resolve(spec, params.creates) if params.creates else None
    before = await trio.to_thread.run_sync(_fingerprint, creates) if creates else None
    if params.env is None:
        env = None
    else:
        env = dict(params.env) if params.whole_env else {**os.environ, **params.env}
    started = time.perf_counter()
    try:
        process = await open_in_own_group(argv, cwd=spec.cwd, env=env)
    except OSError as exc:
        if spec.cwd is not None and not os.path.isdir(spec.cwd):
            why = f"its working directory {spec.cwd} does not exist"
        else:
            why = f"could not start {argv[0]!r} in {spec.cwd}: {exc.strerror or exc}"
        return make_result(
            spec, checked, finding=COMMAND_FAILED, duration=time.perf_counter() - started,
            reason=f"{why}.", output=f"lockstep: command failed to start: {exc}",
        )
    stdout, stderr = _Capture(), _Capture()
    log, log_problem = _open_log(params.log) if params.log else (None, None)
    timed_out = False
    try:
        async with trio.open_nursery() as nursery:
            assert process.stdout is not None and process.stderr is not None
            nursery.start_soon(_drain, process.stdout, stdout, log)
            nursery.start_soon(_drain, process.stderr, stderr, log)
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
            if log is not None:
                log.close([stderr, stdout])
    duration = time.perf_counter() - started

    exit_code = None if timed_out else process.returncode
    finding: str | None = None
    if timed_out:
        finding = TIMED_OUT
        reason = f"{checked} did not finish within {spec.timeout:g} s; its process group was killed."
        note = f"lockstep: command failed: timed out after {spec.timeout:g} s, process group killed"
    elif exit_code != params.expect_exit:
        finding = COMMAND_FAILED
        reason = f"{checked} {_describe_exit(exit_code)}, expected status {params.expect_exit}."
        note = f"lockstep: command failed: {_describe_exit(exit_code)}, expected {params.expect_exit}"
    else:
        reason = f"{checked} exited with the expected status {exit_code}."
        note = ""
    details: dict[str, Any] = {"expect_exit": params.expect_exit}
    if log is not None:
        details["log"] = params.log
    elif log_problem:
        details["log_problem"] = log_problem
    if creates is not None and finding is None:
        after = await trio.to_thread.run_sync(_fingerprint, creates)
        details["creates"] = str(creates)
        if after is None:
            finding = SIDE_EFFECT_MISSING
            reason = f"{checked} exited {exit_code} but did not create {creates}."
        elif after == before:
            finding = SIDE_EFFECT_MISSING
            reason = f"{checked} exited {exit_code} but left {creates} unchanged."
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
        spec, checked, finding=finding, reason=reason, output=output, details=details,
        exit_code=exit_code, duration=duration,
    )


KIND = Kind("command", CommandParams, check, probe_command, target, on_loop=True, table_problem=table_problem)

"""``lockstep run --agent NAME -- CMD``: run a command as an agent.

Order matters: the session is opened *before* CMD starts (so an unreachable
coordinator or a name already live stops us without running anything), then CMD's pid
is watched (its exit frees the claims at once, even if this wrapper is killed), then
we heartbeat until CMD exits, say bye, and exit with CMD's status.  Signals are
forwarded to CMD, but for a Ctrl-C: the terminal sends that to CMD itself.  In a clone
joined to a coordinator on another host, a ``lockstep worker`` runs alongside CMD
(unless one runs already) so that the agent's checks run here.  Meanwhile every
write in the worktree is reported as it happens (``agents.watch``; armed before CMD
starts).

The coordinator going away never stops CMD: after heartbeat x liveness of silence we
say "coordinator unreachable" on stderr (once), and when it is back we say hello with
our session, which carries CMD's pid, so the session and its pid watch are registered
again (resumed after a restart, or renewed without claims if it had ended).

When CMD exits, ``run`` tells the coordinator the command it ran (``ran``), as an
after-tool hook does for a shell call, so the ``[[trigger]]``s it matches run their
probes; ``run -- sh -c SCRIPT`` is seen as SCRIPT (what a hook sees of a shell call).
With a worker of its own (a joined clone), ``run`` waits for that job before stopping
the worker, so the probes run on this host; otherwise the coordinator runs them and
``run`` exits at once.  Neither changes CMD's exit status.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from contextlib import asynccontextmanager

import trio

from protocol import messages as m
from protocol.errors import EXIT_USAGE, exit_code_of, single_errors

from .client import CoordinatorUnreachable, RequestFailed, open_agent
from .watch import SessionNotices, reporting_writes

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
WORKER_GRACE = 5.0  # seconds the worker `run` started has to stop before it is killed
SHELLS = ("sh", "bash", "dash", "zsh", "ksh")  # `SHELL -c SCRIPT` is reported as SCRIPT
TRIGGER_POLL = 0.1  # seconds between looks at the triggered job run's own worker runs
NOT_FOUND, NOT_RUNNABLE = 127, 126  # exit codes when CMD cannot start (as a shell's)
WORKER_READY_WAIT = 15.0  # seconds run's own worker may take to be welcomed before CMD is reported


def exit_status(returncode: int) -> int:
    """A shell's convention: 128+N for a command killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def run_as_agent(name: str, argv: list[str], endpoint: str | None = None, as_json: bool = False, watch: bool = True) -> int:
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        return _fail(as_json, "bad_request", "no command given (lockstep run --agent NAME -- CMD ...)", EXIT_USAGE)
    if not argv[0]:  # a shell says "command not found" (127) of '': exec would say EACCES (126)
        return _fail(as_json, "bad_request", "cannot start '': an empty command name", NOT_FOUND)
    return trio.run(_run, name, argv, endpoint, as_json, watch)


def _fail(as_json: bool, code: str, message: str, status: int) -> int:
    """Report lockstep's own failure (CMD's output is CMD's business)."""
    if as_json:
        print(json.dumps({"error": {"code": code, "message": message}}))
    else:
        print(f"lockstep run: {message}", file=sys.stderr)
    return status


async def _run(name: str, argv: list[str], endpoint: str | None, as_json: bool, watch: bool) -> int:
    """The signals ``run`` forwards are received for its whole life, so that one arriving
    after CMD exited (a second Ctrl-C, a supervisor's SIGTERM to the group) neither cuts
    the report of CMD's last writes short nor replaces CMD's exit status."""
    relay = _Relay()
    status = None
    with trio.open_signal_receiver(*FORWARDED) as signals, single_errors():
        async with trio.open_nursery() as nursery:
            nursery.start_soon(relay.serve, signals, nursery.cancel_scope)
            status = await _run_command(name, argv, endpoint, as_json, watch, relay)
            nursery.cancel_scope.cancel()
    if relay.stopped_by is not None:  # before CMD started: nothing ran, run stops as the signal says
        return _fail(as_json, "interrupted", f"stopped by {signal.Signals(relay.stopped_by).name}; not starting {argv[0]}",
                     128 + relay.stopped_by)
    return status


class _Relay:
    """Where a signal to ``run`` goes: before CMD starts it stops ``run``; while CMD runs it
    is forwarded to CMD (but for a Ctrl-C, which the terminal sent CMD already); once CMD
    has exited it is dropped: what is left (reporting CMD's last writes) is bounded."""

    def __init__(self) -> None:
        self.process: trio.Process | None = None  # CMD, once started
        self.starting = False  # CMD is being started: a signal now is CMD's, once it runs
        self.held: list[int] = []  # signals that came while CMD was being started
        self.exited = False  # CMD has exited
        self.stopped_by: int | None = None  # the signal that stopped run before CMD started

    async def serve(self, signals, scope: trio.CancelScope) -> None:
        async for signum in signals:
            if self.process is None and self.starting:
                self.held.append(signum)
            elif self.process is None:
                self.stopped_by = signum
                scope.cancel()
                return
            else:
                self.forward(signum)

    def started(self, process: trio.Process) -> None:
        self.process, self.starting = process, False
        for signum in self.held:
            self.forward(signum)

    def forward(self, signum: int) -> None:
        if self.exited or (signum == signal.SIGINT and _terminal_sent_it_to(self.process.pid)):
            return
        try:
            self.process.send_signal(signum)
        except ProcessLookupError:
            pass


async def _run_command(name: str, argv: list[str], endpoint: str | None, as_json: bool, watch: bool, relay: _Relay) -> int:
    try:
        notices = SessionNotices()
        async with open_agent(name, endpoint=endpoint, kind="run", on_notice=notices) as agent, \
                reporting_writes(agent, enabled=watch, session_notices=notices), own_worker() as worker:
            env = dict(os.environ, LOCKSTEP_AGENT=name, LOCKSTEP_ENDPOINT=agent.conn.endpoint)
            relay.starting = True
            try:
                process = await trio.lowlevel.open_process(argv, env=env)
            except OSError as exc:  # a shell's codes: 127 not found, 126 found but not runnable
                status = NOT_FOUND if isinstance(exc, FileNotFoundError) else NOT_RUNNABLE
                return _fail(as_json, "bad_request", f"cannot start {argv[0]}: {exc}", status)
            relay.started(process)
            await agent.watch(process.pid)
            returncode = await process.wait()
            relay.exited = True
            notices.quiet = True  # the session ended with CMD: a renewal by the last reports of writes is no news
            if worker is not None:  # its triggered probes run on that worker: once it is ready
                await _worker_ready(worker)
            await _report_command(agent, argv, wait=worker is not None)
            return exit_status(returncode)
    except CoordinatorUnreachable as exc:
        return _fail(as_json, exc.code, f"{exc}; not starting {argv[0]}", exit_code_of(exc))
    except RequestFailed as exc:
        return _fail(as_json, exc.code, exc.message, exit_code_of(exc))


def command_line(argv: list[str]) -> str:
    """The command as a shell would have run it; ``SHELL -c SCRIPT ...`` is SCRIPT."""
    if len(argv) >= 3 and os.path.basename(argv[0]) in SHELLS and argv[1] == "-c":
        return argv[2]
    return shlex.join(argv)


async def _report_command(agent, argv: list[str], *, wait: bool) -> None:
    """Tell the coordinator what CMD was (``ran``): matching ``[[trigger]]``s run their
    probes.  ``wait``: follow the job to its end (its probes run on our own worker).
    A failure here is said on stderr and changes nothing else."""
    try:
        # The session as it was: a session that ended with CMD still names the agent,
        # and renewing it would show the agent alive again after its command is gone.
        command = command_line(argv).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")  # bytes that are not UTF-8: shown escaped
        reply = await agent.conn.request(m.Ran(session=agent.session, command=command[:4000], cwd=os.getcwd()))
        if wait and isinstance(reply, m.Accepted):
            while (await agent.conn.request(m.JobQuery(job=reply.job))).gate is None:
                await trio.sleep(TRIGGER_POLL)
    except (CoordinatorUnreachable, RequestFailed, OSError) as exc:  # OSError: CMD removed our working directory
        print(f"lockstep run: the command's [[trigger]]s were not run: {exc}", file=sys.stderr)


async def _worker_ready(worker: trio.Process) -> None:
    """Until the worker ``run`` started is welcomed by the coordinator (or gone, or
    ``WORKER_READY_WAIT`` passed: the coordinator then says no worker runs)."""
    from protocol.discovery import locate

    from .worker import running_worker

    place = locate()
    with trio.move_on_after(WORKER_READY_WAIT):
        while worker.poll() is None and running_worker(place, ready=True) != worker.pid:
            await trio.sleep(TRIGGER_POLL)


@asynccontextmanager
async def own_worker():
    """In a clone joined to a coordinator on another host, with no worker running: a
    ``lockstep worker`` for as long as the command runs, so its checks run here."""
    from protocol import curve
    from protocol.discovery import locate

    from .worker import running_worker

    place = locate()
    if not place.in_git or curve.read_remote(place.state_dir) is None or running_worker(place) is not None:
        yield None
        return
    worker = await trio.lowlevel.open_process(
        [sys.executable, "-m", "agents.cli", "worker"], cwd=str(place.worktree), stdin=subprocess.DEVNULL,
    )
    try:
        yield worker
    finally:
        with trio.CancelScope(shield=True):
            worker.terminate()  # it says worker_bye on SIGTERM
            with trio.move_on_after(WORKER_GRACE):
                await worker.wait()
            if worker.returncode is None:
                worker.kill()
                await worker.wait()


def _terminal_sent_it_to(pid: int) -> bool:
    """Whether a SIGINT we got is a Ctrl-C that reached CMD already: the terminal sends it
    to its whole foreground process group, and CMD is in ours.  Forwarding it would be
    a second Ctrl-C, which many programs (agents' REPLs among them) take as "quit now"."""
    try:
        if os.getpgid(pid) != os.getpgrp():
            return False
    except OSError:
        return False
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
                return True
        except OSError:  # not our controlling terminal
            continue
    return False

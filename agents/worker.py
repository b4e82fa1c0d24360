"""``lockstep worker``: run a remote agent's probes in its own clone, for its coordinator.

A clone joined to a coordinator on another host (``lockstep join``) cannot have its
checks run by that coordinator: the files are here.  The worker is the Majordomo
worker of that arrangement (zguide ch. 4, ``mdwrkapi.py``):

* it connects over CURVE with the agent's own key (``remote.json``), so the coordinator
  knows which agent it serves and refuses it any other name;
* ``worker_ready`` says its host and worktree; the welcome says the heartbeat;
* heartbeats go both ways: ``worker_hb`` every interval; after ``heartbeat x liveness``
  with nothing from the coordinator, it says ``worker_ready`` again (the coordinator may
  have restarted and forgotten it);
* each ``work`` runs in a local probe pool, in this clone only: ``suite`` runs the specs
  it is given, ``verify`` builds this worktree's verify suite here and runs it
  (``probes.verifyrun``, the same steps as the coordinator's own verify); every result
  goes back as it finishes (``work_progress``), then ``work_done``; ``restore`` is a
  rule's ``rollback``: this worktree back to what its last passing verify run saw
  (``protocol.restore``), paths other agents hold left alone;
* ``work_cancel`` (its job is over: Ctrl-C on the check, say) ends that work's probes at
  once, their process groups killed and their slots freed, and answers ``work_done``
  saying so (the coordinator only logs it); a ``worker_dismissed`` asking it to say
  ready again does the same for all its work (the coordinator restarted or lost it, so
  no job waits for that work any more); and so does a welcome, after a ``worker_ready``
  sent again, for the work it does not list as still awaited;
* it stops on SIGINT/SIGTERM (saying ``worker_bye``), when the coordinator dismisses it
  (its key revoked, another worker of the key replaced it), or when its key is refused.

While it runs, ``worker.json`` in the clone's state directory names its pid, so
``lockstep run`` does not start a second one; ``ready`` is set there once the
coordinator has welcomed it (``lockstep run`` waits for that before it reports its
command, whose triggered probes this worker runs).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Callable

import msgspec
import trio

from probes import verifyrun
from probes.model import ProbeError, ProbeResult, ProbeSpec
from probes.pool import ProbePool, open_probe_pool
from protocol import curve, restore
from protocol import messages as m
from protocol.discovery import Place, locate
from protocol.errors import PeerError, UsageError, single_errors
from protocol.paths import Pattern, escape, overlaps
from protocol.procs import is_same_process, process_started

from .client import (
    Connection,
    CoordinatorUnreachable,
    RequestFailed,
    open_connection,
    resolve_endpoint,
)

WORKER_FILE = "worker.json"
Say = Callable[[str], None]


class Dismissed(Exception):
    """The coordinator dropped this worker, or refused its key: stop."""


def joined_agent(place: Place) -> str:
    """The agent this clone joined as; ``UsageError`` if it never joined."""
    remote = curve.read_remote(place.state_dir)
    if remote is None or not remote.get("agent"):
        raise UsageError(
            f"{place.worktree} is not a joined clone: a worker runs an agent's probes on another host than its "
            "coordinator; run `lockstep join TOKEN` here first"
        )
    return remote["agent"]


def running_worker(place: Place, *, ready: bool = False) -> int | None:
    """The pid of a live worker of this clone, if any (``ready``: one the coordinator
    has welcomed)."""
    try:
        data = json.loads((place.state_dir / WORKER_FILE).read_text())
        pid, started = int(data["pid"]), data.get("started")
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if ready and data.get("ready") is not True:
        return None
    return pid if is_same_process(pid, started) else None


def _write_state(place: Place, name: str, *, ready: bool = False) -> None:
    pid = os.getpid()
    curve.write_private(place.state_dir / WORKER_FILE, {"pid": pid, "started": process_started(pid), "agent": name, "ready": ready})


def serve_worker(agent: str | None, endpoint: str | None, say: Say) -> int:
    place = locate()
    name = joined_agent(place)
    if agent and agent != name:
        raise UsageError(f"this clone joined as {name}; its key may serve only {name}'s probes, not {agent}'s")
    return trio.run(_serve, place, name, resolve_endpoint(place, endpoint), say)


async def _serve(place: Place, name: str, endpoint: str, say: Say) -> int:
    state = place.state_dir / WORKER_FILE
    _write_state(place, name)
    try:
        async with open_connection(endpoint) as conn, open_probe_pool() as pool:
            await pool.warm_up()  # the first checks do not wait for worker processes to start
            worker = Worker(conn, pool, place, name, say)
            return await worker.serve()
    finally:
        try:
            if json.loads(state.read_text()).get("pid") == os.getpid():
                state.unlink()
        except (OSError, ValueError):
            pass


class Worker:
    def __init__(self, conn: Connection, pool: ProbePool, place: Place, name: str, say: Say) -> None:
        self.conn = conn
        self.pool = pool
        self.place = place
        self.name = name
        self.say = say
        self.heartbeat = 1.0
        self.liveness = 3
        self.top = place.worktree.resolve()  # the one worktree it runs probes in
        self.running: dict[str, trio.CancelScope] = {}  # work id -> its scope (cancelled: its probes end)

    async def ready(self) -> None:
        hello = m.WorkerReady(agent=self.name, host=_hostname(), worktrees=[str(self.place.worktree)], pid=os.getpid())
        started_before = set(self.running)  # work arriving while we wait for the welcome is the coordinator's newest
        welcome = await self.conn.request(hello)
        if not isinstance(welcome, m.WorkerWelcome):
            raise Dismissed(f"unexpected answer to worker_ready: {type(welcome).__name__}")
        self.heartbeat, self.liveness = welcome.heartbeat, welcome.liveness
        if welcome.running is not None:  # None: a coordinator too old to say
            for job in started_before - set(welcome.running):
                self.cancel(job)  # no job waits for it: the coordinator restarted, or lost this worker
        _write_state(self.place, self.name, ready=True)

    async def serve(self) -> int:
        try:
            await self.ready()
        except RequestFailed as exc:
            self.say(f"lockstep worker: refused: {exc.message}")
            return 1
        self.say(f"lockstep worker: running {self.name}'s probes in {self.place.worktree} for {self.conn.endpoint}")
        try:
            with single_errors():  # a Dismissed from any task is the one error
                async with trio.open_nursery() as nursery:
                    await self._serve_in(nursery)
        except Dismissed as exc:
            self.say(f"lockstep worker: {exc}")
            return 1
        self.say("lockstep worker: stopped")
        return 0

    async def _serve_in(self, nursery: trio.Nursery) -> None:
        """Beat, stop on a signal, and take what the coordinator sends until dismissed."""
        nursery.start_soon(self._beat)
        nursery.start_soon(self._stop_on_signal, nursery.cancel_scope)

        def take_work(message: m.Message) -> bool:
            """Work starts, and is cancelled, from the connection's reader, with no
            wake-up of this loop."""
            if isinstance(message, m.WorkCancel):
                self.cancel(message.job)
                return True
            if not isinstance(message, m.Work):
                return False
            self.running[message.job] = trio.CancelScope()  # before it starts: a cancel right behind it finds it
            nursery.start_soon(self._run, message, name=f"work {message.job}")
            return True

        self.conn.take_unsolicited = take_work
        try:
            while True:
                message = await self.conn.next_unsolicited()
                match message:
                    case m.WorkerDismissed(again=True):
                        for job in list(self.running):  # the coordinator forgot this worker: no job waits for its work
                            self.cancel(job)
                        nursery.start_soon(self._ready_again)
                    case m.WorkerDismissed(reason=reason):
                        raise Dismissed(f"dismissed by the coordinator: {reason}")
                    case m.Error(code=code, message=text) if code in ("revoked", "forbidden"):
                        raise Dismissed(f"refused by the coordinator ({code}): {text}")
        finally:
            self.conn.take_unsolicited = None

    async def _stop_on_signal(self, scope: trio.CancelScope) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                self.conn.send_oneway(m.WorkerBye(reason=f"signal {signal.Signals(signum).name}"))
                await trio.sleep(0.05)  # let the bye leave before the socket closes
                scope.cancel()
                return

    async def _beat(self) -> None:
        while True:
            await trio.sleep(self.heartbeat)
            self.conn.send_oneway(m.WorkerBeat())
            if trio.current_time() - self.conn.last_heard > self.heartbeat * self.liveness:
                await self._ready_again()

    async def _ready_again(self) -> None:
        try:
            await self.ready()
        except CoordinatorUnreachable:
            pass  # still away: the next beat tries again
        except RequestFailed as exc:
            raise Dismissed(f"refused by the coordinator ({exc.code}): {exc.message}") from None

    # -- one piece of work ---------------------------------------------------------------

    def cancel(self, job: str) -> None:
        """End work ``job`` now (a command probe's whole process group goes with it); work
        that already ended, or that this worker never ran, is left alone."""
        scope = self.running.get(job)
        if scope is not None:
            scope.cancel()

    async def _run(self, work: m.Work) -> None:
        scope = self.running.setdefault(work.job, trio.CancelScope())
        done = m.WorkDone(job=work.job, error="cancelled by the coordinator (its job was over); its probes were ended")
        try:
            with scope:
                done = await self._carry_out(work)
        except (ProbeError, UsageError) as exc:
            done = m.WorkDone(job=work.job, error=exc.message)
        except Exception as exc:  # a bug in one piece of work: its job fails, the worker goes on
            done = m.WorkDone(job=work.job, error=f"the worker could not run it: {type(exc).__name__}: {exc}")
        finally:
            if self.running.get(work.job) is scope:
                del self.running[work.job]
        if scope.cancelled_caught:
            self.say(f"lockstep worker: work {work.job} cancelled by the coordinator; its probes were ended")
        self.conn.send_oneway(done)

    async def _carry_out(self, work: m.Work) -> m.WorkDone:
        root = self._worktree_of(work.cwd)
        holder_of = _holders(work.held)
        if work.kind == "restore":
            return await self._restore(work, root, holder_of)
        if work.kind == "verify":
            specs, about = await verifyrun.verify_specs(root, work.agent or self.name, work.venv)

            async def progress(result: ProbeResult) -> None:
                self._send_progress(work.job, result, len(specs), about.get(result.name, {}))

            results, tree = await verifyrun.run_verify(self.pool, specs, root, holder_of, progress)
            return m.WorkDone(job=work.job, order=[r.name for r in results], tree=tree)
        specs = [msgspec.convert(spec, ProbeSpec) for spec in work.specs]
        for spec in specs:
            self._worktree_of(spec.cwd or work.cwd)
        if len(specs) == 1:  # one check (the usual `check`, a hook's write check): no suite to schedule
            result = await self.pool.run(specs[0])
            return m.WorkDone(job=work.job, order=[result.name], results=[msgspec.to_builtins(result)])
        results = await self.pool.run_suite(specs, on_result=lambda i, r: self._send_progress(work.job, r, len(specs), {}))
        return m.WorkDone(job=work.job, order=[r.name for r in results])

    async def _restore(self, work: m.Work, root: Path, holder_of: Callable[[str], str | None]) -> m.WorkDone:
        """A rule's rollback, here: the same two steps as on the coordinator's host."""

        def roll_back() -> restore.Restored:
            changes = restore.changes_since(root, work.tree)
            kept = {path: holder for _, path in changes if (holder := holder_of(path)) is not None}
            return restore.restore(root, work.tree, changes, kept)

        try:
            done = await trio.to_thread.run_sync(roll_back)
        except restore.ContentError as exc:
            return m.WorkDone(job=work.job, error=f"{exc}")
        return m.WorkDone(job=work.job, restored=msgspec.to_builtins(done))

    def _send_progress(self, job: str, result: ProbeResult, total: int, about: dict) -> None:
        self.conn.send_oneway(m.WorkProgress(job=job, result=msgspec.to_builtins(result), about=about, total=total))

    def _worktree_of(self, cwd: str) -> Path:
        """Probes run in this clone only: anything else is refused."""
        top = self.top
        target = Path(cwd).resolve() if cwd else top
        if target != top and top not in target.parents:
            raise UsageError(f"{cwd} is not in {self.name}'s clone {top} on {_hostname()}: this worker runs probes there only")
        return top


def _holders(held: list[list[str]]) -> Callable[[str], str | None]:
    """Who else holds a path, from the (pattern, holder) pairs a work came with."""
    patterns = [(Pattern(pattern), holder) for pattern, holder in held]

    def holder_of(path: str) -> str | None:
        try:
            target = Pattern(escape(path))  # a file name from git: its [ * ? are not globs
        except PeerError:
            return None  # not a path a claim can name
        return next((holder for pattern, holder in patterns if overlaps(pattern, target)), None)

    return holder_of


def _hostname() -> str:
    import socket

    return socket.gethostname()


def say_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)

"""Remote workers: the coordinator's side of ``lockstep worker`` (Majordomo, zguide ch. 4).

Theory.  A remote agent's worktree is on its own host, so its probes (checks, verify
runs, plan steps, the hooks' write checks) must run there.  ``lockstep worker`` on
that host connects over the CURVE endpoint with the agent's own key and says
``worker_ready`` (its host and worktrees); the key may serve only the name it is bound
to (``remote.RemoteGate.admit``).  From then on:

* The job runner asks ``run(agent, work)``: the ``work`` goes to that agent's worker;
  each ``work_progress`` is handed to the job as it comes (the job records it, exactly
  as a local probe's result), ``work_done`` ends the call.  No worker for the agent:
  ``no_worker``, naming what to start where.
* Heartbeats go both ways (``worker_hb`` in, ``worker_ping`` out, every ``heartbeat``
  seconds).  A worker silent for ``heartbeat x liveness`` is lost: the work it was
  running fails with ``worker lost`` (the job's gate says so), and it is forgotten
  until it says ``worker_ready`` again.  A worker that says ``worker_bye`` is lost at
  once, and so is one whose key is revoked (``drop``: it is told ``worker_dismissed``).
* One worker per agent: a new ``worker_ready`` from another connection replaces the
  old worker (its running work is lost, it is dismissed).
* A job that ends without its work's ``work_done`` (its requester cancelled it: Ctrl-C
  on ``check``/``verify``; or a result it could not read failed it) tells the worker
  ``work_cancel``: the worker ends that work's probes (their process groups) at once
  and frees their slots, rather than running a long suite to its end for nobody.  A
  worker already lost is not told (it was dismissed, or said bye, or is silent).  A
  worker that says ``worker_ready`` again is welcomed with the work the coordinator
  still waits for from it (none, if it had forgotten or lost it): it drops the rest.
* A result for work nobody waits for any more (cancelled, failed, lost, or a job id
  the coordinator never gave) is logged and dropped, never recorded as a job's result.

Messages arrive in the request loop's turn; the waiting job runs in its own task, so
``receive`` only puts them on that job's channel and never waits.  ``send`` is the
server's reply path (it queues behind unread replies, never blocks).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import msgspec
import trio

from probes.model import ProbeError, ProbeResult
from probes.output import DEFAULT_LIMIT, truncate
from protocol import messages as m
from protocol.codec import encode
from protocol.errors import PeerError

from .effects import Effect, Send

log = logging.getLogger("lockstep")

WORKER_MESSAGES = (m.WorkerReady, m.WorkerBeat, m.WorkProgress, m.WorkDone, m.WorkerBye)
# Results a job has not taken yet (each goes through the ledger): a worker this far ahead
# of its job is flooding it, and is dropped before its backlog fills the coordinator.
PROGRESS_BACKLOG = 256
# A result's text fields as the coordinator keeps them: what a local probe keeps (its
# output errors-first, cut to probes.output.DEFAULT_LIMIT), whatever the worker sent.
RESULT_TEXT_LIMIT = 2000
RESULT_DETAILS_BYTES = 16 * 1024
OnProgress = Callable[[m.WorkProgress], Awaitable[None]]


class WorkerLost(ProbeError):
    """The worker running a job's work is gone; the job fails with this message."""


@dataclass
class Worker:
    peer: bytes
    agent: str
    host: str
    worktrees: list[str]
    pid: int | None
    since: float
    last_heard: float
    work: dict[str, trio.MemorySendChannel] = field(default_factory=dict)  # work id -> its job's channel
    done: int = 0

    def info(self, now: float) -> dict[str, Any]:
        return {
            "agent": self.agent, "host": self.host, "worktrees": self.worktrees, "pid": self.pid,
            "running": sorted(self.work), "done": self.done, "for_s": round(now - self.since, 3),
            "last_heard_s": round(now - self.last_heard, 3),
        }


class WorkerBroker:
    def __init__(self, send: Callable[[bytes, bytes], None], heartbeat: float, liveness: int) -> None:
        self._send = send  # (peer, frame): the server's reply path
        self.heartbeat = heartbeat
        self.liveness = liveness
        self._by_agent: dict[str, Worker] = {}
        self._counts = {"dispatched": 0, "completed": 0, "lost": 0, "no_worker": 0, "cancelled": 0, "ignored": 0}

    # -- what workers say (in the request loop's turn) ----------------------------------

    def receive(self, peer: bytes, name: str, message, now: float) -> list[Effect]:
        """A worker's message; ``name`` is the agent its key is bound to."""
        worker = self._by_agent.get(name)
        if isinstance(message, m.WorkerReady):
            if worker is not None and worker.peer != peer:
                self._lose(worker, f"worker lost: another worker of {name} replaced it")
                self._tell(worker.peer, m.WorkerDismissed(reason=f"another worker of {name} connected (from {message.host or '?'})"))
                worker = None
            if worker is None:
                worker = self._by_agent[name] = Worker(peer, name, message.host, list(message.worktrees), message.pid, now, now)
                log.info("worker for %s ready on %s (%s)", name, message.host or "?", ", ".join(message.worktrees) or "no worktree")
            worker.last_heard = now
            welcome = m.WorkerWelcome(req=message.req, agent=name, heartbeat=self.heartbeat, liveness=self.liveness, running=sorted(worker.work))
            return [Send(peer, welcome)]
        if worker is None or worker.peer != peer:
            if isinstance(message, (m.WorkProgress, m.WorkDone)):
                self._ignore(message, f"{name}'s worker, already lost or replaced")
            if isinstance(message, (m.WorkerBye, m.WorkProgress, m.WorkDone)):
                return []  # a late word from a worker already lost or replaced: its jobs have ended
            # A beat from a worker we do not know (we restarted): it says ready again.
            return [Send(peer, m.WorkerDismissed(reason="this coordinator does not know this worker (it restarted)", again=True))]
        worker.last_heard = now
        match message:
            case m.WorkProgress(job=job) | m.WorkDone(job=job):
                channel = worker.work.get(job)
                if channel is None:
                    self._ignore(message, f"{name}'s worker")
                else:
                    if channel.statistics().current_buffer_used >= PROGRESS_BACKLOG:
                        self._tell(peer, m.WorkerDismissed(reason=f"more than {PROGRESS_BACKLOG} results of job {job} were waiting"))
                        self._forget(worker, f"worker lost: {name}'s worker sent results faster than its job could record them")
                        return []
                    try:
                        message = checked(message)
                    except msgspec.ValidationError as exc:  # the job fails saying so, not as a crash of its own
                        del worker.work[job]
                        message = WorkerLost(f"{name}'s worker sent a result the coordinator cannot read ({exc}); nothing of it recorded")
                    if isinstance(message, m.WorkDone):
                        del worker.work[job]
                        worker.done += 1
                    try:
                        channel.send_nowait(message)
                    except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                        pass  # the job is gone (cancelled): nothing waits for it
            case m.WorkerBye(reason=reason):
                self._forget(worker, f"worker lost: {name}'s worker stopped ({reason or 'bye'})")
        return []

    def beat(self, now: float) -> None:
        """Every ``heartbeat`` seconds: ping every worker, forget the silent ones."""
        for worker in list(self._by_agent.values()):
            if now - worker.last_heard > self.heartbeat * self.liveness:
                silent = now - worker.last_heard
                self._forget(worker, f"worker lost: {worker.agent}'s worker on {worker.host or '?'} did not answer for {silent:.1f}s")
            else:
                self._tell(worker.peer, m.WorkerPing())

    def drop(self, name: str, reason: str) -> bool:
        """Drop ``name``'s worker now (its key was revoked)."""
        worker = self._by_agent.get(name)
        if worker is None:
            return False
        self._tell(worker.peer, m.WorkerDismissed(reason=reason))
        self._forget(worker, f"worker lost: {reason}")
        return True

    # -- what jobs ask -------------------------------------------------------------------

    def has_worker(self, agent: str) -> bool:
        return agent in self._by_agent

    async def run(self, agent: str, work: m.Work, on_progress: OnProgress) -> m.WorkDone:
        """Run ``work`` on ``agent``'s worker: progress as it comes, then its end.
        ``WorkerLost`` if the worker goes away first."""
        worker = self._by_agent.get(agent)
        if worker is None:
            self._counts["no_worker"] += 1
            where = f" ({work.cwd})" if work.cwd else ""
            raise PeerError(
                "no_worker",
                f"no worker runs for {agent}'s worktree on its host: start `lockstep worker` in that clone{where} "
                "(`lockstep run` starts one for its command)",
            )
        send, receive = trio.open_memory_channel[Any](math.inf)
        worker.work[work.job] = send
        self._counts["dispatched"] += 1
        answered = False  # the worker said work_done: nothing of the work runs there any more
        why = "its job ended without waiting for it"
        try:
            self._tell(worker.peer, work)
            async with receive:
                async for message in receive:
                    if isinstance(message, WorkerLost):
                        why = message.message
                        raise message
                    if isinstance(message, m.WorkDone):
                        answered = True
                        for result in message.results:  # a single check's result comes with the end
                            await on_progress(m.WorkProgress(job=message.job, result=result, total=len(message.order)))
                        self._counts["completed"] += 1
                        return message
                    await on_progress(message)
            raise WorkerLost("worker lost")  # pragma: no cover - the channel closes only through _lose
        except trio.Cancelled:
            why = "its job was cancelled"
            raise
        finally:
            worker.work.pop(work.job, None)
            if not answered and self._by_agent.get(agent) is worker:  # a lost worker is not told: it was dismissed, or is gone
                self._counts["cancelled"] += 1
                self._tell(worker.peer, m.WorkCancel(job=work.job, reason=why))

    def statistics(self, now: float) -> dict[str, Any]:
        return {**self._counts, "workers": [w.info(now) for w in self._by_agent.values()]}

    # -- internals -----------------------------------------------------------------------

    def _tell(self, peer: bytes, message: m.Reply) -> None:
        self._send(peer, encode(message))

    def _ignore(self, message: m.WorkProgress | m.WorkDone, sender: str) -> None:
        """A late result: logged, never a job's (its work was cancelled, failed or lost)."""
        self._counts["ignored"] += 1
        log.info("ignored %s of work %r from %s: no job waits for it (cancelled, failed, lost or unknown)",
                 "a result" if isinstance(message, m.WorkProgress) else "the end", message.job, sender)

    def _forget(self, worker: Worker, why: str) -> None:
        if self._by_agent.get(worker.agent) is worker:
            del self._by_agent[worker.agent]
        log.warning("%s", why)
        self._lose(worker, why)

    def _lose(self, worker: Worker, why: str) -> None:
        for channel in worker.work.values():
            self._counts["lost"] += 1
            try:
                channel.send_nowait(WorkerLost(why))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        worker.work.clear()


def checked(message: m.WorkProgress | m.WorkDone) -> m.WorkProgress | m.WorkDone:
    """A worker's results bounded (``bounded_result``) and each a ``ProbeResult``, a
    restore's outcome a ``Restored``; ``msgspec.ValidationError`` if one is not (a
    worker of another version, or a hostile one)."""
    from protocol.restore import Restored

    if isinstance(message, m.WorkDone):
        results = [bounded_result(r) for r in message.results]
        for result in results:
            msgspec.convert(result, ProbeResult)
        if message.restored:
            msgspec.convert(message.restored, Restored)
        return msgspec.structs.replace(message, results=results)
    result = bounded_result(message.result)
    msgspec.convert(result, ProbeResult)
    return msgspec.structs.replace(message, result=result)


def bounded_result(result: dict[str, Any]) -> dict[str, Any]:
    """A remote probe result cut to what a local one may hold: its output errors-first
    to the local limit, its other texts and its details bounded.  (A worker runs the
    agent's own checks, so it may report them as it likes; it may not make the ledger
    hold megabytes per result.)"""
    bounded = dict(result)
    for name, value in result.items():
        if isinstance(value, str) and name != "output" and len(value) > RESULT_TEXT_LIMIT:
            bounded[name] = truncate(value, RESULT_TEXT_LIMIT)
    output = result.get("output")
    if isinstance(output, str) and len(output) > DEFAULT_LIMIT:
        bounded["output"] = truncate(output, DEFAULT_LIMIT)
    details = result.get("details")
    if details is not None and len(encode(details)) > RESULT_DETAILS_BYTES:
        bounded["details"] = {"cut": f"the worker sent more than {RESULT_DETAILS_BYTES} bytes of details"}
    return bounded


def work_for(job: str, kind: str, **fields: Any) -> m.Work:
    """A ``work`` message; specs go as plain maps."""
    specs = [msgspec.to_builtins(spec) for spec in fields.pop("specs", [])]
    return m.Work(job=job, kind=kind, specs=specs, **fields)

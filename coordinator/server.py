"""The I/O shell: one trio process around the pure core.

Tasks (all in one nursery, all ending on SIGINT/SIGTERM or a ``Shutdown`` request):

* ``_serve_requests`` waits for the ROUTER to be readable, drains a batch, feeds every
  message to the core, commits the batch's ledger records in one transaction (a worker
  thread: sqlite never blocks the trio thread), then sends replies and publications.
  Group commit falls out of this: while one batch commits, the next one queues.
* ``_tick`` calls ``core.tick(now)`` a few times per heartbeat interval (expiry).
* ``_recover_storage`` runs only while the ledger cannot be written (see below).
* ``_checkpoint`` runs a PASSIVE WAL checkpoint from a second connection now and then
  (auto-checkpoint inside commits is off: it made p99 ten times worse), and a
  truncating one once the ledger has been idle for a while (the WAL file back to 0).
* ``_retain`` applies the retention policy (``[ledger] keep`` and ``max_size``, see
  retention.py): snapshot, remove what it covers in paced slices, return the space.
* the ``PidWatcher`` reports exits of local agents' processes.
* with ``--curve``: ``_serve_zap`` answers CURVE handshakes (remote.py) and
  ``_beat_workers`` pings remote agents' workers and loses the silent ones (workers.py).

Failing closed: when a commit fails (disk full, I/O error, read-only filesystem), the
batch's records were applied to the registry but are not in the ledger, so the registry
is rebuilt from the ledger, every reply of the batch becomes ``unavailable`` with the
cause, and the condition is published and shown by ``status``.  Until a write succeeds
again, every request but ``status``, ``job`` and heartbeats is answered ``unavailable``
and nothing expires (an expiry could not be recorded); ``_recover_storage`` checkpoints
the WAL and tries a small write with back-off, and serving resumes by itself.

Every path into the core goes through ``_turn`` (a lock): core call, commit, then
sends, never interleaved with another batch — so a reply is never sent before its
ledger records are durable, and sends of one batch keep their order.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import sqlite3
import time
import traceback
from contextlib import ExitStack
from pathlib import Path

import msgspec
import trio
import zmq

from ledger import Ledger, LedgerError
from ledger.records import ClaimReleased, LedgerCompacted, PeerCutOff
from probes.pool import open_probe_pool
from protocol.codec import decode_request, encode, sniff_req
from protocol.discovery import LEDGER_FILE, Place, remove_state, write_state
from protocol.errors import PeerError, UsageError
from protocol.messages import (
    HARD_FRAME_LIMIT,
    MERGING_LIMIT,
    Bye,
    Compact,
    Compacted,
    Enroll,
    Error,
    Fresh,
    Heartbeat,
    JobQuery,
    Keys,
    KeysReply,
    LandQuery,
    Release,
    Status,
)
from protocol.trio_zmq import ReadableAny, TrioSocket
from protocol.uncommitted import uncommitted_paths

from .core import Core, ReplayError, StatusParts
from .effects import (
    Bug,
    CheckUncommitted,
    Publish,
    Record,
    Send,
    StartJob,
    StopServing,
    UnwatchPid,
    WatchPid,
)
from .fairqueue import FairQueue
from .gitrefs import RefWatcher
from .jobs import JobRunner
from .landing import LandQueue
from .pidwatch import PidWatcher
from .registry import SNAPSHOT_FORMAT, STATE_KINDS, Snapshot
from .remote import REMOTE_MARK, REMOTE_PEER, ZAP_ENDPOINT, RemoteGate
from .replies import PIPE_REPLIES, CutOff, PeerQueues
from .retention import (
    AGE_PASS_EVERY,
    IDLE_AFTER,
    SIZE_CHECK_EVERY,
    Pacer,
    events_over_budget,
)
from .settings import Settings
from .statusrender import ROWS_PER_TURN, StatusRender
from .workers import WORKER_MESSAGES, WorkerBroker

log = logging.getLogger("lockstep")

BATCH_LIMIT = 1024  # messages handled per turn
QUEUED_BYTES = 16 * 1024 * 1024  # read off the sockets, not handled yet (requests are small; a frame may be 1 MiB)
PIPE_REQUESTS = 16  # a ROUTER's RCVHWM: requests zmq holds for one peer (each up to HARD_FRAME_LIMIT)
PEER_TURN = 8  # messages of one peer per turn: a flood cannot fill a batch (see fairqueue.py)
HEARTBEAT_GATHER = 0.020  # seconds to let heartbeats gather after a small batch of nothing else
GATHER_BELOW = 32  # batches this small are a trickle
QUIET_BEFORE_GATHER = 1.0  # seconds without a request before heartbeats may gather
CHECKPOINT_INTERVAL = 2.0
WAL_RESTART_FRAMES = 16_384  # WAL frames (64 MiB of 4 KiB pages) past which a checkpoint makes it start over
STORAGE_RETRY_FIRST = 0.25  # seconds before the first retry of an unwritable ledger
STORAGE_RETRY_MAX = 5.0
CONVERT_AT_START_BELOW = 256 * 1024 * 1024  # an older ledger this small is made able to return space at start
SNAPSHOT_EVERY = 50_000  # events between registry snapshots: bounds replay at start-up
REPLY_RETRY_FIRST = 0.001  # seconds before replies waiting for a full peer are retried
REPLY_RETRY_MAX = 0.05
PEERS_NAMED = 10_000  # connections whose last session is remembered (to name a cut-off peer)
REBIND_RETRY = 0.01  # seconds between attempts to bind the remote PUB again after a revocation
REBIND_PATIENCE = 5.0  # seconds of failed attempts before the log says remote publications stopped
# The cyclic collector after start-up: young collections every 10,000 allocations.
# Under figure 2 it takes ~5 % of the loop's CPU; 50,000 made no difference there
# (bench/README.md, "The collector").
GC_THRESHOLD = (10_000, 50, 100)


class StorageFailed(UsageError):
    """``serve`` cannot write its state directory at all: exit 2 with the reason."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="storage")


class BindFailed(UsageError):
    """An endpoint could not be bound (in use, bad address): ``serve`` says so, exit 2."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="bind_failed")


class Server:
    def __init__(
        self, place: Place, settings: Settings, endpoint: str, pub_endpoint: str, probe_limit: int | None = None,
        remote: tuple[str, str] | None = None, durability: str = "the default",
    ) -> None:
        self.place = place
        self.durability_source = durability  # why ``settings.fsync`` has its value (status says)
        # (request, publication) endpoints with CURVE, for agents on other hosts (remote.py)
        self.remote_endpoints = remote
        self._remote: RemoteGate | None = None
        self._remote_router: TrioSocket | None = None
        self._remote_pub: TrioSocket | None = None
        self._workers: WorkerBroker | None = None  # remote agents' workers (workers.py)
        self.probe_limit = probe_limit  # concurrent probes (default: CPU count)
        self.settings = settings
        self.endpoint = endpoint
        self.pub_endpoint = pub_endpoint
        self.core = Core(
            settings,
            repo=place.repo_id,
            host=socket.gethostname(),
            endpoints=[endpoint, *remote[:1]] if remote else [endpoint],
            pub_endpoints=[pub_endpoint, *remote[1:]] if remote else [pub_endpoint],
        )
        self.ledger: Ledger | None = None
        # The integration branch, followed by watching its ref files (fresh-base gate).
        self.refs: RefWatcher | None = None
        if place.in_git:
            self.refs = RefWatcher(place.repo_id, settings.integration_branch or None, settings.land_git_timeout)
            self.core.integration = self.refs.index
        self._turn = trio.Lock()
        self._compacting = trio.Lock()  # one compaction at a time (by hand or by the policy)
        self._size_pass_failed_at = -1  # pages in use when a size pass last removed nothing
        self._retention = {"compacting": "", "removed": 0, "compactions": 0, "last": {}}  # for status
        self._storage_error: str | None = None  # why the ledger cannot be written, while it cannot
        self._storage_since = 0.0
        self._recovering = False
        self._started = False  # the new epoch is in the ledger
        self._failures = 0  # commits failed so far (a turn's status views are void after one)
        self._renders: dict[bytes, StatusRender] = {}  # peer -> its status being rendered (statusrender.py)
        self._fair = FairQueue(per_peer=PEER_TURN, limit=4 * BATCH_LIMIT, byte_limit=QUEUED_BYTES)
        self._replies = PeerQueues(self._route, budget=settings.reply_budget * 1024 * 1024)
        self._replies_waiting = trio.Event()  # set while some peer has replies queued
        self._peer_sessions: dict[bytes, str] = {}  # connection -> the last session it spoke for
        self._stop = trio.Event()
        self._stop_reason = ""
        self._snapshot_at = 0  # ledger id of the newest snapshot this process saved
        self._batches = 0  # wake-ups of the request loop (messages / batches = batching)
        self._last_request_at = float("-inf")  # when the last message that wants an answer came
        self._router: TrioSocket
        self._pub: TrioSocket
        self._pids: PidWatcher

    # ------------------------------------------------------------------ lifecycle

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> str:
        """Serve until stopped; returns why it stopped."""
        ctx = zmq.Context()
        with ExitStack() as stack:
            stack.callback(ctx.term)
            self._ctx, self._stack = ctx, stack  # the remote PUB is bound again after a revocation
            try:
                # fsync = "power-loss": every batch's commit is fsynced before its replies leave.
                self.ledger = Ledger.open(self.place.state_dir / LEDGER_FILE, fsync_every_commit=self.settings.fsync == "power-loss")
            except LedgerError as exc:  # cannot even open it (a new ledger on a full disk)
                raise StorageFailed(str(exc)) from None
            stack.callback(self.ledger.close)
            await self._make_space_returnable()
            self._router = self._open(ctx, zmq.ROUTER, self.endpoint, stack)
            self._pub = self._open(ctx, zmq.PUB, self.pub_endpoint, stack)
            if self.remote_endpoints is not None:
                self._open_remote(ctx, stack)
            try:
                snapshot, history, times, ids = await trio.to_thread.run_sync(self._load_history)
            except LedgerError as exc:  # a row written by hand, or a damaged file: no state to serve from
                raise self._unreadable(str(exc)) from None
            async with open_probe_pool(self.probe_limit) as pool, trio.open_nursery() as nursery:
                self._nursery = nursery
                self._pids = PidWatcher(nursery, self._on_process_exit)
                if self._remote is not None:
                    self._workers = WorkerBroker(self._send, self.settings.heartbeat, self.settings.liveness)
                self._jobs = JobRunner(
                    self.core, self.apply, pool, self.place.worktree, self.place.state_dir, self._workers, self._is_remote_agent,
                    ledger=self.ledger,
                )
                self.core.gates.triggers = tuple((t.command, t.probe) for t in self._jobs.config.triggers)
                self._landings = LandQueue(self.core, self.apply, self._jobs, self.refs, self.place.state_dir)
                if self.refs is not None:
                    # Read the integration branch before leases start: on a long history
                    # this takes a while, and nobody's lease should run meanwhile.
                    await self.refs.sync()
                async with self._turn:
                    now = trio.current_time()
                    try:
                        started = self.core.start(history, now, pid=os.getpid(), snapshot=snapshot, times=times, wall=time.time())
                    except ReplayError as exc:
                        raise self._unreadable(f"ledger {self.ledger.path}: event {ids[exc.index]} ({exc.kind}) cannot be replayed: {exc.cause}") from None
                    await self._execute(started)
                    self._started = self._storage_error is None
                    if self._started and len(history) > SNAPSHOT_EVERY // 10:
                        await self._save_snapshot()
                # Long-lived registry objects make full GC passes slow (tens of ms at 20k
                # claims): park what start-up built, and collect young objects less often.
                gc.freeze()
                gc.set_threshold(*GC_THRESHOLD)
                try:
                    write_state(self.place.state_dir, self._state_info())
                except OSError as exc:
                    raise StorageFailed(f"cannot write the state file in {self.place.state_dir}: {exc.strerror}") from None
                stack.callback(remove_state, self.place.state_dir, os.getpid())
                log.info(
                    "serving %s (epoch %d, mode %s, fsync %s) on %s, publishing on %s; %d live agents, %d claims restored",
                    self.place.repo_id, self.core.registry.epoch, self.settings.mode, self.settings.fsync,
                    self.endpoint, self.pub_endpoint,
                    sum(1 for a in self.core.registry.agents.values() if a.live), len(self.core.registry.claims),
                )
                await self._jobs.build_hashes_from(self.ledger)
                await self._jobs.deploys_from(self.ledger)
                await self._jobs.recent_findings_from(self.ledger)
                resumed = await self._jobs.resume_plans(nursery, self.ledger)
                if resumed:
                    log.info("resumed %d unfinished plan(s) from the ledger", resumed)
                requeued = await self._landings.resume(nursery, self.ledger)
                if requeued:
                    log.info("resumed the merge queue: %d landing(s) queued again", requeued)
                for every, probes in self._jobs.config.scheduled_cycles().items():
                    nursery.start_soon(self._jobs.run_scheduled, every, probes)
                if self.refs is not None:
                    nursery.start_soon(self.refs.watch, self._settle_merge_holds)
                nursery.start_soon(self._serve_requests)
                if self._remote is not None:
                    nursery.start_soon(self._serve_zap)
                    nursery.start_soon(self._beat_workers)
                nursery.start_soon(self._tick)
                nursery.start_soon(self._checkpoint)
                nursery.start_soon(self._retain)
                nursery.start_soon(self._flush_replies)
                nursery.start_soon(self._watch_signals)
                task_status.started(self)
                await self._stop.wait()
                async with self._turn:
                    await self._execute(self.core.stopped(self._stop_reason))
                    await self._save_snapshot()  # the next start replays nothing
                nursery.cancel_scope.cancel()
        log.info("stopped: %s", self._stop_reason)
        return self._stop_reason

    def statistics(self) -> dict:
        """The shell's components, for ``status`` and ``top`` (the core adds its own)."""
        return {
            "ledger": msgspec.to_builtins(self.ledger.statistics()),
            "durability": self.settings.fsync,
            "durability_source": self.durability_source,
            "probes": msgspec.to_builtins(self._jobs.pool_statistics()),
            "pids_watched": len(self._pids),
            **({"integration": msgspec.to_builtins(self.refs.index.statistics())} if self.refs else {}),
            "receive_batches": self._batches,
            "retention": {"keep_s": self.settings.ledger_keep, "max_size": self.settings.ledger_max_size, **self._retention},
            **({"remote": self._remote.statistics()} if self._remote is not None else {}),
            **({"workers": self._workers.statistics(trio.current_time())} if self._workers is not None else {}),
            "replies": self._replies.statistics(),
            "storage": (
                {"error": self._storage_error, "for_s": round(trio.current_time() - self._storage_since, 3)}
                if self._storage_error is not None else {}
            ),
        }

    def stop(self, reason: str) -> None:
        self._stop_reason = self._stop_reason or reason
        self._stop.set()

    def _open_remote(self, ctx: zmq.Context, stack: ExitStack) -> None:
        """The ZAP handler's socket first (a CURVE handshake must never find none), then
        the CURVE ROUTER and PUB; a port 0 becomes the port the kernel gave."""
        try:
            self._remote = RemoteGate(self.place.state_dir, self.place.repo_id, self.place.worktree, [], [])
        except OSError as exc:
            raise StorageFailed(str(exc)) from None
        zap = ctx.socket(zmq.REP)
        zap.setsockopt(zmq.LINGER, 0)
        zap.bind(ZAP_ENDPOINT)
        self._zap = TrioSocket(zap)
        stack.callback(self._zap.close)
        rpc, pub = self.remote_endpoints
        self._remote_router = self._open(ctx, zmq.ROUTER, rpc, stack, curve_secret=self._remote.secret)
        self._remote_pub = self._open(ctx, zmq.PUB, pub, stack, curve_secret=self._remote.secret)
        self._either = ReadableAny([self._router, self._remote_router])
        stack.callback(self._either.close)  # (callbacks run last first: before the sockets close)
        bound = [
            _with_port(wanted, s.socket.getsockopt(zmq.LAST_ENDPOINT).decode())
            for wanted, s in ((rpc, self._remote_router), (pub, self._remote_pub))
        ]
        self.remote_endpoints = (bound[0], bound[1])
        self._remote.endpoints, self._remote.pub = [bound[0]], [bound[1]]
        self.core.endpoints, self.core.pub_endpoints = [self.endpoint, bound[0]], [self.pub_endpoint, bound[1]]

    def _open(self, ctx: zmq.Context, kind: int, endpoint: str, stack: ExitStack, curve_secret: bytes | None = None) -> TrioSocket:
        raw = ctx.socket(kind)
        if curve_secret is not None:
            raw.setsockopt(zmq.CURVE_SERVER, 1)
            raw.setsockopt(zmq.CURVE_SECRETKEY, curve_secret)
            raw.setsockopt(zmq.ZAP_DOMAIN, b"lockstep")
        raw.setsockopt(zmq.LINGER, 0)
        raw.setsockopt(zmq.SNDHWM, 100_000)
        raw.setsockopt(zmq.RCVHWM, 100_000)
        if kind == zmq.ROUTER:
            raw.setsockopt(zmq.MAXMSGSIZE, HARD_FRAME_LIMIT)
            # Requests zmq takes in for one peer before the loop reads them: past this the
            # peer's own socket holds them (back-pressure).  A count, so few: at 100,000 one
            # client sending 1 MB frames grew the coordinator by 1.8 GB in 8 s.
            raw.setsockopt(zmq.RCVHWM, PIPE_REQUESTS)
            # Replies zmq holds for one peer are few; the rest wait, counted in bytes, in
            # PeerQueues (replies.py).  MANDATORY: a full pipe is an error, not a silent drop.
            raw.setsockopt(zmq.SNDHWM, PIPE_REPLIES)
            raw.setsockopt(zmq.ROUTER_MANDATORY, 1)
        raw.setsockopt(zmq.IPV6, 1)  # tcp://[::1]:PORT; IPv4 addresses still work
        path = Path(endpoint[len("ipc://") :]) if endpoint.startswith("ipc://") else None
        try:
            if path is not None:
                path.unlink(missing_ok=True)  # left by a killed coordinator
            raw.bind(endpoint)
        except (zmq.ZMQError, OSError) as exc:  # OSError: the ipc path is a directory, say
            raw.close()  # an open socket would make ctx.term() wait forever
            raise BindFailed(f"cannot listen on {endpoint}: {exc.strerror}") from None
        if path is not None:
            os.chmod(path, 0o600)  # only this user (the directory is private too)
            stack.callback(path.unlink, missing_ok=True)  # after the close below: no socket file left by a stop
        sock = TrioSocket(raw)
        stack.callback(sock.close)
        return sock

    def _unreadable(self, problem: str) -> StorageFailed:
        return StorageFailed(
            f"{problem}; the ledger was changed outside Lockstep or is damaged: restore it from a backup, "
            f"or move {self.place.state_dir / LEDGER_FILE} aside to start with an empty one (its claims are then forgotten)"
        )

    def _load_history(self) -> tuple[Snapshot | None, list[Record], list[float], list[int]]:
        """The newest usable snapshot, the state-changing records after it, their
        ledger (wall-clock) times and their event ids."""
        snapshot, after = None, 0
        saved = self.ledger.latest_snapshot()
        if saved is not None:
            try:
                snapshot = msgspec.msgpack.decode(saved[1], type=Snapshot)
                after = self._snapshot_at = saved[0]
            except (msgspec.DecodeError, msgspec.ValidationError):
                log.warning("ignoring an unreadable snapshot at event %d; replaying the whole ledger", saved[0])
            if snapshot is not None and snapshot.format != SNAPSHOT_FORMAT:
                snapshot, after = None, 0
        history, times, ids = [], [], []
        for event_id, ts, record in self.ledger.timed_records(after=after, kinds=STATE_KINDS):
            history.append(record)
            times.append(ts)
            ids.append(event_id)
        return snapshot, history, times, ids

    async def _save_snapshot(self) -> None:
        """Called inside the turn, right after a commit: registry == ledger up to last_id."""
        if self._storage_error is not None:
            return
        upto = self.ledger.last_id()
        blob = msgspec.msgpack.encode(self.core.registry.snapshot(trio.current_time(), self.settings.lock_delay, time.time()))
        try:
            await trio.to_thread.run_sync(self.ledger.save_snapshot, upto, blob)
        except (LedgerError, sqlite3.Error) as exc:  # only start-up is slower for it
            log.warning("could not save a registry snapshot: %s", exc)
            return
        self._snapshot_at = upto

    def _state_info(self) -> dict:
        return {
            "pid": os.getpid(),
            "repo": self.place.repo_id,
            "endpoints": [self.endpoint, *self.remote_endpoints[:1]] if self.remote_endpoints else [self.endpoint],
            "pub": [self.pub_endpoint, *self.remote_endpoints[1:]] if self.remote_endpoints else [self.pub_endpoint],
            **({"curve_public": self._remote.public.decode()} if self._remote is not None else {}),
            "epoch": self.core.registry.epoch,
            "mode": self.settings.mode,
            "started": time.time(),
            "ledger": str(self.place.state_dir / LEDGER_FILE),
        }

    # ------------------------------------------------------------------ tasks

    async def _serve_requests(self) -> None:
        core, router, turn = self.core, self._router, self._turn
        fair = self._fair
        while True:
            if fair or self._renders:  # messages left from the last turn, or rows to render: no waiting
                await trio.lowlevel.checkpoint()
            elif self._remote_router is None:
                await router.wait_readable()
            else:
                await self._either.wait()  # the local or the CURVE ROUTER
            # The turn is almost always free: take it without another scheduler pass.
            if turn.locked():
                await turn.acquire()
            else:
                turn.acquire_nowait()
            try:
                if fair.room():
                    fair.put_all(router.drain(min(BATCH_LIMIT, fair.room()), fair.room_bytes()))
                if self._remote_router is not None and fair.room():
                    fair.put_all(self._drain_remote(min(BATCH_LIMIT, fair.room()), fair.room_bytes()))
                batch = fair.take(BATCH_LIMIT)
                self._batches += 1
                only_heartbeats = bool(batch)
                effects = []
                messages = []
                statuses: list[tuple[bytes, StatusParts]] = []
                costly: set[bytes] = set()  # peers that asked for a status this turn
                later: dict[bytes, list] = {}  # their messages after a second one, for the next turn
                for frames in batch:
                    peer = frames[0]
                    if peer in later:
                        later[peer].append(frames)
                        continue
                    if len(frames) != 2:
                        effects += core.reject(peer, PeerError("malformed", f"expected one frame per message, got {len(frames) - 1}"))
                        continue
                    try:
                        message = decode_request(frames[1])
                    except PeerError as exc:
                        effects += core.reject(peer, exc, sniff_req(frames[1]))
                        continue
                    if peer[:3] == REMOTE_PEER and self._remote is not None:  # another host: the key decides (remote.py)
                        message, refusal, note = self._remote.admit(peer, message, core.registry)
                        if refusal is not None:
                            effects += core.reject(peer, refusal, message.req)
                            if note:
                                effects += core.announce("remote.forbidden", getattr(message, "agent", None), {"reason": note})
                            continue
                    if isinstance(message, Status):  # costs the whole registry: one per peer at a time
                        if peer in costly or peer in self._renders:
                            later[peer] = [frames]
                            continue
                        costly.add(peer)
                    messages.append((peer, message))
                    session = getattr(message, "session", None)
                    if session is not None and self._peer_sessions.get(peer) != session:
                        self._peer_sessions.pop(peer, None)
                        self._peer_sessions[peer] = session
                        if len(self._peer_sessions) > PEERS_NAMED:
                            del self._peer_sessions[next(iter(self._peer_sessions))]
                for deferred in later.values():
                    fair.put_back(deferred)
                await self._know_heads(messages)
                now = trio.current_time()
                for peer, message in messages:
                    try:
                        if self._storage_error is not None and not isinstance(message, _WHILE_UNWRITABLE):
                            effects += core.reject(peer, PeerError("unavailable", self._storage_error), getattr(message, "req", 0))
                            continue
                        if type(message) not in _SHELL_ANSWERED:
                            before = len(effects)
                            effects += core.receive(peer, message, now)
                            if peer[:3] == REMOTE_PEER and self._remote is not None:
                                self._jobs_asked_remotely(peer, effects[before:])
                            only_heartbeats &= type(message) is Heartbeat
                            continue
                        if isinstance(message, Status):  # its rows are rendered after the turn, in slices
                            more, parts = core.status(peer, message, now)
                            effects += more
                            only_heartbeats = False
                            if parts is not None:
                                statuses.append((peer, parts))
                            continue
                        if isinstance(message, JobQuery):  # read-only: the job runner knows
                            effects += self._answer_job_query(peer, message)
                            continue
                        if isinstance(message, Compact):  # off the request loop, in slices
                            if message.keep is not None and not message.keep >= 0:
                                effects += core.reject(peer, PeerError("bad_request", f"keep must be >= 0 seconds, not {message.keep}"), message.req)
                            else:
                                self._nursery.start_soon(self._compact, peer, message)
                            continue
                        if isinstance(message, LandQuery):  # read-only: the merge queue knows
                            effects += self._landings.answer(peer, message)
                            continue
                        if isinstance(message, (Enroll, Keys)):
                            effects += self._answer_keys(peer, message)
                            continue
                        if isinstance(message, WORKER_MESSAGES):  # a remote agent's worker (workers.py)
                            effects += self._worker_message(peer, message, now)
                    except Exception:  # a bug on one message: answer that peer, keep serving
                        effects += self._bug_answer(peer, message)
                failures = self._failures
                await self._execute(effects)
                if statuses or self._renders:
                    await self._render_statuses(statuses, void=self._failures != failures)
            finally:
                turn.release()
            if not only_heartbeats:
                self._last_request_at = now
            elif not fair and not self._renders and len(batch) < GATHER_BELOW and now - self._last_request_at > QUIET_BEFORE_GATHER:
                # Only a trickle of heartbeats, and no request for a while: nothing waits
                # for an answer, so let the next heartbeats gather instead of waking once
                # per heartbeat (1,000 agents: ~50 wake-ups a second instead of ~1,000).
                # Under load batches are big, and while requests flow nobody sleeps; the
                # first request after a quiet spell waits at most HEARTBEAT_GATHER.
                await trio.sleep(HEARTBEAT_GATHER)

    async def _know_heads(self, messages: list) -> None:
        """Before the core judges intents and claims that carry a HEAD: catch up with the
        refs (a stat of the ref files; git only if they moved) and learn each unknown
        head's lag behind the integration branch (one git call per new head)."""
        if self.refs is None:
            return
        heads = {getattr(message, "head", None) for _, message in messages} - {None}
        for _, message in messages:  # a merge in progress: the commits it brings count too (the core caps them)
            heads.update(getattr(message, "merging", ())[:MERGING_LIMIT])
        releases = any(isinstance(message, (Release, Bye)) for _, message in messages)
        if not heads and not releases:
            return
        await self.refs.sync()  # a release must see the branch's newest commits
        for head in heads:
            await self.refs.ensure_lag(head)

    async def _settle_merge_holds(self) -> None:
        """The integration branch moved: free the merge holds whose commits reached it
        (after a landing that moved it has had its verdict: it frees its own)."""
        async with self._landings.moving:
            pending = self.core.pending_merge_commits()
            if pending:
                merged = await self.refs.merged_among(pending)
                same = await self.refs.same_on_tip(self.core.merge_hold_versions())
                if merged or same:
                    await self.apply(lambda now: self.core.commits_merged(merged, now, same))

    def _bug_answer(self, peer: bytes, message) -> list:
        """Effects for a message whose handling raised outside the core's own guard."""
        log.error("bug while handling a message (answered 'internal', still serving):\n%s", traceback.format_exc())
        error = PeerError("internal", "the coordinator hit a bug handling this message (see coordinator.log)")
        return self.core.reject(peer, error, getattr(message, "req", 0))

    async def _tick(self) -> None:
        interval = min(0.25, max(0.02, self.settings.heartbeat / 5))
        while True:
            await trio.sleep(interval)
            if self._storage_error is not None:
                # An expiry could not be recorded: nothing expires until it can.  The
                # clock still moves on, so the next message finds no stalled loop.
                self.core.keep_time(trio.current_time())
                continue
            async with self._turn:
                await self._execute(self.core.tick(trio.current_time()))

    async def _checkpoint(self) -> None:
        # On the trio thread: ``transactions`` reads the writer's counter without the
        # write lock, so a commit running in a worker thread never stalls the loop here;
        # the checkpoint itself runs in a worker thread on its own connection.  Compaction
        # slices count too: they fill the WAL as appends do.
        last = self.ledger.transactions
        truncated = False
        while True:
            await trio.sleep(CHECKPOINT_INTERVAL)
            moved, last = self.ledger.transactions != last, self.ledger.transactions
            try:
                if moved:
                    done = await trio.to_thread.run_sync(self.ledger.checkpoint)
                    truncated = False
                    if done.wal_frames > WAL_RESTART_FRAMES:
                        # Writes never paused long enough for the WAL to start over
                        # (compaction under load): copy the last frames and make it.
                        await trio.to_thread.run_sync(lambda: self.ledger.checkpoint(restart=True))
                elif not truncated and not self._compacting.locked() and self._storage_error is None:
                    # (while the ledger cannot be written, _recover_storage checkpoints)
                    # Idle for a whole interval: empty the WAL file (it keeps its largest
                    # size otherwise, up to journal_size_limit) and let a vacuumed file shrink.
                    done = await trio.to_thread.run_sync(lambda: self.ledger.checkpoint(truncate=True))
                    truncated = not done.busy
            except LedgerError as exc:  # a full disk: the WAL just grows; the next one retries
                log.warning("WAL checkpoint failed: %s", exc)

    async def _watch_signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                self.stop(f"signal {signal.Signals(signum).name}")
                return

    async def _on_process_exit(self, session: str, detail: str) -> None:
        if self.refs is not None:
            await self.refs.sync()  # its last commits decide which released paths stay held
        await self.apply(lambda now: self.core.process_exited(session, now, detail))

    async def apply(self, call) -> None:
        """Run ``call(now)`` on the core and carry out its effects, in the turn."""
        async with self._turn:
            await self._execute(call(trio.current_time()))

    # ------------------------------------------------------------------ effects

    async def _execute(self, effects: list) -> None:
        """Commit the records, then (only then) let the world see the rest."""
        records = [e for e in effects if isinstance(e, Record)]
        if records:
            durable = any(r.DURABLE for r in records)
            epoch = self.core.registry.epoch
            try:
                # A commit that is not fsynced only writes the WAL into the page cache:
                # cheaper here than a hop to a worker thread and back (two thread
                # wake-ups per batch, the larger part of a serial claim's CPU).  An
                # fsync, or a write lock held by a worker thread, goes to a thread.
                if durable or self.ledger.append_now(records, epoch=epoch) is None:
                    await trio.to_thread.run_sync(lambda: self.ledger.append(records, epoch=epoch, durable=durable))
            except LedgerError as exc:
                await self._fail_closed(exc, effects)
                return
            if self.ledger.last_id() - self._snapshot_at >= SNAPSHOT_EVERY:
                await self._save_snapshot()
            for r in records:
                if r.KIND in _LOGGED_KINDS:
                    log.info("%s %s %s", r.KIND, r.agent or "", getattr(r, "reason", None) or getattr(r, "patterns", None) or "")
                elif isinstance(r, ClaimReleased) and r.revoked is True:
                    log.warning("claim.released %s %s: %s", r.agent, ", ".join(r.patterns), r.reason)
        cut_offs: list[CutOff] = []
        for effect in effects:
            # Replies, publications and records (done above) are nearly all of them: by
            # type first, as a match tries each case in turn (2 us for a record).
            kind = type(effect)
            if kind is Send:
                if effect.peer is not None:  # None: the shell itself asked
                    self._reply(effect.peer, encode(effect.message), cut_offs)
                continue
            if kind is Publish:
                self._publish([effect.kind.encode(), encode(effect.message)])
                self._jobs.observe(self._nursery, effect.message)
                continue
            if isinstance(effect, Record):
                continue
            match effect:
                case Bug(text=text):
                    log.error("bug while handling a message (answered 'internal', still serving):\n%s", text)
                case StartJob(kind="land"):
                    self._landings.enqueue(self._nursery, effect)
                case StartJob():
                    self._jobs.start(self._nursery, effect)
                case WatchPid(session=session, pid=pid, pid_started=started):
                    self._pids.watch(session, pid, started)
                case UnwatchPid(session=session):
                    self._pids.unwatch(session)
                case CheckUncommitted():
                    self._nursery.start_soon(self._check_uncommitted, effect)
                case StopServing(reason=reason):
                    self.stop(reason)
        if cut_offs:
            await self._record_cut_offs(cut_offs)

    async def _render_statuses(self, started: list[tuple[bytes, StatusParts]], *, void: bool) -> None:
        """Start this turn's statuses and render the next rows of the pending ones
        (ROWS_PER_TURN in all, round-robin); send those done (called inside the turn, after its commit: nothing uncommitted shows).
        ``void``: the turn's commit failed, so its views show what the ledger lacks."""
        for peer, parts in started:
            if void:
                error = Error(req=parts.reply.req, code="unavailable", message=self._storage_error or "the ledger could not be written")
                self._reply(peer, encode(error), [])
            else:
                self._renders[peer] = StatusRender(peer, parts)
        cut_offs: list[CutOff] = []
        budget = ROWS_PER_TURN
        for peer in list(self._renders):
            if budget <= 0:
                break
            render = self._renders.pop(peer)
            try:
                budget -= render.step(budget)
                if not render.done:
                    self._renders[peer] = render  # to the back: the next one goes first next turn
                    continue
                reply = render.reply()
                reply = msgspec.structs.replace(
                    reply, statistics={**reply.statistics, **self.statistics()}, jobs=self._jobs.running(), landings=self._landings.queued()
                )
                frame = encode(reply)
            except Exception:  # a bug on one status: answer that peer, keep serving
                log.exception("bug while rendering a status (answered 'internal', still serving)")
                frame = encode(Error(req=render.req, code="internal", message="the coordinator hit a bug rendering a status (see coordinator.log)"))
            self._reply(peer, frame, cut_offs)
        if cut_offs:
            await self._record_cut_offs(cut_offs)

    # ------------------------------------------------------------------ unread replies

    def _route(self, peer: bytes, frame: bytes) -> str:
        if peer[:3] == REMOTE_PEER and self._remote_router is not None:
            return self._remote_router.send_routed_nowait(peer[3:], frame)
        return self._router.send_routed_nowait(peer, frame)

    def _reply(self, peer: bytes, frame: bytes, cut_offs: list[CutOff]) -> None:
        """Send a reply now, or queue it behind the peer's unread ones (replies.py)."""
        cut = self._replies.send(peer, frame)
        if cut is not None:
            cut_offs.append(cut)
        if self._replies.pending() and not self._replies_waiting.is_set():
            self._replies_waiting.set()

    async def _flush_replies(self) -> None:
        """Retry the replies waiting for peers whose pipes were full, with back-off."""
        while True:
            await self._replies_waiting.wait()
            delay = REPLY_RETRY_FIRST
            while self._replies.pending():
                await trio.sleep(delay)
                moved = self._replies.flush()
                delay = REPLY_RETRY_FIRST if moved else min(delay * 2, REPLY_RETRY_MAX)
            self._replies_waiting = trio.Event()

    async def _record_cut_offs(self, cut_offs: list[CutOff]) -> None:
        """Name each peer cut off in the log and the ledger (called inside the turn)."""
        records = []
        for cut in cut_offs:
            session = self._peer_sessions.get(cut.peer)
            agent = self.core.registry.sessions.get(session) if session else None
            name = agent.name if agent is not None else None
            log.warning(
                "cut off connection %s%s: %d unread replies (%d bytes) dropped, over its budget of %d bytes; its session goes on",
                cut.peer.hex(), f" (agent {name}, session {session})" if name else "", cut.replies, cut.bytes, self._replies.budget,
            )
            records.append(PeerCutOff(
                agent=name, session=session if name else None, peer=cut.peer.hex(),
                replies=cut.replies, bytes=cut.bytes, budget=self._replies.budget,
            ))
        try:
            await trio.to_thread.run_sync(lambda: self.ledger.append(records, epoch=self.core.registry.epoch))
        except LedgerError as exc:  # the log line stands; the storage guard handles the disk
            log.warning("could not record a cut-off in the ledger: %s", exc)

    async def _compact(self, peer: bytes, message: Compact) -> None:
        """``lockstep ledger compact``: a compaction by hand (``keep`` None: the policy's)."""
        keep = self.settings.ledger_keep if message.keep is None else message.keep
        try:
            removed, upto = await self._compaction(before=time.time() - keep, by="")
            stats = self.ledger.statistics()
            kept = await trio.to_thread.run_sync(self.ledger.count)
        except (LedgerError, sqlite3.Error) as exc:
            self._send(peer, encode(Error(req=message.req, code="unavailable", message=f"compaction stopped: {exc}")))
            return
        reply = Compacted(
            req=message.req, removed=removed, upto=upto, kept=kept,
            db_size_bytes=stats.db_size_bytes, wal_size_bytes=stats.wal_size_bytes,
        )
        self._send(peer, encode(reply))

    async def _compaction(self, *, before: float, by: str, below: int | None = None) -> tuple[int, int]:
        """Snapshot first (in the turn: registry == ledger up to ``upto``), then remove
        what it covers, older than ``before`` (and below event ``below``, if given), in
        paced slices from a worker thread so that requests and their appends go on
        between them; say so in the ledger; then return the freed pages to the file
        system the same way.  Returns (events removed, the snapshot's event id)."""
        async with self._compacting:
            async with self._turn:
                await self._save_snapshot()
                upto = self._snapshot_at
            # Only events older than ``before`` go: bound the slices' scan by the first
            # younger one (without it the last slice reads every younger row, holding
            # the write lock: seconds on a big ledger).
            younger = await trio.to_thread.run_sync(self.ledger.first_id_at, before)
            limit = min(upto, younger, upto if below is None else below)
            started = time.perf_counter()
            self._retention["compacting"] = by or "by hand"
            try:
                removed = await self._in_slices(lambda rows: self.ledger.remove_slice(limit, before, rows), Pacer(20, 10, 20_000))
            finally:
                self._retention["compacting"] = ""
            self._retention["removed"] += removed
            self._retention["compactions"] += 1
            self._retention["last"] = {"by": by or "by hand", "removed": removed, "upto": upto, "seconds": round(time.perf_counter() - started, 3)}
            if removed:
                log.info("ledger compacted%s: %d events removed (covered by the snapshot at %d)", f" ({by})" if by else "", removed, upto)
                record = LedgerCompacted(removed=removed, upto=upto, before=round(before, 3), by=by)
                await self.apply(lambda now: self.core.note(record, now))
                freed = await self._in_slices(self.ledger.vacuum_slice, Pacer(16, 4, 50_000))
                if freed:
                    log.info("ledger: %d free pages returned to the file system", freed)
            return removed, upto

    async def _in_slices(self, step, pacer: Pacer) -> int:
        """Run ``step(size)`` in a worker thread until it returns 0, paced (retention.py);
        returns the sum of what it returned."""
        total = 0
        while True:
            started = time.perf_counter()
            done = await trio.to_thread.run_sync(step, pacer.size)
            if done <= 0:
                return total
            total += done
            busy = trio.current_time() - self._last_request_at < IDLE_AFTER
            await trio.sleep(pacer.after(time.perf_counter() - started, busy))

    async def _retain(self) -> None:
        """The retention policy, by itself: events older than ``[ledger] keep`` at start
        and then hourly; the oldest events whenever the pages in use pass ``max_size``."""
        next_age_pass = trio.current_time()
        while True:
            if self._storage_error is None:
                try:
                    if trio.current_time() >= next_age_pass:
                        next_age_pass = trio.current_time() + AGE_PASS_EVERY
                        await self._compaction(before=time.time() - self.settings.ledger_keep, by="keep")
                    await self._keep_under_budget()
                except LedgerError as exc:  # the storage guard handles a failing disk
                    log.warning("ledger retention stopped: %s; retried later", exc)
            await trio.sleep(SIZE_CHECK_EVERY)

    async def _keep_under_budget(self) -> None:
        space = await trio.to_thread.run_sync(self.ledger.space)
        budget = self.settings.ledger_max_size
        if space.used_bytes <= budget or space.used_bytes <= self._size_pass_failed_at:
            return
        events = await trio.to_thread.run_sync(self.ledger.count)
        remove = events_over_budget(space.used_bytes, events, budget)
        below = await trio.to_thread.run_sync(self.ledger.first_ids, remove)
        removed, _ = await self._compaction(before=time.time() + 1, by="max_size", below=below)
        if removed == 0:
            # What is left is what restarts need (or younger than the snapshot): try again
            # only once the ledger has grown by a tenth.
            self._size_pass_failed_at = int(space.used_bytes * 1.1)
            log.warning(
                "ledger: %d MB in use, over max_size (%d MB), and nothing more can be removed yet",
                space.used_bytes // 10**6, budget // 10**6,
            )

    async def _make_space_returnable(self) -> None:
        """A ledger made before auto_vacuum=INCREMENTAL cannot give space back: convert
        it once at start (a full VACUUM, before serving) if it is small enough to take
        seconds; a bigger one reuses its free pages and is converted by hand."""
        space = self.ledger.space()
        if space.incremental:
            return
        size = space.pages * space.page_size
        if size > CONVERT_AT_START_BELOW:
            log.warning(
                "ledger %s (%d MB) predates incremental vacuum: removed events' space is reused, not returned; "
                "to return it, stop the coordinator and run: sqlite3 %s 'PRAGMA auto_vacuum=INCREMENTAL; VACUUM'",
                self.ledger.path, size // 10**6, self.ledger.path,
            )
            return
        started = time.perf_counter()
        try:
            await trio.to_thread.run_sync(self.ledger.convert_to_incremental)
        except LedgerError as exc:  # a full disk: VACUUM needs room for a copy
            log.warning("could not convert the ledger to incremental vacuum: %s", exc)
            return
        log.info("ledger converted to incremental vacuum in %.1f s (once)", time.perf_counter() - started)

    async def _check_uncommitted(self, check: CheckUncommitted) -> None:
        """An ended session's worktree, read off the request loop (git status)."""
        paths = await trio.to_thread.run_sync(uncommitted_paths, check.worktree)
        if paths:
            await self.apply(lambda now: self.core.uncommitted_at_end(check.session, check.patterns, paths, now))

    def _send(self, peer: bytes, frame: bytes) -> None:
        """A reply outside a turn's effects (a cut-off it causes is not recorded)."""
        self._reply(peer, frame, [])

    def _publish(self, frames: list[bytes]) -> None:
        self._pub.send_multipart_nowait(frames)
        if self._remote_pub is not None:
            self._remote_pub.send_multipart_nowait(frames)

    # ------------------------------------------------------------------ remote agents

    def _drain_remote(self, limit: int, max_bytes: int) -> list[list[bytes]]:
        """Messages from the CURVE ROUTER, their peer ids marked remote, each peer's key
        (the User-Id our ZAP handler gave its connection) noted for ``admit``."""
        key_of = self._remote.key_of
        if len(key_of) > 10_000:
            key_of.clear()  # only this turn's peers are looked up
        out = []
        for frames in self._remote_router.drain_frames(limit, max_bytes):
            peer = REMOTE_PEER + frames[0].bytes
            key_of[peer] = frames[-1].get("User-Id") or ""
            out.append([peer, *(f.bytes for f in frames[1:])])
        return out

    def _worker_message(self, peer: bytes, message, now: float) -> list:
        if peer[:3] != REMOTE_PEER or self._workers is None:
            error = PeerError("bad_request", "workers run agents' probes on other hosts: connect over the CURVE endpoint (`lockstep worker` in a joined clone)")
            return self.core.reject(peer, error, message.req)
        return self._workers.receive(peer, self._remote.name_of(peer), message, now)

    def _jobs_asked_remotely(self, peer: bytes, effects: list) -> None:
        """Jobs a remote peer just started run their probes on its agent's worker."""
        for effect in effects:
            if isinstance(effect, StartJob) and effect.kind != "land":
                self._jobs.asked_remotely(effect.job, self._remote.name_of(peer))

    def _answer_job_query(self, peer: bytes, message: JobQuery) -> list:
        if peer[:3] != REMOTE_PEER or self._remote is None:
            return self._jobs.answer(peer, message)
        name = self._remote.name_of(peer)
        answer = self._jobs.answer(peer, message, name)
        refused = [e.message for e in answer if isinstance(e, Send) and isinstance(e.message, Error) and e.message.code == "forbidden"]
        if refused:  # someone else's plan: counted and published as every other impersonation
            self._remote.forbidden(message, name, refused[0].message)
            answer += self.core.announce("remote.forbidden", name, {"reason": refused[0].message})
        return answer

    def _is_remote_agent(self, name: str) -> bool:
        """A live session of ``name`` came from another host (e.g. an edit batch's verify)."""
        agent = self.core.registry.live_agent(name)
        return agent is not None and REMOTE_MARK in (agent.host or "")

    async def _beat_workers(self) -> None:
        """Majordomo's heartbeat: ping every worker, lose the silent ones."""
        while True:
            await trio.sleep(self.settings.heartbeat)
            self._workers.beat(trio.current_time())

    def _cut_remote_subscribers(self) -> None:
        """A key was revoked: its open subscription must stop now, not at its next
        reconnection.  libzmq names no connection of a PUB socket, so the remote PUB
        is closed (every remote subscriber's connection with it) before the revocation
        is answered, and bound again on the same endpoint.  Subscribers reconnect by
        themselves through a new CURVE handshake, which the ZAP handler refuses to the
        revoked key; the others miss the publications of those moments, which their
        sequence numbers show (as after any PUB drop), and take a snapshot."""
        if self._remote_pub is None:
            return  # a rebind is under way: the old socket is closed already
        self._remote_pub.close()
        self._remote_pub = None
        self._nursery.start_soon(self._rebind_remote_pub)

    async def _rebind_remote_pub(self) -> None:
        """Bind the remote PUB again on its endpoint.  libzmq releases the old listener
        in its I/O thread, a moment after the close: retry until the port is free."""
        endpoint = self.remote_endpoints[1]
        started, said = trio.current_time(), False
        while True:
            try:
                self._remote_pub = self._open(self._ctx, zmq.PUB, endpoint, self._stack, curve_secret=self._remote.secret)
                break
            except BindFailed as exc:
                if not said and trio.current_time() - started > REBIND_PATIENCE:
                    log.error("%s; remote agents get no publications until it can (retrying)", exc.message)
                    said = True
                await trio.sleep(REBIND_RETRY)
        self._remote.counts["publication_rebinds"] += 1
        log.info("publications for remote agents on %s again (a key was revoked: every remote subscriber reconnected)", endpoint)

    async def _serve_zap(self) -> None:
        """libzmq's ZAP requests (one per CURVE handshake), answered on this loop."""
        while True:
            request = await self._zap.recv_multipart()
            await self._zap.send_multipart(self._remote.zap_answer(request))

    def _answer_keys(self, peer: bytes, message) -> list:
        """``enroll`` (remote, with an enrollment key) and ``keys`` (local operator)."""
        try:
            if isinstance(message, Enroll):
                if peer[:3] != REMOTE_PEER or self._remote is None:
                    raise PeerError("forbidden", "enroll over the coordinator's CURVE endpoint with a join token (`lockstep join`)")
                return [Send(peer, self._remote.enroll(peer, message))]
            if self._remote is not None:
                reply = self._remote.keys_request(message)
                if message.op == "revoke":
                    if self._workers is not None:  # its worker goes at once, too
                        self._workers.drop(message.name, f"the key of {message.name} was revoked")
                    self._cut_remote_subscribers()
                return [Send(peer, reply)]
            if message.op == "list":
                return [Send(peer, KeysReply(req=message.req))]
            raise PeerError(
                "bad_request",
                "this coordinator serves no remote agents: start it with `lockstep serve --endpoint tcp://ADDR:PORT --curve`",
            )
        except PeerError as exc:
            return self.core.reject(peer, exc, message.req)

    # ------------------------------------------------------------------ storage errors

    async def _fail_closed(self, exc: LedgerError, effects: list) -> None:
        """A commit failed: back to what the ledger holds, and every reply says why."""
        self._failures += 1
        cause = f"ledger: {_storage_cause(exc)} at {self.ledger.path}; grants are refused until it can write"
        snapshot, history, times, _ = await trio.to_thread.run_sync(self._load_history)
        now = trio.current_time()
        self.core.restore(history, now, snapshot, times, time.time())
        for effect in effects:
            match effect:
                case Send(peer, message) if peer is not None:
                    error = Error(req=getattr(message, "req", 0), code="unavailable", message=cause)
                    self._reply(peer, encode(error), [])
                case Bug(text=text):
                    log.error("bug while handling a message (answered 'internal', still serving):\n%s", text)
                case StopServing(reason=reason):
                    self.stop(reason)
        if self._storage_error is None:
            self._storage_error, self._storage_since = cause, now
            log.error("%s (%s); serving reads only, retrying", cause, exc)
            for publish in self.core.storage_condition(cause):
                self._publish([publish.kind.encode(), encode(publish.message)])
        if not self._recovering:
            self._recovering = True
            self._nursery.start_soon(self._recover_storage)

    async def _recover_storage(self) -> None:
        """While the ledger cannot be written: checkpoint the WAL (after space is freed
        only a checkpoint shrinks it) and try a small write, with back-off; on success
        serve as before (and record the new epoch if start-up could not)."""
        delay = STORAGE_RETRY_FIRST
        try:
            while self._storage_error is not None:
                await trio.sleep(delay)
                delay = min(delay * 2, STORAGE_RETRY_MAX)
                try:
                    await trio.to_thread.run_sync(self.ledger.checkpoint)
                except LedgerError:
                    pass
                async with self._turn:
                    try:
                        await trio.to_thread.run_sync(lambda: self.ledger.set_meta("storage_checked", str(time.time())))
                    except (LedgerError, sqlite3.Error):
                        continue
                    log.warning("ledger writable again after %.1fs: granting again", trio.current_time() - self._storage_since)
                    self._storage_error = None
                    delay = STORAGE_RETRY_FIRST
                    await self._execute(self.core.storage_condition(None))
                    if not self._started and self._storage_error is None:
                        await self._execute(self.core.start([], trio.current_time(), pid=os.getpid()))
                        self._started = self._storage_error is None
        finally:
            self._recovering = False


def _with_port(wanted: str, bound: str) -> str:
    """``wanted`` as written (the address other hosts use), with the port really bound."""
    return f"{wanted.rsplit(':', 1)[0]}:{bound.rsplit(':', 1)[1]}"


def _storage_cause(exc: Exception) -> str:
    text = str(exc).lower()
    if "full" in text:
        return "disk full"
    if "readonly" in text or "read-only" in text:
        return "read-only"
    return "write failed"


# Requests still served while the ledger cannot be written: they record nothing.
_SHELL_ANSWERED = frozenset({Status, JobQuery, Compact, LandQuery, Enroll, Keys, *WORKER_MESSAGES})  # the rest go to the core
_WHILE_UNWRITABLE = (Status, JobQuery, LandQuery, Heartbeat, Fresh, *WORKER_MESSAGES)

_LOGGED_KINDS = {"coordinator.started", "agent.joined", "agent.stale", "agent.left", "claim.expired", "coordinator.stopped"}

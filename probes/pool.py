"""Running probes for the coordinator without ever blocking its trio loop.

Theory.  A probe checks an agent's claim, so a probe that hangs, crashes or eats
memory must cost one ``fail`` result, never the coordinator.  Hence every check runs
in a process of its own, under its spec's timeout, and ends as a ``ProbeResult``:

* ``command`` probes are child processes driven from the loop by
  ``probes.kinds.command``: own session and process group, killed as a group
  at the timeout (SIGTERM, then SIGKILL after a grace), stragglers ended after exit.
* Python-implemented probes (write, build, http, processes, handoff) run in
  trio-parallel worker processes with ``kill_on_cancel=True``: without it
  trio-parallel shields the call and a timed-out probe would run to completion.  A
  worker that dies (``os._exit``, SIGKILL, segfault) raises ``BrokenWorkerError``;
  that probe fails with ``probe crashed`` and trio-parallel spawns a fresh worker for
  the next call, because a dead worker never goes back to its cache.

Why trio-parallel workers and not a fresh ``python -m probes.worker`` per probe.
Measured by ``bench/bench_probes.py`` on this 2-core machine (shared, so runs vary by
~30%), one ``write`` probe of a 1 KiB file at a time:

    warm pool dispatch             median   0.22 ms   p99   0.35 ms
    fresh python -m probes.worker  median 156.7  ms   p99 187.9  ms   (719x slower)
    first call of a new worker     182 ms (spawn + imports), once per worker
    command probe of `true`        median   1.1  ms   (bare trio.run_process: 0.9 ms)

So a fresh interpreter per probe adds ~150 ms to every check, hundreds of times what
most checks cost (hashing a file takes well under a millisecond), while the pool pays
the spawn once per worker (``warm_up`` pays it up
front) and once more for each crashed worker it replaces.  A hand-made pool of
long-lived ``probes.worker`` processes would just re-implement trio-parallel.  The
forkserver start method measured a little faster to start a worker (90-120 ms against
120-170 ms for spawn, in a separate one-off run) but adds a shared server process for a
one-off saving, so workers use the default ``spawn``.  Consequence of spawn: a program
using the pool must guard its entry point with ``if __name__ == "__main__":``.

Scheduling.  One ``trio.CapacityLimiter`` of ``limit`` slots (default
``os.cpu_count()``) bounds every probe of the pool, from ``run`` and ``run_suite``
alike; it is FIFO, so a suite's probes start in spec order.  ``autofix`` probes may
change the worktree, so they also take a pool-wide lock (taken *before* a slot, so a
queued fixer holds no slot): never two at once.  ``run_suite`` runs its read-only
probes concurrently, then its autofix probes one at a time, and returns results in
spec order.  With ``limit`` slots, a suite's wall time is close to its slowest check
when it has at most ``limit`` checks (bench: 4 sleeps of 0.3/0.5/0.8/1.0 s with
limit 4 took 1.05 s: 1.05x the slowest nominal sleep, 0.37x the sum of the checks;
with the default 2 slots on 2 CPUs it took 1.38 s).
"""

from __future__ import annotations

import inspect
import os
import time
import traceback
from contextlib import asynccontextmanager, nullcontext
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable

import msgspec
import trio
import trio_parallel

from probes import builtin
from probes.model import (
    FAIL,
    PROBE_CRASHED,
    TIMED_OUT,
    ProbeError,
    ProbeResult,
    ProbeSpec,
)
from probes.output import errors_first

OnResult = Callable[[int, ProbeResult], "Awaitable[Any] | Any"]

# Seconds the pool's close waits for idle workers to exit before killing them.
WORKER_SHUTDOWN_GRACE = 5.0


class PoolStatistics(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot of a pool.  ``completed`` counts every result returned (pass or
    fail); ``failed`` those whose verdict is fail; ``timed_out`` the failed ones whose
    finding is ``timed out``; ``running`` the probes holding a slot now."""

    running: int
    completed: int
    failed: int
    timed_out: int
    limit: int


class ProbePool:
    """Runs probes; made by ``open_probe_pool``, valid inside its ``async with``."""

    def __init__(self, workers: trio_parallel.WorkerContext, limit: int) -> None:
        self._workers = workers
        self._limit = limit
        self._slots = trio.CapacityLimiter(limit)
        # trio-parallel would otherwise share its global cpu_count limiter with every
        # other user in the process; ours already bounds the calls, this one only
        # keeps trio-parallel from adding a second, different bound.
        self._worker_slots = trio.CapacityLimiter(limit)
        self._autofix_lock = trio.Lock()
        self._closed = False
        self._running = 0
        self._completed = 0
        self._failed = 0
        self._timed_out = 0

    @property
    def limit(self) -> int:
        return self._limit

    def statistics(self) -> PoolStatistics:
        return PoolStatistics(
            running=self._running,
            completed=self._completed,
            failed=self._failed,
            timed_out=self._timed_out,
            limit=self._limit,
        )

    async def warm_up(self, workers: int | None = None) -> None:
        """Spawn up to ``workers`` (default ``limit``) worker processes now, so the
        first probes do not pay the ~150 ms start-up each."""
        self._check_open()
        count = min(workers or self._limit, self._limit)
        async with trio.open_nursery() as nursery:
            for _ in range(count):
                # Concurrent no-op calls: none finds an idle worker, each spawns one.
                nursery.start_soon(self._call_worker, bool)

    async def run(self, spec: ProbeSpec) -> ProbeResult:
        """Run one probe.  A failing, crashing or timing-out check is a fail result;
        only a malformed spec raises (``ProbeError``), before anything runs."""
        self._check_open()
        prepared, params = builtin.prepare(spec)
        return await self._run_prepared(prepared, params)

    async def run_suite(
        self, specs: Iterable[ProbeSpec], on_result: OnResult | None = None
    ) -> list[ProbeResult]:
        """Run ``specs``: read-only ones concurrently (bounded by ``limit``), then
        autofix ones one at a time; results in spec order.

        Every spec is validated first, so a malformed one raises ``ProbeError`` and
        nothing runs.  ``on_result(index, result)`` is called as each result arrives
        (completion order; ``index`` is the spec's position); it may be async.
        """
        self._check_open()
        prepared = [builtin.prepare(spec) for spec in specs]
        results: list[ProbeResult | None] = [None] * len(prepared)

        async def run_one(index: int) -> None:
            result = await self._run_prepared(*prepared[index])
            results[index] = result
            if on_result is not None:
                outcome = on_result(index, result)
                if inspect.isawaitable(outcome):
                    await outcome

        async with trio.open_nursery() as nursery:
            for index, (spec, _) in enumerate(prepared):
                if not spec.autofix:
                    nursery.start_soon(run_one, index)
        for index, (spec, _) in enumerate(prepared):
            if spec.autofix:
                await run_one(index)
        assert all(result is not None for result in results)
        return results  # type: ignore[return-value]

    # -- internals ------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise trio.ClosedResourceError("this probe pool is closed")

    async def _run_prepared(self, spec: ProbeSpec, params: builtin.Params) -> ProbeResult:
        async with self._autofix_lock if spec.autofix else nullcontext():
            async with self._slots:
                self._running += 1
                try:
                    result = await self._dispatch(spec, params)
                finally:
                    self._running -= 1
        self._completed += 1
        if result.verdict == FAIL:
            self._failed += 1
            if result.finding == TIMED_OUT:
                self._timed_out += 1
        return result

    async def _dispatch(self, spec: ProbeSpec, params: builtin.Params) -> ProbeResult:
        kind = builtin.kind_of(spec)
        if kind.on_loop:  # command: drives its child process from this loop
            return await kind.run(spec, params)
        # Looked up per call (not bound at import) so the table is the one place
        # that says which function checks which kind.
        probe = builtin.PYTHON_PROBES[spec.kind]
        started = time.perf_counter()
        with trio.move_on_after(spec.timeout):
            try:
                return await self._call_worker(builtin.run_python_probe, probe, spec, params)
            except ProbeError:
                raise
            except trio_parallel.BrokenWorkerError as exc:
                return self._crashed(spec, params, started, exc, worker_died=True)
            except Exception as exc:  # e.g. an unpicklable value: still the probe's fault
                return self._crashed(spec, params, started, exc, worker_died=False)
        return builtin.make_result(
            spec,
            builtin.target_of(spec, params),
            finding=TIMED_OUT,
            duration=time.perf_counter() - started,
            reason=f"the {spec.kind} check did not finish within {spec.timeout:g} s; its worker was killed.",
        )

    async def _call_worker(self, function: Callable[..., Any], *args: Any) -> Any:
        return await self._workers.run_sync(
            function, *args, kill_on_cancel=True, limiter=self._worker_slots
        )

    @staticmethod
    def _crashed(
        spec: ProbeSpec, params: builtin.Params, started: float, exc: BaseException, *, worker_died: bool
    ) -> ProbeResult:
        if worker_died:
            process = exc.args[-1] if exc.args else None
            code = getattr(process, "exitcode", None)
            reason = (
                f"the worker process running the {spec.kind} check died"
                f"{f' (exit code {code})' if code is not None else ''}; it is replaced for the next probe."
            )
        else:
            reason = f"the {spec.kind} check could not run: {type(exc).__name__}: {exc}."
        return builtin.make_result(
            spec,
            builtin.target_of(spec, params),
            finding=PROBE_CRASHED,
            duration=time.perf_counter() - started,
            reason=reason,
            output=errors_first("".join(traceback.format_exception(exc))),
        )


@asynccontextmanager
async def open_probe_pool(limit: int | None = None) -> AsyncIterator[ProbePool]:
    """A ``ProbePool`` running at most ``limit`` probes at once (default: the number
    of CPUs).  Leaving the block closes its worker processes."""
    if limit is None:
        limit = os.cpu_count() or 1
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ProbeError(f"probe pool limit must be a positive integer, got {limit!r}")
    async with trio_parallel.open_worker_context(grace_period=WORKER_SHUTDOWN_GRACE) as workers:
        pool = ProbePool(workers, limit)
        try:
            yield pool
        finally:
            pool._closed = True

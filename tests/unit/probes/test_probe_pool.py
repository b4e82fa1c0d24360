"""Tests of probes.pool: isolation, timeouts without orphans, crashes, suites, limits.

Everything is real: hanging and crashing commands, worker processes killed with
``os._exit`` and SIGKILL, a listener that never answers.  Ordering and concurrency
are proved by markers the commands write, never by timing thresholds; a process is
waited for with a pidfd under a deadline (no fixed sleeps), then checked with psutil.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import threading
from pathlib import Path
from typing import Any

import msgspec
import psutil
import pytest
import trio

from probes import builtin
from probes.model import (
    FAIL,
    HANDOFF_INCOMPLETE,
    PASS,
    PROBE_CRASHED,
    TIMED_OUT,
    WRITE_LOST,
    ProbeError,
    ProbeResult,
    ProbeSpec,
)
from probes.pool import PoolStatistics, open_probe_pool

# -- helpers ------------------------------------------------------------------------


def is_running(pid: int) -> bool:
    """psutil's view; a zombie has exited (only its exit status is left to collect)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def live_members(pgid: int) -> list[int]:
    """Non-zombie processes in group ``pgid``, found with psutil (independently of the
    pool's own /proc scan)."""
    members = []
    for process in psutil.process_iter(["status"]):
        try:
            if os.getpgid(process.pid) == pgid and process.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(process.pid)
        except (ProcessLookupError, PermissionError):
            continue
    return members


async def wait_for_exit(pids: list[int], deadline: float = 5.0) -> None:
    """Wait until every pid has exited (a pidfd turns readable at exit), failing the
    test after ``deadline`` seconds; then confirm with psutil."""
    with trio.fail_after(deadline):
        for pid in pids:
            try:
                pidfd = os.pidfd_open(pid)
            except ProcessLookupError:
                continue  # already gone and reaped
            try:
                await trio.lowlevel.wait_readable(pidfd)
            finally:
                os.close(pidfd)
    assert not [pid for pid in pids if is_running(pid)]


def read_pids(path: Path) -> list[int]:
    return [int(word) for word in path.read_text().split()]


def shell_spec(tmp_path: Path, name: str, shell: str, **fields: Any) -> ProbeSpec:
    return ProbeSpec(name=name, kind="command", params={"shell": shell}, cwd=str(tmp_path), **fields)


def write_spec(cwd: Path, path: str, data: bytes, name: str = "wrote") -> ProbeSpec:
    return ProbeSpec(
        name=name, kind="write", params={"path": path, "sha256": hashlib.sha256(data).hexdigest()}, cwd=str(cwd)
    )


# Replacements for a kind's function, run inside a worker.  Module-level so they pickle
# by reference; the worker imports this module to run them.


def die_with_exit(spec: ProbeSpec, params: Any) -> ProbeResult:
    os._exit(70)


def die_with_sigkill(spec: ProbeSpec, params: Any) -> ProbeResult:
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def raise_a_bug(spec: ProbeSpec, params: Any) -> ProbeResult:
    return {}["no such key"]


def report_worker_pid(spec: ProbeSpec, params: Any) -> ProbeResult:
    builtin.resolve(spec, params.path).write_text(str(os.getpid()))
    return builtin.make_result(spec, "pid", reason="wrote the worker's pid")


def report_worker_pid_then_hang(spec: ProbeSpec, params: Any) -> ProbeResult:
    report_worker_pid(spec, params)
    # Far past the probe's timeout, but bounded: were the worker not killed (a
    # shielded call cannot be cancelled by the test's fail_after), the test fails
    # on this pass result instead of hanging.
    threading.Event().wait(20)
    return builtin.make_result(spec, "pid", reason="the worker was not killed at the timeout")


# -- each kind through the pool -----------------------------------------------------


async def test_python_kinds_run_in_workers_and_commands_in_the_loop(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"alpha")
    async with open_probe_pool(limit=2) as pool:
        with trio.fail_after(30):
            good = await pool.run(write_spec(tmp_path, "a.txt", b"alpha"))
            bad = await pool.run(write_spec(tmp_path, "a.txt", b"beta"))
            command = await pool.run(shell_spec(tmp_path, "echo", "echo hello"))
    assert good.verdict == PASS and good.target == str(tmp_path / "a.txt")
    assert bad.verdict == FAIL and bad.finding == WRITE_LOST
    assert command.verdict == PASS and command.output == "hello\n"


# -- timeouts: the whole group dies, nothing is orphaned ----------------------------

HANG_WITH_GRANDCHILD = 'sleep 1000 & echo "$$ $!" > pids.tmp && mv pids.tmp pids; wait'


async def test_timed_out_command_is_killed_with_its_grandchild(tmp_path):
    async with open_probe_pool() as pool:
        with trio.fail_after(20):
            result = await pool.run(shell_spec(tmp_path, "hang", HANG_WITH_GRANDCHILD, timeout=1.0))
    assert result.verdict == FAIL and result.finding == TIMED_OUT and result.exit_code is None
    assert "1 s" in result.reason and result.duration >= 1.0
    assert result.output.startswith("lockstep: command failed: timed out after 1 s")
    leader, grandchild = read_pids(tmp_path / "pids")
    await wait_for_exit([leader, grandchild])
    assert live_members(leader) == []


async def test_sigterm_is_escalated_to_sigkill(tmp_path):
    # The shell and its sleep ignore SIGTERM (an ignored signal stays ignored across
    # exec), so only the SIGKILL after the grace ends them.
    stubborn = "trap '' TERM; " + HANG_WITH_GRANDCHILD
    async with open_probe_pool() as pool:
        with trio.fail_after(20):
            result = await pool.run(shell_spec(tmp_path, "stubborn", stubborn, timeout=1.0))
    assert result.finding == TIMED_OUT and result.duration >= 1.0 + builtin.TERM_GRACE
    leader, grandchild = read_pids(tmp_path / "pids")
    await wait_for_exit([leader, grandchild])
    assert live_members(leader) == []


async def test_stragglers_of_a_finished_command_are_ended(tmp_path):
    # Exits at once, leaving a sleep that also holds its stdout open.
    leaves_a_sleep = 'sleep 1000 & echo "$$ $!" > pids; echo launched'
    async with open_probe_pool() as pool:
        with trio.fail_after(20):
            result = await pool.run(shell_spec(tmp_path, "leaves", leaves_a_sleep, timeout=30))
    assert result.verdict == PASS and result.exit_code == 0 and result.output == "launched\n"
    leader, straggler = read_pids(tmp_path / "pids")
    await wait_for_exit([straggler])
    assert live_members(leader) == []


async def test_a_slow_probe_holds_nobody_up_and_cancelling_it_kills_its_group(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"alpha")
    async with open_probe_pool(limit=2) as pool:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:

                async def slow() -> None:
                    await pool.run(shell_spec(tmp_path, "slow", HANG_WITH_GRANDCHILD, timeout=600))
                    raise AssertionError("the slow probe should have been cancelled")

                nursery.start_soon(slow)
                # Another command runs beside it: it passes once the slow one has
                # written its pid file (it gives up after ~5 s, failing the test).
                waiter = "i=0; while [ ! -e pids ]; do i=$((i+1)); [ $i -gt 500 ] && exit 1; sleep 0.01; done"
                assert (await pool.run(shell_spec(tmp_path, "waiter", waiter))).verdict == PASS
                assert (await pool.run(write_spec(tmp_path, "a.txt", b"alpha"))).verdict == PASS
                nursery.cancel_scope.cancel()
    leader, grandchild = read_pids(tmp_path / "pids")
    await wait_for_exit([leader, grandchild])
    assert live_members(leader) == []


async def test_timed_out_python_probe_kills_its_worker(tmp_path, monkeypatch):
    # Only the hang gets the short timeout: starting a worker and importing may alone take
    # longer than 2 s on a loaded machine, so the runs that must pass get room.
    roomy = msgspec.structs.replace(write_spec(tmp_path, "worker.pid", b""), timeout=30.0)
    short = msgspec.structs.replace(roomy, timeout=2.0)
    async with open_probe_pool(limit=1) as pool:
        with trio.fail_after(90):
            # One worker (limit 1); first have it import this module, so the hang below
            # starts well inside the timeout.
            monkeypatch.setitem(builtin.PYTHON_PROBES, "write", report_worker_pid)
            assert (await pool.run(roomy)).verdict == PASS
            monkeypatch.setitem(builtin.PYTHON_PROBES, "write", report_worker_pid_then_hang)
            result = await pool.run(short)
            assert result.verdict == FAIL and result.finding == TIMED_OUT and result.exit_code is None
            hung_worker = int((tmp_path / "worker.pid").read_text())
            await wait_for_exit([hung_worker])
            monkeypatch.setitem(builtin.PYTHON_PROBES, "write", report_worker_pid)
            assert (await pool.run(roomy)).verdict == PASS  # a fresh worker
            assert int((tmp_path / "worker.pid").read_text()) != hung_worker


async def test_endpoint_that_never_answers_times_out():
    with socket.socket() as listener:  # accepts connections (backlog), never replies
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/health"
        spec = ProbeSpec(name="silent", kind="http", params={"url": url}, timeout=1.0)
        async with open_probe_pool() as pool:
            with trio.fail_after(20):
                result = await pool.run(spec)
                # a roomy timeout: a fresh worker's start alone can take a second on a loaded machine
                after = await pool.run(msgspec.structs.replace(spec, params={"url": "http://127.0.0.1:1/"}, timeout=15.0))
    assert result.finding == TIMED_OUT and result.target == url
    assert after.verdict == FAIL and after.finding != TIMED_OUT  # the pool still works


# -- crashes ------------------------------------------------------------------------


@pytest.mark.parametrize("crash, code", [(die_with_exit, "70"), (die_with_sigkill, "-9")])
async def test_a_crashed_worker_is_a_fail_and_is_replaced(tmp_path, monkeypatch, crash, code):
    (tmp_path / "a.txt").write_bytes(b"alpha")
    spec = write_spec(tmp_path, "a.txt", b"alpha")
    async with open_probe_pool(limit=1) as pool:
        with trio.fail_after(30):
            monkeypatch.setitem(builtin.PYTHON_PROBES, "write", crash)
            crashed = await pool.run(spec)
            monkeypatch.undo()
            after = await pool.run(spec)
        stats = pool.statistics()
    assert crashed.verdict == FAIL and crashed.finding == PROBE_CRASHED
    assert f"exit code {code}" in crashed.reason and "died" in crashed.reason
    assert after.verdict == PASS
    assert stats.completed == 2 and stats.failed == 1


async def test_a_probe_that_raises_is_a_crash_result_with_its_traceback(tmp_path, monkeypatch):
    monkeypatch.setitem(builtin.PYTHON_PROBES, "write", raise_a_bug)
    async with open_probe_pool(limit=1) as pool:
        with trio.fail_after(30):
            result = await pool.run(write_spec(tmp_path, "a.txt", b""))
    assert result.finding == PROBE_CRASHED and "KeyError" in result.reason
    assert result.output.startswith("Traceback") or "KeyError" in result.output.split("\n")[0]


# -- suites -------------------------------------------------------------------------


def logging_spec(tmp_path: Path, label: str, *, autofix: bool = False, nap: str = "0.1") -> ProbeSpec:
    """A command appending "<label> start" / "<label> end" to log (O_APPEND lines are
    atomic), napping in between."""
    shell = f'echo "{label} start" >> log; sleep {nap}; echo "{label} end" >> log'
    return shell_spec(tmp_path, label, shell, autofix=autofix)


def log_events(tmp_path: Path) -> list[tuple[str, str]]:
    return [tuple(line.split()) for line in (tmp_path / "log").read_text().splitlines()]  # type: ignore[misc]


async def test_suite_runs_autofix_after_read_only_one_at_a_time_results_in_spec_order(tmp_path):
    specs = [
        logging_spec(tmp_path, "ro0"),
        logging_spec(tmp_path, "fix0", autofix=True),
        logging_spec(tmp_path, "ro1"),
        logging_spec(tmp_path, "fix1", autofix=True),
        logging_spec(tmp_path, "ro2"),
    ]
    reported: list[int] = []
    async with open_probe_pool(limit=4) as pool:
        with trio.fail_after(30):
            results = await pool.run_suite(specs, on_result=lambda index, result: reported.append(index))
    assert [result.name for result in results] == ["ro0", "fix0", "ro1", "fix1", "ro2"]
    assert all(result.verdict == PASS for result in results)
    events = log_events(tmp_path)
    last_read_only_end = max(i for i, (label, what) in enumerate(events) if label.startswith("ro") and what == "end")
    first_fix_start = min(i for i, (label, _) in enumerate(events) if label.startswith("fix"))
    assert last_read_only_end < first_fix_start
    assert [event for event in events if event[0].startswith("fix")] == [
        ("fix0", "start"), ("fix0", "end"), ("fix1", "start"), ("fix1", "end"),
    ]
    assert sorted(reported[:3]) == [0, 2, 4] and reported[3:] == [1, 3]


async def test_autofix_probes_from_separate_callers_never_overlap(tmp_path):
    async with open_probe_pool(limit=4) as pool:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for index in range(3):
                    nursery.start_soon(pool.run, logging_spec(tmp_path, f"fix{index}", autofix=True))
    events = log_events(tmp_path)
    assert [what for _, what in events] == ["start", "end"] * 3
    assert all(events[i][0] == events[i + 1][0] for i in range(0, 6, 2))


async def test_suite_never_runs_more_than_limit_at_once(tmp_path):
    specs = [logging_spec(tmp_path, f"p{i}", nap="0.2") for i in range(6)]
    async with open_probe_pool(limit=2) as pool:
        with trio.fail_after(30):
            results = await pool.run_suite(specs)
        assert pool.statistics() == PoolStatistics(running=0, completed=6, failed=0, timed_out=0, limit=2)
    assert all(result.verdict == PASS for result in results)
    running = peak = 0
    for _, what in log_events(tmp_path):
        running += 1 if what == "start" else -1
        peak = max(peak, running)
    assert running == 0 and peak <= 2


async def test_read_only_probes_do_run_concurrently(tmp_path):
    # Each waits (up to ~10 s, then fails) for the other's marker: both can pass only
    # if they ran at the same time.
    def rendezvous(mine: str, other: str) -> ProbeSpec:
        shell = (
            f"touch {mine}; i=0; while [ ! -e {other} ]; do "
            "i=$((i+1)); [ $i -gt 400 ] && exit 1; sleep 0.025; done"
        )
        return shell_spec(tmp_path, mine, shell)

    async with open_probe_pool(limit=2) as pool:
        with trio.fail_after(30):
            results = await pool.run_suite([rendezvous("a", "b"), rendezvous("b", "a")])
    assert [result.verdict for result in results] == [PASS, PASS]


async def test_each_probe_sees_its_own_cwd(tmp_path):
    worktrees = {}
    for agent in ("alice", "bob"):
        worktree = tmp_path / agent
        worktree.mkdir()
        (worktree / "marker.txt").write_text(f"{agent}'s worktree\n")
        worktrees[agent] = worktree
    specs = [
        shell_spec(worktrees["alice"], "cat-alice", "cat marker.txt"),
        shell_spec(worktrees["bob"], "cat-bob", "cat marker.txt"),
        write_spec(worktrees["alice"], "marker.txt", b"alice's worktree\n", name="w-alice"),
        write_spec(worktrees["bob"], "marker.txt", b"bob's worktree\n", name="w-bob"),
        write_spec(worktrees["bob"], "marker.txt", b"alice's worktree\n", name="w-crossed"),
    ]
    async with open_probe_pool(limit=2) as pool:
        with trio.fail_after(30):
            results = await pool.run_suite(specs)
    assert results[0].output == "alice's worktree\n" and results[1].output == "bob's worktree\n"
    assert [result.verdict for result in results] == [PASS, PASS, PASS, PASS, FAIL]
    assert results[4].details["path"] == str(worktrees["bob"] / "marker.txt")


async def test_async_on_result_callback_is_awaited(tmp_path):
    seen: list[str] = []

    async def on_result(index: int, result: ProbeResult) -> None:
        await trio.lowlevel.checkpoint()
        seen.append(result.name)

    async with open_probe_pool() as pool:
        with trio.fail_after(30):
            await pool.run_suite([shell_spec(tmp_path, "one", "true"), shell_spec(tmp_path, "two", "false")], on_result)
    assert sorted(seen) == ["one", "two"]


# -- bad specs, statistics, lifetime ------------------------------------------------


async def test_a_bad_spec_raises_and_its_suite_runs_nothing(tmp_path):
    good = shell_spec(tmp_path, "would-touch", "touch ran")
    bad = ProbeSpec(name="bad", kind="write", params={"path": "x"})  # no sha256
    async with open_probe_pool() as pool:
        with pytest.raises(ProbeError, match="sha256"):
            await pool.run(bad)
        with pytest.raises(ProbeError, match="unknown kind"):
            await pool.run(ProbeSpec(name="x", kind="teleport"))
        with pytest.raises(ProbeError, match="loopback"):
            await pool.run_suite([good, ProbeSpec(name="far", kind="http", params={"url": "http://example.com/"})])
        assert pool.statistics().completed == 0
    assert not (tmp_path / "ran").exists()


async def test_statistics_count_results_and_are_immutable(tmp_path):
    async with open_probe_pool(limit=3) as pool:
        with trio.fail_after(30):
            await pool.run_suite(
                [
                    shell_spec(tmp_path, "ok", "true"),
                    shell_spec(tmp_path, "no", "exit 1"),
                    shell_spec(tmp_path, "slow", "exec sleep 30", timeout=0.3),
                ]
            )
        stats = pool.statistics()
    assert stats == PoolStatistics(running=0, completed=3, failed=2, timed_out=1, limit=3)
    with pytest.raises(AttributeError):
        stats.running = 1  # type: ignore[misc]
    assert msgspec.json.decode(msgspec.json.encode(stats)) == {
        "running": 0, "completed": 3, "failed": 2, "timed_out": 1, "limit": 3,
    }


async def test_pool_limit_defaults_to_cpu_count_and_rejects_nonsense():
    async with open_probe_pool() as pool:
        assert pool.statistics().limit == (os.cpu_count() or 1)
    with pytest.raises(ProbeError):
        async with open_probe_pool(limit=0):
            pass
    with pytest.raises(trio.ClosedResourceError):
        await pool.run(ProbeSpec(name="late", kind="command", params={"argv": ["true"]}))


async def test_warm_up_spawns_workers(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"alpha")
    async with open_probe_pool(limit=2) as pool:
        with trio.fail_after(30):
            await pool.warm_up()
            result = await pool.run(write_spec(tmp_path, "a.txt", b"alpha"))
    assert result.verdict == PASS


async def test_handoff_probe_runs_in_a_worker(tmp_path):
    (tmp_path / "HANDOFF.md").write_text("# Notes\n\nSome work happened.\n")
    spec = ProbeSpec(name="handoff", kind="handoff", params={"path": "HANDOFF.md"}, cwd=str(tmp_path))
    async with open_probe_pool() as pool:
        with trio.fail_after(30):
            result = await pool.run(spec)
    assert result.verdict == FAIL and result.finding == HANDOFF_INCOMPLETE
    assert result.details["score"] < 85 and result.details["missing"]

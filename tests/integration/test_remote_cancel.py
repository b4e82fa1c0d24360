"""Ctrl-C on a remote agent's check or verify run ends its probes on the agent's own
host: the coordinator tells the worker ``work_cancel``, the worker kills the probe's
process group and frees its slot, and the result the worker sends after (its
``work_done``) is only logged.  A real coordinator serving ``--curve`` on loopback, a
real ``lockstep worker`` in a joined clone, real CLI calls interrupted as a user would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import psutil

from .conftest import LOCKSTEP, cli, end_process, env_for, pid_gone, wait_until
from .test_remote import _loopback_workers, _serve_curve_on_loopback

# A command that writes its pid to a file, then waits until it is killed (no timer).
PAUSE = "echo $$ > {pidfile}.tmp && mv {pidfile}.tmp {pidfile} && exec tail -f /dev/null"


def _worker_stats(root: Path) -> dict:
    return cli("status", "--json", cwd=root).json["statistics"]["workers"]


def _pid_in(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text())
    except (OSError, ValueError):
        return None


def _running(pid: int | None) -> bool:
    return pid is not None and not pid_gone(pid)


def _ledger(root: Path, kind: str) -> list[dict]:
    out = cli("ledger", "tail", "-n", "200", "--json", cwd=root).out
    return [e for e in map(json.loads, out.splitlines()) if e["kind"] == kind]


def _joined_with_a_worker(tmp_path: Path, coordinator_in) -> tuple[object, Path, subprocess.Popen]:
    origin, clone = _serve_curve_on_loopback(tmp_path, coordinator_in)
    token = cli("invite", "alice", "--json", cwd=origin.root).json["token"]
    assert cli("join", token, "--no-worker", "--json", cwd=clone).rc == 0
    worker = subprocess.Popen([*LOCKSTEP, "worker"], cwd=clone, env=env_for(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: _loopback_workers(origin.root) == ["alice"], timeout=20, what="alice's worker to be ready")
    except BaseException:
        end_process(worker)
        raise
    return origin, clone, worker


def _interrupt(proc: subprocess.Popen) -> int:
    """Ctrl-C on a CLI call: SIGINT, as the terminal sends it; its exit code."""
    proc.send_signal(signal.SIGINT)
    return proc.wait(20)


def test_ctrl_c_on_a_remote_check_kills_its_command_on_the_workers_host_and_the_worker_takes_the_next(tmp_path: Path, coordinator_in):
    origin, clone, worker = _joined_with_a_worker(tmp_path, coordinator_in)
    pidfile = tmp_path / "probe.pid"
    check = subprocess.Popen(
        [*LOCKSTEP, "check", "command", "--agent", "alice", "--timeout", "1000", "--", "sh", "-c", PAUSE.format(pidfile=pidfile)],
        cwd=clone, env=env_for(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    pid = None
    try:
        wait_until(lambda: _running(_pid_in(pidfile)), timeout=20, what="the check's command to run on alice's worker")
        pid = _pid_in(pidfile)
        assert worker.pid in [p.pid for p in psutil.Process(pid).parents()]  # it runs on the worker, not the coordinator
        [running] = _worker_stats(origin.root)["workers"][0]["running"]
        assert _interrupt(check) == 130
        wait_until(lambda: pid_gone(pid), timeout=15, what="the cancelled check's command to end on the worker's host")
        wait_until(lambda: _worker_stats(origin.root)["workers"][0]["running"] == [], timeout=15, what="the worker to run nothing")
        stats = _worker_stats(origin.root)
        assert stats["cancelled"] == 1 and stats["workers"][0]["agent"] == "alice"  # the worker was told, and stays
        # Its work_done after the cancel is a late result: logged, not the job's result.
        log = origin.state_dir / "coordinator.log"
        wait_until(lambda: f"ignored the end of work '{running}' from alice's worker" in log.read_text(), timeout=15,
                   what="the worker's late answer to be logged as ignored")
        (finished,) = [e for e in _ledger(origin.root, "job.finished") if e["data"]["job"] == running]
        assert finished["data"]["verdict"] == "fail" and finished["data"]["reason"].startswith("cancelled: "), finished
        assert not [e for e in _ledger(origin.root, "probe.result") if e["data"].get("job") == running]

        following = cli("check", "command", "--agent", "alice", "--json", "--", "sh", "-c", "echo the-next-job-ran", cwd=clone)
        assert following.rc == 0 and following.json["verdict"] == "pass", following
        assert "the-next-job-ran" in following.json["results"][0]["output"]
    finally:
        end_process(check, signal.SIGINT)
        end_process(worker)
        if _running(pid):
            os.kill(pid, signal.SIGKILL)
    assert worker.returncode == 0
    assert "cancelled by the coordinator" in worker.stderr.read()


def test_ctrl_c_on_a_remote_verify_holding_every_slot_of_the_worker_frees_them_all(tmp_path: Path, coordinator_in):
    """A verify run whose checks take every slot of the worker's probe pool (one per CPU):
    once it is cancelled, the next check runs on the worker at once (before, it queued
    behind checks that ran on for nobody until their timeout)."""
    origin, clone, worker = _joined_with_a_worker(tmp_path, coordinator_in)
    slots = os.cpu_count() or 1
    pids = tmp_path / "pids"
    pids.mkdir()
    (clone / "lockstep.toml").write_text("".join(
        f"[checks.paused{n}]\ncmd = {json.dumps(PAUSE.format(pidfile=pids / str(n)))}\ntimeout = \"1000s\"\n" for n in range(slots)
    ))
    verify = subprocess.Popen([*LOCKSTEP, "verify", "--agent", "alice"], cwd=clone, env=env_for(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    started: list[int | None] = []
    try:
        def all_running() -> bool:
            started[:] = [_pid_in(pids / str(n)) for n in range(slots)]
            return all(_running(pid) for pid in started)

        wait_until(all_running, timeout=30, what=f"{slots} checks of the verify run to take every slot of the worker")
        assert _interrupt(verify) == 130
        wait_until(lambda: all(pid_gone(pid) for pid in started), timeout=15, what="every cancelled check's command to end")
        wait_until(lambda: _ledger(origin.root, "verify.finished"), timeout=15, what="the verify run to finish")
        (finished,) = _ledger(origin.root, "verify.finished")
        assert finished["data"]["passed"] is False and finished["data"]["reason"].startswith("cancelled: "), finished

        following = cli("check", "command", "--agent", "alice", "--json", "--", "true", cwd=clone, timeout=60)
        assert following.rc == 0 and following.json["verdict"] == "pass", following
    finally:
        end_process(verify, signal.SIGINT)
        end_process(worker)
        for pid in started:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
    assert worker.returncode == 0


def test_a_coordinator_killed_mid_check_and_restarted_gets_the_worker_to_drop_that_work(tmp_path: Path, coordinator_in):
    """No cancel can come from a coordinator killed with SIGKILL; its successor does not
    know the worker nor its work: the worker, welcomed again with no work awaited, ends
    the orphaned command and runs the next check."""
    served = []

    def serve(*args):
        served.append(coordinator_in(*args))
        return served[-1]

    origin, clone, worker = _joined_with_a_worker(tmp_path, serve)
    pidfile = tmp_path / "orphan.pid"
    check = subprocess.Popen(
        [*LOCKSTEP, "check", "command", "--agent", "alice", "--timeout", "1000", "--", "sh", "-c", PAUSE.format(pidfile=pidfile)],
        cwd=clone, env=env_for(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    pid = None
    try:
        wait_until(lambda: _running(_pid_in(pidfile)), timeout=20, what="the check's command to run on alice's worker")
        pid = _pid_in(pidfile)
        (coordinator,) = served
        coordinator.kill()
        end_process(check)  # its requester gave up with the coordinator gone
        coordinator.start()  # the same endpoint and keys, a new epoch
        wait_until(lambda: pid_gone(pid), timeout=20, what="the orphaned command to end on the worker's host")
        wait_until(lambda: _loopback_workers(origin.root) == ["alice"], timeout=20, what="alice's worker ready again")
        following = cli("check", "command", "--agent", "alice", "--json", "--", "sh", "-c", "echo the-next-job-ran", cwd=clone)
        assert following.rc == 0 and following.json["verdict"] == "pass", following
    finally:
        end_process(check)
        end_process(worker)
        if _running(pid):
            os.kill(pid, signal.SIGKILL)
    assert worker.returncode == 0

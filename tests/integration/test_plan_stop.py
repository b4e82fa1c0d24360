"""Stopping a running plan: ``lockstep plan stop NAME`` (from another terminal, or for a
plan resumed after a restart) and Ctrl-C on ``lockstep plan run`` end the running step's
command with its process group, start no further step and no rollback, record
``plan.stopped``, show the plan ``stopped`` in ``plan status``, and a restart does not
resume it."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import psutil

from .conftest import LOCKSTEP, cli, end_process, env_for, pid_gone, status, wait_until

FAST = ("--heartbeat", "0.2", "--liveness", "5", "--lock-delay", "1")

# "prepare" has a rollback that "hang" would run if it failed with on_post_fail =
# "rollback"; "hang" writes its pid, then waits until it is killed (no timer);
# "after" must never start.
PLAN = """
[plan]
name = "{name}"

[[step]]
id = "prepare"
run = "true"
rollback = "touch rolled-back"

[[step]]
id = "hang"
run = "echo $$ > {pidfile}; exec tail -f /dev/null"
on_post_fail = "rollback"

[[step]]
id = "after"
run = "touch after-ran"
"""


def _write_plan(repo, name: str = "deploy") -> Path:
    pidfile = repo.root / "hang.pid"
    (repo.root / "PLAN.toml").write_text(PLAN.format(name=name, pidfile=pidfile))
    return pidfile


def _hanging_pid(pidfile: Path) -> int:
    """The pid the hanging step wrote, once that process runs."""

    def running() -> int | None:
        try:
            pid = int(pidfile.read_text())
        except (OSError, ValueError):
            return None
        return pid if psutil.pid_exists(pid) and not pid_gone(pid) else None

    return wait_until(running, timeout=30, what="the hanging step's command to run")


def _ledger(repo, kind: str) -> list[dict]:
    out = cli("ledger", "tail", "-n", "1000", "--kind", kind, "--json", cwd=repo.root).out
    return [json.loads(line) for line in out.splitlines()]


def _plan(repo, job: str) -> dict:
    (summary,) = cli("plan", "status", job, "--json", cwd=repo.root).json
    return summary


def _assert_stopped_where_it_stood(repo, job: str, pid: int, by_reason: str) -> None:
    assert pid_gone(pid)  # the step's command was ended before the stop was reported
    (stopped,) = _ledger(repo, "plan.stopped")
    assert stopped["data"]["job"] == job and stopped["data"]["plan"] == "deploy" and stopped["data"]["step"] == "hang"
    assert stopped["data"]["reason"] == by_reason and stopped["data"]["by"]
    summary = _plan(repo, job)
    assert summary["state"] == "stopped" and summary["waits_for"] is None and summary["current"] is None
    assert {s["id"]: s["state"] for s in summary["steps"]} == {"prepare": "done", "hang": "stopped", "after": "pending"}
    assert summary["reason"].startswith("stopped by ") and by_reason in summary["reason"]
    assert not (repo.root / "after-ran").exists() and not (repo.root / "rolled-back").exists()
    assert not [e for e in _ledger(repo, "plan.*") if e["kind"] in ("plan.step.rolling_back", "plan.failed", "plan.escalated")]
    (finished,) = [e for e in _ledger(repo, "job.finished") if e["data"]["job"] == job]
    assert finished["data"]["verdict"] == "fail" and "stopped by" in finished["data"]["reason"]


def test_plan_stop_ends_the_running_step_and_a_restart_does_not_resume_it(repo, coordinator):
    first = coordinator(*FAST)
    pidfile = _write_plan(repo)
    job = cli("plan", "run", "PLAN.toml", "--detach", "--json", cwd=repo.root).json["job"]
    pid = _hanging_pid(pidfile)
    stopped = cli("plan", "stop", "deploy", "--reason", "wrong tag", "--agent", "ops", "--json", cwd=repo.root, timeout=90)
    assert stopped.rc == 0, stopped
    assert stopped.json["job"] == job and stopped.json["state"] == "stopped"
    assert "stopped by ops at step 'hang': wrong tag" in stopped.json["reason"]
    _assert_stopped_where_it_stood(repo, job, pid, "wrong tag")
    assert _ledger(repo, "plan.stopped")[0]["data"]["by"] == "ops"
    assert status(repo)["jobs"] == []
    first.stop()
    pidfile.unlink()
    coordinator(*FAST)
    # plans are resumed before the first request is served: a resumed one would be listed
    assert status(repo)["jobs"] == []
    assert _plan(repo, job)["state"] == "stopped"
    again = cli("plan", "stop", job, "--json", cwd=repo.root)
    assert again.rc == 1 and again.json["error"]["code"] == "not_found", again


def test_ctrl_c_on_plan_run_stops_the_plan(repo, coordinator):
    coordinator(*FAST)
    pidfile = _write_plan(repo)
    proc = subprocess.Popen([*LOCKSTEP, "plan", "run", "PLAN.toml"], cwd=repo.root, env=env_for(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pid = _hanging_pid(pidfile)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, (proc.returncode, err)
    finally:
        end_process(proc)
    (job,) = [e["data"]["job"] for e in _ledger(repo, "job.started")]
    wait_until(lambda: [e for e in _ledger(repo, "job.finished") if e["data"]["job"] == job], timeout=30, what="the plan to stop")
    _assert_stopped_where_it_stood(repo, job, pid, "Ctrl-C on `lockstep plan run`")
    assert status(repo)["jobs"] == []


def test_a_plan_resumed_after_a_restart_can_be_stopped(repo, coordinator):
    first = coordinator(*FAST)
    pidfile = _write_plan(repo)
    job = cli("plan", "run", "PLAN.toml", "--detach", "--json", cwd=repo.root).json["job"]
    before = _hanging_pid(pidfile)
    first.kill()  # the step's command is in its own group: end it as a crash would leave it
    psutil.Process(before).kill()
    pidfile.unlink()
    coordinator(*FAST)
    pid = _hanging_pid(pidfile)  # resumed: the step runs again
    stopped = cli("plan", "stop", job, "--json", cwd=repo.root, timeout=90)
    assert stopped.rc == 0, stopped
    _assert_stopped_where_it_stood(repo, job, pid, "stopped with `lockstep plan stop`")


def test_plan_stop_refuses_what_is_not_a_running_plan(repo, coordinator, tmp_path):
    server = coordinator(*FAST)
    missing = cli("plan", "stop", "deploy", cwd=repo.root)
    assert missing.rc == 1 and "no running plan 'deploy'" in missing.err, missing
    (repo.root / "PLAN.toml").write_text('[plan]\nname = "quick"\n\n[[step]]\nid = "one"\nrun = "true"\n')
    done = cli("plan", "run", "PLAN.toml", "--json", cwd=repo.root, timeout=60)
    assert done.rc == 0, done
    ended = cli("plan", "stop", done.json["job"], "--json", cwd=repo.root)
    assert ended.rc == 1 and ended.json["error"]["code"] == "not_found", ended
    check = cli("check", "command", "--json", "--", "true", cwd=repo.root).json["job"]
    not_a_plan = cli("plan", "stop", check, "--json", cwd=repo.root)
    assert not_a_plan.rc == 2 and not_a_plan.json["error"]["code"] == "bad_request", not_a_plan
    server.stop()
    unreachable = cli("plan", "stop", "deploy", "--json", cwd=repo.root)
    assert unreachable.rc == 3 and unreachable.json["error"]["code"] == "unreachable", unreachable


def test_plan_stop_ends_a_step_that_waits_for_an_agent(repo, coordinator):
    coordinator(*FAST)
    (repo.root / "PLAN.toml").write_text(
        '[plan]\nname = "review"\n\n[[step]]\nid = "approve"\nexpect = "approve the release"\nagent = "reviewer"\n\n'
        '[[step]]\nid = "after"\nrun = "touch after-ran"\n'
    )
    job = cli("plan", "run", "PLAN.toml", "--detach", "--json", cwd=repo.root).json["job"]
    wait_until(lambda: (_plan(repo, job)["waits_for"] or {}).get("what", "").startswith("agent reviewer"), timeout=30, what="the step to wait for reviewer")
    stopped = cli("plan", "stop", "review", cwd=repo.root, timeout=90)
    assert stopped.rc == 0 and stopped.out.startswith("stopped: plan 'review' stopped by "), stopped
    assert "at step 'approve': stopped with `lockstep plan stop`" in stopped.out
    assert "stopped: stopped by " in cli("plan", "status", job, cwd=repo.root).out
    summary = _plan(repo, job)
    assert summary["state"] == "stopped" and {s["id"]: s["state"] for s in summary["steps"]} == {"approve": "stopped", "after": "pending"}
    assert status(repo)["jobs"] == [] and not (repo.root / "after-ran").exists()

"""A check or verify run whose requester stops waiting (Ctrl-C) is cancelled on the
coordinator: its command's process group ends, its slot is freed, its job finishes
with verdict fail and reason ``cancelled: ...``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid

import psutil

from .conftest import LOCKSTEP, cli, end_process, env_for, status, wait_until

FAST = ("--heartbeat", "0.2", "--liveness", "5", "--lock-delay", "1")


def _alive(marker: str) -> list[int]:
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if marker in " ".join(p.info["cmdline"] or ()) and p.info["status"] != psutil.STATUS_ZOMBIE and p.pid:
            if "agents.cli" not in " ".join(p.info["cmdline"] or ()):
                found.append(p.pid)
    return found


def _finished(repo, kind: str) -> list[dict]:
    out = cli("ledger", "tail", "-n", "200", "--json", cwd=repo.root).out
    return [e for e in map(json.loads, out.splitlines()) if e["kind"] == kind]


def _interrupt_while_running(repo, marker: str, *args: str) -> int:
    """Start ``lockstep ARGS``, Ctrl-C it once ``marker``'s process runs; its exit code."""
    proc = subprocess.Popen([*LOCKSTEP, *args], cwd=repo.root, env=env_for(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: _alive(marker), timeout=20, what="the check's command to run")
        proc.send_signal(signal.SIGINT)
        return proc.wait(20)
    finally:
        end_process(proc)


def test_ctrl_c_on_a_check_ends_its_command_and_children_on_the_coordinator(repo, coordinator):
    coordinator(*FAST)
    marker = f"abandoned-{uuid.uuid4().hex}"
    # a command that waits until it is killed (no timer), and a child that does the same
    script = "import signal,subprocess,sys; subprocess.Popen([sys.executable,'-c','import signal; signal.pause()',sys.argv[1]]); signal.pause()"
    rc = _interrupt_while_running(repo, marker, "check", "command", "--timeout", "1000", "--", sys.executable, "-c", script, marker)
    assert rc == 130
    wait_until(lambda: not _alive(marker), timeout=15, what="the abandoned command and its child to end")
    wait_until(lambda: status(repo).get("jobs") == [], timeout=15, what="the job to finish")
    (finished,) = _finished(repo, "job.finished")
    assert finished["data"]["verdict"] == "fail" and finished["data"]["reason"].startswith("cancelled: ")


def test_ctrl_c_on_an_agents_verify_cancels_it_and_the_coordinator_keeps_serving(repo, coordinator):
    coordinator(*FAST)
    marker = f"abandoned-verify-{uuid.uuid4().hex}"
    (repo.root / "lockstep.toml").write_text(f'[checks.slow]\ncmd = "tail -f /dev/null # {marker}"\ntimeout = "1000s"\n')
    rc = _interrupt_while_running(repo, marker, "verify", "--agent", "alice")
    assert rc == 130
    wait_until(lambda: not _alive(marker), timeout=15, what="the abandoned verify check to end")
    wait_until(lambda: _finished(repo, "verify.finished"), timeout=15, what="the verify run to finish")
    (finished,) = _finished(repo, "verify.finished")
    assert finished["data"]["passed"] is False and finished["data"]["reason"].startswith("cancelled: ")
    assert cli("check", "command", "--", "true", cwd=repo.root).rc == 0


def test_only_the_requesting_session_may_cancel_a_job(repo, coordinator):
    coordinator(*FAST)
    marker = f"kept-{uuid.uuid4().hex}"
    proc = subprocess.Popen(
        [*LOCKSTEP, "check", "command", "--agent", "alice", "--timeout", "1000", "--", sys.executable, "-c", "import signal; signal.pause()", marker],
        cwd=repo.root, env=env_for(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: _alive(marker), timeout=20, what="the check's command to run")
        (job,) = status(repo)["jobs"]
        code = (
            "import sys; from agents.oneshot import Connection, RequestFailed, resolve_endpoint; from protocol import discovery;"
            "from protocol import messages as m\n"
            "conn = Connection(resolve_endpoint(discovery.locate(), None), timeout=5)\n"
            "try:\n conn.request(m.JobQuery(job=sys.argv[1], cancel=True))\n"
            "except RequestFailed as exc:\n print(exc.code)\n"
        )
        other = subprocess.run([sys.executable, "-c", code, job["job"]], cwd=repo.root, env=env_for(), capture_output=True, text=True, timeout=30)
        assert other.stdout.strip() == "refused", other
        assert _alive(marker)
    finally:
        end_process(proc, signal.SIGINT)
    wait_until(lambda: not _alive(marker), timeout=15, what="the command to end after its own requester's Ctrl-C")

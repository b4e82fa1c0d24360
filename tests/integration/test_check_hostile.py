"""Hostile checks against a real coordinator: each gets a clear answer with the
documented exit code, bounded memory and disk, and the coordinator keeps serving."""

from __future__ import annotations

import subprocess
import sys

from agents.oneshot import Connection, resolve_endpoint
from probes.kinds.command import LOG_MAX_BYTES
from probes.kinds.handoff import LISTED
from protocol import discovery
from protocol import messages as m

from .conftest import PROJECT, cli, env_for, wait_until

FAST = ("--heartbeat", "0.2", "--liveness", "5", "--lock-delay", "1")


def test_a_command_printing_more_than_the_log_cap_keeps_a_bounded_log_with_its_end(repo, coordinator):
    coordinator(*FAST)
    size = LOG_MAX_BYTES + 8 * 1024 * 1024
    script = f"import sys; w = sys.stdout.write; [w('x' * 1023 + chr(10)) for _ in range({size // 1024})]; w('THE-LAST-LINE' + chr(10))"
    result = cli("check", "command", "--json", "--timeout", "120", "--", sys.executable, "-c", script, cwd=repo.root, timeout=150)
    assert result.rc == 0, result
    (check,) = result.json["results"]
    log = check["details"]["log"]
    with open(log, "rb") as file:
        file.seek(0, 2)
        kept = file.tell()
        file.seek(max(0, kept - 4096))
        end = file.read()
    assert kept <= LOG_MAX_BYTES + 1024 * 1024
    assert b"THE-LAST-LINE" in end and b"not kept" in open(log, "rb").read()[LOG_MAX_BYTES - 1024 :]
    assert cli("check", "command", "--", "true", cwd=repo.root).rc == 0


def test_checks_from_a_removed_directory_are_bad_input_in_one_line(repo, coordinator):
    coordinator(*FAST)
    gone = repo.root / "gone"
    gone.mkdir()
    plan = repo.root / "PLAN.toml"
    plan.write_text('[plan]\nname = "p"\n[[step]]\nid = "a"\nrun = "true"\n')
    script = (
        "import os, subprocess, sys; os.chdir(sys.argv[1]); os.rmdir(sys.argv[1]);"
        "sys.exit(subprocess.run([sys.executable, '-m', 'agents.cli', *sys.argv[2:]]).returncode)"
    )
    for args in (["check", "command", "--", "true"], ["check", "http", "http://127.0.0.1:1/"], ["plan", "run", str(plan)]):
        gone.mkdir(exist_ok=True)
        proc = subprocess.run([sys.executable, "-c", script, str(gone), *args], env=env_for({"PYTHONPATH": str(PROJECT)}), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2, (args, proc.stderr)
        # (Python itself warns first that it could not put the directory on sys.path.)
        assert "Traceback" not in proc.stderr, (args, proc.stderr)
        assert proc.stderr.strip().splitlines()[-1] == "lockstep: the current directory no longer exists (removed?): cd into a worktree of the repository", args
    assert cli("check", "command", "--", "true", cwd=repo.root).rc == 0


def _gate_of(repo, request) -> m.Gate:
    """Send ``request`` as a raw client would and follow its job to the gate."""
    conn = Connection(resolve_endpoint(discovery.locate(str(repo.root)), None), timeout=10)
    try:
        accepted = conn.request(request)
        return wait_until(lambda: conn.request(m.JobQuery(job=accepted.job)).gate, timeout=20, what="the job's gate")
    finally:
        conn.close()


def test_a_working_directory_no_path_can_name_is_refused_in_one_line(repo, coordinator):
    coordinator(*FAST)
    probe = m.ProbeRequest(kind="command", name="command", params={"argv": ["true"]})
    for cwd in ("\x00", f"{repo.root}/a\x00b"):
        for request in (m.Check(probe=probe, cwd=cwd), m.Verify(cwd=cwd), m.PlanRun(plan='[plan]\nname = "p"\n[[step]]\nid = "a"\nrun = "true"\n', cwd=cwd)):
            gate = _gate_of(repo, request)
            assert gate.verdict == "fail" and "internal error" not in gate.reason, gate.reason
            assert "not a directory path" in gate.reason, gate.reason
    assert cli("check", "command", "--", "true", cwd=repo.root).rc == 0


def test_a_job_query_sends_only_the_results_after_since(repo, coordinator):
    """A client following a verify run of thousands of checks asks for the new results
    only; every poll carried all of them before (quadratic traffic and memory)."""
    coordinator(*FAST)
    (repo.root / "lockstep.toml").write_text("".join(f'[checks.c{i}]\ncmd = "echo {i}"\n' for i in range(12)))
    conn = Connection(resolve_endpoint(discovery.locate(str(repo.root)), None), timeout=10)
    try:
        accepted = conn.request(m.Verify(cwd=str(repo.root)))
        wait_until(lambda: conn.request(m.JobQuery(job=accepted.job)).gate, timeout=60, what="the verify run to finish")
        whole = conn.request(m.JobQuery(job=accepted.job))
        later = conn.request(m.JobQuery(job=accepted.job, since=5))
    finally:
        conn.close()
    assert len(whole.results) == 12 and whole.done == later.done == 12
    assert later.results == whole.results[5:]
    result = cli("verify", "--json", cwd=repo.root, timeout=60)
    assert result.rc == 0 and len(result.json["results"]) == 12
    shown = cli("verify", cwd=repo.root, timeout=60)
    assert shown.rc == 0 and sum(" c" in line and "echo" in line for line in shown.err.splitlines()) == 12, shown.err


def test_a_handoff_note_citing_thousands_of_commits_gives_a_bounded_result(repo, coordinator):
    """300,000 cited commits made a 300,000-fact result (20 s, 436 MB in the client):
    the result lists the first false facts and counts the rest; score and reason use all."""
    coordinator(*FAST)
    sections = ["Primary request", "Key concepts", "Work completed", "Decisions", "Files and code changes",
                "Unresolved issues", "Pending tasks", "Current work", "Next step"]
    cited = " ".join(f"a{i:011x}" for i in range(3000))
    (repo.root / "HANDOFF.md").write_text("\n".join(f"## {s}\n{cited if s == 'Work completed' else 'see src/app.py'}\n" for s in sections))
    result = cli("check", "handoff", "HANDOFF.md", "--agent", "alice", "--json", cwd=repo.root, timeout=120)
    assert result.rc == 1, result
    (check,) = result.json["results"]
    details = check["details"]
    assert len(details["facts"]) <= LISTED and len(details["facts"]) + details["facts_omitted"] >= 3000
    assert all(not f["holds"] for f in details["facts"])
    assert "3000 false facts" in check["reason"]
    assert len(result.out) < 1024 * 1024

"""Checks, verify runs, the done gate, rules, plans and scheduled probes, end to end:
a real coordinator, real files, real commands, a real HTTP server on loopback."""

from __future__ import annotations

import hashlib
import http.server
import json
import signal
import subprocess
import sys
import threading
import uuid

import psutil
import pytest

from .conftest import LOCKSTEP, _git, cli, end_process, env_for, wait_until

FAST = ("--heartbeat", "0.2", "--liveness", "5", "--lock-delay", "1")


def _ledger(repo, n: int = 200) -> list[dict]:
    out = cli("ledger", "tail", "-n", str(n), "--json", cwd=repo.root).out
    return [json.loads(line) for line in out.splitlines()]


def test_check_write_passes_on_the_right_hash_and_fails_when_the_write_was_lost(repo, coordinator):
    coordinator(*FAST)
    target = repo.root / "src" / "app.py"
    good = hashlib.sha256(target.read_bytes()).hexdigest()
    passed = cli("check", "write", "src/app.py", "--sha256", good, "--json", cwd=repo.root)
    assert passed.rc == 0 and passed.json["verdict"] == "pass"
    lost = cli("check", "write", "src/app.py", "--sha256", "0" * 64, "--json", cwd=repo.root)
    assert lost.rc == 1
    result = lost.json["results"][0]
    assert result["finding"] == "write lost" and result["details"]["expected"] == "0" * 64
    recorded = [e for e in _ledger(repo) if e["kind"] == "probe.result"]
    assert [e["data"]["verdict"] for e in recorded] == ["pass", "fail"]
    assert cli("check", "write", "x", "--sha256", "nothex", cwd=repo.root).rc == 2


def test_check_build_fails_when_the_build_produced_nothing_and_the_rule_answers(repo, coordinator):
    coordinator(*FAST)
    dist = repo.root / "dist"
    dist.mkdir()
    (dist / "bundle-1.js").write_text("one")
    assert cli("check", "build", "dist", cwd=repo.root).rc == 0
    again = cli("check", "build", "dist", "--json", cwd=repo.root)  # nothing new was built
    assert again.rc == 1
    gate = again.json
    assert gate["results"][0]["finding"] == "build produced nothing"
    assert gate["responses"][0]["action"] == "rollback"  # the seed rule
    (dist / "bundle-2.js").write_text("two")
    assert cli("check", "build", "dist", cwd=repo.root).rc == 0


def test_check_command_exit_code_stderr_and_side_effect(repo, coordinator):
    coordinator(*FAST)
    ok = cli("check", "command", "--creates", "out.txt", "--", sys.executable, "-c", "open('out.txt','w').write('x')", cwd=repo.root)
    assert ok.rc == 0
    bad = cli("check", "command", "--json", "--", sys.executable, "-c", "import sys; print('fine'); sys.exit('boom: it broke')", cwd=repo.root)
    assert bad.rc == 1
    result = bad.json["results"][0]
    assert result["exit_code"] == 1 and "boom: it broke" in result["output"]
    assert result["output"].index("boom") < result["output"].index("fine")  # errors first
    silent = cli("check", "command", "--creates", "never.txt", "--json", "--", "true", cwd=repo.root)
    assert silent.rc == 1 and silent.json["results"][0]["finding"] == "side effect missing"


def test_a_hanging_command_is_killed_at_its_timeout_with_its_children(repo, coordinator):
    coordinator(*FAST)
    marker = f"hang-{uuid.uuid4().hex}"
    script = "import subprocess,sys,time; subprocess.Popen([sys.executable,'-c','import time; time.sleep(1000)',sys.argv[1]]); time.sleep(1000)"
    hung = cli("check", "command", "--timeout", "1", "--json", "--", sys.executable, "-c", script, marker, cwd=repo.root)
    assert hung.rc == 1
    result = hung.json["results"][0]
    assert result["finding"] == "timed out" and result["exit_code"] is None
    leftovers = [p.pid for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or ()) and p.status() != psutil.STATUS_ZOMBIE]
    assert leftovers == []


class _Deploy(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        routes = {
            "/index.html": (200, "text/html", '<script src="/bundle-abc123.js"></script>'),
            "/deploy-info": (200, "application/json", json.dumps({"hash": "abc123", "services": 27})),
        }
        status, kind, body = routes.get(self.path, (404, "text/plain", "missing"))
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def deploy_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Deploy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_check_http_verifies_a_deploy(repo, coordinator, deploy_server):
    coordinator(*FAST)
    assert cli("check", "http", f"{deploy_server}/index.html", "--contains", "bundle-abc123.js", cwd=repo.root).rc == 0
    assert cli("check", "http", f"{deploy_server}/deploy-info", "--json-path", "$.hash", "--equals", "abc123", cwd=repo.root).rc == 0
    stale = cli("check", "http", f"{deploy_server}/deploy-info", "--json-path", "$.hash", "--equals", "def456", "--json", cwd=repo.root)
    assert stale.rc == 1 and stale.json["results"][0]["finding"] == "endpoint failing"
    assert cli("check", "http", f"{deploy_server}/gone.js", cwd=repo.root).rc == 1
    assert cli("check", "http", "http://example.com/", cwd=repo.root).rc == 2  # loopback only


def test_check_processes_counts_and_names_the_missing(repo, coordinator):
    coordinator(*FAST)
    marker = f"service-{uuid.uuid4().hex}"
    workers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker]) for _ in range(2)]
    try:
        assert cli("check", "processes", "--match", marker, "--count", "2", cwd=repo.root).rc == 0
        short = cli("check", "processes", "--match", marker, "--count", "3", "--json", cwd=repo.root)
        assert short.rc == 1
        details = short.json["results"][0]["details"]
        assert short.json["results"][0]["finding"] == "processes missing" and details["found"] == 2
    finally:
        for w in workers:
            end_process(w)


def test_check_handoff_scores_the_document(repo, coordinator):
    coordinator(*FAST)
    (repo.root / "HANDOFF.md").write_text("# Handoff\n\n## Next step\n\nsomething\n")
    weak = cli("check", "handoff", "HANDOFF.md", "--json", cwd=repo.root)
    assert weak.rc == 1
    result = weak.json["results"][0]
    assert result["finding"] == "handoff incomplete" and result["details"]["missing"]


def _suite(root, *, max_loops: int = 3, fail: bool = False, policy: str = "before-final-answer") -> None:
    test = "import sys; sys.exit(1)" if fail else "pass"
    (root / "lockstep.toml").write_text(
        f'[verify]\nmax_repair_loops = {max_loops}\npolicy = "{policy}"\n\n'
        f'[checks.lint]\ncmd = "{sys.executable} -c pass"\n\n'
        f'[checks.test]\ncmd = "{sys.executable} -c \'{test}\'"\ntimeout = "30s"\n'
    )


def test_verify_runs_the_suite_and_gates_done(repo, coordinator):
    coordinator(*FAST)
    _suite(repo.root, fail=True)
    cli("intent", "src/app.py", "--agent", "dev", cwd=repo.root)
    blocked = cli("done", "--agent", "dev", "--json", cwd=repo.root)
    assert blocked.rc == 1 and blocked.json["verdict"] == "block" and "no verify run" in blocked.json["reason"]
    failed = cli("verify", "--agent", "dev", "--json", cwd=repo.root)
    assert failed.rc == 1 and [r["verdict"] for r in failed.json["results"]] == ["pass", "fail"]
    assert cli("done", "--agent", "dev", cwd=repo.root).rc == 1
    _suite(repo.root)
    human = cli("verify", "--agent", "dev", cwd=repo.root)
    assert human.rc == 0 and "✓ lint" in human.err and "✓ test" in human.err
    assert cli("done", "--agent", "dev", cwd=repo.root).rc == 0
    cli("intent", "src/app.py", "--agent", "dev", cwd=repo.root)  # a new write...
    again = cli("done", "--agent", "dev", "--json", cwd=repo.root)  # ...needs a new verify run
    assert again.rc == 1 and "no verify run since your last write" in again.json["reason"]
    kinds = [e["kind"] for e in _ledger(repo)]
    assert kinds.count("verify.result") == 4 and kinds.count("verify.finished") == 2


def test_verify_without_an_agent_is_anonymous_and_counts_for_nobody(repo, coordinator):
    coordinator(*FAST)
    _suite(repo.root)
    cli("intent", "src/app.py", "--agent", "dev", cwd=repo.root)
    assert cli("verify", cwd=repo.root).rc == 0
    assert cli("done", "--agent", "dev", cwd=repo.root).rc == 1


def test_the_repair_loop_is_bounded(repo, coordinator):
    _suite(repo.root, max_loops=2, fail=True)  # [verify] is read when the coordinator starts
    coordinator(*FAST)
    assert cli("verify", "--agent", "dev", cwd=repo.root).rc == 1
    assert cli("verify", "--agent", "dev", cwd=repo.root).rc == 1
    stopped = cli("verify", "--agent", "dev", "--json", cwd=repo.root)
    assert stopped.rc == 1 and stopped.json["verdict"] == "escalate" and "not re-running" in stopped.json["reason"]
    assert sum(e["kind"] == "verify.finished" for e in _ledger(repo)) == 2  # the third did not run
    assert cli("verify", "--agent", "dev", "--new-turn", cwd=repo.root).rc == 1  # a new turn runs again


def test_two_agents_verify_their_own_worktrees(repo, coordinator):
    coordinator(*FAST)
    _suite(repo.root)
    _suite(repo.other, fail=True)
    assert cli("verify", "--agent", "alice", cwd=repo.root).rc == 0
    assert cli("verify", "--agent", "bob", cwd=repo.other).rc == 1


def test_a_broken_lockstep_toml_is_bad_input(repo, coordinator):
    coordinator(*FAST)
    (repo.root / "lockstep.toml").write_text("[checks.x]\ncmmd = 'typo'\n")
    result = cli("verify", "--json", cwd=repo.root)
    assert result.rc == 2 and "cmmd" in result.json["error"]["message"]


PLAN = """
[plan]
name = "release"

[[step]]
id = "build"
run = "{py} -c \\"open('built.txt','w').write('1')\\""
post = [{{ kind = "command", cmd = "test -f built.txt" }}]
rollback = "rm -f built.txt"

[[step]]
id = "deploy"
run = "{deploy}"
on_post_fail = "rollback"
"""


def test_a_plan_runs_its_steps_and_rolls_back_the_previous_one(repo, coordinator):
    coordinator(*FAST)
    plan = repo.root / "PLAN.toml"
    plan.write_text(PLAN.format(py=sys.executable, deploy="false"))
    ran = cli("plan", "run", "PLAN.toml", "--json", cwd=repo.root, timeout=60)
    assert ran.rc == 1 and ran.json["verdict"] == "fail"
    assert not (repo.root / "built.txt").exists()  # rolled back
    status = cli("plan", "status", "--json", cwd=repo.root).json
    assert status[0]["state"] == "failed"
    assert {s["id"]: s["state"] for s in status[0]["steps"]} == {"build": "done", "deploy": "failed"}
    kinds = [e["kind"] for e in _ledger(repo)]
    assert "plan.step.rolling_back" in kinds and "plan.failed" in kinds
    plan.write_text(PLAN.format(py=sys.executable, deploy="true"))
    assert cli("plan", "run", "PLAN.toml", cwd=repo.root, timeout=60).rc == 0


def test_an_interrupted_plan_resumes_after_a_restart(repo, coordinator, tmp_path):
    first = coordinator(*FAST)
    gate = tmp_path / "release-the-step"
    (repo.root / "PLAN.toml").write_text(
        '[plan]\nname = "slow"\n\n'
        f'[[step]]\nid = "wait"\nrun = "{sys.executable} -c \\"import os,time\\nwhile not os.path.exists(\'{gate}\'): time.sleep(0.05)\\""\n\n'
        '[[step]]\nid = "after"\nrun = "true"\n'
    )
    started = cli("plan", "run", "PLAN.toml", "--detach", "--json", cwd=repo.root)
    job = started.json["job"]
    wait_until(lambda: any(e["kind"] == "plan.step.started" for e in _ledger(repo)), what="the plan to start")
    first.kill()
    gate.write_text("go")
    coordinator(*FAST)
    wait_until(lambda: cli("plan", "status", job, "--json", cwd=repo.root).json[0]["state"] == "succeeded", timeout=30, what="the resumed plan")


def test_a_scheduled_probe_runs_inside_the_coordinator_and_its_finding_goes_through_the_rules(repo, coordinator):
    (repo.root / "lockstep.toml").write_text(
        '[[probe]]\nname = "services"\nkind = "processes"\nmatch = "no-such-service-4b2f"\ncount = 27\nevery = "300ms"\n'
    )
    coordinator(*FAST)

    def reported():
        events = _ledger(repo)
        results = [e for e in events if e["kind"] == "probe.result" and e["data"]["name"] == "services"]
        responses = [e for e in events if e["kind"] == "rule.response"]
        return results and responses and (results[0], responses[0])

    result, response = wait_until(reported, timeout=20, what="a scheduled run and its rule response")
    assert result["data"]["finding"] == "processes missing"
    assert response["data"]["action"] == "notify"


def test_progress_and_results_are_published(repo, coordinator):
    import zmq

    from protocol.codec import decode_publication

    coordinator(*FAST)
    pub = json.loads((repo.state_dir / "coordinator.json").read_text())["pub"][0]
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"job.")
    sub.connect(pub)
    try:
        seen: list = []

        def finished_seen():
            cli("check", "command", "--", "true", cwd=repo.root)
            while sub.poll(100):
                seen.append(decode_publication(sub.recv_multipart()[1]))
            return any(p.kind == "job.finished" for p in seen)

        wait_until(finished_seen, timeout=20, what="a job.finished publication")
        finished = next(p for p in seen if p.kind == "job.finished")
        assert finished.data["verdict"] == "pass" and finished.data["gate"]["results"][0]["name"] == "command"
        assert any(p.kind == "job.progress" for p in seen)
    finally:
        sub.close()
        ctx.term()


def test_probes_need_a_coordinator(repo):
    assert cli("check", "command", "--", "true", cwd=repo.root).rc == 3
    assert cli("verify", cwd=repo.root).rc == 3


def test_checks_are_killed_cleanly_when_the_coordinator_stops(repo, coordinator):
    c = coordinator(*FAST)
    marker = f"long-check-{uuid.uuid4().hex}"
    proc = subprocess.Popen(
        [*LOCKSTEP, "check", "command", "--timeout", "300", "--", sys.executable, "-c", "import time; time.sleep(300)", marker],
        cwd=repo.root, env=env_for(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout.count(b"\n") >= 2, what="the check to run")
        c.proc.send_signal(signal.SIGTERM)
        assert c.proc.wait(20) == 0
        wait_until(lambda: subprocess.run(["pgrep", "-f", f"time.sleep.300.*{marker}"], capture_output=True).stdout == b"",
                   timeout=15, what="the check's process to be gone")
    finally:
        end_process(proc)


def test_after_each_edit_batch_the_coordinator_verifies_by_itself(repo, coordinator):
    _suite(repo.root, policy="after-each-edit-batch")
    coordinator(*FAST)
    cli("intent", "src/app.py", "--agent", "dev", cwd=repo.root)
    wait_until(lambda: cli("done", "--agent", "dev", cwd=repo.root).rc == 0, timeout=30, what="the automatic verify run")
    finished = [e for e in _ledger(repo) if e["kind"] == "verify.finished"]
    assert len(finished) == 1 and finished[0]["agent"] == "dev"


RULES = """
[checks.ok]
cmd = "true"

[[probe]]
name = "deploy"
kind = "command"
cmd = "false"

[[rule]]
finding = "side effect missing"
response = "block_agent"
message = "it claimed an effect it did not have"

[[rule]]
finding = "command failed"
probe = "deploy"
response = "touch"
path = "dist/index.html"

[[rule]]
finding = "timed out"
response = "queue_task"
task = "find out why the check hangs"
agent = "ops"
"""


def test_configured_rules_block_an_agent_touch_a_file_and_queue_a_task(repo, coordinator):
    (repo.root / "lockstep.toml").write_text(RULES)  # rules are read when serve starts
    coordinator(*FAST)
    # a claimed side effect that did not happen: the agent is blocked until it verifies
    assert cli("check", "command", "--agent", "dev", "--creates", "never.txt", "--", "true", cwd=repo.root).rc == 1
    blocked = cli("intent", "src/app.py", "--agent", "dev", "--json", cwd=repo.root)
    assert blocked.rc == 1 and "blocked by a rule" in blocked.json["reason"]
    assert cli("verify", "--agent", "dev", cwd=repo.root).rc == 0
    assert cli("intent", "src/app.py", "--agent", "dev", cwd=repo.root).rc == 0
    # a failing deploy check touches the entry point
    (repo.root / "dist").mkdir()
    touched = cli("check", "command", "--name", "deploy", "--json", "--", "false", cwd=repo.root)
    assert touched.rc == 1 and touched.json["responses"][0]["action"] == "touch"
    assert (repo.root / "dist" / "index.html").exists()
    # a hang queues a task for the operator's agent
    assert cli("check", "command", "--timeout", "0.5", "--", "sleep", "30", cwd=repo.root).rc == 1
    queued = [e for e in _ledger(repo) if e["kind"] == "task.queued"]
    assert queued and queued[0]["agent"] == "ops" and queued[0]["data"]["task"] == "find out why the check hangs"
    assert [e["data"]["action"] for e in _ledger(repo) if e["kind"] == "rule.response"] == ["block_agent", "touch", "queue_task"]


def test_checks_run_only_in_this_repositorys_worktrees(repo, coordinator, tmp_path):
    coordinator(*FAST)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    endpoint = json.loads((repo.state_dir / "coordinator.json").read_text())["endpoints"][0]
    result = cli("check", "command", "--json", "--", "true", cwd=elsewhere, env={"LOCKSTEP_ENDPOINT": endpoint})
    assert result.rc == 1 and "is not in a worktree of" in result.json["reason"]
    assert cli("check", "command", "--", "true", cwd=repo.other).rc == 0


def test_plan_status_says_what_a_step_waits_for_and_how_to_satisfy_it(repo, coordinator):
    coordinator(*FAST)
    (repo.root / "PLAN.toml").write_text(
        '[plan]\nname = "review"\n\n'
        '[[step]]\nid = "review"\nexpect = "review the change"\nagent = "reviewer"\n\n'
        '[[step]]\nid = "after"\nrun = "true"\n'
    )
    # committed: done is keyed on the worktree's content, and the reviewer changed nothing
    _git(repo.root, "add", "PLAN.toml")
    _git(repo.root, "commit", "-q", "-m", "plan")
    job = cli("plan", "run", "PLAN.toml", "--detach", "--json", cwd=repo.root).json["job"]

    def waiting():
        [summary] = cli("plan", "status", job, "--json", cwd=repo.root).json
        return summary["waits_for"] and "agent reviewer" in summary["waits_for"]["what"] and summary

    summary = wait_until(waiting, timeout=20, what="the plan to wait for its agent")
    assert summary["current"] == "review" and summary["state"] == "running"
    assert "review the change" in summary["waits_for"]["what"]
    assert "lockstep done --agent reviewer" in summary["waits_for"]["how"]
    text = cli("plan", "status", job, cwd=repo.root).out
    assert "step review waits for agent reviewer" in text and "to go on: `lockstep done --agent reviewer`" in text
    # doing what it says satisfies it
    assert cli("done", "--agent", "reviewer", cwd=repo.root).rc == 0
    wait_until(lambda: cli("plan", "status", job, "--json", cwd=repo.root).json[0]["state"] == "succeeded", timeout=30, what="the plan to finish")
    assert cli("plan", "status", job, "--json", cwd=repo.root).json[0]["waits_for"] is None

"""Numbers and endpoints at their edges, through the real command line and a real
coordinator: each was accepted (a job that "timed out" at once, a claim expired when
granted, an MCP server serving with no coordinator it could ever reach) or misread
before, and is now one clear line with the documented exit code."""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess

from agents.oneshot import RequestFailed, open_connection
from protocol import messages as m

from .conftest import LOCKSTEP, cli, env_for, status, wait_until

FAST = ("--heartbeat", "0.2", "--liveness", "3", "--lock-delay", "1")


def _one_line_usage(result, *words: str) -> None:
    assert result.rc == 2, result
    assert result.err.count("\n") == 1 and result.err.startswith("lockstep: "), result.err
    assert "Traceback" not in result.err
    for word in words:
        assert word in result.err, (word, result.err)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_check_timeout_past_its_bounds_is_one_line_and_exit_2(repo, coordinator):
    # 5e-324 ran the check and failed it as "timed out" (exit 1); 1e308 and 2**63 were
    # taken, so a hung command would have held its job for ever
    coordinator(*FAST)
    digest = _sha256((repo.root / "src" / "app.py").read_bytes())
    for value in ("5e-324", "1e-320", "0.001", "1e308", "9223372036854775808", "86401"):
        refused = cli("check", "write", "src/app.py", "--sha256", digest, "--timeout", value, cwd=repo.root)
        _one_line_usage(refused, "timeout must be between 0.01 s and 86400 s")
        refused = cli("check", "command", "--timeout", value, "--", "true", cwd=repo.root)
        _one_line_usage(refused, "timeout must be between 0.01 s and 86400 s")
    assert cli("check", "write", "src/app.py", "--sha256", digest, "--timeout", "86400", cwd=repo.root).rc == 0


def test_a_claim_ttl_under_the_minimum_is_refused_not_granted_expired(repo, coordinator):
    coordinator(*FAST)
    for value in ("5e-324", "1e-320", "0.001"):
        refused = cli("claim", "--agent", "alice", "src/app.py", "--ttl", value, cwd=repo.root)
        _one_line_usage(refused, "too short: at least 0.01 s")
        as_json = cli("claim", "--agent", "alice", "src/app.py", "--ttl", value, "--json", cwd=repo.root)
        assert as_json.rc == 2 and as_json.json["error"]["code"] == "bad_request", as_json
    assert not status(repo)["claims"]
    assert cli("claim", "--agent", "alice", "src/app.py", "--ttl", "30s", cwd=repo.root).rc == 0


def test_a_claim_wait_past_a_day_is_one_line_and_exit_2(repo, coordinator):
    # --wait 1e308 was taken: a refused claim waited for ever, printing a 309-digit wait
    coordinator(*FAST)
    assert cli("claim", "--agent", "alice", "src/app.py", cwd=repo.root).rc == 0
    for value in ("1e308", "9223372036854775808", "86401", "25h"):
        _one_line_usage(cli("claim", "--agent", "bob", "src/app.py", "--wait", value, cwd=repo.root), "--wait", "at most 86400 s")
    assert cli("claim", "--agent", "bob", "src/app.py", "--wait", "0.1", cwd=repo.root).rc == 1  # waited, then refused


def test_a_token_never_granted_or_not_positive_says_what_is_wrong(repo, coordinator):
    # each was "token N is not the current grant ...; it was released, expired or superseded"
    coordinator(*FAST)
    granted = cli("claim", "--agent", "alice", "src/app.py", "--json", cwd=repo.root).json["token"]
    for token in (str(2**63 - 1), str(granted + 1000)):
        blocked = cli("intent", "--agent", "alice", "src/app.py", "--token", token, cwd=repo.root)
        assert blocked.rc == 1 and f"block: token {token} was never granted" in blocked.out, blocked
    for token in ("0", "-1", str(-(2**63))):
        bad = cli("intent", "--agent", "alice", "src/app.py", "--token", token, cwd=repo.root)
        _one_line_usage(bad, "token must be a positive integer", f"not {token}")
    assert cli("intent", "--agent", "alice", "src/app.py", "--token", str(granted), cwd=repo.root).rc == 0


MALFORMED = ("nonsense", "tcp://", "ipc://@abstract", "tcp://127.0.0.1:99999", "tcp://127.0.0.1:0")


def test_mcp_and_the_guards_refuse_a_malformed_endpoint_before_serving(repo):
    # `mcp --endpoint nonsense` served stdin (exit 0 at its end); a guard with nothing
    # to check passed with it
    initialize = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}) + "\n"
    for endpoint in MALFORMED:
        for verb in (("mcp", "--agent", "alice"), ("guard", "pre-commit"), ("guard", "pre-push")):
            done = subprocess.run([*LOCKSTEP, *verb, "--endpoint", endpoint], input=initialize, cwd=repo.root,
                                  env=env_for(), capture_output=True, text=True, timeout=30)
            assert done.returncode == 2 and done.stdout == "", (verb, endpoint, done)
            assert done.stderr.count("\n") == 1 and done.stderr.startswith("lockstep: "), (verb, endpoint, done.stderr)
        from_env = subprocess.run([*LOCKSTEP, "mcp", "--agent", "alice"], input=initialize, cwd=repo.root,
                                  env=env_for({"LOCKSTEP_ENDPOINT": endpoint}), capture_output=True, text=True, timeout=30)
        assert from_env.returncode == 2 and from_env.stdout == "", (endpoint, from_env)


def test_a_tcp_port_out_of_range_is_bad_input_not_unreachable(repo):
    # tcp://127.0.0.1:99999 was connected to, and the verb said "no answer" (exit 3)
    for endpoint in ("tcp://127.0.0.1:99999", "tcp://127.0.0.1:65536", "tcp://127.0.0.1:0"):
        for verb in (("status",), ("tasks",), ("ledger", "compact"), ("claim", "--agent", "e", "src/app.py")):
            _one_line_usage(cli(*verb, "--endpoint", endpoint, cwd=repo.root, timeout=20), "is not a tcp port to connect to")
    _one_line_usage(cli("serve", "--endpoint", "tcp://127.0.0.1:70000", cwd=repo.root), "is not a tcp port to serve on")


def _check_on_the_wire(repo, probe: m.ProbeRequest) -> m.Gate:
    """Send a check as any client may (the command line refuses a path outside first)
    and wait for its verdict."""
    endpoint = json.loads((repo.state_dir / "coordinator.json").read_text())["endpoints"][0]
    with open_connection(endpoint) as conn:
        accepted = conn.request(m.Check(probe=probe, cwd=str(repo.root / "src")))
        replies = []
        wait_until(lambda: replies.append(conn.request(m.JobQuery(job=accepted.job))) or replies[-1].gate is not None, what="the check's verdict")
        return replies[-1].gate


def test_the_write_check_reads_no_file_outside_its_worktree(repo, coordinator, tmp_path):
    # a check sent on the wire hashed /etc/passwd, ../../secret or a symlink's target
    # and its verdict said whether it had the given hash
    coordinator(*FAST)
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"not the repository's\n")
    (repo.root / "src" / "link").symlink_to(secret)
    digest = _sha256(secret.read_bytes())
    for path in (str(secret), "../../secret.txt", "link", "/etc/passwd"):
        gate = _check_on_the_wire(repo, m.ProbeRequest(kind="write", params={"path": path, "sha256": digest}))
        assert gate.verdict == "fail" and "is outside the worktree" in gate.reason, (path, gate)
        assert not gate.results, gate  # nothing was read
    for name in ("a[1].py", "with space.py", "été.py"):
        (repo.root / "src" / name).write_bytes(b"inside\n")
        gate = _check_on_the_wire(repo, m.ProbeRequest(kind="write", params={"path": name, "sha256": _sha256(b"inside\n")}))
        assert gate.verdict == "pass", (name, gate)
        checked = cli("check", "write", f"src/{name}", "--sha256", _sha256(b"inside\n"), cwd=repo.root)
        assert checked.rc == 0, checked


def test_ledger_compact_with_nobody_at_the_endpoint_is_unreachable_at_once(repo):
    # it waited out the compaction's ten minutes for a reply that could never come
    for endpoint in ("tcp://127.0.0.1:1", f"ipc://{repo.root / 'no-coordinator.sock'}"):
        if endpoint.startswith("ipc://"):
            (repo.root / "no-coordinator.sock").touch()  # a socket file left behind by a killed coordinator
        gone = cli("ledger", "compact", "--endpoint", endpoint, cwd=repo.root, timeout=30, env={"LOCKSTEP_TIMEOUT": "1"})
        assert gone.rc == 3 and "no answer from the coordinator" in gone.err, gone


def test_the_tool_hooks_report_a_malformed_endpoint_as_said_not_as_unexpected(repo):
    # codex's and gemini's hooks said "unexpected PeerError: ..." (allowed, as any failure)
    events = {
        "gemini": {"session_id": "s", "cwd": str(repo.root), "hook_event_name": "BeforeTool", "tool_name": "write_file",
                   "tool_input": {"file_path": "src/app.py", "content": "x"}},
        "codex": {"session_id": "s", "cwd": str(repo.root), "hook_event_name": "PreToolUse", "tool_name": "apply_patch",
                  "tool_input": {"command": "*** Begin Patch\n*** Update File: src/app.py\n@@\n-print('hi')\n+x\n*** End Patch\n"}},
    }
    said = {"nonsense": "unsupported endpoint 'nonsense'", "tcp://127.0.0.1:99999": "port 99999 is not a tcp port to connect to"}
    for client, event in events.items():
        for endpoint, words in said.items():
            done = subprocess.run([*LOCKSTEP, "hook", client, "--endpoint", endpoint], input=json.dumps(event),
                                  cwd=repo.root, env=env_for({"LOCKSTEP_AGENT": "bob"}), capture_output=True, text=True, timeout=60)
            assert done.returncode == 0 and words in done.stdout and "lockstep: " in done.stdout, (client, done)
            assert "unexpected" not in done.stdout, (client, done.stdout)


def test_a_hello_with_a_pid_past_pid_t_is_refused_and_the_coordinator_serves_on(repo, coordinator):
    # pid 2**31 reached the pid watcher: os.pidfd_open raised OverflowError and the
    # coordinator ended
    coordinator(*FAST)
    endpoint = json.loads((repo.state_dir / "coordinator.json").read_text())["endpoints"][0]
    with open_connection(endpoint) as conn:
        for pid in (2**31, 2**40):
            try:
                conn.request(m.Hello(agent="p", kind="session", pid=pid, host=socket.gethostname()))
            except RequestFailed as exc:
                assert exc.code == "bad_request" and f"not {pid}" in exc.message
            else:
                raise AssertionError(f"a hello with pid {pid} was welcomed")
    assert cli("claim", "--agent", "alice", "src/app.py", cwd=repo.root).rc == 0  # still serving


def test_a_timeout_of_1e308_seconds_waits_as_any_long_one(repo, coordinator):
    # 1e308 s in milliseconds is infinite: "cannot convert float infinity to integer", a traceback
    coordinator(*FAST)
    for value in ("1e308", "1.7976931348623157e308"):
        shown = cli("status", "--json", cwd=repo.root, env={"LOCKSTEP_TIMEOUT": value})
        assert shown.rc == 0 and "Traceback" not in shown.err, shown
        assert cli("claim", "--agent", "t", "src/app.py", cwd=repo.root, env={"LOCKSTEP_TIMEOUT": value}).rc == 0


SERVE_OUT_OF_RANGE = [
    (("--probe-limit", "9223372036854775808"), "not in the range 1<=x<=1024"),
    (("--probe-limit", "1025"), "not in the range 1<=x<=1024"),
    (("--lock-delay", "1e308"), "lock_delay: 1e+308 s is out of bounds (from 0 s to 86400 s)"),
    (("--lock-delay", "86401"), "lock_delay: 86401 s is out of bounds (from 0 s to 86400 s)"),
    (("--oneshot-ttl", "1e308"), "oneshot_ttl: 1e+308 s is out of bounds (from 0.01 s to 86400 s)"),
    (("--liveness", "9223372036854775807"), "'liveness': 9223372036854775807 is more than the maximum 100"),
]


def test_serve_numbers_past_their_range_are_one_line_and_exit_2(repo):
    # each was taken: a coordinator served with a lock delay of 1e308 s (a stale holder's
    # paths held for ever), a probe limit of 2**63 (no limit) or a liveness that never
    # let a silent agent go stale
    for args, words in SERVE_OUT_OF_RANGE:
        _one_line_usage(cli("serve", *args, cwd=repo.root, timeout=20), words)
    for table, line, words in (
        ("coordinator", "lock_delay = 1e308", "lock_delay: 1e+308 s is out of bounds"),
        ("land", "git_timeout = 1e308", "land_git_timeout: 1e+308 s is out of bounds (from 0.01 s to 86400 s)"),
        ("verify", "max_repair_loops = 1000", "'max_repair_loops': 1000 is more than the maximum 100"),
    ):
        (repo.root / "lockstep.toml").write_text(f"[{table}]\n{line}\n")
        _one_line_usage(cli("serve", cwd=repo.root, timeout=20), words)
    (repo.root / "lockstep.toml").unlink()


def test_serve_numbers_at_the_edge_of_their_range_serve(repo, coordinator):
    coordinator("--heartbeat", "0.2", "--liveness", "100", "--lock-delay", "86400", "--oneshot-ttl", "86400", "--probe-limit", "1024")
    assert status(repo)["agents"] == []


def test_a_process_count_no_machine_can_run_is_one_line_and_exit_2(repo, coordinator):
    # --count 9223372036854775807 ran the check, which could only fail (exit 1)
    coordinator(*FAST)
    for value in ("9223372036854775807", "4194305"):
        refused = cli("check", "processes", "--match", "python", "--count", value, cwd=repo.root)
        _one_line_usage(refused, "count must be from 0 to 4194304")
    assert cli("check", "processes", "--match", "python", "--count", "1", cwd=repo.root).rc == 0

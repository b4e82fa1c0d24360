"""The CLI contract: commands, JSON fields and exit codes that scripts rely on."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from .conftest import (
    LOCKSTEP,
    cli,
    end_process,
    env_for,
    make_repo,
    pid_gone,
    status,
    wait_until,
)

FAST = ("--heartbeat", "0.2", "--liveness", "3", "--lock-delay", "1")


def test_claim_status_intent_release_json_contract(repo, coordinator):
    coordinator(*FAST)
    granted = cli("claim", "src/api/", "--agent", "alice", "--json", cwd=repo.root)
    assert granted.rc == 0
    body = granted.json
    assert body["granted"] is True and isinstance(body["token"], int)
    assert body["conflicts"] == [] and body["warnings"] == []

    refused = cli("claim", "src/api/x.py", "--agent", "bob", "--json", cwd=repo.other)
    assert refused.rc == 1
    body = refused.json
    assert body["granted"] is False and body["token"] is None
    assert body["conflicts"][0]["holder"] == "alice" and body["conflicts"][0]["pattern"] == "src/api/"

    blocked = cli("intent", "src/api/x.py", "--agent", "bob", "--json", cwd=repo.other)
    assert blocked.rc == 1
    assert blocked.json["verdict"] == "block" and blocked.json["holders"] == ["alice"]
    assert set(blocked.json) >= {"verdict", "reason", "token", "holders"}

    allowed = cli("intent", "docs/new.md", "--agent", "bob", "--json", cwd=repo.other)
    assert allowed.rc == 0 and allowed.json["verdict"] == "allow" and isinstance(allowed.json["token"], int)

    state = status(repo)
    assert state["mode"] == "parallel-strict" and isinstance(state["epoch"], int)
    assert all(e.startswith(("ipc://", "tcp://")) for e in state["endpoints"])
    agent = next(a for a in state["agents"] if a["name"] == "bob")
    assert set(agent) >= {"name", "state", "pid", "worktree", "last_seen"} and agent["state"] == "alive"
    assert agent["worktree"] == str(repo.other)
    claim = next(c for c in state["claims"] if c["holder"] == "alice")
    assert claim == {**claim, "pattern": "src/api/", "access": "exclusive"} and {"token", "since"} <= set(claim)

    released = cli("release", "--all", "--agent", "alice", "--json", cwd=repo.root)
    assert released.rc == 0 and released.json["released"] == ["src/api/"]
    assert cli("claim", "src/api/x.py", "--agent", "bob", cwd=repo.other).rc == 0


def test_paths_are_relative_to_the_current_directory_and_shared_across_worktrees(repo, coordinator):
    coordinator(*FAST)
    assert cli("claim", "app.py", "--agent", "alice", cwd=repo.root / "src").rc == 0
    assert status(repo)["claims"][0]["pattern"] == "src/app.py"
    # an existing directory means the folder; a path in the other worktree names the same path
    assert cli("claim", str(repo.other / "src"), "--agent", "bob", "--json", cwd=repo.root).json["conflicts"][0]["pattern"] == "src/app.py"


def test_bad_input_exits_2_with_a_message(repo, coordinator, tmp_path):
    coordinator(*FAST)
    no_agent = cli("claim", "src/x.py", "--json", cwd=repo.root)
    assert no_agent.rc == 2 and "LOCKSTEP_AGENT" in no_agent.json["error"]["message"]
    outside = cli("claim", str(tmp_path), "--agent", "alice", "--json", cwd=repo.root)
    assert outside.rc == 2 and outside.json["error"]["code"] == "bad_path"
    bad_name = cli("claim", "x.py", "--agent", "no spaces", cwd=repo.root)
    assert bad_name.rc == 2 and "invalid agent name" in bad_name.err
    glob_intent = cli("intent", "src/*.py", "--agent", "alice", "--json", cwd=repo.root)
    assert glob_intent.rc == 2 and glob_intent.json["error"]["code"] == "bad_path"
    force_without_reason = cli("release", "--force", "x.py", cwd=repo.root)
    assert force_without_reason.rc == 2


def test_no_coordinator_exits_3(repo):
    result = cli("claim", "x.py", "--agent", "alice", "--json", cwd=repo.root)
    assert result.rc == 3 and result.json["error"]["code"] == "unreachable"
    assert cli("status", cwd=repo.root).rc == 3
    # a state file left by a killed coordinator: still 3, after the connect timeout
    repo.state_dir.mkdir(parents=True, exist_ok=True)
    (repo.state_dir / "coordinator.json").write_text(json.dumps({"pid": 1, "endpoints": ["tcp://127.0.0.1:9"]}))
    assert cli("status", cwd=repo.root, env={"LOCKSTEP_TIMEOUT": "0.5"}).rc == 3


def test_env_agent_and_env_endpoint(repo, coordinator):
    coordinator(*FAST)
    endpoint = status(repo)["endpoints"][0]
    result = cli("claim", "x.py", "--json", cwd=repo.root, env={"LOCKSTEP_AGENT": "envy", "LOCKSTEP_ENDPOINT": endpoint})
    assert result.rc == 0 and status(repo)["claims"][0]["holder"] == "envy"


def test_second_serve_exits_1_naming_the_first_and_stop_ends_it(repo, coordinator):
    first = coordinator(*FAST)
    second = cli("serve", cwd=repo.other, timeout=20)
    assert second.rc == 1 and str(first.pid) in second.err
    stopped = cli("stop", "--json", cwd=repo.other)
    assert stopped.rc == 0 and stopped.json["stopped"] is True
    assert first.proc.wait(10) == 0
    assert not (repo.state_dir / "coordinator.json").exists()


def test_stop_leaves_no_socket_file(repo, coordinator):
    first = coordinator(*FAST)
    info = status(repo)
    sockets = [Path(e[len("ipc://") :]) for e in info["endpoints"] + info["pub"] if e.startswith("ipc://")]
    assert sockets and all(p.exists() for p in sockets)
    assert cli("stop", cwd=repo.root).rc == 0
    assert first.proc.wait(10) == 0
    assert [p for p in sockets if p.exists()] == []


def test_a_killed_coordinators_state_file_never_stops_the_next_serve(repo, coordinator):
    coordinator(*FAST).kill()
    assert (repo.state_dir / "coordinator.json").exists()
    coordinator(*FAST)
    assert status(repo)["epoch"] == 2


def test_serve_refuses_a_non_loopback_endpoint(repo):
    result = cli("serve", "--endpoint", "tcp://0.0.0.0:7777", "--json", cwd=repo.root)
    assert result.rc == 2 and "loopback" in result.json["error"]["message"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_on_loopback_tcp(repo, coordinator):
    endpoint = f"tcp://127.0.0.1:{_free_port()}"
    coordinator(*FAST, "--endpoint", endpoint, "--pub-endpoint", f"tcp://127.0.0.1:{_free_port()}")
    assert status(repo)["endpoints"] == [endpoint]
    assert cli("claim", "a.py", "--agent", "t", cwd=repo.other).rc == 0


def test_ledger_tail_json_lines(repo, coordinator):
    c = coordinator(*FAST)
    cli("claim", "x.py", "--agent", "alice", cwd=repo.root)
    c.stop()
    tail = cli("ledger", "tail", "-n", "5", "--json", cwd=repo.other)  # works with no coordinator
    assert tail.rc == 0
    events = [json.loads(line) for line in tail.out.splitlines()]
    assert len(events) == 5 and events[-1]["kind"] == "coordinator.stopped"
    assert {"id", "ts", "epoch", "kind", "agent", "token", "data"} <= set(events[0])
    assert "claim.granted" in [e["kind"] for e in events]


def test_run_contract(repo, coordinator):
    coordinator(*FAST)
    child = cli("run", "--agent", "runner", "--", sys.executable, "-c",
                "import os,sys; print(os.environ['LOCKSTEP_AGENT']); sys.exit(7)", cwd=repo.root)
    assert child.rc == 7 and child.out.strip() == "runner"
    killed = cli("run", "--agent", "runner", "--", sys.executable, "-c", "import os,signal; os.kill(os.getpid(), signal.SIGTERM)", cwd=repo.root)
    assert killed.rc == 128 + signal.SIGTERM
    # a command that cannot start: 127 when there is no such file, 126 when it cannot run (as a shell says)
    missing = cli("run", "--agent", "runner", "--", str(repo.root / "no-such-command"), cwd=repo.root)
    assert missing.rc == 127 and "cannot start" in missing.err
    (repo.root / "not-executable.sh").write_text("#!/bin/sh\nexit 0\n")
    for unrunnable in (repo.root / "not-executable.sh", repo.root / "src"):  # no x bit; a folder
        refused = cli("run", "--agent", "runner", "--", str(unrunnable), cwd=repo.root)
        assert refused.rc == 126 and "cannot start" in refused.err, refused
    # the run's claims are released when its command exits
    cli("run", "--agent", "holder", "--", sys.executable, "-m", "agents.cli", "claim", "src/", cwd=repo.root)
    assert [c for c in status(repo)["claims"] if c["holder"] == "holder"] == []


def test_run_refuses_a_live_name_and_forwards_signals(repo, coordinator, tmp_path):
    coordinator(*FAST)
    marker = tmp_path / "got-term"
    script = (
        "import signal,sys,pathlib\n"
        f"signal.signal(signal.SIGTERM, lambda *a: (pathlib.Path({str(marker)!r}).write_text('x'), sys.exit(5)))\n"
        "print('ready', flush=True); signal.pause()\n"
    )
    run = subprocess.Popen([*LOCKSTEP, "run", "--agent", "busy", "--", sys.executable, "-c", script],
                           cwd=repo.root, env=env_for(), stdout=subprocess.PIPE, text=True)
    try:
        assert run.stdout.readline().strip() == "ready"
        again = cli("run", "--agent", "busy", "--", "true", cwd=repo.other)
        assert again.rc == 1 and "already live" in again.err
        as_json = cli("run", "--agent", "busy", "--json", "--", "true", cwd=repo.other)
        assert as_json.rc == 1 and as_json.json["error"]["code"] == "agent_live"
        run.send_signal(signal.SIGTERM)
        assert run.wait(10) == 5 and marker.exists()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(10)
    wait_until(lambda: next(a for a in status(repo)["agents"] if a["name"] == "busy")["state"] == "gone", what="busy gone")


# CMD counts the SIGINTs it gets and exits with that count on SIGTERM.
COUNTS_SIGINT = (
    "import signal,sys\n"
    "both = {signal.SIGINT, signal.SIGTERM}\n"
    "signal.pthread_sigmask(signal.SIG_BLOCK, both)\n"
    "print('ready', flush=True)\n"
    "got = 0\n"
    "while signal.sigwaitinfo(both).si_signo == signal.SIGINT:\n"
    "    got += 1\n"
    "    print('interrupted', got, flush=True)\n"
    "sys.exit(got)\n"
)


def _read_until(fd: int, text: bytes, seen: bytearray, timeout: float = 15.0) -> None:
    """Read the terminal's output until ``text`` shows up (fail after ``timeout``)."""
    import select

    deadline = time.monotonic() + timeout
    while text not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"timed out waiting for {text!r} in {bytes(seen)!r}"
        if select.select([fd], [], [], left)[0]:
            seen += os.read(fd, 4096)


def _end_session(run: subprocess.Popen) -> None:
    """End ``run`` and, should CMD outlive it, CMD (its session's process group)."""
    end_process(run)
    try:
        os.killpg(run.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_ctrl_c_in_a_terminal_reaches_the_command_once(repo, coordinator):
    """A Ctrl-C reaches every process of the terminal's foreground group, CMD included:
    ``run`` does not forward that SIGINT a second time (a second Ctrl-C quits many agents)."""
    import fcntl
    import termios

    coordinator(*FAST)
    master, terminal = os.openpty()

    def with_the_terminal():  # in the child, after setsid: the pty becomes its controlling terminal
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    run = subprocess.Popen(
        [*LOCKSTEP, "run", "--agent", "typist", "--", sys.executable, "-c", COUNTS_SIGINT], cwd=repo.root, env=env_for(),
        stdin=terminal, stdout=terminal, stderr=terminal, start_new_session=True, preexec_fn=with_the_terminal,
    )
    os.close(terminal)
    try:
        seen = bytearray()
        _read_until(master, b"ready", seen)
        # run is stopped while CMD takes the Ctrl-C, so that a SIGINT run would forward
        # comes after it, as a second one, and is not merged into the first.
        run.send_signal(signal.SIGSTOP)
        os.write(master, b"\x03")  # Ctrl-C, through the terminal's line discipline
        _read_until(master, b"interrupted 1", seen)
        run.send_signal(signal.SIGCONT)
        run.send_signal(signal.SIGTERM)  # forwarded after any SIGINT run would forward
        assert run.wait(15) == 1, bytes(seen)
    finally:
        _end_session(run)
        os.close(master)


def test_a_sigint_sent_to_run_alone_is_forwarded(repo, coordinator):
    coordinator(*FAST)
    run = subprocess.Popen([*LOCKSTEP, "run", "--agent", "interrupted", "--", sys.executable, "-c", COUNTS_SIGINT],
                           cwd=repo.root, env=env_for(), stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert run.stdout.readline().strip() == "ready"
        run.send_signal(signal.SIGINT)
        assert run.stdout.readline().strip() == "interrupted 1"
        run.send_signal(signal.SIGTERM)
        assert run.wait(15) == 1
    finally:
        _end_session(run)


def test_a_signal_after_the_command_exited_keeps_its_exit_status(repo, coordinator, tmp_path):
    """A second Ctrl-C, or a supervisor's SIGTERM to the group, that reaches ``run`` while it
    reports CMD's last writes does not replace CMD's status (nor cut the report short)."""
    coordinator(*FAST)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        sent = tmp_path / f"sent-{sig.name}"
        # A child CMD leaves behind waits until run has reaped CMD, then signals run.
        script = (f'sh -c "while kill -0 $$ 2>/dev/null; do :; done; kill -{sig.name[3:]} $PPID && touch {sent}" & '
                  f"echo late > src/late.py; exit 5")
        result = cli("run", "--agent", "finishing", "--", "sh", "-c", script, cwd=repo.root)
        assert sent.exists(), f"{sig.name} was not sent while run was still finishing"
        assert result.rc == 5, (sig.name, result)


def _catches(pid: int, sig: int) -> bool:
    """Whether process ``pid`` has a handler for ``sig`` (its SigCgt mask in /proc)."""
    fields = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)
    return bool(int(fields["SigCgt"], 16) >> (sig - 1) & 1)


def test_a_signal_before_the_command_starts_stops_run_and_the_command_never_runs(repo, coordinator, tmp_path):
    server = coordinator(*FAST)
    os.kill(server.pid, signal.SIGSTOP)  # run's hello waits for an answer
    marker = tmp_path / "started"
    run = subprocess.Popen([*LOCKSTEP, "run", "--agent", "early", "--", "touch", str(marker)], cwd=repo.root,
                           env=env_for({"LOCKSTEP_TIMEOUT": "30"}), stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: _catches(run.pid, signal.SIGTERM), what="run receiving signals")
        run.send_signal(signal.SIGTERM)
        assert run.wait(15) == 128 + signal.SIGTERM
        assert "stopped by SIGTERM; not starting touch" in run.stderr.read()
        assert not marker.exists()
    finally:
        os.kill(server.pid, signal.SIGCONT)
        end_process(run)


def test_run_without_a_coordinator_exits_3_and_does_not_start_the_command(repo, tmp_path):
    marker = tmp_path / "started"
    result = cli("run", "--agent", "x", "--", sys.executable, "-c", f"open({str(marker)!r},'w')", cwd=repo.root)
    assert result.rc == 3 and not marker.exists()


def test_force_release_is_logged_and_frees_the_path(repo, coordinator):
    coordinator(*FAST)
    cli("claim", "src/", "--agent", "alice", cwd=repo.root)
    forced = cli("release", "--force", "src/app.py", "--reason", "alice is stuck", "--json", cwd=repo.root)
    assert forced.rc == 0 and forced.json["holders"] == ["alice"]
    assert cli("claim", "src/app.py", "--agent", "bob", cwd=repo.other).rc == 0
    tail = cli("ledger", "tail", "-n", "20", "--json", cwd=repo.root)
    forced_events = [e for e in map(json.loads, tail.out.splitlines()) if e["data"].get("forced")]
    assert forced_events and "alice is stuck" in forced_events[0]["data"]["reason"]


def test_claim_wait_gets_the_path_when_it_frees(repo, coordinator):
    coordinator(*FAST)
    cli("claim", "x.py", "--agent", "alice", "--ttl", "1s", cwd=repo.root)
    waited = cli("claim", "x.py", "--agent", "bob", "--wait", "20s", "--json", cwd=repo.other)
    assert waited.rc == 0 and waited.json["granted"] is True


def test_help_explains_every_command():
    out = subprocess.run([*LOCKSTEP, "--help"], capture_output=True, text=True, env=env_for()).stdout
    for command in ("serve", "stop", "claim", "release", "intent", "status", "ledger", "run", "demo"):
        assert command in out
        sub = subprocess.run([*LOCKSTEP, command, "--help"], capture_output=True, text=True, env=env_for())
        assert sub.returncode == 0 and len(sub.stdout) > 200, command
    version = subprocess.run([*LOCKSTEP, "--version"], capture_output=True, text=True, env=env_for())
    assert version.returncode == 0 and "lockstep" in version.stdout


def test_top_once_and_json_show_the_coordinators_view(repo, coordinator):
    coordinator(*FAST)
    cli("claim", "src/api/", "--agent", "alice", cwd=repo.root)
    frame = cli("top", "--once", cwd=repo.root)
    assert frame.rc == 0 and "alice" in frame.out and "src/api/" in frame.out and "checks in flight" in frame.out
    as_json = cli("top", "--json", cwd=repo.root)
    assert as_json.rc == 0 and as_json.json["claims"][0]["holder"] == "alice"


def test_a_oneshot_session_bound_to_a_pid_ends_when_that_process_does(repo, coordinator):
    coordinator(*FAST, "--lock-delay", "60")
    owner = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert cli("claim", "src/", "--agent", "editor", "--pid", str(owner.pid), cwd=repo.root).rc == 0
        assert next(a for a in status(repo)["agents"] if a["name"] == "editor")["pid"] == owner.pid
        owner.kill()
        owner.wait(10)
        # lock_delay is 60s: only the pid watch frees it this fast
        wait_until(lambda: cli("claim", "src/app.py", "--agent", "other", cwd=repo.other).rc == 0, timeout=10, what="the path to free")
        assert next(a for a in status(repo)["agents"] if a["name"] == "editor")["state"] == "gone"
    finally:
        end_process(owner)


def test_detach_returns_once_serving_and_the_state_dir_is_private(repo):
    started = cli("serve", "--detach", "--json", *FAST, cwd=repo.root, timeout=30)
    try:
        assert started.rc == 0
        info = started.json
        assert info["endpoints"][0].startswith("ipc://") and status(repo)["epoch"] == 1
        assert (repo.state_dir.stat().st_mode & 0o777) == 0o700
        assert (repo.state_dir / "coordinator.log").exists()
    finally:
        assert cli("stop", cwd=repo.root).rc == 0
    wait_until(lambda: pid_gone(info["pid"]), what="the detached coordinator to exit")


def test_a_repository_too_deep_for_a_unix_socket_path_still_gets_one(tmp_path, coordinator_in):
    deep = tmp_path.joinpath(*["a-rather-long-directory-name"] * 5, "repo")
    repo = make_repo(deep)
    assert len(str(repo.state_dir / "pub.sock")) > 107
    coordinator_in(repo, *FAST)
    state = status(repo)
    assert not state["endpoints"][0].startswith("ipc://@")  # never abstract: any user could connect
    assert cli("claim", "x.py", "--agent", "deep", cwd=repo.other).rc == 0

"""Coordinator process + agent processes in two worktrees: modes, death, freezing."""

from __future__ import annotations

import signal
import time

import zmq

from protocol.codec import decode_publication

from .conftest import agent_state, holders, status, wait_until

FAST = ("--heartbeat", "0.2", "--liveness", "3", "--lock-delay", "1.5")
# Restart tests check that sessions resume, not how fast silence is noticed: a lease of
# 10 s leaves room for a restart and a client's reconnect on a loaded machine.
RESTART = ("--heartbeat", "0.5", "--liveness", "20", "--lock-delay", "1.5")


def test_strict_mode_blocks_a_writer_in_another_worktree(repo, coordinator, agents):
    coordinator(*FAST)
    alice = agents("alice", repo.root)
    bob = agents("bob", repo.other)
    granted = alice.do("claim", paths=["src/api/"])
    assert granted["type"] == "granted"
    refused = bob.do("claim", paths=["src/api/handlers.py"])
    assert refused["type"] == "refused" and refused["conflicts"][0]["holder"] == "alice"
    blocked = bob.do("intent", paths=["src/api/x.py"])
    assert blocked["verdict"] == "block" and blocked["holders"] == ["alice"]
    assert bob.do("intent", paths=["docs/readme.md"])["verdict"] == "allow"


def test_warn_mode_warns_and_publishes(repo, coordinator, agents):
    coordinator(*FAST, "--mode", "parallel-warn")
    alice = agents("alice", repo.root)
    bob = agents("bob", repo.other)
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"intent.")
    sub.connect(status(repo)["pub"][0])
    try:
        alice.do("claim", paths=["src/app.py"])
        granted = bob.do("claim", paths=["src/*.py"])
        assert granted["type"] == "granted" and granted["warnings"][0]["holder"] == "alice"
        # a SUB socket joins asynchronously: repeat the intent until one is seen
        def published():
            decision = bob.do("intent", paths=["src/app.py"])
            assert decision["verdict"] == "warn" and decision.get("token") is None
            if sub.poll(200):
                return decode_publication(sub.recv_multipart()[1])
        publication = wait_until(published, timeout=10, what="the warning's publication")
        assert publication.agent == "bob" and publication.data["verdict"] == "warn"
        assert publication.data["holders"] == ["alice"]
    finally:
        sub.close()
        ctx.term()


def test_sigkilled_agent_claims_are_released_within_the_liveness_bound(repo, coordinator, agents):
    coordinator(*FAST)
    alice = agents("alice", repo.root)
    bob = agents("bob", repo.other)
    alice.do("claim", paths=["src/app.py"])
    alice.signal(signal.SIGKILL)
    killed_at = time.monotonic()
    # silence: stale after heartbeat x liveness = 0.6s; then held for lock_delay = 1.5s
    wait_until(lambda: agent_state(repo, "alice") == "stale", timeout=10, what="alice to go stale")
    wait_until(lambda: bob.do("claim", paths=["src/app.py"])["type"] == "granted", timeout=15, what="bob's grant")
    elapsed = time.monotonic() - killed_at
    assert elapsed < 0.6 + 1.5 + 8.0  # the configured bound, with generous slack


def test_a_run_agent_whose_command_dies_frees_its_paths_at_once(repo, coordinator, agents):
    coordinator(*FAST, "--lock-delay", "60")
    bob = agents("bob", repo.other)
    script = "import subprocess,sys; subprocess.run([sys.executable,'-m','agents.cli','claim','src/']); sys.stdin.read()"
    import subprocess
    import sys

    from .conftest import LOCKSTEP, end_process, env_for

    run = subprocess.Popen(
        [*LOCKSTEP, "run", "--agent", "carol", "--", sys.executable, "-c", script],
        cwd=repo.root,
        env=env_for(),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: holders(repo).get("src/") == "carol", timeout=20, what="carol's claim")
        child = next(a["pid"] for a in status(repo)["agents"] if a["name"] == "carol")
        import os

        os.kill(child, signal.SIGKILL)
        # lock_delay is 60s: only an exit seen at once (the coordinator's pid watch, or run's
        # own wait saying bye, whichever comes first) frees it this fast
        wait_until(lambda: bob.do("claim", paths=["src/app.py"])["type"] == "granted", timeout=10, what="bob's grant")
        assert agent_state(repo, "carol") == "gone"
        assert run.wait(10) == 128 + signal.SIGKILL
        carol = next(a for a in status(repo)["agents"] if a["name"] == "carol")
        assert carol["reason"] in (f"process {child} exited", "bye")  # not "exited (exit seen)"
    finally:
        end_process(run)


def test_a_frozen_agent_is_refused_when_it_wakes_and_writes_with_its_old_token(repo, coordinator, agents):
    coordinator(*FAST, "--lock-delay", "4")
    alice = agents("alice", repo.root)
    bob = agents("bob", repo.other)
    old_token = alice.do("claim", paths=["src/app.py"])["token"]
    alice.signal(signal.SIGSTOP)
    try:
        wait_until(lambda: agent_state(repo, "alice") == "stale", timeout=10, what="alice to go stale")
        refused = bob.do("claim", paths=["src/app.py"])  # inside the lock delay
        assert refused["type"] == "refused"
        conflict = refused["conflicts"][0]
        assert conflict["holder"] == "alice" and 0 < conflict["retry_after"] <= 4
        grant = wait_until(
            lambda: (r := bob.do("claim", paths=["src/app.py"]))["type"] == "granted" and r, timeout=15, what="bob's grant"
        )
        assert grant["token"] > old_token
    finally:
        alice.signal(signal.SIGCONT)
    decision = alice.do("intent", paths=["src/app.py"], token=old_token)
    assert decision["verdict"] == "block"
    assert decision["session"] != alice.session  # its client opened a new session...
    assert any("expired" in n for n in alice.notices)  # ...and said so


def test_coordinator_killed_and_restarted_keeps_grants_and_issues_higher_tokens(repo, coordinator, agents):
    first = coordinator(*RESTART)
    alice = agents("alice", repo.root)
    bob = agents("bob", repo.other)
    token = alice.do("claim", paths=["src/app.py"])["token"]
    epoch = status(repo)["epoch"]
    first.kill()
    coordinator(*RESTART)
    after = status(repo)
    assert after["epoch"] == epoch + 1
    assert {c["pattern"]: (c["holder"], c["token"]) for c in after["claims"]} == {"src/app.py": ("alice", token)}
    # alice's session resumed: still hers, and still live well past heartbeat x liveness
    assert bob.do("claim", paths=["src/app.py"])["type"] == "refused"
    assert alice.do("intent", paths=["src/app.py"], token=token)["verdict"] == "allow"
    assert alice.do("claim", paths=["src/other.py"])["token"] > token
    assert agent_state(repo, "alice") == "alive"


def test_a_clean_stop_saves_a_snapshot_and_the_next_start_restores_from_it(repo, coordinator):
    from ledger import open_readonly

    from .conftest import cli

    first = coordinator(*FAST)
    for i in range(5):
        assert cli("claim", f"src/f{i}.py", "--agent", "alice", cwd=repo.root).rc == 0
    before = {c["pattern"]: c["token"] for c in status(repo)["claims"]}
    first.stop()
    with open_readonly(repo.state_dir / "ledger.db") as reader:
        upto, _ = reader.latest_snapshot()
        assert upto == reader.last_id()
    coordinator(*FAST)
    assert {c["pattern"]: c["token"] for c in status(repo)["claims"]} == before
    assert cli("claim", "src/g.py", "--agent", "alice", "--json", cwd=repo.root).json["token"] > max(before.values())


def test_an_agent_follows_a_coordinator_that_restarts_on_another_port(repo, coordinator, agents):
    import socket

    def free_port() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def serve_on_new_ports():
        return coordinator(*RESTART, "--endpoint", f"tcp://127.0.0.1:{free_port()}", "--pub-endpoint", f"tcp://127.0.0.1:{free_port()}")

    first = serve_on_new_ports()
    alice = agents("alice", repo.root)
    token = alice.do("claim", paths=["src/app.py"])["token"]
    first.kill()
    serve_on_new_ports()
    # her next request times out on the old port, rediscovers, resumes the session
    decision = alice.do("intent", paths=["src/app.py"], token=token, timeout=20)
    assert decision["verdict"] == "allow" and decision["session"] == alice.session
    assert agent_state(repo, "alice") == "alive"

"""Agents on other hosts, on real separate network stacks.

The coordinator runs in one network namespace, agents in others, each in its own clone
of the repository, joined by veth pairs through a bridge (``netns.py``); everything
the agents say crosses those links over CURVE.  The namespaces are made and removed
by the fixture (as root, with ``ip``; otherwise every test here is skipped and says
why)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import (
    LOCKSTEP,
    Result,
    _git,
    end_process,
    env_for,
    make_repo,
    wait_until,
)
from .netns import Hosts, skip_reason

FAST = ("--heartbeat", "0.2", "--liveness", "3", "--lock-delay", "1")
PORT = 7400

_why_not = skip_reason()
needs_netns = pytest.mark.skipif(_why_not is not None, reason=f"multi-host tests: {_why_not}")


class Net:
    """Hosts, the processes started on them, and CLI calls on a host."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.hosts = Hosts(["coord", "a", "b"])
        self.procs: list[subprocess.Popen] = []

    def run(self, host: str, *args: str, cwd: Path, timeout: float = 30) -> Result:
        proc = subprocess.run(
            [*self.hosts.prefix(host), *LOCKSTEP, *args], cwd=cwd, env=env_for(), capture_output=True, text=True, timeout=timeout
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def start(self, host: str, *args: str, cwd: Path) -> subprocess.Popen:
        proc = subprocess.Popen(
            [*self.hosts.prefix(host), *LOCKSTEP, *args], cwd=cwd, env=env_for(),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        self.procs.append(proc)
        return proc

    def serve(self, root: Path, *args: str) -> str:
        """Serve ``root``'s repository on the coord host; returns its CURVE endpoint."""
        endpoint = f"tcp://{self.hosts.address['coord']}:{PORT}"
        proc = self.start("coord", "serve", "--endpoint", endpoint, "--curve", *FAST, *args, cwd=root)
        state = root / ".git" / "lockstep" / "coordinator.json"

        def ready() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"coordinator exited with {proc.returncode}: {proc.stderr.read()}")
            try:
                return json.loads(state.read_text()).get("pid") == proc.pid
            except (OSError, ValueError):
                return False

        wait_until(ready, timeout=20, what="the coordinator to serve")
        return endpoint

    def clone(self, origin: Path, name: str) -> Path:
        """A clone of ``origin`` for a host: its own .git, its own state directory."""
        path = self.tmp / name
        _git(self.tmp, "clone", "-q", str(origin), str(path))
        return path

    def join(self, root: Path, host: str, clone: Path, name: str) -> dict:
        invited = self.run("coord", "invite", name, "--ttl", "5m", "--json", cwd=root)
        assert invited.rc == 0, invited
        joined = self.run(host, "join", invited.json["token"], "--no-worker", "--json", cwd=clone)
        assert joined.rc == 0, joined
        return joined.json

    def status(self, root: Path) -> dict:
        result = self.run("coord", "status", "--json", cwd=root)
        assert result.rc == 0, result
        return result.json

    def close(self) -> None:
        for proc in reversed(self.procs):
            end_process(proc)
        self.hosts.close()


@pytest.fixture
def net(tmp_path: Path):
    net = Net(tmp_path)
    try:
        net.hosts.build()
        yield net
    finally:
        net.close()  # processes first, then every namespace, whatever happened


@pytest.fixture
def origin(tmp_path: Path):
    return make_repo(tmp_path / "origin")


@needs_netns
def test_enrolled_agents_on_two_hosts_claim_and_are_refused_as_locally(net: Net, origin):
    net.serve(origin.root)
    clone_a, clone_b = net.clone(origin.root, "host-a"), net.clone(origin.root, "host-b")
    joined = net.join(origin.root, "a", clone_a, "alice")
    assert joined["agent"] == "alice"
    keyfile = Path(joined["keyfile"])
    assert keyfile.stat().st_mode & 0o777 == 0o600 and keyfile.is_relative_to(clone_a / ".git")
    assert "lockstep" not in _git(clone_a, "status", "--porcelain")  # nothing tracked or untracked in the worktree
    net.join(origin.root, "b", clone_b, "bob")

    granted = net.run("a", "claim", "src/app.py", "--agent", "alice", "--json", cwd=clone_a)
    assert granted.rc == 0 and granted.json["granted"], granted
    refused = net.run("b", "claim", "src/app.py", "--agent", "bob", "--json", cwd=clone_b)
    assert refused.rc == 1 and not refused.json["granted"], refused
    assert "alice" in refused.out  # the holder on the other host, by name
    blocked = net.run("b", "intent", "src/app.py", "--agent", "bob", "--json", cwd=clone_b)
    assert blocked.rc == 1 and blocked.json["verdict"] == "block", blocked
    # Paths are repo-relative from any clone: the coordinator sees one repository.
    status = net.status(origin.root)
    assert [(c["holder"], c["pattern"]) for c in status["claims"]] == [("alice", "src/app.py")]
    assert {a["name"] for a in status["agents"]} == {"alice", "bob"}

    # Bob's key may act only as bob: impersonation is refused, counted and logged.
    forged = net.run("b", "claim", "src/other.py", "--agent", "alice", "--json", cwd=clone_b)
    assert forged.rc == 1 and forged.json["error"]["code"] == "forbidden", forged
    stop = net.run("b", "stop", "--json", cwd=clone_b)  # an operator verb from another host
    assert stop.rc == 1 and stop.json["error"]["code"] == "forbidden", stop
    remote = net.status(origin.root)["statistics"]["remote"]
    assert remote["forbidden"] == 2 and remote["keys"] == 2
    assert "forbidden" in (origin.state_dir / "coordinator.log").read_text()

    # A used token does not enroll twice.
    token = net.run("coord", "invite", "carol", "--json", cwd=origin.root).json["token"]
    clone_c = net.clone(origin.root, "host-b-carol")
    assert net.run("b", "join", token, "--no-worker", "--json", cwd=clone_c).rc == 0
    again = net.run("b", "join", token, "--no-worker", "--json", cwd=net.clone(origin.root, "host-b-again"))
    assert again.rc == 1 and again.json["error"]["code"] == "revoked", again

    # Revoked: refused at once, before the core, and counted.
    revoked = net.run("coord", "keys", "revoke", "bob", "--json", cwd=origin.root)
    assert revoked.rc == 0, revoked
    after = net.run("b", "claim", "src/new.py", "--agent", "bob", "--json", cwd=clone_b)
    assert after.rc == 1 and after.json["error"]["code"] == "revoked", after
    listed = net.run("coord", "keys", "list", "--json", cwd=origin.root).json["keys"]
    assert {(k["name"], k["state"]) for k in listed} == {("alice", "enrolled"), ("bob", "revoked"), ("carol", "enrolled")}
    remote = net.status(origin.root)["statistics"]["remote"]
    assert remote["refused_revoked_key"] >= 1


@needs_netns
def test_keys_from_elsewhere_and_other_repositories_are_refused(net: Net, origin, tmp_path: Path):
    endpoint = net.serve(origin.root)
    clone = net.clone(origin.root, "host-a")
    # A key another coordinator enrolled (this one never saw it): refused at the handshake.
    import zmq

    public, secret = zmq.curve_keypair()
    server_key = json.loads((origin.state_dir / "curve.key").read_text())["public"]
    (clone / ".git" / "lockstep").mkdir(mode=0o700)
    (clone / ".git" / "lockstep" / "remote.json").write_text(json.dumps({
        "agent": "mallory", "endpoints": [endpoint], "pub": [], "server_key": server_key,
        "public": public.decode(), "secret": secret.decode(),
    }))
    stranger = net.run("a", "claim", "src/app.py", "--agent", "mallory", "--json", cwd=clone)
    assert stranger.rc == 1 and stranger.json["error"]["code"] == "revoked", stranger
    assert net.status(origin.root)["statistics"]["remote"]["refused_unknown_key"] >= 1
    assert net.status(origin.root)["claims"] == []

    # A clone of another repository is told so at enrollment (its root commit differs).
    # (its own content: two repositories made alike in the same second share their root commit)
    other = tmp_path / "elsewhere" / "unrelated"
    other.mkdir(parents=True)
    _git(other, "init", "-q", "-b", "main")
    (other / "README").write_text("another project\n")
    _git(other, "add", ".")
    _git(other, "-c", "user.email=o@example.com", "-c", "user.name=o", "commit", "-q", "-m", "another project")
    token = net.run("coord", "invite", "dave", "--json", cwd=origin.root).json["token"]
    wrong = net.run("a", "join", token, "--no-worker", "--json", cwd=other)
    assert wrong.rc == 2 and wrong.json["error"]["code"] == "wrong_repo", wrong
    assert "another repository" in wrong.json["error"]["message"]


@needs_netns
def test_a_cut_link_makes_the_remote_agent_stale_and_its_claims_are_fenced(net: Net, origin):
    net.serve(origin.root)
    clone_a, clone_b = net.clone(origin.root, "host-a"), net.clone(origin.root, "host-b")
    net.join(origin.root, "a", clone_a, "alice")
    net.join(origin.root, "b", clone_b, "bob")
    net.start("a", "run", "--agent", "alice", "--", "sleep", "120", cwd=clone_a)
    wait_until(lambda: any(a["name"] == "alice" and a["state"] == "alive" for a in net.status(origin.root)["agents"]),
               timeout=20, what="alice's run session")
    # `run` in a joined clone starts a worker for its command (none ran there).
    wait_until(lambda: "alice" in _workers(net, origin.root), timeout=20, what="the worker `run` started")
    claimed = net.run("a", "claim", "src/app.py", "--agent", "alice", "--json", cwd=clone_a)
    assert claimed.rc == 0, claimed
    token = claimed.json["token"]

    net.hosts.cut("a")
    wait_until(lambda: not net.status(origin.root)["claims"], timeout=20, what="alice's claim to be released")
    wait_until(lambda: "alice" not in _workers(net, origin.root), timeout=20, what="alice's worker to be lost")
    assert any(a["name"] == "alice" and a["state"] != "alive" for a in net.status(origin.root)["agents"])

    def bob_gets_it():
        result = net.run("b", "claim", "src/app.py", "--agent", "bob", "--json", cwd=clone_b)
        return result.json if result.rc == 0 else None

    bob = wait_until(bob_gets_it, timeout=20, interval=0.2, what="bob's grant after the lock delay")
    assert bob["token"] > token

    net.hosts.restore("a")
    fenced = net.run("a", "intent", "src/app.py", "--agent", "alice", "--token", str(token), "--json", cwd=clone_a)
    assert fenced.rc == 1 and fenced.json["verdict"] == "block", fenced
    assert f"token {token}" in fenced.json["reason"]
    # The worker says it is ready again once the coordinator answers.
    wait_until(lambda: "alice" in _workers(net, origin.root), timeout=30, what="alice's worker back after the link is restored")


def test_curve_on_loopback_needs_no_root(tmp_path: Path, coordinator_in):
    """The same enrollment and refusals over loopback tcp, for machines without root."""
    from .conftest import cli

    origin, clone = _serve_curve_on_loopback(tmp_path, coordinator_in)
    token = cli("invite", "alice", "--json", cwd=origin.root).json["token"]
    assert cli("join", token, "--no-worker", "--json", cwd=clone).rc == 0
    assert cli("claim", "src/app.py", "--agent", "alice", "--json", cwd=clone).rc == 0
    forged = cli("claim", "src/x.py", "--agent", "bob", "--json", cwd=clone)
    assert forged.rc == 1 and forged.json["error"]["code"] == "forbidden"
    local = cli("claim", "src/app.py", "--agent", "bob", "--json", cwd=origin.root)  # a local agent, on ipc
    assert local.rc == 1 and "alice" in local.out
    # Serving remote agents, grants survive the coordinator's power loss by default, and status says so.
    statistics = cli("status", "--json", cwd=origin.root).json["statistics"]
    assert statistics["durability"] == "power-loss"
    assert statistics["durability_source"] == "the default with remote agents (--curve)"
    assert "durability power-loss (the default with remote agents (--curve))" in cli("status", cwd=origin.root).out


def _serve_curve_on_loopback(tmp_path: Path, coordinator_in, config: str | None = None):
    """A repository (with ``config`` as its committed lockstep.toml) served with --curve
    on a free loopback port, and a clone of it."""
    import socket

    origin = make_repo(tmp_path / "origin")
    if config is not None:
        _commit_config(origin.root, config)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    coordinator_in(origin, "--endpoint", f"tcp://127.0.0.1:{port}", "--pub-endpoint", "tcp://127.0.0.1:0", "--curve", *FAST)
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", str(origin.root), str(clone))
    return origin, clone


def test_invite_takes_a_ttl_in_days_as_its_help_says(tmp_path: Path, coordinator_in):
    import time

    from .conftest import cli

    origin, _ = _serve_curve_on_loopback(tmp_path, coordinator_in)
    invited = cli("invite", "alice", "--ttl", "2d", "--json", cwd=origin.root)  # refused as "not a duration"
    assert invited.rc == 0, invited
    assert invited.json["expires"] - time.time() > 86400


def test_a_spent_or_expired_join_token_is_refused_saying_so(tmp_path: Path, coordinator_in):
    from .conftest import cli

    origin, clone = _serve_curve_on_loopback(tmp_path, coordinator_in)
    token = cli("invite", "alice", "--json", cwd=origin.root).json["token"]
    assert cli("join", token, "--no-worker", "--json", cwd=clone).rc == 0
    expired = cli("invite", "bob", "--ttl", "1ms", "--json", cwd=origin.root).json["token"]
    for spent in (token, expired):
        again = cli("join", spent, "--no-worker", "--json", cwd=clone)
        assert again.rc == 1 and again.json["error"]["code"] == "revoked", again
        assert "join token" in again.json["error"]["message"] and "lockstep invite" in again.json["error"]["message"]


def test_a_key_store_with_a_damaged_entry_is_refused_at_serve_with_one_line(tmp_path: Path, coordinator_in):
    """keys.json whose entries are not what the coordinator wrote: ``serve`` says so
    (exit 2, one line), rather than serving and failing every keys/invite/status
    request with an internal error."""
    from .conftest import cli

    origin, clone = _serve_curve_on_loopback(tmp_path, coordinator_in)
    token = cli("invite", "alice", "--json", cwd=origin.root).json["token"]
    assert cli("join", token, "--no-worker", "--json", cwd=clone).rc == 0
    assert cli("invite", "bob", "--json", cwd=origin.root).rc == 0
    assert cli("stop", cwd=origin.root).rc == 0
    keys = origin.state_dir / "keys.json"
    good = json.loads(keys.read_text())
    damaged = [
        {"keys": {key: "junk" for key in good["keys"]}, "invites": good["invites"]},
        {"keys": good["keys"], "invites": {key: {"name": "bob"} for key in good["invites"]}},
    ]
    for data in damaged:
        keys.write_text(json.dumps(data))
        served = cli("serve", "--endpoint", "tcp://127.0.0.1:0", "--curve", "--json", cwd=origin.root, timeout=20)
        assert served.rc == 2, served
        message = served.json["error"]["message"]
        assert "keys.json" in message and "\n" not in message and "Traceback" not in served.err, served


def test_a_non_loopback_endpoint_without_curve_is_refused(repo):
    from .conftest import cli

    refused = cli("serve", "--endpoint", "tcp://10.1.2.3:7400", "--json", cwd=repo.root)
    assert refused.rc == 2 and "--curve" in refused.json["error"]["message"]


def test_a_remote_agents_checks_run_on_its_worker_over_loopback(tmp_path: Path, coordinator_in):
    """A worker over loopback CURVE (no root needed): no worker is a clear failure; with
    one, verify and the write check run in the clone, on content only the clone has."""
    import hashlib

    from .conftest import cli

    origin, clone = _serve_curve_on_loopback(tmp_path, coordinator_in, '[checks.content]\ncmd = "cat only-in-the-clone.txt"\n')
    (clone / "only-in-the-clone.txt").write_text("made in the clone\n")
    token = cli("invite", "alice", "--json", cwd=origin.root).json["token"]
    assert cli("join", token, "--no-worker", "--json", cwd=clone).rc == 0

    missing = cli("verify", "--agent", "alice", "--json", cwd=clone)
    assert missing.rc == 1 and missing.json["verdict"] == "fail", missing
    assert "no worker" in missing.json["reason"] and "lockstep worker" in missing.json["reason"]

    worker = subprocess.Popen([*LOCKSTEP, "worker"], cwd=clone, env=env_for(), stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: [w["agent"] for w in cli("status", "--json", cwd=origin.root).json["statistics"]["workers"]["workers"]] == ["alice"],
                   timeout=20, what="alice's worker to be ready")
        verified = cli("verify", "--agent", "alice", "--json", cwd=clone)
        assert verified.rc == 0 and verified.json["verdict"] == "pass", verified
        assert "made in the clone" in verified.json["results"][0]["output"]
        digest = hashlib.sha256((clone / "src" / "app.py").read_bytes()).hexdigest()
        written = cli("check", "write", "src/app.py", "--sha256", digest, "--agent", "alice", "--json", cwd=clone)
        assert written.rc == 0 and written.json["verdict"] == "pass", written
        events = cli("ledger", "tail", "--json", cwd=origin.root).out
        assert "made in the clone" in events  # recorded like any verify result
    finally:
        end_process(worker)
    assert worker.returncode == 0, worker.stderr.read()

    # `join` starts a worker in the background by itself.
    import os
    import signal

    other = tmp_path / "clone-carol"
    _git(tmp_path, "clone", "-q", str(origin.root), str(other))
    token = cli("invite", "carol", "--json", cwd=origin.root).json["token"]
    joined = cli("join", token, "--json", cwd=other)
    assert joined.rc == 0 and joined.json["worker"], joined
    pid = joined.json["worker"]

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    try:
        wait_until(lambda: "carol" in [w["agent"] for w in cli("status", "--json", cwd=origin.root).json["statistics"]["workers"]["workers"]],
                   timeout=20, what="the worker join started")
    finally:
        os.kill(pid, signal.SIGTERM)
        wait_until(gone, timeout=20, what="the worker join started to stop")


# A worker that answers every piece of work with results no coordinator can read:
# ``progress`` as a work_progress whose result's name is a number, ``done`` as a
# work_done whose result has no name.
_GARBLED_WORKER = """
import sys, trio
from agents.client import open_connection, resolve_endpoint
from protocol import messages as m
from protocol.discovery import locate

async def beat(conn, every):
    while True:  # a worker's heartbeat, at the period the coordinator's welcome gives (as lockstep worker's)
        conn.send_oneway(m.WorkerBeat())
        await trio.sleep(every)

async def main():
    place = locate()
    async with open_connection(resolve_endpoint(place, None)) as conn, trio.open_nursery() as nursery:
        welcome = await conn.request(m.WorkerReady(agent="alice", host="garbled", worktrees=[str(place.worktree)]))
        nursery.start_soon(beat, conn, welcome.heartbeat)
        while True:
            work = await conn.next_unsolicited()
            if not isinstance(work, m.Work):
                continue
            if sys.argv[1] == "progress":
                conn.send_oneway(m.WorkProgress(job=work.job, result={"name": 5, "verdict": []}, total=1))
                conn.send_oneway(m.WorkDone(job=work.job, order=["x"]))
            else:
                conn.send_oneway(m.WorkDone(job=work.job, order=["x"], results=[{"junk": 1}]))

trio.run(main)
"""


def test_a_worker_sending_results_that_are_not_probe_results_fails_the_job_saying_so(tmp_path: Path, coordinator_in):
    """Malformed results from a worker fail its job with a reason naming the worker and
    what was wrong, not an internal error with a traceback in the log; the
    coordinator serves on."""
    from .conftest import cli

    origin, clone = _serve_curve_on_loopback(tmp_path, coordinator_in, '[checks.ok]\ncmd = "true"\n')
    token = cli("invite", "alice", "--json", cwd=origin.root).json["token"]
    assert cli("join", token, "--no-worker", "--json", cwd=clone).rc == 0
    script = tmp_path / "garbled_worker.py"
    script.write_text(_GARBLED_WORKER)
    for how in ("progress", "done"):
        worker = subprocess.Popen([sys.executable, str(script), how], cwd=clone, env=env_for(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait_until(lambda: "alice" in _loopback_workers(origin.root), timeout=20, what="the garbled worker to be ready")
            verified = cli("verify", "--agent", "alice", "--json", cwd=clone)
            assert verified.rc == 1 and verified.json["verdict"] == "fail", verified
            reason = verified.json["reason"]
            assert "alice's worker sent a result the coordinator cannot read" in reason and "internal error" not in reason, reason
        finally:
            end_process(worker)
        wait_until(lambda: "alice" not in _loopback_workers(origin.root), timeout=20, what="the garbled worker gone")
    assert "Traceback" not in (origin.state_dir / "coordinator.log").read_text()
    assert cli("status", "--json", cwd=origin.root).rc == 0


def test_a_worker_started_with_a_revoked_key_says_it_was_refused_not_that_nothing_serves(tmp_path: Path, coordinator_in):
    """A worker of a revoked key, started again: exit 1 saying the key was refused (the
    CURVE handshake failed), not exit 3 "no answer ... is `lockstep serve` running?"
    while the coordinator runs; no traceback."""
    from .conftest import cli

    origin, clone = _serve_curve_on_loopback(tmp_path, coordinator_in)
    token = cli("invite", "alice", "--json", cwd=origin.root).json["token"]
    assert cli("join", token, "--no-worker", "--json", cwd=clone).rc == 0
    assert cli("keys", "revoke", "alice", cwd=origin.root).rc == 0
    started = cli("worker", cwd=clone)
    assert started.rc == 1, started
    assert "refused this clone's key" in started.out + started.err and "Traceback" not in started.err, started
    as_json = cli("worker", "--json", cwd=clone)
    assert as_json.rc == 1 and as_json.json["exit"] == 1 and "refused this clone's key" in as_json.json["stopped"], as_json
    assert cli("status", "--json", cwd=origin.root).rc == 0


def _loopback_workers(root: Path) -> list[str]:
    from .conftest import cli

    return [w["agent"] for w in cli("status", "--json", cwd=root).json["statistics"]["workers"]["workers"]]


def _worker_on(net: Net, host: str, clone: Path) -> subprocess.Popen:
    return net.start(host, "worker", cwd=clone)


def _workers(net: Net, root: Path) -> dict[str, dict]:
    return {w["agent"]: w for w in net.status(root)["statistics"]["workers"]["workers"]}


def _commit_config(root: Path, text: str) -> None:
    """``lockstep.toml`` committed on the origin's main, where every clone gets it."""
    (root / "lockstep.toml").write_text(text)
    _git(root, "add", "lockstep.toml")
    _git(root, "commit", "-q", "-m", "lockstep.toml")


def _origin_with_a_check(origin, check: str) -> None:
    rule = '[[rule]]\nfinding = "worker lost"\nresponse = "retry"\nmessage = "run it again once the worker is back"\n'
    _commit_config(origin.root, f"[checks.here]\ncmd = '''{check}'''\ntimeout = 60\n\n{rule}")


def _verify_losing_the_worker(net: Net, root: Path, clone: Path, worker: subprocess.Popen) -> tuple[int, str, str]:
    """alice's ``verify --json`` from host a, its worker killed while the run is on it:
    the verify's exit code, stdout and stderr."""
    verifying = subprocess.Popen([*net.hosts.prefix("a"), *LOCKSTEP, "verify", "--agent", "alice", "--json"], cwd=clone, env=env_for(),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    net.procs.append(verifying)
    wait_until(lambda: _workers(net, root)["alice"]["running"], timeout=20, what="the verify run on alice's worker")
    worker.kill()
    worker.wait(10)
    out, err = verifying.communicate(timeout=30)
    return verifying.returncode, out, err


@needs_netns
def test_a_remote_verify_runs_in_the_remote_clone_and_a_lost_worker_fails_it(net: Net, origin):
    # The check waits (boundedly) for a go file, then shows what only host a's clone has,
    # and the address only host a's network namespace has.
    _origin_with_a_check(
        origin, "for i in $(seq 300); do [ -f go ] && break; sleep 0.05; done; cat only-in-a.txt; ip -4 -o addr show",
    )
    net.serve(origin.root)
    clone_a = net.clone(origin.root, "host-a")
    (clone_a / "only-in-a.txt").write_text("content of host a's clone\n")
    net.join(origin.root, "a", clone_a, "alice")

    # No worker: a clear failure naming what to start, and where.
    (clone_a / "go").write_text("")
    missing = net.run("a", "verify", "--agent", "alice", "--json", cwd=clone_a)
    assert missing.rc == 1 and missing.json["verdict"] == "fail", missing
    assert "no worker" in missing.json["reason"] and "`lockstep worker`" in missing.json["reason"] and str(clone_a) in missing.json["reason"]

    worker = _worker_on(net, "a", clone_a)
    wait_until(lambda: "alice" in _workers(net, origin.root), timeout=20, what="alice's worker")
    assert _workers(net, origin.root)["alice"]["worktrees"] == [str(clone_a)]
    passed = net.run("a", "verify", "--agent", "alice", "--json", cwd=clone_a)
    assert passed.rc == 0 and passed.json["verdict"] == "pass", passed
    output = passed.json["results"][0]["output"]
    assert "content of host a's clone" in output and net.hosts.address["a"] in output
    assert net.hosts.address["coord"] not in output  # not run on the coordinator's host
    ledger = net.run("coord", "ledger", "tail", "--json", cwd=origin.root).out
    assert "content of host a's clone" in ledger  # recorded like a local result

    # The hooks' write check runs there too: a write that did not land is caught.
    written = {"hook_event_name": "PostToolUse", "tool_name": "Write", "cwd": str(clone_a),
               "tool_input": {"file_path": str(clone_a / "only-in-a.txt"), "content": "content of host a's clone\n"}}
    hook = subprocess.run([*net.hosts.prefix("a"), *LOCKSTEP, "hook", "claude"], cwd=clone_a, env=env_for({"LOCKSTEP_AGENT": "alice"}),
                          input=json.dumps(written), capture_output=True, text=True, timeout=30)
    assert hook.returncode == 0, hook.stderr
    lost_write = {**written, "tool_input": {**written["tool_input"], "content": "what the tool meant to write\n"}}
    hook = subprocess.run([*net.hosts.prefix("a"), *LOCKSTEP, "hook", "claude"], cwd=clone_a, env=env_for({"LOCKSTEP_AGENT": "alice"}),
                          input=json.dumps(lost_write), capture_output=True, text=True, timeout=30)
    assert hook.returncode == 2 and "did not land" in hook.stderr, hook.stderr
    guard = net.run("a", "guard", "pre-commit", "--json", cwd=clone_a)
    assert guard.rc == 0, guard

    # The worker killed mid-job: the job fails with "worker lost".
    (clone_a / "go").unlink()
    rc, out, err = _verify_losing_the_worker(net, origin.root, clone_a, worker)
    (clone_a / "go").write_text("")  # the orphaned check ends now
    lost = json.loads(out)
    assert rc == 1 and lost["verdict"] == "fail" and "worker lost" in lost["reason"], (out, err)
    assert [r["finding"] for r in lost["results"]] == ["worker lost"]  # a finding: the rules answer it
    assert [r["action"] for r in lost["responses"]] == ["retry"], lost["responses"]
    assert "alice" not in _workers(net, origin.root)
    assert net.status(origin.root)["statistics"]["workers"]["lost"] == 1

    # Restarted: the next verify passes.
    _worker_on(net, "a", clone_a)
    wait_until(lambda: "alice" in _workers(net, origin.root), timeout=20, what="alice's worker again")
    again = net.run("a", "verify", "--agent", "alice", "--json", cwd=clone_a)
    assert again.rc == 0 and again.json["verdict"] == "pass", again


@needs_netns
def test_a_revoked_keys_worker_is_dismissed_at_once(net: Net, origin):
    net.serve(origin.root)
    clone_b = net.clone(origin.root, "host-b")
    net.join(origin.root, "b", clone_b, "bob")
    worker = _worker_on(net, "b", clone_b)
    wait_until(lambda: "bob" in _workers(net, origin.root), timeout=20, what="bob's worker")
    assert net.run("coord", "keys", "revoke", "bob", "--json", cwd=origin.root).rc == 0
    assert "bob" not in _workers(net, origin.root)  # dropped with the revocation, not after a silence
    assert worker.wait(20) == 1
    said = worker.stderr.read()
    assert "dismissed by the coordinator: the key of bob was revoked" in said and "Traceback" not in said, said
    # And it cannot come back with that key.
    again = net.run("b", "worker", "--json", cwd=clone_b)
    assert again.rc != 0 and "bob" not in _workers(net, origin.root), again


def _where_results(net: Net, root: Path) -> list[dict]:
    out = net.run("coord", "ledger", "tail", "-n", "1000", "--kind", "probe.result", "--json", cwd=root).out
    return [e for e in map(json.loads, out.splitlines()) if e["data"]["name"] == "where"]


@needs_netns
def test_a_remote_agents_trigger_runs_its_probe_on_its_own_host(net: Net, origin):
    _commit_config(
        origin.root,
        '[[probe]]\nname = "where"\nkind = "command"\ncmd = "cat only-in-a.txt; ip -4 -o addr show"\n\n'
        '[[trigger]]\ncommand = "./deploy.sh*"\nprobe = "where"\n'
    )
    net.serve(origin.root)
    clone_a = net.clone(origin.root, "host-a")
    (clone_a / "only-in-a.txt").write_text("content of host a's clone\n")
    (clone_a / "deploy.sh").write_text("#!/bin/sh\necho deployed\n")
    (clone_a / "deploy.sh").chmod(0o755)
    net.join(origin.root, "a", clone_a, "alice")
    assert "alice" not in _workers(net, origin.root)

    def ran_on_host_a(result: dict) -> bool:
        output = result["data"]["output"]
        return "content of host a's clone" in output and net.hosts.address["a"] in output and net.hosts.address["coord"] not in output

    # `run` with no worker on the host: it starts its own and waits for the triggered probe.
    ran = net.run("a", "run", "--agent", "alice", "--", "sh", "-c", "./deploy.sh --prod", cwd=clone_a, timeout=60)
    assert ran.rc == 0 and "deployed" in ran.out, ran
    (first,) = _where_results(net, origin.root)  # in the ledger by the time `run` exits
    assert first["agent"] == "alice" and first["data"]["verdict"] == "pass" and ran_on_host_a(first), first
    wait_until(lambda: "alice" not in _workers(net, origin.root), timeout=20, what="the worker `run` started to stop")

    # The after-tool hook of a coding client on that host, with a worker running there.
    _worker_on(net, "a", clone_a)
    wait_until(lambda: "alice" in _workers(net, origin.root), timeout=20, what="alice's worker")
    event = {"hook_event_name": "PostToolUse", "tool_name": "Bash", "cwd": str(clone_a), "session_id": "s1",
             "tool_input": {"command": "./deploy.sh"}, "tool_response": {"stdout": "deployed\n", "stderr": ""}}
    hook = subprocess.run([*net.hosts.prefix("a"), *LOCKSTEP, "hook", "claude"], cwd=clone_a, env=env_for({"LOCKSTEP_AGENT": "alice"}),
                          input=json.dumps(event), capture_output=True, text=True, timeout=30)
    assert hook.returncode == 0, hook.stderr
    results = wait_until(lambda: r if len(r := _where_results(net, origin.root)) == 2 else None, timeout=30, what="the hook's triggered probe")
    assert results[1]["agent"] == "alice" and ran_on_host_a(results[1]), results[1]
    finished = net.run("coord", "ledger", "tail", "--kind", "job.finished", "--json", cwd=origin.root).out
    assert [json.loads(line)["data"]["kind"] for line in finished.splitlines()] == ["trigger", "trigger"]


SUBSCRIBER = r"""
import json, re, sys, zmq
remote = json.load(open(sys.argv[1]))
sub = zmq.Context().socket(zmq.SUB)
sub.curve_serverkey, sub.curve_publickey = remote["server_key"].encode(), remote["public"].encode()
sub.curve_secretkey = remote["secret"].encode()
sub.setsockopt(zmq.SUBSCRIBE, b"")
sub.connect(remote["pub"][0])
while True:
    for marker in re.findall(rb"(?:before|after)-[0-9]+", b"".join(sub.recv_multipart())):
        print(marker.decode(), flush=True)
"""


class _Subscriber:
    """A CURVE subscriber on a host, with a clone's key: the markers it has received."""

    def __init__(self, net: Net, host: str, clone: Path) -> None:
        import threading

        self.proc = subprocess.Popen(
            [*net.hosts.prefix(host), sys.executable, "-c", SUBSCRIBER, str(clone / ".git" / "lockstep" / "remote.json")],
            env=env_for(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        net.procs.append(self.proc)
        self.seen: list[str] = []
        threading.Thread(target=lambda: self.seen.extend(line.strip() for line in self.proc.stdout), daemon=True).start()


@needs_netns
def test_a_revoked_keys_open_subscription_is_cut_at_once_and_others_keep_theirs(net: Net, origin):
    net.serve(origin.root)
    clone_a, clone_b = net.clone(origin.root, "host-a"), net.clone(origin.root, "host-b")
    net.join(origin.root, "a", clone_a, "alice")
    net.join(origin.root, "b", clone_b, "bob")
    alice, bob = _Subscriber(net, "a", clone_a), _Subscriber(net, "b", clone_b)
    made = iter(range(1_000_000))

    def publish(marker: str) -> str:  # a claim on the coordinator's host: published with its path
        name = f"{marker}-{next(made)}"
        assert net.run("coord", "claim", f"{name}.txt", "--agent", "carol", "--json", cwd=origin.root).rc == 0
        return name

    def both_hear() -> bool:
        name = publish("before")
        return name in alice.seen and name in bob.seen

    wait_until(both_hear, timeout=30, interval=0.1, what="both subscribers to receive publications")
    assert net.run("coord", "keys", "revoke", "bob", "--json", cwd=origin.root).rc == 0
    # From the moment the revocation is answered, nothing published reaches bob's open
    # subscription; alice's comes back by itself within a bounded time.
    after: list[str] = []

    def alice_hears() -> bool:
        after.append(publish("after"))
        return sum(name in alice.seen for name in after) >= 3

    wait_until(alice_hears, timeout=30, interval=0.1, what="alice's subscription to receive again")
    assert not [m for m in bob.seen if m.startswith("after-")], bob.seen
    assert bob.proc.poll() is None and alice.proc.poll() is None  # both still subscribed, as far as they know
    remote = net.status(origin.root)["statistics"]["remote"]
    assert remote["publication_rebinds"] == 1
    # bob's subscriber tried to reconnect, and the handshake was refused
    wait_until(lambda: net.status(origin.root)["statistics"]["remote"]["refused_revoked_key"] >= 1, timeout=20,
               what="bob's reconnection to be refused")
    assert not [m for m in bob.seen if m.startswith("after-")], bob.seen


FOLLOWER = r"""
import json, sys, trio
from agents.client import open_connection, resolve_endpoint
from agents.top import View, follow, publication_endpoint
from protocol import discovery
from protocol import messages as m

async def main():
    view = View()
    async with open_connection(resolve_endpoint(discovery.locate())) as conn:
        view.take(await conn.request(m.Status()))
        pub = publication_endpoint(conn.endpoint, view.snapshot)
        print(json.dumps({"pub": pub}), flush=True)
        seen = lambda v: any(p.kind == "intent.decided" and p.agent == "bob" for _, p in v.recent)
        with trio.fail_after(40):
            await follow(conn, pub, view, lambda: None, until=seen)
    print(json.dumps({"gates": [[p.kind, p.agent] for _, p in view.recent]}), flush=True)

trio.run(main)
"""


@needs_netns
def test_top_from_a_remote_clone_shows_the_coordinators_view_with_its_publications(net: Net, origin):
    net.serve(origin.root)
    clone_a, clone_b = net.clone(origin.root, "host-a"), net.clone(origin.root, "host-b")
    net.join(origin.root, "a", clone_a, "alice")
    net.join(origin.root, "b", clone_b, "bob")
    assert net.run("a", "claim", "src/app.py", "--agent", "alice", "--json", cwd=clone_a).rc == 0
    assert net.run("b", "claim", "src/other.py", "--agent", "bob", "--json", cwd=clone_b).rc == 0

    # The snapshot: both hosts' agents and claims, as the coordinator sees them.
    top = net.run("a", "top", "--once", "--json", cwd=clone_a)
    assert top.rc == 0, top
    assert {a["name"] for a in top.json["agents"]} == {"alice", "bob"}
    assert {(c["holder"], c["pattern"]) for c in top.json["claims"]} == {("alice", "src/app.py"), ("bob", "src/other.py")}
    assert top.json["storage"]["writable"]
    shown = net.run("a", "top", "--once", cwd=clone_a)
    assert shown.rc == 0 and "alice" in shown.out and "bob" in shown.out, shown

    # The live view's publications: over CURVE with alice's key, on the coordinator's
    # remote publication endpoint (not its ipc one, which only its own host has).
    follower = subprocess.Popen(
        [*net.hosts.prefix("a"), sys.executable, "-c", FOLLOWER], cwd=clone_a, env=env_for(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    net.procs.append(follower)
    first = json.loads(follower.stdout.readline() or "{}")
    assert first.get("pub", "").startswith(f"tcp://{net.hosts.address['coord']}:"), (first, follower.stderr.read() if follower.poll() is not None else "")

    def bob_is_seen() -> bool:  # a gate decision on host b, published, received on host a
        net.run("b", "intent", "src/other.py", "--agent", "bob", "--json", cwd=clone_b)
        return follower.poll() is not None

    wait_until(bob_is_seen, timeout=40, interval=0.5, what="host a's view to receive bob's gate decision")
    out, err = follower.communicate(timeout=10)
    assert follower.returncode == 0, err
    assert ["intent.decided", "bob"] in json.loads(out)["gates"], out


@needs_netns
def test_a_remote_agents_rule_responses_run_in_its_clone_on_its_host(net: Net, origin):
    # Two checks: "sane" fails on a broken app (answered by a rollback to the last passing
    # verify), "service" fails on a marker (answered by a restart command).  Both responses
    # must act in host a's clone, where alice's files are, not on the coordinator's host.
    _commit_config(
        origin.root,
        "[checks.sane]\ncmd = 'for i in $(seq 300); do [ -f ../service/hold ] || break; sleep 0.05; done; ! grep -q broken src/app.py'\n\n"
        "[checks.service]\ncmd = 'test ! -f ../service/down'\n\n"
        '[[rule]]\nfinding = "command failed"\nprobe = "sane"\nresponse = "rollback"\n\n'
        '[[rule]]\nfinding = "command failed"\nprobe = "service"\nresponse = "restart"\n'
        "cmd = 'rm -f ../service/down; (pwd; ip -4 -o addr show) > ../service/restarted.txt'\n\n"
        '[[rule]]\nfinding = "worker lost"\nresponse = "rollback"\n\n'
        "[checks.fresh]\ncmd = 'test ! -f ../service/stale'\n\n"
        '[[rule]]\nfinding = "command failed"\nprobe = "fresh"\nresponse = "touch"\npath = "src/shared.py"\n'
    )
    net.serve(origin.root)
    clone_a = net.clone(origin.root, "host-a")
    net.join(origin.root, "a", clone_a, "alice")
    net.join(origin.root, "b", net.clone(origin.root, "host-b"), "bob")

    # No worker: the rollback is refused clearly, and nothing is touched anywhere.
    passed = net.run("a", "verify", "--agent", "alice", "--json", cwd=clone_a)
    assert passed.rc == 1 and "no worker" in passed.json["reason"], passed  # the verify itself needs one too
    worker = _worker_on(net, "a", clone_a)
    wait_until(lambda: "alice" in _workers(net, origin.root), timeout=20, what="alice's worker")
    passed = net.run("a", "verify", "--agent", "alice", "--json", cwd=clone_a)
    assert passed.rc == 0 and passed.json["verdict"] == "pass" and passed.json["tree"], passed

    # The coordinator's own worktree differs from alice's: a rollback run there would show.
    (origin.root / "src" / "app.py").write_text("the coordinator host's own edit, broken\n")
    (clone_a / "src" / "app.py").write_text("print('broken')\n")
    (clone_a / "src" / "new.py").write_text("new = 1\n")
    (clone_a / "src" / "shared.py").write_text("shared = 2\n")
    assert net.run("b", "claim", "src/shared.py", "--agent", "bob", "--json", cwd=net.tmp / "host-b").rc == 0
    service = net.tmp / "service"  # outside every worktree: a service's own files
    service.mkdir()
    (service / "down").write_text("")
    (service / "stale").write_text("")
    os.utime(clone_a / "src" / "shared.py", (1, 1))

    failed = net.run("a", "verify", "--agent", "alice", "--json", cwd=clone_a)
    assert failed.rc == 1 and failed.json["verdict"] == "fail", failed
    responses = {r["action"]: r for r in failed.json["responses"]}
    assert set(responses) == {"rollback", "restart", "touch"}, failed.json["responses"]
    # The rollback: alice's clone back to what her passing verify saw, bob's path kept.
    assert (clone_a / "src" / "app.py").read_text() == "print('hi')\n"
    assert not (clone_a / "src" / "new.py").exists()
    assert (clone_a / "src" / "shared.py").read_text() == "shared = 2\n"
    assert "on alice's host" in responses["rollback"]["outcome"] and "src/shared.py (held by bob)" in responses["rollback"]["outcome"]
    (recorded,) = [json.loads(line) for line in net.run("coord", "ledger", "tail", "--kind", "rule.response", "--json", cwd=origin.root).out.splitlines()
                   if json.loads(line)["data"]["action"] == "rollback"]
    details = recorded["data"]["details"]
    assert details["tree"] == passed.json["tree"] and details["worktree"] == str(clone_a)
    assert (details["restored"], details["removed"], details["kept"]) == (["src/app.py"], ["src/new.py"], {"src/shared.py": "bob"})
    # ... and the coordinator's host untouched.
    assert (origin.root / "src" / "app.py").read_text() == "the coordinator host's own edit, broken\n"
    # The restart command ran in alice's clone, in host a's network namespace.
    assert not (service / "down").exists()
    where, *addresses = (service / "restarted.txt").read_text().splitlines()
    assert where == str(clone_a) and net.hosts.address["a"] in str(addresses) and net.hosts.address["coord"] not in str(addresses)
    assert "exit 0" in responses["restart"]["outcome"] and "on alice's host" in responses["restart"]["outcome"]
    # The touch: the file in alice's clone (bob holds it, so the rollback left it); none made on the coordinator's host.
    assert (clone_a / "src" / "shared.py").stat().st_mtime > 1 and not (origin.root / "src" / "shared.py").exists()
    assert "exit 0" in responses["touch"]["outcome"] and "on alice's host" in responses["touch"]["outcome"]
    (service / "stale").unlink()

    # The worker lost mid-verify: the "worker lost" rule's rollback has no worker to run
    # on, and says so; nothing is restored on either host.
    (clone_a / "src" / "app.py").write_text("print('broken again')\n")
    (service / "hold").write_text("")
    _, out, err = _verify_losing_the_worker(net, origin.root, clone_a, worker)
    (service / "hold").unlink()  # the orphaned check ends now
    (response,) = json.loads(out)["responses"]
    assert response["action"] == "rollback", (out, err)
    assert "could not roll back alice's worktree on its host" in response["outcome"] and "no worker" in response["outcome"]
    assert "nothing restored" in response["outcome"], response
    assert (clone_a / "src" / "app.py").read_text() == "print('broken again')\n"
    assert (origin.root / "src" / "app.py").read_text() == "the coordinator host's own edit, broken\n"


def _commit_on_branch(clone: Path, branch: str, path: str, content: bytes) -> str:
    _git(clone, "checkout", "-q", "-B", branch, "origin/main")
    (clone / path).write_bytes(content)
    _git(clone, "add", path)
    _git(clone, "-c", "user.email=a@example.com", "-c", "user.name=a", "commit", "-q", "-m", f"{branch}: {path}")
    return _git(clone, "rev-parse", "HEAD").strip()


@needs_netns
def test_landing_from_a_remote_clone_sends_the_branch_or_says_to_push_it(net: Net, origin):
    _commit_config(origin.root, "[checks.landed]\ncmd = 'test -f src/feature.py'\n")
    net.serve(origin.root)
    clone_a = net.clone(origin.root, "host-a")
    net.join(origin.root, "a", clone_a, "alice")

    # A branch only host a's clone has: it goes with the landing as a bundle, is checked
    # and fetched into a private ref on the coordinator's host, and lands as a local one.
    head = _commit_on_branch(clone_a, "feature", "src/feature.py", b"feature = 1\n")
    landed = net.run("a", "land", "--agent", "alice", "--json", cwd=clone_a, timeout=120)
    assert landed.rc == 0 and landed.json["verdict"] == "landed", landed.out[-1500:]
    assert [r["verdict"] for r in landed.json["results"]] == ["pass"]  # checked on the merged tree, there
    assert _git(origin.root, "merge-base", "--is-ancestor", head, "main") == ""
    assert "refs/lockstep/clones/" not in _git(origin.root, "for-each-ref")  # its private ref went with the landing
    assert "refs/heads/feature" not in _git(origin.root, "for-each-ref", "refs/heads")  # no branch of the repository touched
    _git(clone_a, "fetch", "-q", "origin")

    # Too big for one message: not sent, and the landing says what to do instead.
    main_before = _git(origin.root, "rev-parse", "main").strip()
    big = _commit_on_branch(clone_a, "big", "src/feature-data.bin", os.urandom(400 * 1024))
    refused = net.run("a", "land", "--agent", "alice", "--json", cwd=clone_a, timeout=60)
    assert refused.rc == 1 and refused.json["verdict"] == "blocked", refused
    assert "big is not sent with the landing" in refused.err and "bytes one message may carry" in refused.err, refused.err
    reason = refused.json["reason"]
    assert "big was not sent with the landing and does not exist in the coordinator's repository" in reason, reason
    assert str(origin.root) in reason and "push your branch to it first" in reason and "git push" in reason, reason
    assert _git(origin.root, "rev-parse", "main").strip() == main_before

    # A bundle built on a commit the coordinator's repository lacks (the clone's
    # remote-tracking branches say another repository has it): verified and refused.
    _commit_on_branch(clone_a, "unshared", "src/unshared.py", b"only here\n")
    _git(clone_a, "update-ref", "refs/remotes/elsewhere/unshared", "HEAD")
    (clone_a / "src" / "on-top.py").write_text("on top\n")
    _git(clone_a, "add", "src/on-top.py")
    _git(clone_a, "-c", "user.email=a@example.com", "-c", "user.name=a", "commit", "-q", "-m", "on top")
    unusable = net.run("a", "land", "--agent", "alice", "--json", cwd=clone_a, timeout=60)
    assert unusable.rc == 1 and unusable.json["verdict"] == "blocked", unusable
    assert "the bundle of unshared sent from alice's clone cannot be used here" in unusable.json["reason"], unusable.json["reason"]
    assert "refs/lockstep/clones/alice/unshared" not in _git(origin.root, "for-each-ref")
    assert _git(origin.root, "rev-parse", "main").strip() == main_before

    # Pushed there (what it said), the same command lands it.
    _git(clone_a, "checkout", "-q", "big")
    _git(clone_a, "push", "-q", "origin", "big")
    landed = net.run("a", "land", "--agent", "alice", "--json", cwd=clone_a, timeout=120)
    assert landed.rc == 0 and landed.json["verdict"] == "landed", landed.out[-1500:]
    assert _git(origin.root, "merge-base", "--is-ancestor", big, "main") == ""
